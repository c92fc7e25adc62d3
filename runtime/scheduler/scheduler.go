// Package scheduler fires PicoBot's scheduled runs: each job (a CronJob
// resource in cluster mode; a manifest or an agent-made job in embedded
// mode) at its `at` / `every` / 6-field `cron` ticks in its time zone,
// exactly once per tick however many schedulers race for it, and across
// restarts.
//
// Exactly once comes from the store: a tick is claimed by inserting its run
// record, unique per job and scheduled time (store.CronStore.ClaimCronRuns),
// so of several schedulers only one wins, and a restarted scheduler picks up
// after the last recorded tick. Ticks missed while no scheduler ran follow
// the job's missed-run policy and are recorded either way (a skipped tick
// gets a run record saying why), never dropped.
//
// Jobs wait in a heap ordered by their next tick, so the scheduler sleeps
// until the earliest one instead of scanning every job; claims go to the
// store in batches. A run is handed to a Runner (a fresh session of the
// target agent that must end by calling complete_scheduled_run), and its
// outcome is delivered by the job's delivery policy through a Deliverer.
// The operator (a leader-elected manager.Runnable) and embedded mode (inside
// `picobot serve`) run this same package.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/schedule"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
)

// Defaults of Options.
const (
	DefaultClaimWorkers     = 8
	DefaultClaimBatch       = 500
	DefaultRecordWorkers    = 2
	DefaultRunTimeout       = 30 * time.Minute
	DefaultMissedAfter      = time.Minute
	DefaultCatchUpWindow    = 24 * time.Hour
	DefaultMaxCatchUpRuns   = 100
	DefaultMaxMissedRecords = 1000
	DefaultSweepInterval    = time.Minute
)

// Options configure a Scheduler.
type Options struct {
	// Store keeps run records (required).
	Store RunStore
	// Runner executes runs (required).
	Runner Runner
	// Deliverer sends outcomes; without one, outcomes the policy would
	// deliver are recorded as failed deliveries saying so.
	Deliverer Deliverer
	// Clock drives firing; tests pass a fake one (k8s.io/utils/clock/testing).
	Clock clock.Clock
	Log   *slog.Logger
	// TracerProvider traces each fire: a trace of its own (cron.fire) that
	// the run's turn continues (package tracing); nil traces nothing.
	TracerProvider trace.TracerProvider
	// ClaimWorkers claim batches in parallel; ClaimBatch caps a batch.
	ClaimWorkers, ClaimBatch int
	// RecordWorkers cap the store writes recording how runs ended, so that
	// thousands of runs finishing at once leave the store's connections to
	// the claims of the next tick.
	RecordWorkers int
	// MaxConcurrentRuns caps runs in progress (0: no cap). A run waiting for
	// a slot starts late.
	MaxConcurrentRuns int
	// ClaimAhead claims a tick this long before it is due, so that when
	// thousands of jobs share a tick their claims are written beforehand and
	// the runs start on time. A run claimed ahead starts at its tick unless
	// its job changed meanwhile (then the tick is recorded as skipped); a
	// scheduler dying between the claim and the tick leaves the run to be
	// recorded as interrupted. 0 claims at the tick.
	ClaimAhead time.Duration
	// RunTimeout ends a run that takes longer (recorded as failed).
	RunTimeout time.Duration
	// MissedAfter: a tick processed more than this late was missed (the
	// scheduler was down or stalled) and follows the missed-run policy; a
	// tick less late simply runs late.
	MissedAfter time.Duration
	// CatchUpWindow applies to catch_up jobs that set no catchUpWindow.
	CatchUpWindow time.Duration
	// MaxCatchUpRuns caps the runs catch_up starts for one job at once (the
	// newest ticks); older missed ticks are recorded as skipped.
	MaxCatchUpRuns int
	// MaxMissedRecords caps the skipped ticks recorded one by one for a job
	// at once; older ones are summarised on the oldest record.
	MaxMissedRecords int
	// StaleAfter: a run record left unfinished (or undelivered) for this
	// long by a scheduler that is gone is finished as failed (or delivered
	// again). Embedded mode, the only scheduler of its store, sets a tiny
	// value; the default is RunTimeout plus MissedAfter.
	StaleAfter time.Duration
	// SweepInterval is how often unfinished records are looked for.
	SweepInterval time.Duration
	// RootAgent, when set, names the tenant's root agent (agentspec.RootAgent
	// over its Agents): runs of jobs naming no agent go to it. Without it
	// they go to the agent named RootAgent. Its error fails the run.
	RootAgent func(ctx context.Context, tenant string) (string, error)
	// OnRunDone, when set, sees every finished run record (including
	// skipped ticks), e.g. to publish CronJob status.lastRun.
	OnRunDone func(Job, store.DetailedCronRun)
	// OnMissed, when set, sees the ticks of a job that were missed (the
	// scheduler was down or stalled past MissedAfter) once their records are
	// claimed: n ticks the missed-run policy ran (ran) or skipped. Skipped
	// ticks summarised in another's record (past MaxMissedRecords) count
	// too; those past the walk's limit of a schedule firing every second
	// for days are not counted.
	OnMissed func(j Job, ran bool, n int)
}

