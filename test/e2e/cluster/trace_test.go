package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
)

// tracedManifest is tenantBase with Agent "tracer" of the fake model
// (%[3]s), the calculator tool and one warm pod.
const tracedManifest = tenantBase + `
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: tracer
  namespace: %[1]s
spec:
  instructions: You are a test agent.
  model:
    provider: openai
    model: fake-model
    baseURL: %[3]s
    apiKeySecretRef: {name: model-key, key: apiKey}
  tools:
    allow: ["calculator"]
  runtime:
    warmPool: 1
`

// TestTurnTraceAcrossGatewayAndSessionPod: one turn with a tool call, sent
// on the gateway's WebSocket and run by a session pod, is one trace in the
// real OTLP receiver: the gateway's frame span, its bus.publish span (the
// Redis stream entry), and below it, exported by the session pod, the
// turn with its model calls, its tool call and its delivery.
func TestTurnTraceAcrossGatewayAndSessionPod(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-traces", "tenant-traces-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if last := r.Messages[len(r.Messages)-1]; len(last.ToolResults) > 0 {
			return fakellm.Turn{Text: "The answer is 42.", Usage: &fakellm.Usage{InputTokens: 120, OutputTokens: 7}}
		}
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}},
			Usage: &fakellm.Usage{InputTokens: 100, OutputTokens: 12}}
	})
	st.apply(t, fmt.Sprintf(tracedManifest, ns, key, st.llm.URL()))
	g.Eventually(func(g Gomega) {
		var a picobotv1alpha1.Agent
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "tracer"}, &a)).To(Succeed())
		g.Expect(a.Status.WarmPods).To(HaveValue(Equal(int32(1))))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())

	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(t)
	frames := ws.Exchange(t, gatewaytest.Frame{"id": "traced-1", "agent": "tracer", "chat_id": "bob", "text": "6*7?"})
	final := gatewaytest.Event(frames, "final")
	g.Expect(final).NotTo(BeNil(), "frames: %v", frames)
	g.Expect(final["text"]).To(Equal("The answer is 42."))

	// The gateway and the pod export on their own schedules: wait for the
	// gateway's root and the pod's turn with everything below it.
	var spans []tracingtest.Span
	var root tracingtest.Span
	g.Eventually(func() error {
		root = tracingtest.Span{}
		for _, s := range st.traces.Named(tracing.SpanWebSocketSend) {
			if s.Attrs["picobot.tenant"] == ns && s.Attrs["picobot.chat"] == "bob" {
				root = s
			}
		}
		if root.SpanID == "" {
			return errors.New("no gateway span of the turn yet")
		}
		spans = st.traces.Trace(root.TraceID)
		n := 0
		for _, s := range spans {
			if s.Service == "picobot-session" {
				n++
			}
		}
		if n < 5 { // the turn, two model calls, the tool call, the delivery
			return errors.New("the session pod's spans have not all arrived:\n" + tracingtest.Tree(spans))
		}
		return nil
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	tree := tracingtest.Tree(spans)
	g.Expect(tree).To(HavePrefix(tracing.SpanWebSocketSend+"\n"), tree)
	g.Expect(tree).To(ContainSubstring(`
  `+tracing.SpanPublish+`
    `+tracing.SpanTurn+`
      `+tracing.SpanModel+`
      `+tracing.SpanModel+`
      `+tracing.SpanTool+`
      `+tracing.SpanDeliver+`
`), tree)
	g.Expect(root.Service).To(Equal("picobot-gateway"))
	g.Expect(root.ParentID).To(BeEmpty())

	turn, err := tracingtest.Find(spans, tracing.SpanTurn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(turn.Service).To(Equal("picobot-session"), "the pod ran the turn")
	g.Expect(turn.Attrs).To(HaveKeyWithValue("picobot.tenant", ns))
	g.Expect(turn.Attrs).To(HaveKeyWithValue("picobot.agent", "tracer"))
	g.Expect(turn.Attrs).To(HaveKeyWithValue("picobot.outcome", "ok"))
	var pub tracingtest.Span
	for _, s := range spans {
		if s.SpanID == turn.ParentID {
			pub = s
		}
	}
	g.Expect(pub.Name).To(Equal(tracing.SpanPublish), "the turn's parent is the stream entry's publish span")
	g.Expect(pub.Service).To(Equal("picobot-gateway"), "published by the gateway")
	g.Expect(pub.ParentID).To(Equal(root.SpanID))
	for _, s := range spans {
		switch s.Name {
		case tracing.SpanModel, tracing.SpanTool, tracing.SpanDeliver:
			g.Expect(s.ParentID).To(Equal(turn.SpanID), "%s is a child of the turn", s.Name)
			g.Expect(s.Service).To(Equal("picobot-session"))
		}
	}
	tool, _ := tracingtest.Find(spans, tracing.SpanTool)
	g.Expect(tool.Attrs).To(HaveKeyWithValue("gen_ai.tool.name", "calculator"))
}
