package metrics

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/picobot/picobot/runtime/llm"
)

// Model wraps p, the link of agent's model chain named "provider/model",
// so its calls are recorded: latency, time to first token of streamed
// calls, tokens, errors and, for a fallback (not the chain's first link),
// each call made to it. It wraps rather than changes provider.Retry and
// provider.Fallback: put it around a link of the chain (outside Retry, so a
// call's time includes its retries). Nil m returns p.
func (m *Metrics) Model(tenant, agent, name string, fallback bool, p llm.Provider) llm.Provider {
	if m == nil {
		return p
	}
	prov, model, ok := strings.Cut(name, "/")
	if !ok {
		prov, model = "", name
	}
	return &observedModel{m: m, next: p, fallback: fallback, labels: []string{tenant, agent, prov, model}}
}

type observedModel struct {
	m        *Metrics
	next     llm.Provider
	fallback bool
	labels   []string // tenant, agent, provider, model
}

func (o *observedModel) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	m := o.m
	turn := turnOf(ctx)
	labels := o.labels
	if turn != nil && turn.tenant != labels[0] {
		// One agent's chain serves several tenants in embedded mode: the
		// turn knows whose call this is.
		labels = append([]string{turn.tenant}, labels[1:]...)
	}
	if o.fallback {
		m.modelFallbacks.WithLabelValues(labels...).Inc()
	}
	start := m.clock.Now()
	deltas := onDelta
	if onDelta != nil {
		var first atomic.Bool
		deltas = func(d llm.Delta) {
			if d.Text != "" && first.CompareAndSwap(false, true) {
				m.modelTTFT.WithLabelValues(labels...).Observe(m.clock.Since(start).Seconds())
			}
			onDelta(d)
		}
	}
	resp, err := o.next.Complete(ctx, req, deltas)
	d := m.clock.Since(start)
	observe(m.modelSeconds.WithLabelValues(labels...), d, exemplar(ctx))
	if turn != nil {
		turn.model.Add(int64(d))
	}
	outcome := OutcomeOK
	if err != nil {
		outcome = ErrorCode(ctx, err)
	}
	m.modelCalls.WithLabelValues(append(labels[:4:4], outcome)...).Inc()
	if err == nil {
		u := resp.Usage
		m.modelTokens.WithLabelValues(append(labels[:4:4], "in")...).Add(float64(u.InputTokens))
		m.modelTokens.WithLabelValues(append(labels[:4:4], "out")...).Add(float64(u.OutputTokens))
		if u.CachedInputTokens > 0 {
			m.modelTokens.WithLabelValues(append(labels[:4:4], "cached")...).Add(float64(u.CachedInputTokens))
		}
	}
	return resp, err
}
