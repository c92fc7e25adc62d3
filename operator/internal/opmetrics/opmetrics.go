// Package opmetrics holds the operator's own Prometheus metrics — the
// session pods of the warm pools and the runs of CronJobs — registered on
// controller-runtime's registry (metrics.Registry), so they are served on
// the operator's authenticated metrics endpoint beside controller-runtime's.
//
// Labels are bounded by configuration: namespace (the tenant), agent (an
// Agent object's name) and outcome codes. Every method is safe on a nil
// *Metrics, which records nothing.
package opmetrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/store"
)

// Metrics are the operator's metrics.
type Metrics struct {
	poolPods    *prometheus.GaugeVec
	podsCreated *prometheus.CounterVec
	podsReaped  *prometheus.CounterVec
	poolMisses  *prometheus.CounterVec
	cron        *metrics.CronRuns
}

// New registers the operator's metrics on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		poolPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picobot_pool_pods",
			Help: "An agent's session pods at its last reconcile, by state: active (serving a chat), warm (waiting for a wake) or starting (not registered yet)."},
			[]string{"namespace", "agent", "state"}),
		podsCreated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_pool_pods_created_total",
			Help: "Session pods the operator created (to refill a warm pool or serve wakes no warm pod took), by outcome: ok or refused (a quota, a missing RuntimeClass, an admission policy)."},
			[]string{"namespace", "agent", "outcome"}),
		podsReaped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_pool_pods_reaped_total",
			Help: "Session pods whose runtime exited (idle, or done with its chat) that the operator deleted."}, []string{"namespace", "agent"}),
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_pool_wake_misses_total",
			Help: "Chats of session pods that died mid-chat which the operator woke again (their messages wait for a new pod)."}, []string{"namespace", "agent"}),
		cron: metrics.NewCronRuns(),
	}
	for _, c := range append([]prometheus.Collector{m.poolPods, m.podsCreated, m.podsReaped, m.poolMisses}, m.cron.Collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("failed to register the operator's metrics"), err)
		}
	}
	return m, nil
}

// Pool records an agent's pods after a reconcile planned them.
func (m *Metrics) Pool(namespace, agent string, active, warm, starting int32) {
	if m == nil {
		return
	}
	m.poolPods.WithLabelValues(namespace, agent, "active").Set(float64(active))
	m.poolPods.WithLabelValues(namespace, agent, "warm").Set(float64(warm))
	m.poolPods.WithLabelValues(namespace, agent, "starting").Set(float64(starting))
}

// PoolGone drops the series of an agent that was deleted.
func (m *Metrics) PoolGone(namespace, agent string) {
	if m == nil {
		return
	}
	m.poolPods.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "agent": agent})
}

// PodCreated counts a pod creation; refused says the API server refused it.
func (m *Metrics) PodCreated(namespace, agent string, refused bool) {
	if m == nil {
		return
	}
	outcome := "ok"
	if refused {
		outcome = "refused"
	}
	m.podsCreated.WithLabelValues(namespace, agent, outcome).Inc()
}

// PodsReaped counts n reaped pods.
func (m *Metrics) PodsReaped(namespace, agent string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.podsReaped.WithLabelValues(namespace, agent).Add(float64(n))
}

// Rewoken counts a chat of a dead pod woken again.
func (m *Metrics) Rewoken(namespace, agent string) {
	if m == nil {
		return
	}
	m.poolMisses.WithLabelValues(namespace, agent).Inc()
}

// CronRunDone records a finished run (the scheduler's OnRunDone).
func (m *Metrics) CronRunDone(namespace string, run store.DetailedCronRun) {
	if m == nil {
		return
	}
	m.cron.Done(namespace, run)
}
