package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// uploadsManifest is tenantBase with Agent "seer": a vision model (the fake
// one, %[3]s) that may read files.
const uploadsManifest = tenantBase + `
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: seer
  namespace: %[1]s
spec:
  instructions: You are a test agent.
  model:
    provider: openai
    model: fake-vision
    vision: true
    baseURL: %[3]s
    apiKeySecretRef: {name: model-key, key: apiKey}
  tools:
    allow: ["file_read"]
  runtime:
    idleTimeout: 5m
`

// pngFile is a real (1x1) PNG image.
var pngFile = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" +
	"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84\x00\x00\x00\x00IEND\xaeB`\x82")

// upload posts a file to chat chatID of agent as the web UI does.
func upload(t *testing.T, c gatewaytest.Client, agent, chatID, name, mediaType string, data []byte) (int, gatewaytest.Frame) {
	t.Helper()
	q := url.Values{"agent": {agent}, "chat_id": {chatID}, "name": {name}}
	if mediaType != "" {
		q.Set("media_type", mediaType)
	}
	res, err := c.Request(http.MethodPost, "/api/v1/uploads?"+q.Encode(), data, http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		t.Fatal(err)
	}
	var body gatewaytest.Frame
	_ = json.Unmarshal(res.Body, &body)
	return res.Status, body
}

