// Package logctx carries a turn's logger in its context, so every line the
// hot path of a turn logs — the session runtime, the session manager, usage
// accounting, the audit log — names the tenant, agent, session and turn it
// belongs to without each layer passing them on.
//
// The session runtime puts a logger with the tenant, agent, chat and turn
// (the inbound message id) into the turn's context as it starts; the
// session manager adds the session once it has resolved it. Code on the
// path logs with From(ctx, its own logger).
package logctx

import (
	"context"
	"log/slog"
)

type key struct{}

// With returns ctx carrying log.
func With(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, key{}, log)
}

// From returns the logger of ctx, fallback when it has none (slog.Default
// when fallback is nil too).
func From(ctx context.Context, fallback *slog.Logger) *slog.Logger {
	if l, ok := ctx.Value(key{}).(*slog.Logger); ok && l != nil {
		return l
	}
	if fallback != nil {
		return fallback
	}
	return slog.Default()
}

// Add returns ctx whose logger (if it has one) also carries args; a
// context without a logger is returned as it is.
func Add(ctx context.Context, args ...any) context.Context {
	l, ok := ctx.Value(key{}).(*slog.Logger)
	if !ok || l == nil {
		return ctx
	}
	return With(ctx, l.With(args...))
}
