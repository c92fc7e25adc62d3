package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/test/services"
)

const (
	tenant  = "team"
	timeout = 20 * time.Second // hang guard only
	poll    = 5 * time.Millisecond
)

var (
	t0       = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)
	pg       *schedulertest.Postgres
	pgReason string
)

func TestMain(m *testing.M) {
	baseline := goleak.IgnoreCurrent()
	var err error
	pg, err = schedulertest.StartPostgres()
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		pgReason = reason
	}
	code := m.Run()
	if pg != nil {
		pg.Stop()
	}
	if code == 0 {
		if err := goleak.Find(baseline); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func newSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newPostgres(t *testing.T) string {
	t.Helper()
	if pg == nil {
		t.Skip(pgReason)
	}
	return pg.NewDatabase(t)
}

// running is a started scheduler and how to stop it.
type running struct {
	*scheduler.Scheduler
	stop func()
}

func start(t *testing.T, opts scheduler.Options, jobs ...scheduler.Job) *running {
	t.Helper()
	g := NewWithT(t)
	s, err := scheduler.New(opts)
	g.Expect(err).NotTo(HaveOccurred())
	for _, j := range jobs {
		g.Expect(s.Upsert(j)).To(Succeed())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	var once sync.Once
	r := &running{Scheduler: s, stop: func() { once.Do(func() { cancel(); wg.Wait() }) }}
	t.Cleanup(r.stop)
	return r
}

func job(name string, sched picobotv1alpha1.Schedule, mutate ...func(*picobotv1alpha1.CronJobSpec)) scheduler.Job {
	spec := picobotv1alpha1.CronJobSpec{Schedule: sched, Prompt: "Check the build server's disk and alert above 90%",
		DeliveryPolicy: picobotv1alpha1.DeliveryAlways, MissedRunPolicy: picobotv1alpha1.MissedRunOnce,
		Target: &picobotv1alpha1.DeliveryTarget{Channel: "telegram", ChatID: "42"}}
	for _, m := range mutate {
		m(&spec)
	}
	return scheduler.Job{Tenant: tenant, Name: name, Spec: spec, Created: t0, Version: "1"}
}

var everyMinute = picobotv1alpha1.Schedule{Cron: "0 * * * * *"}

func runsOf(t *testing.T, st store.CronStore, name string) []store.DetailedCronRun {
	t.Helper()
	runs, err := st.ListDetailedCronRuns(store.WithTenant(context.Background(), tenant), scheduler.JobKey(tenant, name), 0)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return runs
}

// finished waits until name has n finished run records and returns them,
// latest tick first.
func finished(t *testing.T, st store.CronStore, name string, n int) []store.DetailedCronRun {
	t.Helper()
	var out []store.DetailedCronRun
	NewWithT(t).Eventually(func(g Gomega) {
		out = runsOf(t, st, name)
		g.Expect(out).To(HaveLen(n))
		for _, r := range out {
			g.Expect(r.State).To(Equal(store.CronDone))
			g.Expect(r.Delivery).NotTo(Equal(store.CronDeliveryPending))
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return out
}

func TestDeliveryPolicyAndFailClosed(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	runner := &schedulertest.Runner{Now: clk.Now, Result: func(req scheduler.RunRequest) (scheduler.RunResult, error) {
		switch req.Job {
		case "team/alert-always", "team/alert-on-alert", "team/alert-never":
			return scheduler.RunResult{Outcome: store.OutcomeAlert, Message: "disk at 95%", SessionID: "cron:x:default"}, nil
		case "team/no-outcome":
			return scheduler.RunResult{Message: "I looked and it is fine"}, nil
		case "team/runner-error":
			return scheduler.RunResult{}, fmt.Errorf("no agent named %q in tenant %q: %w", req.Agent, req.Tenant, scheduler.ErrUnknownAgent)
		}
		return scheduler.RunResult{Outcome: store.OutcomeOK, Message: "all good"}, nil
	}}
	del := &schedulertest.Deliverer{}
	policy := func(p picobotv1alpha1.DeliveryPolicy) func(*picobotv1alpha1.CronJobSpec) {
		return func(s *picobotv1alpha1.CronJobSpec) { s.DeliveryPolicy = p }
	}
	start(t, scheduler.Options{Store: st, Runner: runner, Deliverer: del, Clock: clk},
		job("ok-always", everyMinute),
		job("ok-on-alert", everyMinute, policy(picobotv1alpha1.DeliveryOnAlert)),
		job("alert-always", everyMinute),
		job("alert-on-alert", everyMinute, policy(picobotv1alpha1.DeliveryOnAlert)),
		job("alert-never", everyMinute, policy(picobotv1alpha1.DeliveryNever)),
		job("no-outcome", everyMinute),
		job("runner-error", everyMinute, func(s *picobotv1alpha1.CronJobSpec) { s.AgentRef = &corev1.LocalObjectReference{Name: "ops"} }),
		job("no-target", everyMinute, func(s *picobotv1alpha1.CronJobSpec) { s.Target = nil }),
	)
	clk.Step(time.Minute)

	tick := t0.Add(time.Minute)
	cases := []struct {
		name     string
		outcome  store.CronOutcome
		delivery store.CronDelivery
		message  string
	}{
		{"ok-always", store.OutcomeOK, store.CronDeliveryDelivered, "all good"},
		{"ok-on-alert", store.OutcomeOK, store.CronDeliverySuppressed, "all good"},
		{"alert-always", store.OutcomeAlert, store.CronDeliveryDelivered, "disk at 95%"},
		{"alert-on-alert", store.OutcomeAlert, store.CronDeliveryDelivered, "disk at 95%"},
		{"alert-never", store.OutcomeAlert, store.CronDeliverySuppressed, "disk at 95%"},
		{"no-outcome", store.OutcomeFailed, store.CronDeliveryDelivered, "a run must end with complete_scheduled_run"},
		{"runner-error", store.OutcomeFailed, store.CronDeliveryDelivered, `no agent named "ops" in tenant "team": unknown agent`},
		{"no-target", store.OutcomeOK, store.CronDeliverySuppressed, "all good"},
	}
	for _, tc := range cases {
		r := finished(t, st, tc.name, 1)[0]
		g.Expect(r.ScheduledTime).To(Equal(tick), tc.name)
		g.Expect(r.Outcome).To(Equal(tc.outcome), tc.name)
		g.Expect(r.Delivery).To(Equal(tc.delivery), tc.name)
		g.Expect(r.Message).To(ContainSubstring(tc.message), tc.name)
		g.Expect(r.StartedAt).To(Equal(&tick), "started at the tick by the fake clock")
		g.Expect(r.Detail.Agent).To(Equal(map[bool]string{true: "ops", false: "root"}[tc.name == "runner-error"]), tc.name)
	}
	noTarget := runsOf(t, st, "no-target")[0]
	g.Expect(noTarget.Detail.DeliveryError).To(Equal("the job has no target channel and chat"))
	g.Expect(runsOf(t, st, "alert-never")[0].Detail.SessionID).To(Equal("cron:x:default"))

	notices := del.Notices()
	g.Expect(notices).To(HaveLen(5))
	for _, n := range notices {
		g.Expect(n.Channel).To(Equal("telegram"))
		g.Expect(n.ChatID).To(Equal("42"))
		g.Expect(n.ID).To(Equal("cron:" + n.RunID))
		if n.Job == "team/alert-on-alert" {
			g.Expect(n.Text).To(Equal("alert-on-alert (alert): disk at 95%"))
		}
	}
	for _, c := range runner.Calls() {
		g.Expect(c.Req.Prompt).To(Equal("Check the build server's disk and alert above 90%"))
		g.Expect(c.Req.ScheduledTime).To(Equal(tick))
		g.Expect(c.Req.Tenant).To(Equal(tenant))
	}
}

func TestDeliveryFailureIsRecorded(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	del := &schedulertest.Deliverer{}
	del.Fail(errors.New("telegram: 403 Forbidden: bot was blocked by the user"))
	start(t, scheduler.Options{Store: st, Runner: &schedulertest.Runner{}, Deliverer: del, Clock: clk}, job("daily", everyMinute))
	clk.Step(time.Minute)
	r := finished(t, st, "daily", 1)[0]
	g.Expect(r.Outcome).To(Equal(store.OutcomeOK))
	g.Expect(r.Delivery).To(Equal(store.CronDeliveryFailed))
	g.Expect(r.Detail.DeliveryError).To(Equal("telegram: 403 Forbidden: bot was blocked by the user"))

	// Without a deliverer the run still records why nothing was delivered.
	st2, clk2 := newSQLite(t), clocktesting.NewFakeClock(t0)
	start(t, scheduler.Options{Store: st2, Runner: &schedulertest.Runner{}, Clock: clk2}, job("daily", everyMinute))
	clk2.Step(time.Minute)
	r = finished(t, st2, "daily", 1)[0]
	g.Expect(r.Delivery).To(Equal(store.CronDeliveryFailed))
	g.Expect(r.Detail.DeliveryError).To(Equal("no deliverer is configured in this scheduler"))
}

func TestSchedulesAtEveryAndTimeZone(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	runner := &schedulertest.Runner{Now: clk.Now}
	at := t0.Add(90 * time.Second)
	every := job("every", picobotv1alpha1.Schedule{Every: new(int64(120_000))})
	every.Created = t0.Add(30 * time.Second)
	s := start(t, scheduler.Options{Store: st, Runner: runner, Clock: clk},
		job("once", picobotv1alpha1.Schedule{At: new(at.UnixMilli())}),
		every,
		job("shanghai", picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", TZ: "Asia/Shanghai"}),
	)
	next, ok := s.NextRun(tenant, "shanghai")
	g.Expect(ok).To(BeTrue())
	g.Expect(next).To(Equal(time.Date(2030, 3, 5, 1, 0, 0, 0, time.UTC)), "09:00 in Shanghai is 01:00 UTC")
	next, _ = s.NextRun(tenant, "every")
	g.Expect(next).To(Equal(t0.Add(150*time.Second)), "every counts from the job's creation")

	clk.SetTime(at)
	g.Expect(finished(t, st, "once", 1)[0].ScheduledTime).To(Equal(at))
	_, ok = s.NextRun(tenant, "once")
	g.Expect(ok).To(BeFalse(), "a one-shot job is done")
	clk.SetTime(t0.Add(150 * time.Second))
	g.Expect(finished(t, st, "every", 1)[0].ScheduledTime).To(Equal(t0.Add(150 * time.Second)))
	clk.SetTime(t0.Add(270 * time.Second))
	g.Expect(finished(t, st, "every", 2)[0].ScheduledTime).To(Equal(t0.Add(270 * time.Second)))

	clk.SetTime(time.Date(2030, 3, 5, 1, 0, 0, 0, time.UTC))
	g.Expect(finished(t, st, "shanghai", 1)[0].ScheduledTime).To(Equal(time.Date(2030, 3, 5, 1, 0, 0, 0, time.UTC)))
}

func TestSuspendUpdateAndRemove(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	runner := &schedulertest.Runner{}
	suspended := job("j", everyMinute, func(s *picobotv1alpha1.CronJobSpec) { s.Suspend = new(true) })
	s := start(t, scheduler.Options{Store: st, Runner: runner, Clock: clk}, suspended)
	_, ok := s.NextRun(tenant, "j")
	g.Expect(ok).To(BeFalse())
	clk.Step(3 * time.Minute)
	g.Consistently(func() []store.DetailedCronRun { return runsOf(t, st, "j") }).WithTimeout(200 * time.Millisecond).Should(BeEmpty())

	resumed := job("j", everyMinute)
	resumed.Version = "2"
	g.Expect(s.Upsert(resumed)).To(Succeed())
	next, ok := s.NextRun(tenant, "j")
	g.Expect(ok).To(BeTrue())
	g.Expect(next).To(Equal(t0.Add(4*time.Minute)), "resuming fires from now on; suspended ticks are not missed")
	clk.Step(time.Minute)
	finished(t, st, "j", 1)

	bad := job("j", picobotv1alpha1.Schedule{Cron: "0 0 0 31 2 *"})
	bad.Version = "3"
	g.Expect(s.Upsert(bad)).To(MatchError(ContainSubstring("never fires")))
	g.Expect(s.Len()).To(BeZero(), "an invalid schedule unschedules the job")

	g.Expect(s.Upsert(resumed)).To(Succeed())
	s.Remove(tenant, "j")
	g.Expect(s.Len()).To(BeZero())
	clk.Step(time.Minute)
	g.Consistently(func() []store.DetailedCronRun { return runsOf(t, st, "j") }).WithTimeout(200 * time.Millisecond).Should(HaveLen(1))
}

// TestRestartWithMissedTicks stops a scheduler after one run, lets ten
// minutes pass, and starts another on the same store: the ticks in between
// follow each missed-run policy, every one of them recorded.
func TestRestartWithMissedTicks(t *testing.T) {
	cases := []struct {
		policy  picobotv1alpha1.MissedRunPolicy
		window  time.Duration
		runs    []int // minutes after t0 that run after the restart
		skipped []int
		reason  string
	}{
		{policy: picobotv1alpha1.MissedSkip, skipped: []int{2, 3, 4, 5, 6, 7, 8, 9, 10}, reason: "missedRunPolicy skip"},
		{policy: picobotv1alpha1.MissedRunOnce, runs: []int{10}, skipped: []int{2, 3, 4, 5, 6, 7, 8, 9},
			reason: "folded into the run of 2030-03-04T12:10:00Z"},
		{policy: picobotv1alpha1.MissedCatchUp, window: 5 * time.Minute, runs: []int{6, 7, 8, 9, 10}, skipped: []int{2, 3, 4, 5},
			reason: "outside the catch-up window of 5m0s"},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			g := NewWithT(t)
			clk := clocktesting.NewFakeClock(t0)
			st := newSQLite(t)
			j := job("j", everyMinute, func(s *picobotv1alpha1.CronJobSpec) {
				s.MissedRunPolicy = tc.policy
				if tc.window > 0 {
					s.CatchUpWindow = picobotv1alpha1.NewDuration(tc.window)
				}
			})
			opts := scheduler.Options{Store: st, Clock: clk, MissedAfter: 10 * time.Second}
			first := &schedulertest.Runner{}
			opts.Runner = first
			a := start(t, opts, j)
			clk.Step(time.Minute)
			finished(t, st, "j", 1)
			a.stop()

			clk.SetTime(t0.Add(10*time.Minute + 30*time.Second)) // down for 9.5 minutes
			second := &schedulertest.Runner{}
			opts.Runner = second
			var mu sync.Mutex
			var missed [2]int // ran, skipped
			opts.OnMissed = func(mj scheduler.Job, ran bool, n int) {
				mu.Lock()
				defer mu.Unlock()
				if mj.Name != "j" {
					n = -1000 // fails the count below
				}
				if ran {
					missed[0] += n
				} else {
					missed[1] += n
				}
			}
			start(t, opts, j)
			runs := finished(t, st, "j", 1+len(tc.runs)+len(tc.skipped))
			var gotRuns, gotSkipped []int
			for _, r := range runs[:len(runs)-1] {
				m := int(r.ScheduledTime.Sub(t0) / time.Minute)
				if r.Outcome == store.OutcomeSkipped {
					gotSkipped = append(gotSkipped, m)
					g.Expect(r.Message).To(ContainSubstring(tc.reason))
					g.Expect(r.Delivery).To(Equal(store.CronDeliverySuppressed))
				} else {
					gotRuns = append(gotRuns, m)
				}
			}
			g.Expect(gotRuns).To(ConsistOf(toAny(tc.runs)...))
			g.Expect(gotSkipped).To(ConsistOf(toAny(tc.skipped)...))
			g.Expect(second.Calls()).To(HaveLen(len(tc.runs)))
			// Counted once each record is claimed, which may be just after
			// finished saw it.
			g.Eventually(func() [2]int {
				mu.Lock()
				defer mu.Unlock()
				return missed
			}).WithTimeout(timeout).WithPolling(poll).Should(Equal([2]int{len(tc.runs), len(tc.skipped)}), "every tick was missed: ran, skipped")

			clk.Step(30 * time.Second) // t0+11m: the next tick fires as usual
			after := finished(t, st, "j", 2+len(tc.runs)+len(tc.skipped))
			g.Expect(after[0].ScheduledTime).To(Equal(t0.Add(11 * time.Minute)))
			g.Expect(after[0].Outcome).To(Equal(store.OutcomeOK))
		})
	}
}

func toAny(xs []int) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// TestStoppingLeavesWorkForTheNextScheduler stops a scheduler during a run:
// the run is recorded as interrupted with its delivery pending, and the next
// scheduler's sweep delivers it. A run a vanished scheduler left claimed is
// finished as failed.
func TestStoppingLeavesWorkForTheNextScheduler(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	del := &schedulertest.Deliverer{}
	blocked := &schedulertest.Runner{Block: make(chan struct{})}
	j := job("j", everyMinute)
	a := start(t, scheduler.Options{Store: st, Runner: blocked, Deliverer: del, Clock: clk}, j)
	clk.Step(time.Minute)
	g.Eventually(blocked.Calls).WithTimeout(timeout).WithPolling(poll).Should(HaveLen(1))
	a.stop()
	r := runsOf(t, st, "j")[0]
	g.Expect(r.Outcome).To(Equal(store.OutcomeFailed))
	g.Expect(r.Message).To(ContainSubstring("Interrupted"))
	g.Expect(r.Delivery).To(Equal(store.CronDeliveryPending), "not delivered while stopping")
	g.Expect(del.Notices()).To(BeEmpty())

	// A run claimed by a scheduler that vanished without a trace.
	ctx := store.WithTenant(context.Background(), tenant)
	startedLongAgo := t0.Add(-3 * time.Hour)
	won, err := st.ClaimCronRuns(ctx, []store.CronClaim{{Run: store.CronRun{Job: j.Key(), RunID: "orphan",
		ScheduledTime: t0.Add(-3 * time.Hour), StartedAt: &startedLongAgo},
		Detail: store.CronRunDetail{Agent: "root", Channel: "telegram", ChatID: "42"}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(won).To(Equal([]bool{true}))

	clk.Step(10 * time.Second)
	start(t, scheduler.Options{Store: st, Runner: &schedulertest.Runner{}, Deliverer: del, Clock: clk, StaleAfter: time.Nanosecond}, j)
	g.Eventually(func(g Gomega) {
		r, err := st.GetDetailedCronRun(ctx, r.RunID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Delivery).To(Equal(store.CronDeliveryDelivered))
		o, err := st.GetDetailedCronRun(ctx, "orphan")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(o.State).To(Equal(store.CronDone))
		g.Expect(o.Outcome).To(Equal(store.OutcomeFailed))
		g.Expect(o.Delivery).To(Equal(store.CronDeliveryDelivered))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	ids := map[string]bool{}
	for _, n := range del.Notices() {
		ids[n.ID] = true
		g.Expect(n.Text).To(ContainSubstring("(failed): Interrupted"))
	}
	g.Expect(ids).To(Equal(map[string]bool{"cron:" + r.RunID: true, "cron:orphan": true}))
}

// TestTwoSchedulersFireEachTickOnce races two schedulers on one PostgreSQL
// database: every tick of every job runs exactly once.
func TestTwoSchedulersFireEachTickOnce(t *testing.T) {
	g := NewWithT(t)
	dsn := newPostgres(t)
	clk := clocktesting.NewFakeClock(t0)
	runner := &schedulertest.Runner{}
	const jobs, ticks = 40, 5
	var js []scheduler.Job
	for i := range jobs {
		js = append(js, job(fmt.Sprintf("job-%02d", i), everyMinute))
	}
	a := schedulertest.Open(t, dsn)
	start(t, scheduler.Options{Store: a, Runner: runner, Clock: clk, ClaimBatch: 7}, js...)
	start(t, scheduler.Options{Store: schedulertest.Open(t, dsn), Runner: runner, Clock: clk, ClaimBatch: 11}, js...)
	for i := range ticks {
		clk.Step(time.Minute)
		g.Eventually(func() int { return len(runner.Calls()) }).WithTimeout(timeout).WithPolling(poll).Should(Equal(jobs * (i + 1)))
	}
	g.Consistently(func() int { return len(runner.Calls()) }).WithTimeout(300 * time.Millisecond).Should(Equal(jobs * ticks))
	g.Expect(runner.Duplicates()).To(BeZero())
	for _, j := range js {
		runs := finished(t, a, j.Name, ticks)
		for i, r := range runs {
			g.Expect(r.ScheduledTime).To(Equal(t0.Add(time.Duration(ticks-i) * time.Minute)))
			g.Expect(r.Outcome).To(Equal(store.OutcomeOK))
		}
	}
}

func TestValidateSpec(t *testing.T) {
	now := t0
	base := func() picobotv1alpha1.CronJobSpec {
		return picobotv1alpha1.CronJobSpec{Schedule: everyMinute, Prompt: "p"}
	}
	cases := []struct {
		name   string
		mutate func(*picobotv1alpha1.CronJobSpec)
		future bool
		err    string
	}{
		{name: "valid", mutate: func(*picobotv1alpha1.CronJobSpec) {}},
		{name: "five fields", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Schedule.Cron = "0 9 * * *" },
			err: `cron "0 9 * * *" has 5 fields; want 6`},
		{name: "bad field", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Schedule.Cron = "0 0 25 * * *" }, err: `invalid cron "0 0 25 * * *"`},
		{name: "never fires", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Schedule.Cron = "0 0 0 30 2 *" }, err: "never fires"},
		{name: "unknown tz", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Schedule.TZ = "Mars/Olympus" }, err: `unknown time zone "Mars/Olympus"`},
		{name: "every too short", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Schedule = picobotv1alpha1.Schedule{Every: new(int64(59_999))} },
			err: "every must be at least 60000 ms"},
		{name: "every too long", mutate: func(s *picobotv1alpha1.CronJobSpec) {
			s.Schedule = picobotv1alpha1.Schedule{Every: new(int64(400 * 24 * 3600 * 1000))}
		}, err: "366 days"},
		{name: "at in the past", future: true, mutate: func(s *picobotv1alpha1.CronJobSpec) {
			s.Schedule = picobotv1alpha1.Schedule{At: new(now.Add(-time.Minute).UnixMilli())}
		}, err: "is in the past (now is 2030-03-04T12:00:00Z)"},
		{name: "at in seconds", future: true, mutate: func(s *picobotv1alpha1.CronJobSpec) {
			s.Schedule = picobotv1alpha1.Schedule{At: new(now.Add(time.Hour).Unix())}
		}, err: "looks like seconds"},
		{name: "past at allowed when not creating", mutate: func(s *picobotv1alpha1.CronJobSpec) {
			s.Schedule = picobotv1alpha1.Schedule{At: new(now.Add(-time.Minute).UnixMilli())}
		}},
		{name: "two kinds", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Schedule.Every = new(int64(60_000)) },
			err: "exactly one of at, every or cron"},
		{name: "tz without cron", mutate: func(s *picobotv1alpha1.CronJobSpec) {
			s.Schedule = picobotv1alpha1.Schedule{Every: new(int64(60_000)), TZ: "UTC"}
		}, err: "tz applies only to a cron schedule"},
		{name: "empty prompt", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.Prompt = "  " }, err: "prompt is empty"},
		{name: "bad policy", mutate: func(s *picobotv1alpha1.CronJobSpec) { s.DeliveryPolicy = "sometimes" }, err: "use always, on_alert or never"},
		{name: "window without catch_up", mutate: func(s *picobotv1alpha1.CronJobSpec) {
			s.CatchUpWindow = picobotv1alpha1.NewDuration(time.Hour)
		}, err: "only with missed_run_policy catch_up"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := base()
			tc.mutate(&spec)
			err := scheduler.ValidateSpec(spec, now, tc.future)
			if tc.err == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
			} else {
				NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.err)))
			}
		})
	}
}

