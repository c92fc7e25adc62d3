package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/picobot/picobot/runtime/tracing"
)

// TestLogHandlerAddsTraceIDs: a line logged with a span's context carries
// its trace and span ids beside the logger's own fields; a line without one
// carries none.
func TestLogHandlerAddsTraceIDs(t *testing.T) {
	g := NewWithT(t)
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("tenant", "t1", "agent", "a1")
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "turn")
	defer span.End()

	log.InfoContext(ctx, "Turn started", "session", "s1")
	log.Info("No context")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	g.Expect(lines).To(HaveLen(2))
	var first, second map[string]any
	g.Expect(json.Unmarshal(lines[0], &first)).To(Succeed())
	g.Expect(json.Unmarshal(lines[1], &second)).To(Succeed())
	g.Expect(first).To(HaveKeyWithValue("trace_id", span.SpanContext().TraceID().String()))
	g.Expect(first).To(HaveKeyWithValue("span_id", span.SpanContext().SpanID().String()))
	g.Expect(first).To(HaveKeyWithValue("tenant", "t1"))
	g.Expect(first).To(HaveKeyWithValue("session", "s1"))
	g.Expect(second).NotTo(HaveKey("trace_id"))
	g.Expect(second).To(HaveKeyWithValue("agent", "a1"))
	g.Expect(tracing.LogHandler(log.Handler())).To(BeIdenticalTo(log.Handler()), "wrapping twice adds the ids once")
}

// TestStartWithoutRecordingParent: without a recording span in the context
// Start is a no-op (tracing off costs nothing below the roots); under one it
// starts a child on the parent's pipeline; StartLinked starts a new trace
// linked to it.
func TestStartWithoutRecordingParent(t *testing.T) {
	g := NewWithT(t)
	ctx, span := tracing.Start(context.Background(), "child")
	g.Expect(span.IsRecording()).To(BeFalse())
	g.Expect(ctx).To(Equal(context.Background()))
	span.End()

	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	defer parent.End()
	_, child := tracing.Start(pctx, "child")
	defer child.End()
	g.Expect(child.IsRecording()).To(BeTrue())
	g.Expect(child.SpanContext().TraceID()).To(Equal(parent.SpanContext().TraceID()))
	g.Expect(child.(sdktrace.ReadOnlySpan).Parent().SpanID()).To(Equal(parent.SpanContext().SpanID()))

	_, linked := tracing.StartLinked(pctx, context.Background(), "later")
	defer linked.End()
	ro := linked.(sdktrace.ReadOnlySpan)
	g.Expect(ro.SpanContext().TraceID()).NotTo(Equal(parent.SpanContext().TraceID()), "a trace of its own")
	g.Expect(ro.Parent().IsValid()).To(BeFalse())
	g.Expect(ro.Links()).To(HaveLen(1))
	g.Expect(ro.Links()[0].SpanContext.SpanID()).To(Equal(parent.SpanContext().SpanID()))
}