// Scheduler fires jobs. Upsert and Remove are safe to call at any time,
// before or during Run.
type Scheduler struct {
	opts    Options
	log     *slog.Logger
	clock   clock.Clock
	running atomic.Bool

	mu       sync.Mutex
	entries  map[string]*entry // by job key
	heap     timeHeap
	recovery map[string]time.Time // job key -> first sight: ticks up to it need recovery
	tenants  map[string]struct{}  // every tenant a job was seen in, for sweeps

	wake, recWake chan struct{}
	// batches has a queue per claim worker; a job's ticks always go to the
	// same one (see dispatch).
	batches []chan []action

	flightMu    sync.Mutex
	inFlight    map[string]struct{} // run ids this scheduler is running or delivering
	runSlots    chan struct{}
	recordSlots chan struct{}
	runs        sync.WaitGroup
	tracer      trace.Tracer
}

// New returns a scheduler; call Run to start firing.
func New(opts Options) (*Scheduler, error) {
	if opts.Store == nil || opts.Runner == nil {
		return nil, errors.New("failed to create scheduler: Store and Runner are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.ClaimWorkers, DefaultClaimWorkers)
	def(&opts.ClaimBatch, DefaultClaimBatch)
	def(&opts.RecordWorkers, DefaultRecordWorkers)
	def(&opts.MaxCatchUpRuns, DefaultMaxCatchUpRuns)
	def(&opts.MaxMissedRecords, DefaultMaxMissedRecords)
	// The oldest kept missed tick must be a skipped one (see plan).
	opts.MaxMissedRecords = max(opts.MaxMissedRecords, opts.MaxCatchUpRuns+100)
	defDur(&opts.RunTimeout, DefaultRunTimeout)
	defDur(&opts.MissedAfter, DefaultMissedAfter)
	defDur(&opts.CatchUpWindow, DefaultCatchUpWindow)
	defDur(&opts.SweepInterval, DefaultSweepInterval)
	defDur(&opts.StaleAfter, opts.RunTimeout+opts.MissedAfter)
	opts.ClaimAhead = max(0, opts.ClaimAhead)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &Scheduler{opts: opts, log: opts.Log, clock: opts.Clock, tracer: tracing.Tracer(opts.TracerProvider),
		entries: map[string]*entry{}, recovery: map[string]time.Time{}, tenants: map[string]struct{}{},
		wake: make(chan struct{}, 1), recWake: make(chan struct{}, 1),
		batches: make([]chan []action, opts.ClaimWorkers), inFlight: map[string]struct{}{},
		recordSlots: make(chan struct{}, opts.RecordWorkers)}
	for i := range s.batches {
		s.batches[i] = make(chan []action, 1)
	}
	if opts.MaxConcurrentRuns > 0 {
		s.runSlots = make(chan struct{}, opts.MaxConcurrentRuns)
	}
	return s, nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Upsert adds a job or replaces it with a new version. The first time a job
// is seen, its ticks since its last recorded run are recovered (fired late or
// handled as missed). A new version of a known job fires from now on. A
// suspended job stays known but does not fire. An invalid schedule removes
// the job and is returned (the CronJob's status or the tool reports it).
func (s *Scheduler) Upsert(j Job) error {
	sched, perr := schedule.Parse(j.Spec.Schedule, j.anchor())
	key := j.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenants[j.Tenant] = struct{}{}
	e := s.entries[key]
	if perr != nil {
		if e != nil {
			s.heap.remove(e)
			delete(s.entries, key)
			delete(s.recovery, key)
		}
		return fmt.Errorf("failed to schedule job %q: %w", key, perr)
	}
	if e != nil && j.Version != "" && e.job.Version == j.Version {
		return nil
	}
	now := s.clock.Now()
	first := e == nil
	if first {
		e = &entry{index: -1}
		s.entries[key] = e
	}
	job := j
	e.job, e.sched, e.next = &job, sched, time.Time{}
	if !job.suspended() {
		e.next = sched.Next(now).UTC()
		if first {
			s.recovery[key] = now
			signal(s.recWake)
		}
	}
	s.heap.place(e)
	signal(s.wake)
	return nil
}

// Remove forgets a job; its ticks stop. Runs in progress finish.
func (s *Scheduler) Remove(tenant, name string) {
	key := JobKey(tenant, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil {
		s.heap.remove(e)
		delete(s.entries, key)
		delete(s.recovery, key)
		signal(s.wake)
	}
}

// NextRun returns when a job fires next; false when it is unknown,
// suspended or done.
func (s *Scheduler) NextRun(tenant, name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[JobKey(tenant, name)]
	if e == nil || e.next.IsZero() {
		return time.Time{}, false
	}
	return e.next, true
}

// Len is the number of known jobs.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Run fires jobs until ctx ends, then waits for the runs in progress, which
// ctx's end cancels (they are recorded as interrupted). It can be called
// once.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("scheduler is already running")
	}
	var wg sync.WaitGroup
	for _, q := range s.batches {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case b := <-q:
					if ctx.Err() != nil { // select picks at random
						return
					}
					s.claim(ctx, b)
				}
			}
		})
	}
	wg.Go(func() { s.recoverLoop(ctx) })
	wg.Go(func() { s.sweepLoop(ctx) })
	s.fireLoop(ctx)
	wg.Wait()
	s.runs.Wait()
	return nil
}

