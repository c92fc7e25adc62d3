package cluster

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestCanvasInClusterMode: the canvas tool runs in a session pod; its
// commands reach the WebSocket client through the chat's Redis event
// channel, and the client's answers to eval and snapshot (canvas_result
// frames given to the gateway) reach the waiting turn over the chat's
// control channel, the way an approval answer does.
func TestCanvasInClusterMode(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-canvas", "tenant-canvas-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			return fakellm.Turn{Text: "model saw: " + last.ToolResults[0].Content}
		}
		switch lastUser(r) {
		case "push":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "canvas", Args: `{"action":"a2ui_push","text":"hello from the pod"}`}}}
		case "eval":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "canvas", Args: `{"action":"eval","javaScript":"6*7"}`}}}
		case "snapshot":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "canvas", Args: `{"action":"snapshot","timeoutMs":20000}`}}}
		}
		return fakellm.Turn{Text: "ok"}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0))
	st.waitReady(t, ns, "helper")

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	const chat = "canvas"
	// command reads the frames of message id until its canvas event.
	command := func(id string) map[string]any {
		for {
			f := ws.Read(t)
			if f["id"] != id {
				continue
			}
			if ev := gatewaytest.Event([]gatewaytest.Frame{f}, "canvas"); ev != nil {
				return ev["canvas"].(map[string]any)
			}
			g.Expect(f["type"]).NotTo(Equal("done"), "the turn of %s ended without a canvas command: %v", id, f)
		}
	}
	final := func(frames []gatewaytest.Frame) string {
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "%v", frames)
		return ev["text"].(string)
	}

	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m1", "agent": "helper", "chat_id": chat, "text": "push"})
	cmd := command("m1")
	g.Expect(cmd["action"]).To(Equal("a2ui_push"))
	g.Expect(fmt.Sprint(cmd["messages"])).To(ContainSubstring("hello from the pod"))
	g.Expect(final(ws.Until(t, "m1", "done"))).To(HavePrefix("model saw: Pushed 2 A2UI message(s)"))

	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m2", "agent": "helper", "chat_id": chat, "text": "eval"})
	cmd = command("m2")
	g.Expect(cmd["javascript"]).To(Equal("6*7"))
	ack, frames := ws.RequestDuring(t, gatewaytest.Frame{"type": "canvas_result", "id": "r2", "agent": "helper", "chat_id": chat,
		"canvas_id": cmd["id"], "value": "42"}, "m2")
	g.Expect(ack).To(HaveKeyWithValue("answered", true))
	g.Expect(final(frames)).To(HaveSuffix("\n42"))

	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m3", "agent": "helper", "chat_id": chat, "text": "snapshot"})
	cmd = command("m3")
	g.Expect(cmd["action"]).To(Equal("snapshot"))
	ack, frames = ws.RequestDuring(t, gatewaytest.Frame{"type": "canvas_result", "id": "r3", "agent": "helper", "chat_id": chat,
		"canvas_id": cmd["id"], "image": "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)}, "m3")
	g.Expect(ack).To(HaveKeyWithValue("answered", true))
	g.Expect(final(frames)).To(ContainSubstring("MEDIA:canvas-"))
	res := gatewaytest.Event(frames, "tool_result")
	g.Expect(res).NotTo(BeNil())
	g.Expect(res["attachments"]).To(HaveLen(1), "the snapshot is stored as an artifact of the session")
	g.Expect(strings.Contains(fmt.Sprint(res["attachments"]), "image/png")).To(BeTrue())
}
