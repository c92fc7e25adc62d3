package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceparentKey is the W3C Trace Context header a traceparent is kept under.
const traceparentKey = "traceparent"

// Traceparent returns the W3C traceparent of the sampled span in ctx, to be
// kept with something that work later will point back to (a CronJob the
// turn made: its fires link to the turn); "" when tracing is off or the
// trace is not sampled (a link to spans nobody kept leads nowhere).
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier[traceparentKey]
}

// LinkTo returns the span link to the span a traceparent (Traceparent's)
// names, and false when it is empty or malformed.
func LinkTo(traceparent string) (trace.Link, bool) {
	if traceparent == "" {
		return trace.Link{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparentKey: traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}