// fireLoop sleeps until the earliest tick, turns every due tick into
// actions and hands them to the claim workers.
func (s *Scheduler) fireLoop(ctx context.Context) {
	for {
		acts, at := s.due()
		if len(acts) > 0 {
			if !s.dispatch(ctx, acts) {
				return
			}
			continue
		}
		var timer clock.Timer
		var fire <-chan time.Time
		if !at.IsZero() {
			timer = s.clock.NewTimer(max(0, at.Sub(s.clock.Now())))
			// The clock may have passed at between reading it and arming
			// the timer (a fake clock a test steps, a long pause): the
			// timer then waits a whole interval too long, so look again
			// now that it is armed.
			if !s.clock.Now().Before(at) {
				timer.Stop()
				continue
			}
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// due pops every entry whose next tick has come, plans its due ticks and
// puts it back at its following tick. at is when to look again: the next
// tick after that less the claim-ahead time (zero: no tick).
func (s *Scheduler) due() (acts []action, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	until := now.Add(s.opts.ClaimAhead)
	p := s.planParams(now)
	for len(s.heap) > 0 && !s.heap[0].next.After(until) {
		e := s.heap[0]
		var d dueTicks
		if n := e.sched.Next(e.next); n.IsZero() || n.After(until) {
			d.ticks = []time.Time{e.next} // the usual case: one tick, no walk
		} else {
			d = collectTicks(e.sched, e.next.Add(-time.Nanosecond), until, s.opts.MaxMissedRecords)
		}
		if len(d.ticks) == 0 { // not a tick of this schedule: realign
			e.next = e.sched.Next(now).UTC()
		} else {
			acts = append(acts, plan(e.job, d, p)...)
			e.next = e.sched.Next(d.ticks[len(d.ticks)-1]).UTC()
		}
		s.heap.place(e)
	}
	if len(s.heap) == 0 {
		return acts, time.Time{}
	}
	return acts, s.heap[0].next.Add(-s.opts.ClaimAhead)
}

// currentFor returns the version of j's job that is scheduled now, if it
// still fires at tick (a job changed after its tick was claimed ahead runs
// as it is now); nil when it no longer does.
func (s *Scheduler) currentFor(j *Job, tick time.Time) *Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[j.Key()]
	switch {
	case e == nil || e.job.suspended():
		return nil
	case e.job == j || e.sched.Next(tick.Add(-time.Nanosecond)).Equal(tick):
		return e.job
	}
	return nil
}

func (s *Scheduler) planParams(now time.Time) planParams {
	return planParams{now: now, missedAfter: s.opts.MissedAfter, catchUp: s.opts.CatchUpWindow, maxCatchUp: s.opts.MaxCatchUpRuns}
}

// dispatch sends actions to the claim workers in per-tenant batches; false
// when ctx ended first. All ticks of a job go to the same worker, which
// claims its batches one after another, so a job's ticks are recorded in
// order. Were they not, a scheduler dying with an earlier tick's batch still
// in flight would leave a hole behind a later recorded tick, and the next
// scheduler, which resumes after the last recorded tick, would lose it.
func (s *Scheduler) dispatch(ctx context.Context, acts []action) bool {
	type queue struct {
		tenant string
		worker int
	}
	byQueue := map[queue][]action{}
	var order []queue
	for _, a := range acts {
		h := fnv.New32a()
		_, _ = h.Write([]byte(a.job.Key()))
		q := queue{a.job.Tenant, int(h.Sum32() % uint32(len(s.batches)))}
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], a)
	}
	for _, q := range order {
		as := byQueue[q]
		for len(as) > 0 {
			n := min(len(as), s.opts.ClaimBatch)
			select {
			case s.batches[q.worker] <- as[:n]:
			case <-ctx.Done():
				return false
			}
			as = as[n:]
		}
	}
	return true
}

