// Package metrics holds PicoBot's own Prometheus metrics: turns, model calls,
// tool calls, the gateway and the session runtime. A process builds one
// Metrics on its own registry (no global registry, so tests and several
// runtimes in one process never share counters) and hands it to the parts it
// wires; every method is safe on a nil *Metrics, which records nothing.
//
// Labels are bounded by configuration, never by what users send: tenant
// (a namespace), agent, provider and model (the agent's configured chain),
// tool (the agent's registered tools, capped at MaxToolLabels) and outcome
// codes. Session ids and user text never become labels.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// Namespace prefixes every metric name.
const Namespace = "picobot"

// MaxToolLabels caps the distinct tool names used as label values; calls of
// further tools (an MCP server with hundreds of tools) count as OtherTool.
const MaxToolLabels = 200

// Label values that stand for many.
const (
	// OtherTool labels the calls of tools past MaxToolLabels.
	OtherTool = "other"
	// UnknownTool labels calls of a name the agent has no tool for (the
	// model made it up: it must not become a label).
	UnknownTool = "unknown"
)

// Turn outcomes besides the protocol's error codes.
const (
	OutcomeOK = "ok"
)

// Phases of a turn in picobot_turn_duration_seconds.
const (
	PhaseTotal = "total"
	PhaseModel = "model"
	PhaseTools = "tools"
	PhaseQueue = "queue"
	// PhasePrompt is the turn's first step under the session's lock:
	// storing the message, recalling memory, building the system prompt,
	// compressing the context.
	PhasePrompt = "prompt"
	// PhasePersist is its last: storing what the turn produced.
	PhasePersist = "persist"
)

var (
	turnBuckets  = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	modelBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120}
	toolBuckets  = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

// Metrics is the set of PicoBot's metrics of one process.
type Metrics struct {
	clock clock.PassiveClock

	turns          *prometheus.CounterVec
	turnSeconds    *prometheus.HistogramVec
	modelCalls     *prometheus.CounterVec
	modelSeconds   *prometheus.HistogramVec
	modelTTFT      *prometheus.HistogramVec
	modelTokens    *prometheus.CounterVec
	modelCost      *prometheus.CounterVec
	modelFallbacks *prometheus.CounterVec
	toolCalls      *prometheus.CounterVec
	toolSeconds    *prometheus.HistogramVec
	sessions       *prometheus.GaugeVec
	gwConns        *prometheus.GaugeVec
	gwFrames       *prometheus.CounterVec
	frameIn        prometheus.Counter // of gwFrames, resolved once: every frame counts
	frameOut       prometheus.Counter
	gwAuthFailures prometheus.Counter
	gwRateLimited  *prometheus.CounterVec
	gwQuotaRefused *prometheus.CounterVec

	bus    *busMetrics
	store  *storeMetrics
	wakes  *prometheus.CounterVec
	claims *prometheus.CounterVec
	leased *prometheus.GaugeVec
	// cron is the scheduler's in embedded mode (the operator registers
	// its own CronRuns on its registry).
	cron *CronRuns

	toolsMu sync.Mutex
	tools   map[string]struct{} // tool names given a label of their own
}

// Options tune New.
type Options struct {
	// Clock times turns and calls (the real clock when nil).
	Clock clock.PassiveClock
}

