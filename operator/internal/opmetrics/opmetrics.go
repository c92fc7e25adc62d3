// Package opmetrics holds the operator's own Prometheus metrics — the
// session pods of the warm pools, browser pods and the runs of CronJobs —
// registered on
// controller-runtime's registry (metrics.Registry), so they are served on
// the operator's authenticated metrics endpoint beside controller-runtime's.
//
// Labels are bounded by configuration: namespace (the tenant), agent (an
// Agent object's name) and outcome codes. Every method is safe on a nil
// *Metrics, which records nothing.
package opmetrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/store"
)

// PodStartBuckets are the buckets of the pod start latency histograms:
// from a second (an image already on the node) to five minutes (a pull).
var PodStartBuckets = []float64{0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300}

// Browser kinds of the browser metrics' kind label.
const (
	// BrowserProfile is a BrowserProfile's browser (a persistent identity).
	BrowserProfile = "profile"
	// BrowserEphemeral is one dialog's throwaway browser.
	BrowserEphemeral = "ephemeral"
)

// Browser pod states of picobot_browser_pods.
const (
	BrowserStarting = "starting"
	BrowserReady    = "ready"
)

// Metrics are the operator's metrics.
type Metrics struct {
	clock       clock.PassiveClock
	poolPods    *prometheus.GaugeVec
	poolWarm    *prometheus.GaugeVec
	podsCreated *prometheus.CounterVec
	podsReaped  *prometheus.CounterVec
	poolMisses  *prometheus.CounterVec
	podStart    *prometheus.HistogramVec
	coldStarts  *prometheus.CounterVec
	browserPods *prometheus.GaugeVec
	browserUp   *prometheus.HistogramVec
	browserReqs *prometheus.CounterVec
	cron        *metrics.CronRuns

	mu sync.Mutex
	// registered are, per agent, the session pods whose start was
	// observed: the pods registered at the agent's last reconcile, so the
	// set is bounded by the agent's live pods.
	registered map[agentKey]map[types.UID]struct{}
	// browsers are each running browser's kind and state, from which
	// picobot_browser_pods is counted.
	browsers map[agentKey]browserState
}

// agentKey names an object of a namespace (an Agent, a browser).
type agentKey struct{ namespace, name string }

type browserState struct{ kind, state string }

// New registers the operator's metrics on reg, timed by the real clock.
func New(reg prometheus.Registerer) (*Metrics, error) {
	return NewWithClock(reg, clock.RealClock{})
}

// NewWithClock is New with the clock that times pod starts.
func NewWithClock(reg prometheus.Registerer, clk clock.PassiveClock) (*Metrics, error) {
	m := &Metrics{clock: clk, registered: map[agentKey]map[types.UID]struct{}{}, browsers: map[agentKey]browserState{},
		poolWarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picobot_pool_warm_target",
			Help: "The warm pool size an Agent asks for (spec.runtime.warmPool): how many idle session pods the operator keeps ready for wakes."},
			[]string{"namespace", "agent"}),
		podStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "picobot_pool_pod_start_seconds",
			Help:    "Time from a session pod's creation to its runtime registering with the pool (ready for a wake), as the operator's reconciles see it.",
			Buckets: PodStartBuckets}, []string{"namespace", "agent"}),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_pool_cold_starts_total",
			Help: "The warm pool's misses: session pods created for waiting chats that no warm or starting pod could take (each such chat waits for a pod to start)."},
			[]string{"namespace", "agent"}),
		browserPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picobot_browser_pods",
			Help: "Browser pods the operator runs, by kind (profile or ephemeral) and state (starting, or ready: serving sessions)."},
			[]string{"namespace", "kind", "state"}),
		browserUp: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "picobot_browser_pod_start_seconds",
			Help:    "Time from a browser pod's creation to it being ready (its DevTools proxy answering its readiness probe).",
			Buckets: PodStartBuckets}, []string{"namespace", "kind"}),
		browserReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_browser_requests_total",
			Help: "Session pods that asked for a browser (a new holder of its Lease), by whether a ready browser pod was already there (reused) or one had to start (started)."},
			[]string{"namespace", "kind", "outcome"}),
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
	for _, c := range append([]prometheus.Collector{m.poolPods, m.poolWarm, m.podsCreated, m.podsReaped, m.poolMisses, m.podStart, m.coldStarts,
		m.browserPods, m.browserUp, m.browserReqs}, m.cron.Collectors()...) {
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

// WarmTarget records the warm pool size the agent asks for.
func (m *Metrics) WarmTarget(namespace, agent string, size int32) {
	if m == nil {
		return
	}
	m.poolWarm.WithLabelValues(namespace, agent).Set(float64(size))
}

// PoolGone drops the series of an agent that was deleted.
func (m *Metrics) PoolGone(namespace, agent string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"namespace": namespace, "agent": agent}
	m.poolPods.DeletePartialMatch(labels)
	m.poolWarm.DeletePartialMatch(labels)
	m.mu.Lock()
	delete(m.registered, agentKey{namespace, agent})
	m.mu.Unlock()
}

