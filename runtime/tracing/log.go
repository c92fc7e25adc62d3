package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys of the trace context on a log line.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so that a record logged with a context carrying a span
// (slog's *Context methods, or a Logger from WithContext) gets trace_id and
// span_id beside its other fields: a line of a turn's hot path leads to the
// turn's trace. Records without a span are passed on as they are.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ next slog.Handler }

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.next.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.next.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.next.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.next.WithGroup(name)}
}

// Attrs returns trace_id and span_id of the span in ctx as slog arguments,
// none when ctx has no span: for a logger (Logger.With) kept for the length
// of one span, whose lines are logged without that context.
func Attrs(ctx context.Context) []any {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []any{slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String())}
}
