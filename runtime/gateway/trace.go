package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/tracing"
)

// startTurn starts the root span of a turn the gateway takes (name is one
// of tracing's gateway spans), for agent and chat of the request's tenant.
// A request carrying W3C trace context (traceparent, from a client or a
// proxy that traces) makes the turn a part of that trace.
func (s *Server) startTurn(ctx context.Context, h http.Header, name, agent, chat string) (context.Context, trace.Span) {
	if h != nil && h.Get("traceparent") != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(h))
	}
	p, _ := PrincipalFrom(ctx)
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		tracing.AttrTenant.String(p.Tenant), tracing.AttrAgent.String(agent), tracing.AttrChat.String(chat)))
}
