package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/operator/internal/scheduler"
	rtscheduler "github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
)

const (
	eventually = 30 * time.Second // hang guard only
	poll       = 20 * time.Millisecond
)

// cronJob is a job of the agent "ops" (the test runners run any name); a
// job naming no agent needs a root agent in its namespace.
func cronJob(ns, name, cron string, mutate ...func(*picobotv1alpha1.CronJob)) *picobotv1alpha1.CronJob {
	cj := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: cron}, AgentRef: &corev1.LocalObjectReference{Name: "ops"},
			Prompt: "Check the disk usage of the build server and alert above 90%"}}
	for _, m := range mutate {
		m(cj)
	}
	return cj
}

func runsOf(t *testing.T, st store.CronStore, ns, name string) []store.DetailedCronRun {
	t.Helper()
	runs, err := st.ListDetailedCronRuns(store.WithTenant(context.Background(), ns), rtscheduler.JobKey(ns, name), 1000)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return runs
}

// tickList shows runs compactly (oldest first) for failure messages.
func tickList(runs []store.DetailedCronRun) string {
	var b strings.Builder
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		fmt.Fprintf(&b, "%s %s", r.ScheduledTime.Format("15:04:05"), r.Outcome)
		if r.StartedAt != nil {
			fmt.Fprintf(&b, " started %s", r.StartedAt.Format("15:04:05.000"))
		}
		if r.FinishedAt != nil {
			fmt.Fprintf(&b, " finished %s", r.FinishedAt.Format("15:04:05.000"))
		}
		b.WriteString("; ")
	}
	return b.String()
}