func (s *Scheduler) track(runID string) {
	s.flightMu.Lock()
	s.inFlight[runID] = struct{}{}
	s.flightMu.Unlock()
}

func (s *Scheduler) untrack(runID string) {
	s.flightMu.Lock()
	delete(s.inFlight, runID)
	s.flightMu.Unlock()
}

func (s *Scheduler) tracked(runID string) bool {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	_, ok := s.inFlight[runID]
	return ok
}

// claim records a batch of one tenant's ticks and starts the runs it won.
// A store error is retried with backoff until ctx ends: the unique tick makes
// a retry safe, and ticks held up meanwhile are handled as late or missed.
func (s *Scheduler) claim(ctx context.Context, batch []action) {
	now := s.clock.Now()
	tenant := batch[0].job.Tenant
	claims := make([]store.CronClaim, len(batch))
	for i, a := range batch {
		r := store.CronRun{Job: a.job.Key(), RunID: store.NewID(), ScheduledTime: a.tick}
		d := store.CronRunDetail{Agent: a.job.Agent()}
		if t := a.job.Spec.Target; t != nil {
			d.Channel, d.ChatID = t.Channel, t.ChatID
		}
		if a.run {
			// A tick claimed ahead starts at its time.
			started := now
			if a.tick.After(now) {
				started = a.tick
			}
			r.StartedAt = &started
			s.track(r.RunID)
		} else {
			r.State, r.Outcome, r.Message, r.FinishedAt, r.Delivery = store.CronDone, store.OutcomeSkipped, a.reason, &now,
				store.CronDeliverySuppressed
		}
		claims[i] = store.CronClaim{Run: r, Detail: d}
	}
	// A claim in flight when the scheduler stops is let finish, so that
	// what it won is known and recorded as interrupted, rather than left
	// claimed (perhaps committed) and unfinished until the stale sweep.
	var won []bool
	err := s.retry(ctx, "claim ticks", func() error {
		cctx, cancel := context.WithTimeout(store.WithTenant(context.WithoutCancel(ctx), tenant), writeTimeout)
		defer cancel()
		var err error
		won, err = s.opts.Store.ClaimCronRuns(cctx, claims)
		return err
	})
	for i, a := range batch {
		c := claims[i]
		if err != nil || !won[i] {
			s.untrack(c.Run.RunID)
			continue
		}
		if a.missed > 0 && s.opts.OnMissed != nil {
			s.opts.OnMissed(*a.job, a.run, a.missed)
		}
		if !a.run {
			s.done(*a.job, store.DetailedCronRun{CronRun: withTenant(c.Run, tenant), Detail: c.Detail})
			continue
		}
		s.runs.Go(func() {
			defer s.untrack(c.Run.RunID)
			s.execute(ctx, a.job, c)
		})
	}
}

func withTenant(r store.CronRun, tenant string) store.CronRun {
	r.Tenant = tenant
	return r
}

// retry calls fn until it succeeds or ctx ends, backing off from 100 ms to
// 5 s; the last error is returned when ctx ends.
func (s *Scheduler) retry(ctx context.Context, what string, fn func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		s.log.Error("Scheduler store call failed; retrying", "operation", what, "retryIn", backoff, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-s.clock.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Scheduler) done(j Job, r store.DetailedCronRun) {
	if s.opts.OnRunDone != nil {
		s.opts.OnRunDone(j, r)
	}
}
