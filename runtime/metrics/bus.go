package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picobot/picobot/runtime/bus"
)

// Stream kinds of the bus metrics' stream label: the part of a stream's
// name (bus.Key) that says what it carries. Anything else is StreamOther,
// so chat ids, run ids and the like never become label values.
const (
	StreamChat       = "chat"
	StreamWake       = "wake"
	StreamOutbound   = "outbound"
	StreamDeadLetter = "dead-letter"
	StreamOther      = "other"
)

// busLabels are the tenant and stream kind of a stream named by bus.Key:
// "{tenant:scope}:kind:..." or "{tenant:kind}". A tenant is a namespace
// name, which bus.Key leaves unescaped.
func busLabels(stream string) (tenant, kind string) {
	if !strings.HasPrefix(stream, "{") {
		return "", StreamOther
	}
	tag, rest, _ := strings.Cut(stream[1:], "}")
	tenant, scope, _ := strings.Cut(tag, ":")
	kind = scope
	if rest != "" {
		kind, _, _ = strings.Cut(strings.TrimPrefix(rest, ":"), ":")
	}
	switch kind {
	case StreamChat, StreamWake, StreamOutbound, StreamDeadLetter:
		return tenant, kind
	}
	return tenant, StreamOther
}

// busMetrics are the bus's metrics.
type busMetrics struct {
	published, consumed, acked, reclaimed *prometheus.CounterVec
	errors                                *prometheus.CounterVec
	inFlight                              *prometheus.GaugeVec
	lag                                   *prometheus.HistogramVec
}

func newBusMetrics() *busMetrics {
	labels := []string{"tenant", "stream"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "bus", Name: name, Help: help}, labels)
	}
	return &busMetrics{
		published: counter("published_total", "Messages this process appended to streams, by tenant and stream kind (chat, wake, outbound, dead-letter, other)."),
		consumed:  counter("consumed_total", "Messages this process fetched from streams as new."),
		acked:     counter("acked_total", "Messages this process acknowledged."),
		reclaimed: counter("reclaimed_total", "Pending messages this process took over from a consumer that died or stalled (Claim)."),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "bus", Name: "errors_total",
			Help: "Bus calls that failed, by operation (publish, fetch, ack, claim)."}, []string{"tenant", "stream", "operation"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "bus", Name: "pending_entries",
			Help: "Messages this process fetched or took over and has not acknowledged yet (its part of the streams' pending entries)."}, labels),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "bus", Name: "consumer_lag_seconds",
			Help:    "Time from a message being queued (its queued-at header) to a consumer fetching it: how far consumers lag behind publishers.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}}, labels),
	}
}

func (b *busMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{b.published, b.consumed, b.acked, b.reclaimed, b.errors, b.inFlight, b.lag}
}

// Bus returns b recording the bus metrics; b itself when m is nil.
func (m *Metrics) Bus(b bus.Bus) bus.Bus {
	if m == nil || b == nil {
		return b
	}
	return &meteredBus{Bus: b, m: m}
}

// meteredBus is a bus.Bus that records what passes through it.
type meteredBus struct {
	bus.Bus
	m *Metrics
}

func (b *meteredBus) failed(tenant, kind, op string, err error) error {
	if err != nil {
		b.m.bus.errors.WithLabelValues(tenant, kind, op).Inc()
	}
	return err
}

// Publish implements bus.Bus.
func (b *meteredBus) Publish(ctx context.Context, stream string, msgs ...bus.Message) error {
	tenant, kind := busLabels(stream)
	if err := b.Bus.Publish(ctx, stream, msgs...); err != nil {
		return b.failed(tenant, kind, "publish", err)
	}
	b.m.bus.published.WithLabelValues(tenant, kind).Add(float64(len(msgs)))
	return nil
}

// Fetch implements bus.Bus.
func (b *meteredBus) Fetch(ctx context.Context, stream, group, consumer string, opts bus.FetchOptions) ([]bus.Message, error) {
	tenant, kind := busLabels(stream)
	msgs, err := b.Bus.Fetch(ctx, stream, group, consumer, opts)
	if err != nil {
		if ctx.Err() != nil {
			return msgs, err // a wait cut short is no failure of the bus
		}
		return msgs, b.failed(tenant, kind, "fetch", err)
	}
	if len(msgs) > 0 {
		b.m.bus.consumed.WithLabelValues(tenant, kind).Add(float64(len(msgs)))
		b.m.bus.inFlight.WithLabelValues(tenant, kind).Add(float64(len(msgs)))
		now := b.m.clock.Now()
		lag := b.m.bus.lag.WithLabelValues(tenant, kind)
		for _, msg := range msgs {
			if at, ok := msg.QueuedTime(); ok {
				lag.Observe(max(now.Sub(at), 0).Seconds())
			}
		}
	}
	return msgs, nil
}

// Ack implements bus.Bus.
func (b *meteredBus) Ack(ctx context.Context, stream, group string, seqs ...string) error {
	tenant, kind := busLabels(stream)
	if err := b.Bus.Ack(ctx, stream, group, seqs...); err != nil {
		return b.failed(tenant, kind, "ack", err)
	}
	b.m.bus.acked.WithLabelValues(tenant, kind).Add(float64(len(seqs)))
	// Acks of messages another incarnation fetched would push the gauge
	// below zero; it counts this process's own.
	g := b.m.bus.inFlight.WithLabelValues(tenant, kind)
	g.Sub(float64(len(seqs)))
	return nil
}

// Claim implements bus.Bus.
func (b *meteredBus) Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]bus.Message, error) {
	tenant, kind := busLabels(stream)
	msgs, err := b.Bus.Claim(ctx, stream, group, consumer, minIdle, count)
	if err != nil {
		if ctx.Err() != nil {
			return msgs, err
		}
		return msgs, b.failed(tenant, kind, "claim", err)
	}
	if len(msgs) > 0 {
		b.m.bus.reclaimed.WithLabelValues(tenant, kind).Add(float64(len(msgs)))
		b.m.bus.inFlight.WithLabelValues(tenant, kind).Add(float64(len(msgs)))
	}
	return msgs, nil
}