// RegisteredPod is a session pod whose runtime has registered with the
// pool (warm or busy).
type RegisteredPod struct {
	UID     types.UID
	Created time.Time
}

// PodsRegistered records the start latency of the agent's registered pods
// not seen registered before: the time from their creation to now. It is
// called with every pod registered at each reconcile (which runs at least
// every few seconds while the agent has pods), so the latency is as exact
// as that resync; pods no longer listed are forgotten. The first call for
// an agent only takes note of the pods already registered.
func (m *Metrics) PodsRegistered(namespace, agent string, pods []RegisteredPod) {
	if m == nil {
		return
	}
	key := agentKey{namespace, agent}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	seen, known := m.registered[key]
	next := make(map[types.UID]struct{}, len(pods))
	for _, p := range pods {
		next[p.UID] = struct{}{}
		if _, ok := seen[p.UID]; ok || !known {
			// Pods registered when this process first looks at the agent
			// (a restart, a new leader) started before it: not timed.
			continue
		}
		m.podStart.WithLabelValues(namespace, agent).Observe(max(now.Sub(p.Created), 0).Seconds())
	}
	m.registered[key] = next
}

// BrowserState records what a browser's pod is: state BrowserStarting or
// BrowserReady, or "" when the browser runs no pod.
func (m *Metrics) BrowserState(namespace, name, kind, state string) {
	if m == nil {
		return
	}
	key := agentKey{namespace, name}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.browsers[key]
	if old == (browserState{kind, state}) {
		return
	}
	if old.state != "" {
		m.browserPods.WithLabelValues(namespace, old.kind, old.state).Dec()
	}
	if state == "" {
		delete(m.browsers, key)
		return
	}
	m.browsers[key] = browserState{kind, state}
	m.browserPods.WithLabelValues(namespace, kind, state).Inc()
}

// BrowserStarted records a browser pod that became ready after starting
// for d.
func (m *Metrics) BrowserStarted(namespace, kind string, d time.Duration) {
	if m == nil {
		return
	}
	m.browserUp.WithLabelValues(namespace, kind).Observe(max(d, 0).Seconds())
}

// BrowserRequested records a session pod asking for a browser; reused says
// a ready pod already served it.
func (m *Metrics) BrowserRequested(namespace, kind string, reused bool) {
	if m == nil {
		return
	}
	outcome := "started"
	if reused {
		outcome = "reused"
	}
	m.browserReqs.WithLabelValues(namespace, kind, outcome).Inc()
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

// ColdStarts counts n pods created for waiting chats no warm or starting
// pod could take.
func (m *Metrics) ColdStarts(namespace, agent string, n int32) {
	if m == nil || n <= 0 {
		return
	}
	m.coldStarts.WithLabelValues(namespace, agent).Add(float64(n))
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

// CronMissed records missed ticks of a CronJob (the scheduler's OnMissed).
func (m *Metrics) CronMissed(namespace string, ran bool, n int) {
	if m == nil {
		return
	}
	m.cron.Missed(namespace, ran, n)
}

// CronRunDone records a finished run (the scheduler's OnRunDone).
func (m *Metrics) CronRunDone(namespace string, run store.DetailedCronRun) {
	if m == nil {
		return
	}
	m.cron.Done(namespace, run)
}