// TestClusterUploadsReachTheSessionPod uploads an image and a text file
// through the gateway of a cluster and sends them with a message: the
// files go to S3 through the gateway, the session pod fetches them
// through the blob grant service, the model receives the image as an
// image part and the text file's place in the workspace, reads the file
// there with file_read (the tools' container) and answers with its
// content; the file is in the pod's workspace volume, and the search
// finds the answer.
func TestClusterUploadsReachTheSessionPod(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-uploads", "tenant-uploads-key"
	var mu sync.Mutex
	var asked []fakellm.Message // the user message of each turn's first request
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			return fakellm.Turn{Text: "the file says: " + last.ToolResults[0].Content}
		}
		mu.Lock()
		asked = append(asked, last)
		mu.Unlock()
		if strings.HasPrefix(last.Content, "read the notes") {
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "r1", Name: "file_read", Args: `{"path":"uploads/notes.md"}`}}}
		}
		return fakellm.Turn{Text: fmt.Sprintf("I see %d image(s).", last.Images)}
	})
	st.apply(t, fmt.Sprintf(uploadsManifest, ns, key, st.llm.URL()))
	st.waitReady(t, ns, "seer")
	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}

	status, img := upload(t, c, "seer", "tab1", "cat.png", "image/png", pngFile)
	g.Expect(status).To(Equal(http.StatusCreated), "%v", img)
	status, notes := upload(t, c, "seer", "tab1", "notes.md", "", []byte("# Plan\n- buy milk\n"))
	g.Expect(status).To(Equal(http.StatusCreated), "%v", notes)
	g.Expect(notes).To(HaveKeyWithValue("media_type", "text/markdown"))

	ws := c.Dial(t)
	frames := ws.Exchange(t, gatewaytest.Frame{"v": 1, "type": "send", "id": "m1", "agent": "seer", "chat_id": "tab1",
		"text": "read the notes", "files": []string{img["id"].(string), notes["id"].(string)}})
	g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
	g.Expect(gatewaytest.Event(frames, "final")).To(HaveKeyWithValue("text", ContainSubstring("- buy milk")))
	mu.Lock()
	user := asked[0]
	mu.Unlock()
	g.Expect(user.Images).To(Equal(1), "the image reaches the model as an image part")
	g.Expect(user.Content).To(HavePrefix("read the notes\n\n![cat.png](/api/v1/artifacts/" + img["id"].(string) + ") (in the workspace: uploads/cat.png)"))
	g.Expect(user.Content).To(ContainSubstring("[notes.md](/api/v1/artifacts/" + notes["id"].(string) + ") (in the workspace: uploads/notes.md)"))

	// On the pod's workspace volume (a folder of the local pod runner).
	var copies []string
	_ = filepath.WalkDir(filepath.Join(st.dir, "pods"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, filepath.Join("uploads", "notes.md")) && strings.Contains(p, ns+"_seer-") {
			copies = append(copies, p)
		}
		return nil
	})
	g.Expect(copies).To(HaveLen(1))
	data, err := os.ReadFile(copies[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("# Plan\n- buy milk\n"))

	// The stored message links the files (what the web UI shows after a
	// reload), and the gateway serves their bytes to the tenant.
	status, body := c.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("web:seer/tab1:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	msgs := body["messages"].([]any)
	g.Expect(msgs[0].(map[string]any)["content"]).To(Equal(user.Content))
	g.Expect(msgs[len(msgs)-1]).To(HaveKeyWithValue("usage", HaveKeyWithValue("input_tokens", BeNumerically(">", 0))),
		"the session pod stored the turn's tokens with its answer (shown after a reload)")
	// The conversation search (PostgreSQL's full-text index) finds the
	// answer by a word of the file.
	status, body = c.Do(t, http.MethodGet, "/api/v1/search?agent=seer&chat_id=tab1&q=milk", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body["hits"]).To(ContainElement(And(HaveKeyWithValue("session", "web:seer/tab1:default"), HaveKeyWithValue("role", "assistant"))))
	status, raw := c.Raw(t, http.MethodGet, img["url"].(string), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(raw).To(Equal(pngFile))

	// Another tenant's upload cannot be sent here.
	other, otherKey := "tenant-uploads-b", "tenant-uploads-b-key"
	st.apply(t, fmt.Sprintf(uploadsManifest, other, otherKey, st.llm.URL()))
	st.waitReady(t, other, "seer")
	frames = gatewaytest.Client{URL: st.gatewayURL, Key: otherKey}.Dial(t).Exchange(t, gatewaytest.Frame{"v": 1, "type": "send", "id": "m2",
		"agent": "seer", "chat_id": "tab1", "text": "read the notes", "files": []string{notes["id"].(string)}})
	ef := gatewaytest.ErrorFrame(frames)
	g.Expect(ef).NotTo(BeNil())
	g.Expect(ef).To(HaveKeyWithValue("code", gateway.CodeUnknownArtifact))
}

// TestClusterConfigPage: the web UI's configuration view through the
// gateway of a cluster shows the tenant's Agent as the cluster has it
// (model, where its key comes from, tools), read-only with the kubectl
// command that changes it; a change with kubectl shows there; a save
// from the page is refused with that command and changes nothing; another
// tenant's key sees no such agent.
func TestClusterConfigPage(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-cfgpage", "tenant-cfgpage-key"
	st.apply(t, fmt.Sprintf(uploadsManifest, ns, key, st.llm.URL()))
	st.waitReady(t, ns, "seer")
	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}

	config := func() map[string]any {
		status, body := c.Do(t, http.MethodGet, "/api/v1/config/agents/seer", nil)
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
		return body["config"].(map[string]any)
	}
	cfg := config()
	g.Expect(cfg).To(Equal(map[string]any{"agent": "seer", "mode": "cluster", "editable": false,
		"edit": "kubectl -n tenant-cfgpage edit agent seer", "provider": "openai", "model": "fake-vision", "base_url": st.llm.URL(),
		"key_set": true, "key_source": "Secret tenant-cfgpage/model-key, key apiKey",
		"tools_profile": "", "tools_allow": []any{"file_read"}, "tools_deny": nil}))

	var a picobotv1alpha1.Agent
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "seer"}, &a)).To(Succeed())
	before := a.DeepCopy()
	a.Spec.Model.Model = "fake-vision-2"
	a.Spec.Tools.Deny = []string{"bash"}
	g.Expect(st.kube.Patch(context.Background(), &a, client.MergeFrom(before))).To(Succeed())
	// The gateway reads Agents through its informer's cache.
	g.Eventually(config, time.Minute, 200*time.Millisecond).Should(And(
		HaveKeyWithValue("model", "fake-vision-2"), HaveKeyWithValue("tools_deny", []any{"bash"})))

	status, body := c.Do(t, http.MethodPut, "/api/v1/config/agents/seer", map[string]any{"provider": "openai", "model": "other", "tools_allow": []string{"bash"}})
	g.Expect(status).To(Equal(http.StatusForbidden), "%v", body)
	g.Expect(body["error"]).To(HaveKeyWithValue("code", gateway.CodeForbidden))
	g.Expect(body["error"]).To(HaveKeyWithValue("message", ContainSubstring("kubectl -n tenant-cfgpage edit agent seer")))
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "seer"}, &a)).To(Succeed())
	g.Expect(a.Spec.Model.Model).To(Equal("fake-vision-2"))
	g.Expect(a.Spec.Tools.Allow).To(Equal([]string{"file_read"}))

	// Tenants see only their own Agents.
	st.apply(t, fmt.Sprintf(tenantBase, "tenant-cfgpage-b", "tenant-cfgpage-b-key"))
	other := gatewaytest.Client{URL: st.gatewayURL, Key: "tenant-cfgpage-b-key"}
	g.Eventually(func(g Gomega) {
		status, body := other.Do(t, http.MethodGet, "/api/v1/config/agents/seer", nil)
		g.Expect(status).To(Equal(http.StatusNotFound), "%v", body)
		g.Expect(body["error"]).To(HaveKeyWithValue("code", gateway.CodeUnknownAgent))
	}, time.Minute, 200*time.Millisecond).Should(Succeed(), "once the operator published the key")
}