// NewRegistry returns the registry of a process: the Go runtime and process
// collectors, to which New adds PicoBot's metrics. Tests use an empty
// prometheus.NewRegistry to see only PicoBot's.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// New registers PicoBot's metrics on reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m := &Metrics{clock: opts.Clock, tools: map[string]struct{}{},
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "turns_total",
			Help: "Model turns that ended, by outcome: ok or the protocol's error code."}, []string{"tenant", "agent", "outcome"}),
		turnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "turn_duration_seconds",
			Help:    "Time of a turn by phase: total (from the runtime taking the message to its outcome), prompt (storing the message, memory recall, the system prompt, compression), model (its model calls), tools (its tool calls), persist (storing what it produced) and queue (from the message being queued to the runtime taking it).",
			Buckets: turnBuckets}, []string{"tenant", "agent", "phase"}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "model_calls_total",
			Help: "Model calls (retries included) by outcome: ok, an HTTP status, truncated, context_overflow, cancelled or error (a network or other failure)."},
			[]string{"tenant", "agent", "provider", "model", "outcome"}),
		modelSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "model_call_duration_seconds",
			Help: "Time of a model call, retries included.", Buckets: modelBuckets}, []string{"tenant", "agent", "provider", "model"}),
		modelTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "model_time_to_first_token_seconds",
			Help: "Time from a streamed model call's start to its first text delta.", Buckets: modelBuckets}, []string{"tenant", "agent", "provider", "model"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "model_tokens_total",
			Help: "Tokens of successful model calls as the provider reported them: direction in, out, or cached (the part of in served from a prompt cache)."},
			[]string{"tenant", "agent", "provider", "model", "direction"}),
		modelCost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "model_cost_total",
			Help: "Cost of successful model calls as usage accounting priced them, in the price table's currency unit (USD for the built-in prices); a model without a price adds nothing."},
			[]string{"tenant", "agent", "provider", "model"}),
		modelFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "model_fallbacks_total",
			Help: "Calls made to a fallback model (provider, model) after the models before it in the agent's chain failed."},
			[]string{"tenant", "agent", "provider", "model"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tool_calls_total",
			Help: "Tool calls by tool and outcome (ok or error)."}, []string{"tenant", "agent", "tool", "outcome"}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "tool_call_duration_seconds",
			Help: "Time of a tool call.", Buckets: toolBuckets}, []string{"tenant", "agent", "tool"}),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "sessions_active",
			Help: "Chats this process serves now (each runs one session's turns at a time)."}, []string{"tenant", "agent"}),
		gwConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "gateway_connections",
			Help: "Open client connections of the gateway by kind (websocket)."}, []string{"kind"}),
		gwFrames: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gateway_frames_total",
			Help: "WebSocket frames by direction (in, out)."}, []string{"direction"}),
		gwAuthFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "gateway_auth_failures_total",
			Help: "Requests refused for a missing or wrong API key."}),
		gwQuotaRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gateway_quota_refused_total",
			Help: "Messages the gateway refused for the tenant's TenantQuota caps, by code: session_limit (maxConcurrentSessions) or message_limit (messagesPerMinute)."},
			[]string{"tenant", "code"}),
		gwRateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "gateway_rate_limited_total",
			Help: "Requests refused with 429 by reason: key (the API key's rate limit) or auth_failures (too many failed authentications from the address)."},
			[]string{"reason"}),
	}
	m.frameIn, m.frameOut = m.gwFrames.WithLabelValues("in"), m.gwFrames.WithLabelValues("out")
	m.bus, m.store = newBusMetrics(), newStoreMetrics()
	m.wakes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "session_wakes_total",
		Help: "Chats this process woke a runtime for (a message for a chat no runtime served), by outcome: queued or error."},
		[]string{"tenant", "agent", "outcome"})
	m.claims = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "pool_claims_total",
		Help: "Wakes this session pod claimed (a chat, a scheduled run or a stateless turn), by kind: warm (the pod was waiting for wakes when the wake was queued) or cold (the wake was queued before the pod was ready: it waited for the pod to start, or to finish other work)."},
		[]string{"tenant", "agent", "kind"})
	m.leased = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "sessions_leased",
		Help: "Sessions whose store lease this process took and has not given up (idle between turns or in one); sessions_active counts the chats served."},
		[]string{"tenant", "agent"})
	m.cron = NewCronRuns()
	cs := []prometheus.Collector{m.turns, m.turnSeconds, m.modelCalls, m.modelSeconds, m.modelTTFT, m.modelTokens, m.modelCost, m.modelFallbacks,
		m.toolCalls, m.toolSeconds, m.sessions, m.gwConns, m.gwFrames, m.gwAuthFailures, m.gwRateLimited, m.gwQuotaRefused, m.wakes,
		m.claims, m.leased}
	cs = append(cs, m.cron.Collectors()...)
	cs = append(cs, m.bus.collectors()...)
	cs = append(cs, m.store.collectors()...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("failed to register PicoBot's metrics"), err)
		}
	}
	return m, nil
}

