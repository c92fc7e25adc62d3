package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// visionYAML declares "seer", whose model accepts images, and "blind",
// whose model does not.
const visionYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: seer
spec:
  model:
    provider: openai
    model: fake
    vision: true
    baseURL: %[1]s
    apiKeySecretRef: {name: llm, key: apiKey}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: blind
spec:
  model:
    provider: openai
    model: fake
    baseURL: %[1]s
    apiKeySecretRef: {name: llm, key: apiKey}
`

// pngFile is a real (1x1) PNG image.
var pngFile = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" +
	"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84\x00\x00\x00\x00IEND\xaeB`\x82")

// uploadAs posts data as a file of chat tab1 of agent with media type ct,
// the way the web UI does.
func uploadAs(t *testing.T, c gatewaytest.Client, agent, name, ct string, data []byte) (int, gatewaytest.Frame) {
	t.Helper()
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	q := url.Values{"agent": {agent}, "chat_id": {"tab1"}, "name": {name}}
	if ct != "" {
		q.Set("media_type", ct)
	}
	res, err := c.Request(http.MethodPost, "/api/v1/uploads?"+q.Encode(), data, h)
	if err != nil {
		t.Fatal(err)
	}
	var body gatewaytest.Frame
	_ = json.Unmarshal(res.Body, &body)
	return res.Status, body
}

