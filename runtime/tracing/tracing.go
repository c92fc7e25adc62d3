// Package tracing is PicoBot's OpenTelemetry tracing: one trace per turn, from
// the channel webhook or WebSocket frame through the gateway, the bus entry,
// the session runtime, each model and tool call, to the outbound delivery.
//
// It holds only what the hot path needs of the OpenTelemetry API: span names
// and attributes, Start (a child span on the pipeline of the span in the
// context), the W3C trace context carried in bus entries, and a slog handler
// that puts trace_id and span_id on log lines. Building the SDK's provider
// and its OTLP exporter is package runtime/tracing/otlp's job, done once in
// a process's main; nothing here is global.
//
// Roots of a trace (a gateway request, a webhook, a bus entry taken by a
// session runtime, a cron fire) start their span with the TracerProvider
// their component was given; everything below them starts its spans with
// Start, which uses the provider of the parent span. A context without a
// recording span (tracing off, or the trace not sampled) makes Start a
// no-op, so the code below the roots needs no configuration at all.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of PicoBot's spans.
const ScopeName = "github.com/picobot/picobot"

// Span names. A turn's tree is: a root (SpanWebSocketSend, SpanHTTPSend,
// SpanChatCompletion, or SpanInbound for a chat platform's webhook or
// polled update) > SpanPublish > SpanTurn > SpanModel
// and SpanTool (several) > SpanDeliver.
const (
	SpanWebSocketSend  = "gateway.websocket.send"
	SpanHTTPSend       = "gateway.http.send"
	SpanChatCompletion = "gateway.chat_completions"
	SpanInbound        = "channel.inbound"
	SpanPublish        = "bus.publish"
	SpanTurn           = "session.turn"
	SpanModel          = "model.call"
	SpanTool           = "tool.call"
	SpanDeliver        = "turn.deliver"
	SpanOutbound       = "outbound.deliver"
	SpanOutboundRelay  = "outbound.relay"
	SpanCronFire       = "cron.fire"
	SpanBackgroundRun  = "background.run"
)

// Attribute keys. Model calls use the OpenTelemetry GenAI semantic
// conventions' names; the rest are PicoBot's own.
const (
	AttrTenant       = attribute.Key("picobot.tenant")
	AttrAgent        = attribute.Key("picobot.agent")
	AttrChannel      = attribute.Key("picobot.channel")
	AttrChannelType  = attribute.Key("picobot.channel.type")
	AttrChat         = attribute.Key("picobot.chat")
	AttrSession      = attribute.Key("picobot.session")
	AttrMessageID    = attribute.Key("picobot.message_id")
	AttrOutcome      = attribute.Key("picobot.outcome")
	AttrStream       = attribute.Key("messaging.destination.name")
	AttrDeliveries   = attribute.Key("picobot.deliveries")
	AttrTool         = attribute.Key("gen_ai.tool.name")
	AttrToolCallID   = attribute.Key("gen_ai.tool.call.id")
	AttrProvider     = attribute.Key("gen_ai.system")
	AttrModel        = attribute.Key("gen_ai.request.model")
	AttrInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	AttrCachedTokens = attribute.Key("gen_ai.usage.cached_input_tokens")
	AttrFallback     = attribute.Key("picobot.model.fallback")
	AttrCronJob      = attribute.Key("picobot.cronjob")
	AttrRunID        = attribute.Key("picobot.run_id")
)

// noSpan is what Start returns when there is nothing to record: ending it
// does nothing, and it never ends a span of the caller's.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a child span of the span in ctx, on that span's own
// pipeline (its TracerProvider). Without a recording parent it returns ctx
// unchanged and a span that records nothing, at the cost of one context
// lookup: that is the whole price of tracing when it is off.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	return parent.TracerProvider().Tracer(ScopeName).Start(ctx, name, opts...)
}

// Tracer returns PicoBot's tracer of tp; a nil tp is the no-op provider
// (tracing off).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Fail records err on span and marks it failed; a nil err does nothing.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// TraceID returns the id of the sampled trace of ctx, "" when there is none
// (tracing off or the trace not sampled): what Prometheus exemplars carry.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}

// StartLinked starts the root span of work that outlives the request that
// asked for it (a background run started by a turn's tool call): a new
// trace in ctx, on the pipeline of the span in from, linked to that span
// (a span link, not a parent, so the turn's trace ends with the turn).
// Without a recording span in from it returns ctx and a span that records
// nothing.
func StartLinked(from, ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(from)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.LinkFromContext(from)))
	return parent.TracerProvider().Tracer(ScopeName).Start(ctx, name, opts...)
}