// Handler serves g's metrics, in OpenMetrics when the scraper asks for it.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Turn times one turn; the model and tool calls made with its context add
// their time to its phases.
type Turn struct {
	m             *Metrics
	tenant, agent string
	start         time.Time
	queued        time.Time    // zero when unknown
	model, tools  atomic.Int64 // nanoseconds
	// prompt and persist are set by the one goroutine that runs the
	// session's steps, before End.
	prompt, persist time.Duration
	timedSteps      bool // the session runtime timed them
	exemplar        prometheus.Labels
}

type turnKey struct{}

// StartTurn starts timing a turn of agent; calls made with the returned
// context count towards its phases. End it with Turn.End.
func (m *Metrics) StartTurn(ctx context.Context, tenant, agent string) (context.Context, *Turn) {
	if m == nil {
		return ctx, nil
	}
	t := &Turn{m: m, tenant: tenant, agent: agent, start: m.clock.Now(), exemplar: exemplar(ctx)}
	return context.WithValue(ctx, turnKey{}, t), t
}

func turnOf(ctx context.Context) *Turn {
	t, _ := ctx.Value(turnKey{}).(*Turn)
	return t
}

// QueuedAt says when the turn's message was queued (bus.HeaderQueuedAt):
// the time from then to the turn's start is its queue phase.
func (t *Turn) QueuedAt(at time.Time) {
	if t != nil {
		t.queued = at
	}
}

// TimePhase starts timing phase (PhasePrompt or PhasePersist) of the turn
// of ctx; the returned func ends it. Without a turn in ctx it does nothing.
func TimePhase(ctx context.Context, phase string) (done func()) {
	t := turnOf(ctx)
	if t == nil {
		return func() {}
	}
	start := t.m.clock.Now()
	return func() {
		d := t.m.clock.Since(start)
		t.timedSteps = true
		switch phase {
		case PhasePrompt:
			t.prompt += d
		case PhasePersist:
			t.persist += d
		}
	}
}

// End records the turn with outcome (OutcomeOK or an error code).
func (t *Turn) End(outcome string) {
	if t == nil {
		return
	}
	t.m.turns.WithLabelValues(t.tenant, t.agent, outcome).Inc()
	h := t.m.turnSeconds
	observe(h.WithLabelValues(t.tenant, t.agent, PhaseTotal), t.m.clock.Since(t.start), t.exemplar)
	observe(h.WithLabelValues(t.tenant, t.agent, PhaseModel), time.Duration(t.model.Load()), t.exemplar)
	observe(h.WithLabelValues(t.tenant, t.agent, PhaseTools), time.Duration(t.tools.Load()), t.exemplar)
	if t.timedSteps {
		observe(h.WithLabelValues(t.tenant, t.agent, PhasePrompt), t.prompt, t.exemplar)
		observe(h.WithLabelValues(t.tenant, t.agent, PhasePersist), t.persist, t.exemplar)
	}
	if !t.queued.IsZero() {
		// Clocks of two hosts may disagree: a negative wait is none.
		observe(h.WithLabelValues(t.tenant, t.agent, PhaseQueue), max(t.start.Sub(t.queued), 0), t.exemplar)
	}
}

// ExemplarTraceID is the exemplar label of a latency observation: the id of
// the sampled trace of the turn or call it timed, so a slow bucket leads to
// the trace (OpenMetrics exposition only; see Handler).
const ExemplarTraceID = "trace_id"

// exemplar returns the exemplar labels of the sampled trace of ctx, nil
// without one (tracing off or the trace not sampled).
func exemplar(ctx context.Context) prometheus.Labels {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return nil
	}
	return prometheus.Labels{ExemplarTraceID: sc.TraceID().String()}
}

// observe records d on o with ex as its exemplar when there is one.
func observe(o prometheus.Observer, d time.Duration, ex prometheus.Labels) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && ex != nil {
		eo.ObserveWithExemplar(d.Seconds(), ex)
		return
	}
	o.Observe(d.Seconds())
}

// SessionStarted counts a chat this process starts serving; the returned
// func counts its end.
func (m *Metrics) SessionStarted(tenant, agent string) (ended func()) {
	if m == nil {
		return func() {}
	}
	g := m.sessions.WithLabelValues(tenant, agent)
	g.Inc()
	return g.Dec
}

// Woke counts a wake of agent's runtime for a chat; err is the wake's
// failure (nil: queued).
func (m *Metrics) Woke(tenant, agent string, err error) {
	if m == nil {
		return
	}
	outcome := "queued"
	if err != nil {
		outcome = "error"
	}
	m.wakes.WithLabelValues(tenant, agent, outcome).Inc()
}