// TestUploadsReachTheModelAndTheWorkspace uploads an image and a text file
// over REST and sends them with a WebSocket message: the model receives the
// image as an image part of the user message, both files are in the
// session's workspace, and the stored message links them (what the web UI
// shows after a reload). A model without vision is told the image is not
// shown; the file still reaches its workspace.
func TestUploadsReachTheModelAndTheWorkspace(t *testing.T) {
	g := NewWithT(t)
	e := startAgents(t, func(u string) string { return fmt.Sprintf(visionYAML, u) }, nil, nil)

	status, img := uploadAs(t, e.a, "seer", "cat.png", "image/png", pngFile)
	g.Expect(status).To(Equal(http.StatusCreated), "%v", img)
	g.Expect(img).To(HaveKeyWithValue("name", "cat.png"))
	g.Expect(img).To(HaveKeyWithValue("media_type", "image/png"))
	g.Expect(img).To(HaveKeyWithValue("size", BeNumerically("==", len(pngFile))))
	g.Expect(img["url"]).To(Equal("/api/v1/artifacts/" + img["id"].(string)))
	// No Content-Type: the extension of a text file says what it is.
	status, notes := uploadAs(t, e.a, "seer", "notes.md", "", []byte("# Plan\n- buy milk\n"))
	g.Expect(status).To(Equal(http.StatusCreated), "%v", notes)
	g.Expect(notes).To(HaveKeyWithValue("media_type", "text/markdown"))

	e.llm.Script(fakellm.Turn{Text: "A cat, and a shopping list."})
	ws := e.a.Dial(t)
	frames := ws.Exchange(t, frame{"v": 1, "type": "send", "id": "m1", "agent": "seer", "chat_id": "tab1", "text": "what is this?",
		"files": []string{img["id"].(string), notes["id"].(string)}})
	g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
	g.Expect(gatewaytest.Event(frames, "final")).To(HaveKeyWithValue("text", "A cat, and a shopping list."))

	req := e.llm.Requests()[0]
	user := req.Messages[len(req.Messages)-1]
	g.Expect(user.Role).To(Equal("user"))
	g.Expect(user.Images).To(Equal(1), "the image reaches the model as an image part")
	g.Expect(user.Content).To(HavePrefix("what is this?\n\n![cat.png](/api/v1/artifacts/"))
	g.Expect(user.Content).To(ContainSubstring("(in the workspace: uploads/cat.png)"))
	g.Expect(user.Content).To(ContainSubstring("[notes.md](/api/v1/artifacts/" + notes["id"].(string) + ") (in the workspace: uploads/notes.md)"))

	copied, err := filepath.Glob(filepath.Join(e.dir, ".picobot", "workspaces", "*", "seer", "*", "uploads", "notes.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(copied).To(HaveLen(1), "the text file is in the session's workspace")
	data, _ := os.ReadFile(copied[0])
	g.Expect(string(data)).To(Equal("# Plan\n- buy milk\n"))

	status, body := e.a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("web:seer/tab1:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	msgs := body["messages"].([]any)
	g.Expect(msgs[0].(map[string]any)["content"]).To(Equal(user.Content), "the stored message links the files")

	// A model without vision is told the image is not shown.
	status, img2 := uploadAs(t, e.a, "blind", "cat.png", "image/png", pngFile)
	g.Expect(status).To(Equal(http.StatusCreated))
	e.llm.Script(fakellm.Turn{Text: "I cannot see it."})
	frames = ws.Exchange(t, frame{"v": 1, "type": "send", "id": "m2", "agent": "blind", "chat_id": "tab1", "files": []string{img2["id"].(string)}})
	g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil(), "a message of files alone is fine")
	req = e.llm.Requests()[1]
	user = req.Messages[len(req.Messages)-1]
	g.Expect(user.Images).To(Equal(0))
	g.Expect(user.Content).To(ContainSubstring("not shown: this model does not accept images"))
	g.Expect(user.Content).To(ContainSubstring("(in the workspace: uploads/cat.png)"))
}

// TestUploadErrors: what is refused, with which code and message, before
// anything is stored or sent to the model.
func TestUploadErrors(t *testing.T) {
	e := startAgents(t, func(u string) string { return fmt.Sprintf(visionYAML, u) }, nil, nil)
	big := bytes.Repeat([]byte("a"), gateway.MaxUploadBytes+1)
	bigPNG := append(append([]byte{}, pngFile...), make([]byte, gateway.MaxUploadImageBytes+100<<10)...)
	cases := []struct {
		name, agent, file, ct string
		data                  []byte
		status                int
		code, msg             string
	}{
		{"too large", "seer", "big.txt", "text/plain", big, http.StatusRequestEntityTooLarge, gateway.CodeTooLarge, "the limit is 10485760"},
		{"image too large for the model", "seer", "big.png", "image/png", bigPNG, http.StatusRequestEntityTooLarge, gateway.CodeTooLarge,
			"big.png is 3.85 MiB; an image may be at most 3.75 MiB (what the model APIs accept)"},
		{"not the type it says", "seer", "fake.png", "image/png", []byte("MZ\x90\x00 not a picture"), http.StatusUnsupportedMediaType, gateway.CodeUnsupportedMedia,
			"fake.png says it is a PNG image (image/png) but its bytes are not"},
		{"empty", "seer", "empty.txt", "text/plain", nil, http.StatusBadRequest, gateway.CodeBadRequest, "empty.txt is empty"},
		{"no name", "seer", "", "text/plain", []byte("x"), http.StatusBadRequest, gateway.CodeBadRequest, "name is required"},
		{"a path for a name", "seer", "../etc/passwd", "text/plain", []byte("x"), http.StatusBadRequest, gateway.CodeBadRequest, "is not a file name"},
		{"unknown agent", "nobody", "a.txt", "text/plain", []byte("x"), http.StatusNotFound, gateway.CodeUnknownAgent, `no agent "nobody"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, body := uploadAs(t, e.a, tc.agent, tc.file, tc.ct, tc.data)
			g.Expect(status).To(Equal(tc.status), "%v", body)
			g.Expect(errCode(body)).To(Equal(tc.code))
			g.Expect(body["error"].(map[string]any)["message"]).To(ContainSubstring(tc.msg))
		})
	}

	t.Run("a body any web page could post", func(t *testing.T) {
		g := NewWithT(t)
		res, err := e.a.Request(http.MethodPost, "/api/v1/uploads?agent=seer&chat_id=tab1&name=a.txt", "hello", http.Header{"Content-Type": {"text/plain"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(http.StatusUnsupportedMediaType))
		g.Expect(string(res.Body)).To(ContainSubstring("send the file with Content-Type: application/octet-stream"))
	})

	t.Run("sends naming files that are not this chat's uploads", func(t *testing.T) {
		g := NewWithT(t)
		status, mine := uploadAs(t, e.a, "seer", "a.txt", "text/plain", []byte("a"))
		g.Expect(status).To(Equal(http.StatusCreated))
		status, theirs := uploadAs(t, gatewaytest.Client{URL: e.url, Key: keyB}, "seer", "b.txt", "text/plain", []byte("b"))
		g.Expect(status).To(Equal(http.StatusCreated))
		ws := e.a.Dial(t)
		for _, c := range []struct {
			chat  string
			files []string
			code  string
			msg   string
		}{
			{"tab1", []string{theirs["id"].(string)}, gateway.CodeUnknownArtifact, "no uploaded file"}, // another tenant's
			{"tab2", []string{mine["id"].(string)}, gateway.CodeUnknownArtifact, "was not uploaded to this chat"},
			{"tab1", strings.Split(strings.Repeat("x,", gateway.MaxFilesPerMessage+1), ",")[:gateway.MaxFilesPerMessage+1], gateway.CodeBadRequest, "at most 10 files"},
		} {
			frames := ws.Exchange(t, frame{"v": 1, "type": "send", "id": "s-" + c.chat + c.code, "agent": "seer", "chat_id": c.chat, "text": "see", "files": c.files})
			f := gatewaytest.ErrorFrame(frames)
			g.Expect(f).To(HaveKeyWithValue("code", c.code), "%v", frames)
			g.Expect(f["message"]).To(ContainSubstring(c.msg))
		}
		g.Expect(e.llm.Requests()).To(BeEmpty(), "nothing reached the model")
	})
}
