package gateway_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"testing/fstest"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const canvasAgentYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  model:
    provider: openai
    model: fake
    vision: true
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["canvas"]
`

// onePixelPNG is a valid 1×1 PNG.
var onePixelPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

// TestCanvasOverTheWebSocket: the canvas tool's commands reach the web
// client that sent the message as canvas events; eval and snapshot wait
// for its canvas_result. A bad answer is a bad_request error, another
// tenant's client cannot answer, and the answer of the chat's client
// reaches the model (eval's value as text, snapshot's image as an image).
func TestCanvasOverTheWebSocket(t *testing.T) {
	g := NewWithT(t)
	e := startAgents(t, func(u string) string { return fmt.Sprintf(canvasAgentYAML, u) }, nil, nil)
	e.llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "canvas", Args: `{"action":"a2ui_push","text":"hi"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c2", Name: "canvas", Args: `{"action":"eval","javaScript":"6*7"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c3", Name: "canvas", Args: `{"action":"snapshot"}`}}},
		fakellm.Turn{Text: "done"},
	)
	ws := e.a.Dial(t)
	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m1", "agent": "assistant", "chat_id": "c", "text": "draw"})
	next := func() map[string]any {
		for {
			f := ws.Read(t)
			if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == "canvas" {
				return ev["canvas"].(map[string]any)
			}
			g.Expect(f["type"]).NotTo(Equal("done"), "the turn ended before its canvas command: %v", f)
		}
	}
	push := next()
	g.Expect(push["action"]).To(Equal("a2ui_push"))
	g.Expect(push).NotTo(HaveKey("id"))
	g.Expect(push["messages"]).To(HaveLen(2))

	eval := next()
	g.Expect(eval["action"]).To(Equal("eval"))
	g.Expect(eval["javascript"]).To(Equal("6*7"))
	id := eval["id"].(string)
	result := func(extra gatewaytest.Frame) gatewaytest.Frame {
		f := gatewaytest.Frame{"type": "canvas_result", "id": "r-" + fmt.Sprint(len(extra)), "agent": "assistant", "chat_id": "c", "canvas_id": id}
		for k, v := range extra {
			f[k] = v
		}
		return ws.Request(t, f)
	}
	for _, tt := range []struct {
		extra gatewaytest.Frame
		want  string
	}{
		{gatewaytest.Frame{"canvas_id": ""}, "canvas_id is required"},
		{gatewaytest.Frame{"chat_id": "a/b"}, "must not contain"},
		{gatewaytest.Frame{"image": "https://example.com/x.png"}, "image must be a data: URL of a PNG or JPEG"},
		{gatewaytest.Frame{"image": "data:image/png;base64,!!!"}, "image is not valid base64"},
		{gatewaytest.Frame{"image": "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("<svg/>"))}, "image says it is image/png but its bytes are text/"},
	} {
		f := result(tt.extra)
		g.Expect(f["type"]).To(Equal("error"), "%v", tt.extra)
		g.Expect(f["code"]).To(Equal(gateway.CodeBadRequest))
		g.Expect(f["message"]).To(ContainSubstring(tt.want))
	}
	// Another tenant's client names the same chat: its answer reaches
	// nothing.
	other := gatewaytest.Client{URL: e.a.URL, Key: keyB}.Dial(t)
	f := other.Request(t, gatewaytest.Frame{"type": "canvas_result", "id": "x", "agent": "assistant", "chat_id": "c", "canvas_id": id, "value": "forged"})
	g.Expect(f).To(HaveKeyWithValue("answered", false))
	f = result(gatewaytest.Frame{"value": "42"})
	g.Expect(f).To(HaveKeyWithValue("answered", true))
	g.Expect(f).To(HaveKeyWithValue("canvas_id", id))

	snap := next()
	g.Expect(snap["action"]).To(Equal("snapshot"))
	id = snap["id"].(string)
	f = result(gatewaytest.Frame{"image": "data:image/png;base64," + base64.StdEncoding.EncodeToString(onePixelPNG)})
	g.Expect(f).To(HaveKeyWithValue("answered", true))
	ws.Until(t, "m1", "done")

	reqs := e.llm.Requests()
	msgs := reqs[len(reqs)-1].Messages
	var evalResult, snapResult string
	images := 0
	for _, m := range msgs {
		images += m.Images
		for _, r := range m.ToolResults {
			switch r.CallID {
			case "c2":
				evalResult = r.Content
			case "c3":
				snapResult = r.Content
			}
		}
	}
	g.Expect(evalResult).To(HaveSuffix("\n42"))
	g.Expect(snapResult).To(ContainSubstring("MEDIA:canvas-"))
	g.Expect(images).To(Equal(1))
}

// TestCanvasFrameHeaders: the canvas frame's document is the one page of
// the UI that may be framed, by the UI only, and its CSP lets script run
// but reach nothing; the UI itself may frame it and web pages.
func TestCanvasFrameHeaders(t *testing.T) {
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) {
		c.UI = fstest.MapFS{"index.html": {Data: []byte("<h1>PicoBot</h1>")}, "canvas-frame.html": {Data: []byte("<p>canvas</p>")}}
	})
	res, err := e.a.Request(http.MethodGet, "/canvas-frame.html", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusOK))
	g.Expect(res.Header.Get("X-Frame-Options")).To(Equal("SAMEORIGIN"))
	csp := res.Header.Get("Content-Security-Policy")
	g.Expect(csp).To(ContainSubstring("frame-ancestors 'self'"))
	g.Expect(csp).To(ContainSubstring("connect-src 'none'"))
	g.Expect(csp).To(ContainSubstring("default-src 'none'"))
	res, err = e.a.Request(http.MethodGet, "/", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Header.Get("X-Frame-Options")).To(Equal("DENY"))
	g.Expect(res.Header.Get("Content-Security-Policy")).To(ContainSubstring("frame-src 'self' http: https:"))
}
