// Package deadletter publishes how many chat messages each tenant has on its
// dead-letter stream (sessionrt.DeadLetterStream): messages whose turn took
// their session runtime down on every delivery and were set aside. An
// operator alerts on the gauge, looks at them with `picobot dead-letters
// --tenant NS` and requeues them once the cause is fixed.
package deadletter

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/sessionrt"
)

// DefaultInterval is how often the counts are read.
const DefaultInterval = 30 * time.Second

// StreamLen is what the gauge needs of the bus.
type StreamLen interface {
	Len(ctx context.Context, stream string) (int64, error)
}

// Gauge keeps picobot_dead_letter_messages{namespace} up to date for every
// namespace with Agents. It is a manager.Runnable; it needs no leader (each
// replica reports the same counts).
type Gauge struct {
	Client   client.Reader
	Bus      StreamLen
	Interval time.Duration
	gauge    *prometheus.GaugeVec
	// last are the namespaces of the last update (Update is not called
	// concurrently: Start's loop, or a test).
	last map[string]bool
}

// New returns a Gauge registered with reg.
func New(c client.Reader, b StreamLen, reg prometheus.Registerer) (*Gauge, error) {
	g := &Gauge{Client: c, Bus: b, Interval: DefaultInterval, gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "picobot_dead_letter_messages",
		Help: "Chat messages set aside on the tenant's dead-letter stream after too many deliveries (picobot dead-letters lists and requeues them).",
	}, []string{"namespace"})}
	if err := reg.Register(g.gauge); err != nil {
		return nil, err
	}
	return g, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (g *Gauge) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (g *Gauge) Start(ctx context.Context) error {
	t := time.NewTicker(g.Interval)
	defer t.Stop()
	for {
		g.Update(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Update reads the counts once. Namespaces that no longer have Agents are
// dropped from the gauge.
func (g *Gauge) Update(ctx context.Context) {
	logger := log.FromContext(ctx).WithName("dead-letters")
	var agents picobotv1alpha1.AgentList
	if err := g.Client.List(ctx, &agents); err != nil {
		logger.Error(err, "Failed to list Agents")
		return
	}
	seen := map[string]bool{}
	for _, a := range agents.Items {
		if seen[a.Namespace] {
			continue
		}
		seen[a.Namespace] = true
		n, err := g.Bus.Len(ctx, sessionrt.DeadLetterStream(a.Namespace))
		if err != nil {
			logger.Error(err, "Failed to count dead letters", "namespace", a.Namespace)
			continue
		}
		g.gauge.WithLabelValues(a.Namespace).Set(float64(n))
	}
	g.prune(seen)
}

// prune drops the series of the namespaces seen last time and not now.
func (g *Gauge) prune(seen map[string]bool) {
	for ns := range g.last {
		if !seen[ns] {
			g.gauge.DeleteLabelValues(ns)
		}
	}
	g.last = seen
}