// TestFiresCronJobsAndPublishesLastRun runs the Runnable beside the CronJob
// controller in one manager, as the operator does, on a fake clock.
// counterValue is the value of the counter name whose label values are
// values (in the order of its labels), 0 when it has none.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, values ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetValue())
			}
			if slices.Equal(got, values) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestFiresCronJobsAndPublishesLastRun(t *testing.T) {
	need(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	st := schedulertest.Open(t, pg.NewDatabase(t))
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	clk := clocktesting.NewFakeClock(now)
	runner := &schedulertest.Runner{Now: clk.Now, Result: func(req rtscheduler.RunRequest) (rtscheduler.RunResult, error) {
		return rtscheduler.RunResult{Outcome: store.OutcomeAlert, Message: "disk at 93%"}, nil
	}}
	del := &schedulertest.Deliverer{}

	reg := prometheus.NewRegistry()
	om, err := opmetrics.New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	_, r := operator(t, ns, "", scheduler.Config{Store: st, Runner: runner, Deliverer: del, Clock: clk, Metrics: om}, clock.RealClock{})
	g.Expect(r.NeedLeaderElection()).To(BeTrue())

	target := &picobotv1alpha1.DeliveryTarget{Channel: "telegram", ChatID: "42"}
	g.Expect(k8s.Create(ctx, cronJob(ns, "disk", "0 * * * * *", func(cj *picobotv1alpha1.CronJob) {
		cj.Spec.Target = target
		cj.Spec.DeliveryPolicy = picobotv1alpha1.DeliveryOnAlert
	}))).To(Succeed())
	g.Expect(k8s.Create(ctx, cronJob(ns, "paused", "0 * * * * *", func(cj *picobotv1alpha1.CronJob) {
		cj.Spec.Suspend = new(true)
	}))).To(Succeed())
	// The scheduler exists once the manager has started the runnable (after
	// leader election), which may be after the CronJobs are created.
	g.Eventually(func() int {
		if s := r.Scheduler(); s != nil {
			return s.Len()
		}
		return -1
	}).WithTimeout(eventually).WithPolling(poll).Should(Equal(2))

	clk.Step(30 * time.Second) // the next minute
	tick := now.Add(30 * time.Second)
	g.Eventually(func(g Gomega) {
		runs := runsOf(t, st, ns, "disk")
		g.Expect(runs).To(HaveLen(1))
		g.Expect(runs[0].ScheduledTime).To(Equal(tick))
		g.Expect(runs[0].Outcome).To(Equal(store.OutcomeAlert))
		g.Expect(runs[0].Delivery).To(Equal(store.CronDeliveryDelivered))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(runsOf(t, st, ns, "paused")).To(BeEmpty())
	g.Expect(del.Notices()).To(HaveLen(1))
	g.Expect(del.Notices()[0].Text).To(Equal("disk (alert): disk at 93%"))
	// The run counts by outcome, and its start (the fake clock's tick)
	// was on time.
	g.Eventually(func() float64 { return counterValue(t, reg, "picobot_cron_runs_total", ns, "alert") }).
		WithTimeout(eventually).WithPolling(poll).Should(Equal(1.0))
	g.Expect(testutil.CollectAndCount(reg, "picobot_cron_fire_lag_seconds")).To(Equal(1))

	// status.lastRun is published beside the controller's nextRunTime.
	g.Eventually(func(g Gomega) {
		cj := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "disk"}, cj)).To(Succeed())
		g.Expect(cj.Status.LastRun).NotTo(BeNil())
		g.Expect(cj.Status.LastRun.ScheduledTime.Time).To(BeTemporally("==", tick))
		g.Expect(cj.Status.LastRun.Outcome).To(Equal(picobotv1alpha1.RunOutcome("alert")))
		g.Expect(cj.Status.LastRun.ID).To(Equal(runsOf(t, st, ns, "disk")[0].RunID))
		g.Expect(cj.Status.NextRunTime).NotTo(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// An edit reschedules; a delete unschedules.
	cj := &picobotv1alpha1.CronJob{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "disk"}, cj)).To(Succeed())
	cj.Spec.Schedule.Cron = "0 0 9 * * *"
	g.Expect(k8s.Update(ctx, cj)).To(Succeed())
	nine := time.Date(tick.Year(), tick.Month(), tick.Day(), 9, 0, 0, 0, time.UTC)
	if !nine.After(tick) {
		nine = nine.AddDate(0, 0, 1)
	}
	g.Eventually(func() time.Time { next, _ := r.Scheduler().NextRun(ns, "disk"); return next }).
		WithTimeout(eventually).WithPolling(poll).Should(Equal(nine))
	g.Expect(k8s.Delete(ctx, cj)).To(Succeed())
	g.Eventually(func() int { return r.Scheduler().Len() }).WithTimeout(eventually).WithPolling(poll).Should(Equal(1))
}

// TestRestartWithMissedTicks stops the operator's scheduler, moves the clock
// ten minutes on and starts a new one: each missed-run policy is applied to
// the ticks in between and every tick is recorded.
func TestRestartWithMissedTicks(t *testing.T) {
	need(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	st := schedulertest.Open(t, pg.NewDatabase(t))
	now := time.Now().UTC()
	base := now.Truncate(time.Minute).Add(time.Minute) // the first tick
	clk := clocktesting.NewFakeClock(now)
	policies := map[string]picobotv1alpha1.MissedRunPolicy{
		"skip": picobotv1alpha1.MissedSkip, "once": picobotv1alpha1.MissedRunOnce, "catch-up": picobotv1alpha1.MissedCatchUp}
	for name, p := range policies {
		g.Expect(k8s.Create(ctx, cronJob(ns, name, "0 * * * * *", func(cj *picobotv1alpha1.CronJob) {
			cj.Spec.MissedRunPolicy = p
			if p == picobotv1alpha1.MissedCatchUp {
				cj.Spec.CatchUpWindow = picobotv1alpha1.NewDuration(4*time.Minute + 30*time.Second)
			}
		}))).To(Succeed())
	}
	tuning := rtscheduler.Options{MissedAfter: 10 * time.Second}
	start := func(m *opmetrics.Metrics) *started {
		s, r := operator(t, ns, "", scheduler.Config{Store: st, Runner: &schedulertest.Runner{}, Clock: clk, Tuning: tuning, Metrics: m}, nil)
		g.Eventually(func() int { return scheduled(r) }).WithTimeout(eventually).WithPolling(poll).Should(Equal(3))
		return s
	}
	first := start(nil)
	clk.SetTime(base)
	for name := range policies {
		g.Eventually(func() []store.DetailedCronRun { return runsOf(t, st, ns, name) }).WithTimeout(eventually).WithPolling(poll).Should(HaveLen(1))
	}
	first.stop()

	clk.SetTime(base.Add(9*time.Minute + 30*time.Second)) // down for ticks +1m ... +9m
	reg := prometheus.NewRegistry()
	om, err := opmetrics.New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	start(om)
	minutesOf := func(runs []store.DetailedCronRun, skipped bool) []int {
		var out []int
		for _, r := range runs {
			if (r.Outcome == store.OutcomeSkipped) == skipped && r.ScheduledTime.After(base) {
				out = append(out, int(r.ScheduledTime.Sub(base)/time.Minute))
			}
		}
		return out
	}
	want := map[string]struct{ runs, skipped []int }{
		"skip":     {skipped: []int{9, 8, 7, 6, 5, 4, 3, 2, 1}},
		"once":     {runs: []int{9}, skipped: []int{8, 7, 6, 5, 4, 3, 2, 1}},
		"catch-up": {runs: []int{9, 8, 7, 6, 5}, skipped: []int{4, 3, 2, 1}},
	}
	for name, w := range want {
		g.Eventually(func(g Gomega) {
			runs := runsOf(t, st, ns, name)
			g.Expect(runs).To(HaveLen(10), name)
			for _, r := range runs {
				g.Expect(r.State).To(Equal(store.CronDone))
			}
			g.Expect(minutesOf(runs, false)).To(Equal(w.runs), name)
			g.Expect(minutesOf(runs, true)).To(Equal(w.skipped), name)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	// Every tick in between was missed: run (once's and catch-up's) or
	// skipped.
	g.Eventually(func() []float64 {
		return []float64{counterValue(t, reg, "picobot_cron_missed_ticks_total", "run", ns),
			counterValue(t, reg, "picobot_cron_missed_ticks_total", "skipped", ns)}
	}).WithTimeout(eventually).WithPolling(poll).Should(Equal([]float64{1 + 5, 9 + 8 + 4}))
}

// TestMaintenanceJobIsCreatedOnceAndKept: the Runnable creates the daily
// routine-maintenance CronJob in a namespace with Agents; a restart keeps a
// user's suspension, and only a deleted one comes back.
func TestMaintenanceJobIsCreatedOnceAndKept(t *testing.T) {
	need(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	st := schedulertest.Open(t, pg.NewDatabase(t))
	start := func() *started {
		s, _ := operator(t, ns, "", scheduler.Config{Store: st, Runner: &schedulertest.Runner{}, Maintenance: true, MaintenanceTZ: "Europe/Berlin"}, nil)
		return s
	}
	key := client.ObjectKey{Namespace: ns, Name: rtscheduler.MaintenanceJobName}
	first := start()
	g.Consistently(func() error { return k8s.Get(ctx, key, &picobotv1alpha1.CronJob{}) }).
		WithTimeout(500*time.Millisecond).Should(MatchError(ContainSubstring("not found")), "no Agents, no job")
	g.Expect(k8s.Create(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root"}})).To(Succeed())
	cj := &picobotv1alpha1.CronJob{}
	g.Eventually(func() error { return k8s.Get(ctx, key, cj) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(cj.Spec.Schedule).To(Equal(picobotv1alpha1.Schedule{Cron: rtscheduler.MaintenanceCron, TZ: "Europe/Berlin"}))
	g.Expect(cj.Spec.Prompt).To(ContainSubstring("routine_maintenance"))
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgentMade, "true"))
	first.stop()

	cj.Spec.Suspend = new(true)
	cj.Spec.Schedule.Cron = "0 0 4 * * *"
	g.Expect(k8s.Update(ctx, cj)).To(Succeed())
	second := start()
	g.Consistently(func(g Gomega) {
		got := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.Spec.Suspend).To(HaveValue(BeTrue()))
		g.Expect(got.Spec.Schedule.Cron).To(Equal("0 0 4 * * *"))
	}).WithTimeout(time.Second).WithPolling(poll).Should(Succeed(), "a restart does not overwrite the user's change")
	second.stop()

	g.Expect(k8s.Delete(ctx, cj)).To(Succeed())
	start()
	g.Eventually(func(g Gomega) {
		got := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.Spec.Suspend).To(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// TestJobsNamingNoAgentRunOnTheRootAgent: the daily routine-maintenance job
// and a CronJob without agentRef run on the namespace's root agent — its
// only Agent ("assistant", as `make run` names it), then the Agent that
// says spec.role: root — not on an Agent named "root", which does not exist.
func TestJobsNamingNoAgentRunOnTheRootAgent(t *testing.T) {
	need(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	st := schedulertest.Open(t, pg.NewDatabase(t))
	// Yesterday: the CronJobs, created now, are younger than the fake clock's
	// 03:29:30, so no tick before it counts as missed. (Today's 03:29:30
	// would be later than their creation between midnight and 03:29 UTC,
	// and the 03:29 tick would be caught up.)
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	clk := clocktesting.NewFakeClock(day.Add(3*time.Hour + 29*time.Minute + 30*time.Second))
	runner := &schedulertest.Runner{Now: clk.Now}
	g.Expect(k8s.Create(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "assistant"}})).To(Succeed())
	op, r := operator(t, ns, "", scheduler.Config{Store: st, Runner: runner, Clock: clk, Maintenance: true}, nil)
	g.Expect(k8s.Create(ctx, cronJob(ns, "report", "0 * * * * *", func(cj *picobotv1alpha1.CronJob) { cj.Spec.AgentRef = nil }))).To(Succeed())
	g.Eventually(func() int { return scheduled(r) }).WithTimeout(eventually).WithPolling(poll).Should(Equal(2), "report and maintenance")

	agents := func() map[string]string {
		out := map[string]string{}
		for _, c := range runner.Calls() {
			out[c.Req.Job+"@"+c.Req.ScheduledTime.Format("15:04")] = c.Req.Agent
		}
		return out
	}
	clk.SetTime(day.Add(3*time.Hour + 30*time.Minute))
	g.Eventually(agents).WithTimeout(eventually).WithPolling(poll).Should(Equal(map[string]string{
		ns + "/report@03:30": "assistant", ns + "/" + rtscheduler.MaintenanceJobName + "@03:30": "assistant"}))

	boss := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "boss"}}
	boss.Spec.Role = new(picobotv1alpha1.AgentRoleRoot)
	g.Expect(k8s.Create(ctx, boss)).To(Succeed())
	g.Eventually(func(g Gomega) { // the scheduler reads Agents from the manager's cache
		var l picobotv1alpha1.AgentList
		g.Expect(op.GetClient().List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		g.Expect(l.Items).To(HaveLen(2))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	clk.SetTime(day.Add(3*time.Hour + 31*time.Minute))
	g.Eventually(agents).WithTimeout(eventually).WithPolling(poll).Should(HaveKeyWithValue(ns+"/report@03:31", "boss"))
}

// TestTwoReplicasFailover runs two managers with leader election on the real
// API server, both with the Runnable, over one database. Only the leader
// fires; when it dies without releasing its Lease, the other takes over,
// fires the ticks it missed meanwhile (late, they are within MissedAfter) and
// the next ones. No tick runs twice and none is lost, and a stopping
// scheduler records what it had claimed (ahead, or in flight) as interrupted.
func TestTwoReplicasFailover(t *testing.T) {
	need(t)
	if testing.Short() {
		t.Skip("waits for a Lease to expire")
	}
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	dsn := pg.NewDatabase(t)
	runner := &schedulertest.Runner{}
	const jobs = 20
	for i := range jobs {
		g.Expect(k8s.Create(ctx, cronJob(ns, fmt.Sprintf("every-second-%02d", i), "* * * * * *"))).To(Succeed())
	}
	a, ra := operator(t, ns, "scheduler-failover", scheduler.Config{Store: schedulertest.Open(t, dsn), Runner: runner}, nil)
	b, rb := operator(t, ns, "scheduler-failover", scheduler.Config{Store: schedulertest.Open(t, dsn), Runner: runner}, nil)
	var leader, standby *started
	g.Eventually(func() bool { return ra.Scheduler() != nil || rb.Scheduler() != nil }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	leader, standby = a, b
	standbyRunnable := rb
	if rb.Scheduler() != nil {
		leader, standby, standbyRunnable = b, a, ra
	}
	g.Expect(standbyRunnable.Scheduler()).To(BeNil(), "the standby does not fire")
	g.Eventually(func() int { return len(runner.Calls()) }).WithTimeout(eventually).WithPolling(poll).Should(BeNumerically(">=", 3*jobs))
	leader.stop() // a crash: the Lease is not released
	killed := time.Now()
	g.Eventually(func() bool { return standbyRunnable.Scheduler() != nil }).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	before := len(runner.Calls())
	g.Eventually(func() int { return len(runner.Calls()) }).WithTimeout(eventually).WithPolling(poll).Should(BeNumerically(">=", before+3*jobs))
	standby.stop()

	g.Expect(runner.Duplicates()).To(BeZero(), "no tick ran twice")
	st := schedulertest.Open(t, dsn)
	for i := range jobs {
		runs := runsOf(t, st, ns, fmt.Sprintf("every-second-%02d", i))
		first, last := runs[len(runs)-1].ScheduledTime, runs[0].ScheduledTime
		g.Expect(runs).To(HaveLen(int(last.Sub(first)/time.Second)+1), "every tick from the first to the last is recorded (killed at %s): %s",
			killed.Format("15:04:05.000"), tickList(runs))
		g.Expect(first.Before(killed) && last.After(killed)).To(BeTrue())
		for _, r := range runs {
			g.Expect(r.Outcome).NotTo(Equal(store.OutcomeSkipped), "the takeover was quick: missed ticks ran late")
			g.Expect(r.State).To(Equal(store.CronDone), "a stopped scheduler leaves no claim unfinished: %s", tickList(runs))
		}
	}
}

// TestOneShotCompletes: a one-shot CronJob fires once; once the scheduler
// publishes its run, the controller marks it Completed (while it fires it
// is not reported as "in the past").
func TestOneShotCompletes(t *testing.T) {
	need(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	st := schedulertest.Open(t, pg.NewDatabase(t))
	clk := clocktesting.NewFakeClock(time.Now())
	runner := &schedulertest.Runner{}
	operator(t, ns, "", scheduler.Config{Store: st, Runner: runner, Clock: clk}, clk)

	at := clk.Now().Add(time.Minute).Truncate(time.Second)
	g.Expect(k8s.Create(ctx, cronJob(ns, "remind", "", func(cj *picobotv1alpha1.CronJob) {
		cj.Spec.Schedule = picobotv1alpha1.Schedule{At: new(at.UnixMilli())}
	}))).To(Succeed())
	reason := func(g Gomega) string {
		cj := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "remind"}, cj)).To(Succeed())
		for _, c := range cj.Status.Conditions {
			if c.Type == picobotv1alpha1.ConditionScheduleValid {
				return c.Reason
			}
		}
		return ""
	}
	g.Eventually(reason).WithTimeout(eventually).WithPolling(poll).Should(Equal(picobotv1alpha1.ReasonScheduled))
	clk.SetTime(at)
	g.Eventually(reason).WithTimeout(eventually).WithPolling(poll).Should(Equal(picobotv1alpha1.ReasonCompleted))
	g.Expect(runner.Calls()).To(HaveLen(1))
	g.Expect(runner.Calls()[0].Req.ScheduledTime).To(Equal(at.UTC()))
}

// TestCronJobsPastTheCapAreNotScheduled: under a TenantQuota's maxCronJobs
// the CronJob controller marks the jobs past it (WithinQuota False) and the
// scheduler drops them; deleting an earlier job schedules the next.
func TestCronJobsPastTheCapAreNotScheduled(t *testing.T) {
	need(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	st := schedulertest.Open(t, pg.NewDatabase(t))
	_, r := operator(t, ns, "", scheduler.Config{Store: st, Runner: &schedulertest.Runner{}}, clock.RealClock{})
	g.Expect(k8s.Create(ctx, &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName},
		Spec: picobotv1alpha1.TenantQuotaSpec{MaxCronJobs: new(int32(1))}})).To(Succeed())
	first := cronJob(ns, "first", "0 0 9 * * *")
	g.Expect(k8s.Create(ctx, first)).To(Succeed())
	g.Expect(k8s.Create(ctx, cronJob(ns, "second", "0 0 9 * * *"))).To(Succeed())
	scheduledNext := func(name string) bool { next, _ := r.Scheduler().NextRun(ns, name); return !next.IsZero() }
	g.Eventually(func(g Gomega) {
		cj := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, cj)).To(Succeed())
		g.Expect(cj.Status.Conditions).To(ContainElement(And(HaveField("Type", picobotv1alpha1.ConditionWithinQuota), HaveField("Status", metav1.ConditionFalse))))
		g.Expect(scheduledNext("first")).To(BeTrue())
		g.Expect(scheduledNext("second")).To(BeFalse())
		g.Expect(r.Scheduler().Len()).To(Equal(1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(k8s.Delete(ctx, first)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(scheduledNext("second")).To(BeTrue())
		g.Expect(r.Scheduler().Len()).To(Equal(1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}
