package cluster

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestExecApprovalsInClusterMode: the turn runs in a session pod and waits
// there; the approval request reaches the WebSocket client through the
// chat's Redis event channel, and the answer, given to the gateway (an
// approve frame, or a "/deny CODE" message from another connection), reaches
// the waiting turn over the chat's control channel, the way a stop does.
// Approved, the command runs in the sandbox container; denied or not
// answered within approvalTimeout, it does not run.
func TestExecApprovalsInClusterMode(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-approvals", "tenant-approvals-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			return fakellm.Turn{Text: "model saw: " + last.ToolResults[0].Content}
		}
		x, ok := strings.CutPrefix(lastUser(r), "run ")
		if !ok {
			return fakellm.Turn{Text: "ok"}
		}
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bash", Args: `{"command":"echo ran-` + x + `-as-$(id -u)"}`}}}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0)+"  tools:\n    exec: {ask: always, approvalTimeout: 4s}\n")
	st.waitReady(t, ns, "helper")

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	const chat = "approvals"
	final := func(frames []gatewaytest.Frame) string {
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "%v", frames)
		return ev["text"].(string)
	}

	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m1", "agent": "helper", "chat_id": chat, "text": "run A"})
	req := ws.UntilApproval(t, "m1")
	g.Expect(req).To(And(HaveKeyWithValue("name", "bash"), HaveKeyWithValue("command", "echo ran-A-as-$(id -u)")))
	ack, frames := ws.RequestDuring(t, gatewaytest.Frame{"type": "approve", "id": "a1", "agent": "helper", "chat_id": chat, "code": req["code"], "decision": "approve"}, "m1")
	g.Expect(ack).To(HaveKeyWithValue("answered", true))
	g.Expect(gatewaytest.Event(frames, "approval_result")).To(HaveKeyWithValue("outcome", "approved"))
	g.Expect(final(frames)).To(HavePrefix("model saw: ran-A-as-65533"), "it ran in the sandbox container")

	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m2", "agent": "helper", "chat_id": chat, "text": "run B"})
	req = ws.UntilApproval(t, "m2")
	other := c.Dial(t)
	cmd := other.Exchange(t, gatewaytest.Frame{"id": "x1", "agent": "helper", "chat_id": chat, "text": "/deny " + req["code"].(string)})
	g.Expect(gatewaytest.Event(cmd, "command")).To(HaveKeyWithValue("text", HavePrefix("Denied")))
	frames = ws.Until(t, "m2", "done")
	g.Expect(gatewaytest.Event(frames, "approval_result")).To(HaveKeyWithValue("outcome", "denied"))
	g.Expect(final(frames)).To(HavePrefix("model saw: error: the command was not run: the user denied it"))

	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m3", "agent": "helper", "chat_id": chat, "text": "run C"})
	ws.UntilApproval(t, "m3")
	frames = ws.Until(t, "m3", "done")
	g.Expect(gatewaytest.Event(frames, "approval_result")).To(HaveKeyWithValue("outcome", "timed_out"))
	g.Expect(final(frames)).To(ContainSubstring("did not answer the approval request within 4s"))
}