// Kinds of picobot_pool_claims_total.
const (
	// ClaimWarm is a wake queued while the pod waited for one: the warm
	// pool served it.
	ClaimWarm = "warm"
	// ClaimCold is a wake queued before the pod was ready to take it.
	ClaimCold = "cold"
)

// PoolWaiting makes the claim series of a session pod of agent that starts
// waiting for wakes, at zero: a pod's series are new when it starts, and a
// scrape that saw them at zero makes its first claim an increase to
// Prometheus.
func (m *Metrics) PoolWaiting(tenant, agent string) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(tenant, agent, ClaimWarm)
	m.claims.WithLabelValues(tenant, agent, ClaimCold)
}

// PoolClaimed counts a wake a session pod claimed; warm says the pod was
// waiting for wakes when it was queued.
func (m *Metrics) PoolClaimed(tenant, agent string, warm bool) {
	if m == nil {
		return
	}
	kind := ClaimCold
	if warm {
		kind = ClaimWarm
	}
	m.claims.WithLabelValues(tenant, agent, kind).Inc()
}

// SessionsLeased returns the gauge of the sessions of agent whose lease
// this process holds (session.Config.Leased), nil when m is.
func (m *Metrics) SessionsLeased(tenant, agent string) prometheus.Gauge {
	if m == nil {
		return nil
	}
	return m.leased.WithLabelValues(tenant, agent)
}

// CronLagBuckets are the buckets of picobot_cron_fire_lag_seconds.
var CronLagBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800}

// CronRuns are the CronJob scheduler's metrics, the same in embedded mode
// (on Metrics' registry) and in the operator (on controller-runtime's).
type CronRuns struct {
	runs   *prometheus.CounterVec
	lag    *prometheus.HistogramVec
	missed *prometheus.CounterVec
}

// NewCronRuns makes them; the caller registers Collectors.
func NewCronRuns() *CronRuns {
	return &CronRuns{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_cron_runs_total",
			Help: "Finished CronJob runs by recorded outcome: ok, alert, failed, refused or skipped (a missed tick the missed-run policy did not run)."},
			[]string{"namespace", "outcome"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "picobot_cron_fire_lag_seconds",
			Help: "Time from a CronJob run's scheduled tick to its start.", Buckets: CronLagBuckets}, []string{"namespace"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picobot_cron_missed_ticks_total",
			Help: "CronJob ticks missed while no scheduler ran (or it stalled past a minute), by what the job's missed-run policy did with them: run or skipped."},
			[]string{"namespace", "action"}),
	}
}

// Collectors are the vectors to register.
func (c *CronRuns) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.runs, c.lag, c.missed}
}

// Missed records n missed ticks of a CronJob of namespace (the scheduler's
// OnMissed); ran says the missed-run policy ran them.
func (c *CronRuns) Missed(namespace string, ran bool, n int) {
	if c == nil || n <= 0 {
		return
	}
	action := "skipped"
	if ran {
		action = "run"
	}
	c.missed.WithLabelValues(namespace, action).Add(float64(n))
}

// Done records a finished CronJob run of namespace (the scheduler's
// OnRunDone): its outcome and, when it started, its lag behind its tick.
func (c *CronRuns) Done(namespace string, run store.DetailedCronRun) {
	if c == nil {
		return
	}
	outcome := string(run.Outcome)
	if outcome == "" {
		outcome = "unknown"
	}
	c.runs.WithLabelValues(namespace, outcome).Inc()
	if run.StartedAt != nil {
		c.lag.WithLabelValues(namespace).Observe(max(run.StartedAt.Sub(run.ScheduledTime), 0).Seconds())
	}
}

// CronMissed records missed ticks of a CronJob of namespace in embedded
// mode (see CronRuns.Missed).
func (m *Metrics) CronMissed(namespace string, ran bool, n int) {
	if m == nil {
		return
	}
	m.cron.Missed(namespace, ran, n)
}

// CronRunDone records a finished CronJob run of namespace in embedded mode.
func (m *Metrics) CronRunDone(namespace string, run store.DetailedCronRun) {
	if m == nil {
		return
	}
	m.cron.Done(namespace, run)
}

