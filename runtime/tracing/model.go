package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/llm"
)

// Model wraps p, the link of an agent's model chain named "provider/model",
// so each call made with a traced context is a SpanModel span carrying the
// provider, the model, whether the link is a fallback and the tokens the
// provider reported. Put it around a link (outside provider.Retry, so a
// span covers the call's retries), like metrics.Model.
func Model(name string, fallback bool, p llm.Provider) llm.Provider {
	prov, model, ok := strings.Cut(name, "/")
	if !ok {
		prov, model = "", name
	}
	return &tracedModel{next: p, start: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrProvider.String(prov), AttrModel.String(model), AttrFallback.Bool(fallback))}}
}

type tracedModel struct {
	next  llm.Provider
	start []trace.SpanStartOption
}

func (t *tracedModel) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	ctx, span := Start(ctx, SpanModel, t.start...)
	if !span.IsRecording() {
		return t.next.Complete(ctx, req, onDelta)
	}
	defer span.End()
	resp, err := t.next.Complete(ctx, req, onDelta)
	if err != nil {
		Fail(span, err)
		return resp, err
	}
	u := resp.Usage
	span.SetAttributes(AttrInputTokens.Int(u.InputTokens), AttrOutputTokens.Int(u.OutputTokens), AttrCachedTokens.Int(u.CachedInputTokens))
	return resp, nil
}