// TestClaimAhead: with ClaimAhead a tick is claimed before its time and
// runs at it, as its job is then; a job disabled in between records the
// tick as skipped.
func TestClaimAhead(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	runner := &schedulertest.Runner{Now: clk.Now}
	kept, changed, disabled := job("kept", everyMinute), job("changed", everyMinute), job("disabled", everyMinute)
	s := start(t, scheduler.Options{Store: st, Runner: runner, Clock: clk, ClaimAhead: 10 * time.Second}, kept, changed, disabled)

	clk.Step(55 * time.Second)
	tick := t0.Add(time.Minute)
	g.Eventually(func() []store.DetailedCronRun { return runsOf(t, st, "kept") }).WithTimeout(timeout).WithPolling(poll).Should(HaveLen(1))
	claimed := runsOf(t, st, "kept")[0]
	g.Expect(claimed.State).To(Equal(store.CronClaimed), "claimed ahead")
	g.Expect(claimed.StartedAt).To(Equal(&tick), "it starts at its tick")
	g.Consistently(runner.Calls).WithTimeout(100*time.Millisecond).Should(BeEmpty(), "not before its time")

	changed.Spec.Prompt, changed.Version = "A different task", "2"
	g.Expect(s.Upsert(changed)).To(Succeed())
	disabled.Spec.Suspend, disabled.Version = new(true), "2"
	g.Expect(s.Upsert(disabled)).To(Succeed())
	clk.Step(5 * time.Second)
	g.Expect(finished(t, st, "kept", 1)[0].Outcome).To(Equal(store.OutcomeOK))
	g.Expect(finished(t, st, "changed", 1)[0].Outcome).To(Equal(store.OutcomeOK))
	prompts := map[string]string{}
	for _, c := range runner.Calls() {
		g.Expect(c.Started).To(Equal(tick))
		prompts[c.Req.Job] = c.Req.Prompt
	}
	g.Expect(prompts).To(HaveLen(2))
	g.Expect(prompts["team/changed"]).To(Equal("A different task"), "runs as the job is at its tick")
	skipped := finished(t, st, "disabled", 1)[0]
	g.Expect(skipped.Outcome).To(Equal(store.OutcomeSkipped))
	g.Expect(skipped.Message).To(ContainSubstring("disabled, removed or rescheduled"))
}