// toolLabel bounds the tool label: a name the agent has no tool for is
// UnknownTool, names past MaxToolLabels are OtherTool.
func (m *Metrics) toolLabel(name string) string {
	if name == "" {
		return UnknownTool
	}
	m.toolsMu.Lock()
	defer m.toolsMu.Unlock()
	if _, ok := m.tools[name]; ok {
		return name
	}
	if len(m.tools) >= MaxToolLabels {
		return OtherTool
	}
	m.tools[name] = struct{}{}
	return name
}

// Tools records the tool calls of one agent; agent.Loop calls it.
type Tools struct {
	m             *Metrics
	tenant, agent string
}

// Tools returns the recorder of agent's tool calls, nil when m is.
func (m *Metrics) Tools(tenant, agent string) *Tools {
	if m == nil {
		return nil
	}
	return &Tools{m: m, tenant: tenant, agent: agent}
}

// ToolStarted implements agent.ToolObserver: name is a tool of the agent's
// registry, "" for a name it has none for.
func (t *Tools) ToolStarted(ctx context.Context, name string) func(isError bool) {
	if t == nil {
		return func(bool) {}
	}
	start := t.m.clock.Now()
	turn := turnOf(ctx)
	tenant := t.tenant
	if turn != nil {
		tenant = turn.tenant // an agent's tools serve several tenants in embedded mode
	}
	return func(isError bool) {
		d := t.m.clock.Since(start)
		label := t.m.toolLabel(name)
		outcome := OutcomeOK
		if isError {
			outcome = "error"
		}
		t.m.toolCalls.WithLabelValues(tenant, t.agent, label, outcome).Inc()
		t.m.toolSeconds.WithLabelValues(tenant, t.agent, label).Observe(d.Seconds())
		if turn != nil {
			turn.tools.Add(int64(d))
		}
	}
}

// ConnWebSocket is the gateway connection kind of a WebSocket client.
const ConnWebSocket = "websocket"

// ConnOpened counts an open gateway connection of kind; the returned func
// counts its close.
func (m *Metrics) ConnOpened(kind string) (closed func()) {
	if m == nil {
		return func() {}
	}
	g := m.gwConns.WithLabelValues(kind)
	g.Inc()
	return g.Dec
}

// Frame counts a WebSocket frame; in is a client's frame.
func (m *Metrics) Frame(in bool) {
	if m == nil {
		return
	}
	if in {
		m.frameIn.Inc()
		return
	}
	m.frameOut.Inc()
}

// AuthFailure counts a request refused for its API key.
func (m *Metrics) AuthFailure() {
	if m == nil {
		return
	}
	m.gwAuthFailures.Inc()
}

// Reasons of picobot_gateway_rate_limited_total.
const (
	RateLimitKey          = "key"
	RateLimitAuthFailures = "auth_failures"
)

// RateLimited counts a request refused with 429 for reason.
func (m *Metrics) RateLimited(reason string) {
	if m == nil {
		return
	}
	m.gwRateLimited.WithLabelValues(reason).Inc()
}

// ErrorCode is the outcome label of a failed model call.
func ErrorCode(ctx context.Context, err error) string {
	var se *llm.StatusError
	switch {
	case errors.As(err, &se):
		return strconv.Itoa(se.StatusCode)
	case errors.Is(err, llm.ErrContextOverflow):
		return "context_overflow"
	case errors.Is(err, llm.ErrTruncated):
		return "truncated"
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "error"
}

// ModelCost adds the cost of a call of agent's model named
// "provider/model", in millionths of the price table's currency unit
// (quota.Meter prices every call).
func (m *Metrics) ModelCost(tenant, agent, name string, micros int64) {
	if m == nil || micros <= 0 {
		return
	}
	prov, model, ok := strings.Cut(name, "/")
	if !ok {
		prov, model = "", name
	}
	m.modelCost.WithLabelValues(tenant, agent, prov, model).Add(float64(micros) / 1e6)
}

// QuotaRefused counts a message refused for the tenant's TenantQuota caps
// (its protocol code: session_limit or message_limit).
func (m *Metrics) QuotaRefused(tenant, code string) {
	if m == nil {
		return
	}
	m.gwQuotaRefused.WithLabelValues(tenant, code).Inc()
}
