package otlp_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/tracing/otlp"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(embeddedtest.LeakOptions(),
		// The gRPC exporter's connection winds down after Shutdown returns.
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/transport.(*http2Client).keepalive"))...)
}

// env is an environment without OTEL_* variables, whatever the test
// process has, plus vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestEnabled(t *testing.T) {
	tests := []struct {
		name    string
		cfg     otlp.Config
		vars    map[string]string
		want    bool
		wantErr string
	}{
		{name: "off by default"},
		{name: "the flag's endpoint", cfg: otlp.Config{Endpoint: "http://c:4318"}, want: true},
		{name: "the standard endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: true},
		{name: "the traces endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: true},
		{name: "the exporter alone (its default endpoint)", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{name: "exporter none wins over an endpoint", cfg: otlp.Config{Endpoint: "http://c:4318"}, vars: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "SDK disabled wins", cfg: otlp.Config{Endpoint: "http://c:4318"}, vars: map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{name: "an exporter PicoBot lacks", vars: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin" is not supported (want otlp or none)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.cfg.Getenv = env(tc.vars)
			on, err := tc.cfg.Enabled()
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(on).To(Equal(tc.want))
		})
	}
}

func TestNewProviderRefusesBadSettings(t *testing.T) {
	tests := []struct {
		name    string
		cfg     otlp.Config
		wantErr string
	}{
		{"json protocol", otlp.Config{Endpoint: "http://c:4318", Protocol: "http/json"}, `OTLP protocol "http/json" is not supported (want grpc or http/protobuf)`},
		{"endpoint without scheme", otlp.Config{Endpoint: "collector:4317"}, `OTLP endpoint "collector:4317" is not an http or https URL with a host`},
		{"endpoint of another scheme", otlp.Config{Endpoint: "ftp://c:21"}, `OTLP endpoint "ftp://c:21" is not an http or https URL with a host`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Getenv = env(nil)
			tp, err := otlp.NewProvider(t.Context(), tc.cfg)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
			NewWithT(t).Expect(tp).To(BeNil())
		})
	}
	tp, err := otlp.NewProvider(t.Context(), otlp.Config{Getenv: env(nil)})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(tp).To(BeNil(), "tracing is off by default")
}

// TestTurnTraceEmbedded runs one turn with a tool call through the embedded
// gateway's WebSocket (the picobot serve path) with spans exported over
// each OTLP protocol to a real OTLP receiver, and checks the turn's span
// tree: the gateway's frame, the bus entry, the session runtime's turn,
// its two model calls and its tool call, and the delivery of its outcome.
func TestTurnTraceEmbedded(t *testing.T) {
	for _, proto := range []string{otlp.ProtocolGRPC, otlp.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			rcv := tracingtest.Start(t)
			endpoint := rcv.HTTPEndpoint
			if proto == otlp.ProtocolGRPC {
				endpoint = rcv.GRPCEndpoint
			}
			tp, err := otlp.NewProvider(t.Context(), otlp.Config{Endpoint: endpoint, Protocol: proto, ServiceName: "picobot-test",
				Getenv: env(nil)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tp).NotTo(BeNil())
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

			e := embeddedtest.Start(t, embeddedtest.Options{TracerProvider: tp})
			e.LLM.Respond(func(r fakellm.Recorded) fakellm.Turn {
				if last := r.Messages[len(r.Messages)-1]; len(last.ToolResults) > 0 {
					return fakellm.Turn{Text: "The answer is 42.", Usage: &fakellm.Usage{InputTokens: 120, OutputTokens: 7}}
				}
				return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}},
					Usage: &fakellm.Usage{InputTokens: 100, OutputTokens: 12}}
			})
			c, err := client.New(e.URL, client.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			conn, err := c.Dial(t.Context())
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = conn.Close() }()
			reply, err := conn.Ask(t.Context(), client.Send{Agent: "assistant", ChatID: "traced", Text: "6*7?"}, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(reply.Text).To(Equal("The answer is 42."))

			// The gateway's span ends as its frame handler returns and the
			// turn's once the reply is handed over: both may end after the
			// client has the reply. Wait for the seven spans of the tree.
			var root tracingtest.Span
			var spans []tracingtest.Span
			g.Eventually(func() error {
				g.Expect(tp.ForceFlush(t.Context())).To(Succeed())
				if root, err = tracingtest.Find(rcv.Spans(), tracing.SpanWebSocketSend); err != nil {
					return err
				}
				if spans = rcv.Trace(root.TraceID); len(spans) < 7 {
					return fmt.Errorf("%d spans of the turn so far:\n%s", len(spans), tracingtest.Tree(spans))
				}
				return nil
			}).Should(Succeed())
			g.Expect(tracingtest.Tree(spans)).To(Equal(tracing.SpanWebSocketSend + `
  ` + tracing.SpanPublish + `
    ` + tracing.SpanTurn + `
      ` + tracing.SpanModel + `
      ` + tracing.SpanModel + `
      ` + tracing.SpanTool + `
      ` + tracing.SpanDeliver + `
`))
			g.Expect(root.Service).To(Equal("picobot-test"))
			g.Expect(root.ParentID).To(BeEmpty())
			g.Expect(root.Kind).To(Equal(tracepb.Span_SPAN_KIND_SERVER))
			g.Expect(root.Attrs).To(HaveKeyWithValue("picobot.agent", "assistant"))
			g.Expect(root.Attrs).To(HaveKeyWithValue("picobot.tenant", "default"))

			pub, _ := tracingtest.Find(spans, tracing.SpanPublish)
			g.Expect(pub.Kind).To(Equal(tracepb.Span_SPAN_KIND_PRODUCER))
			turn, _ := tracingtest.Find(spans, tracing.SpanTurn)
			g.Expect(turn.Kind).To(Equal(tracepb.Span_SPAN_KIND_CONSUMER))
			g.Expect(turn.Attrs).To(HaveKeyWithValue("picobot.outcome", "ok"))
			g.Expect(turn.Attrs).To(HaveKeyWithValue("picobot.session", reply.Session))
			g.Expect(turn.Attrs).To(HaveKeyWithValue("picobot.channel", "web"))

			var tokens []string
			for _, s := range spans {
				if s.Name == tracing.SpanModel {
					g.Expect(s.Attrs).To(HaveKeyWithValue("gen_ai.system", "openai"))
					g.Expect(s.Attrs).To(HaveKeyWithValue("gen_ai.request.model", "fake"))
					g.Expect(s.Attrs).To(HaveKeyWithValue("picobot.model.fallback", "false"))
					tokens = append(tokens, s.Attrs["gen_ai.usage.input_tokens"]+"/"+s.Attrs["gen_ai.usage.output_tokens"])
				}
			}
			g.Expect(tokens).To(ConsistOf("100/12", "120/7"))
			tool, _ := tracingtest.Find(spans, tracing.SpanTool)
			g.Expect(tool.Attrs).To(HaveKeyWithValue("gen_ai.tool.name", "calculator"))
			g.Expect(tool.Error).To(BeFalse())
		})
	}
}
