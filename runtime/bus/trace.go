package bus

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/tracing"
)

// traceContext is the W3C Trace Context propagator: it writes and reads
// HeaderTraceparent (and tracestate) of an entry's headers.
var traceContext propagation.TraceContext

// TracePublish starts the producer span of publishing msgs to stream, a
// child of the span in ctx, and returns msgs with its trace context in their
// headers (HeaderTraceparent), so the consumer's work continues the trace
// (TraceContext). Headers are copied, never changed in place: a publisher's
// map is its own. A message whose publisher already set HeaderTraceparent
// keeps it. Without a recording span in ctx (tracing off) msgs are returned
// as they are and the span records nothing. Implementations call it in
// Publish and end the span when the entries are appended.
func TracePublish(ctx context.Context, stream string, msgs []Message) ([]Message, trace.Span) {
	ctx, span := tracing.Start(ctx, tracing.SpanPublish, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(tracing.AttrStream.String(stream)))
	if !span.IsRecording() {
		return msgs, span
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if _, ok := m.Headers[HeaderTraceparent]; !ok {
			h := make(map[string]string, len(m.Headers)+2)
			maps.Copy(h, m.Headers)
			traceContext.Inject(ctx, propagation.MapCarrier(h))
			m.Headers = h
		}
		out[i] = m
	}
	return out, span
}

// TraceContext returns ctx carrying the trace context m was published with
// (its HeaderTraceparent) as the remote parent of the consumer's spans;
// ctx as it is when m has none or it is malformed.
func TraceContext(ctx context.Context, m Message) context.Context {
	if m.Headers[HeaderTraceparent] == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier(m.Headers))
}