// claimFirst is a real store whose LastCronRunTimes waits until a claim has
// been written: it forces the order in which a scheduler taking over with
// ClaimAhead may (and under load did) reach the store.
type claimFirst struct {
	store.CronStore
	once    sync.Once
	claimed chan struct{}
}

func (c *claimFirst) ClaimCronRuns(ctx context.Context, claims []store.CronClaim) ([]bool, error) {
	won, err := c.CronStore.ClaimCronRuns(ctx, claims)
	if err == nil {
		c.once.Do(func() { close(c.claimed) })
	}
	return won, err
}

func (c *claimFirst) LastCronRunTimes(ctx context.Context, until map[string]time.Time) (map[string]time.Time, error) {
	select {
	case <-c.claimed:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.CronStore.LastCronRunTimes(ctx, until)
}

// TestTakeoverClaimingAheadLeavesNoGap: a scheduler taking over claims the
// next tick ahead before it has looked up where its predecessor stopped;
// the tick between the predecessor's last one and the takeover still runs
// (late), rather than being hidden behind the one just claimed.
func TestTakeoverClaimingAheadLeavesNoGap(t *testing.T) {
	g := NewWithT(t)
	st := newSQLite(t)
	j := job("j", everyMinute)
	ctx := store.WithTenant(context.Background(), tenant)
	ran := t0.Add(9 * time.Minute)
	won, err := st.ClaimCronRuns(ctx, []store.CronClaim{{Run: store.CronRun{Job: j.Key(), RunID: "before",
		ScheduledTime: ran, State: store.CronDone, Outcome: store.OutcomeOK, StartedAt: &ran, FinishedAt: &ran,
		Delivery: store.CronDeliverySuppressed}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(won).To(Equal([]bool{true}))

	clk := clocktesting.NewFakeClock(t0.Add(10*time.Minute + 30*time.Second)) // the predecessor died after 12:09
	runner := &schedulertest.Runner{Now: clk.Now}
	start(t, scheduler.Options{Store: &claimFirst{CronStore: st, claimed: make(chan struct{})}, Runner: runner, Clock: clk,
		ClaimAhead: 45 * time.Second, MissedAfter: 2 * time.Minute}, j)
	g.Eventually(func(g Gomega) {
		runs := runsOf(t, st, "j")
		g.Expect(runs).To(HaveLen(3))
		g.Expect(runs[0].ScheduledTime).To(Equal(t0.Add(11*time.Minute)), "the next tick is claimed ahead")
		g.Expect(runs[1].ScheduledTime).To(Equal(t0.Add(10*time.Minute)), "the tick before the takeover is not lost")
		g.Expect(runs[1].State).To(Equal(store.CronDone))
		g.Expect(runs[1].Outcome).To(Equal(store.OutcomeOK), "it ran late")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	clk.Step(30 * time.Second)
	g.Expect(finished(t, st, "j", 3)[0].Outcome).To(Equal(store.OutcomeOK))
	g.Expect(runner.Duplicates()).To(BeZero())
}
