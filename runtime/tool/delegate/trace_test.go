package delegate_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/tracing/otlp"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
)

// TestBackgroundRunIsLinkedToItsTurn: a background run started by a traced
// turn's tool call is a background.run trace of its own, exported to a
// real OTLP receiver, with a span link to the span that started it.
func TestBackgroundRunIsLinkedToItsTurn(t *testing.T) {
	g := NewWithT(t)
	rcv := tracingtest.Start(t)
	tp, err := otlp.NewProvider(context.Background(), otlp.Config{Endpoint: rcv.GRPCEndpoint, Protocol: otlp.ProtocolGRPC,
		Getenv: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	log := &readyLog{got: make(chan struct{}, 10)}
	runner := &agents{}
	bctx, stop := context.WithCancel(context.Background())
	bg := delegate.NewBackgroundRuns(bctx, delegate.BackgroundConfig{Runner: runner, Store: st, Completions: log})
	t.Cleanup(func() { stop(); bg.Wait() })
	edges := []picobotv1alpha1.Delegate{{Name: "writer", AgentRef: corev1.LocalObjectReference{Name: "writer"}}}
	reg, err := tool.NewRegistry(delegate.New(delegate.Config{Agent: "lead", Runner: runner, Runs: st, Edges: edges, Background: bg}))
	g.Expect(err).NotTo(HaveOccurred())

	ctx, turn := tp.Tracer("test").Start(store.WithTenant(context.Background(), "team"), "the turn's tool call")
	res := reg.Execute(ctx, tool.Env{SessionID: "web:lead/c:default", Agent: "lead"},
		llm.ToolCall{ID: "c", Name: delegate.Name, Arguments: `{"target":"writer","task":"write it","mode":"background"}`})
	turn.End()
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	var started delegate.Result
	g.Expect(json.Unmarshal([]byte(res.Content), &started)).To(Succeed())
	g.Eventually(log.got).WithTimeout(30 * time.Second).Should(Receive())

	var run tracingtest.Span
	g.Eventually(func() error {
		g.Expect(tp.ForceFlush(context.Background())).To(Succeed())
		run, err = tracingtest.Find(rcv.Spans(), tracing.SpanBackgroundRun)
		return err
	}).WithTimeout(30 * time.Second).Should(Succeed())
	tc := turn.SpanContext()
	g.Expect(run.TraceID).NotTo(Equal(tc.TraceID().String()), "the run is a trace of its own")
	g.Expect(run.ParentID).To(BeEmpty())
	g.Expect(run.Links).To(ConsistOf(tc.TraceID().String() + "/" + tc.SpanID().String()))
	g.Expect(run.Attrs).To(HaveKeyWithValue("picobot.run_id", started.RunID))
	g.Expect(run.Attrs).To(HaveKeyWithValue("picobot.agent", "writer"))
}
