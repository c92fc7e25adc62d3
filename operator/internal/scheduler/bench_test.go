package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/operator/internal/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
)

// createCronJobs creates n CronJobs in ns with the given cron, in parallel.
func createCronJobs(b *testing.B, ns, prefix, cron string, n int) {
	b.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := k8s.Create(context.Background(), cronJob(ns, fmt.Sprintf("%s-%05d", prefix, i), cron)); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// waitFor polls cond every 50 ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// BenchmarkFire10kEveryMinute: 10,000 CronJobs firing at the same second of
// every minute, in the operator as it ships (the CronJob controller and the
// scheduler Runnable in one manager) against the real API server and
// PostgreSQL. Each iteration is one tick. It reports the firing lag
// (scheduled time to the Runner being called) and the operator process's
// CPU over the whole minute. Run with -benchtime=1x (or Nx for N ticks).
func BenchmarkFire10kEveryMinute(b *testing.B) {
	need(b)
	const jobs = 10_000
	ns := newNamespace(b)
	st := schedulertest.Open(b, pg.NewDatabase(b))
	createCronJobs(b, ns, "load", "0 * * * * *", jobs)

	runner := &schedulertest.Runner{}
	_, r := operator(b, ns, "", scheduler.Config{Store: st, Runner: runner}, clock.RealClock{})
	if !waitFor(2*time.Minute, func() bool { return scheduled(r) == jobs }) {
		b.Fatal("the scheduler did not see every CronJob")
	}

	var lags []time.Duration
	var cpu, wall time.Duration
	b.ResetTimer()
	for range b.N {
		tick := time.Now().Truncate(time.Minute).Add(time.Minute)
		time.Sleep(time.Until(tick.Add(-5 * time.Second)))
		cpu0, wall0 := cpuTime(), time.Now()
		if !waitFor(2*time.Minute, func() bool { return countAt(runner, tick) == jobs }) {
			b.Fatalf("only %d of %d jobs ran at %s", countAt(runner, tick), jobs, tick)
		}
		for _, c := range runner.Calls() {
			if c.Req.ScheduledTime.Equal(tick) {
				lags = append(lags, c.Started.Sub(c.Req.ScheduledTime))
			}
		}
		// CPU over the rest of the minute too: run records, status
		// patches, the controller's requeues.
		time.Sleep(time.Until(tick.Add(55 * time.Second)))
		cpu += cpuTime() - cpu0
		wall += time.Since(wall0)
	}
	b.StopTimer()
	slices.Sort(lags)
	b.ReportMetric(float64(percentile(lags, 0.50).Milliseconds()), "lag-p50-ms")
	b.ReportMetric(float64(percentile(lags, 0.99).Milliseconds()), "lag-p99-ms")
	b.ReportMetric(float64(lags[len(lags)-1].Milliseconds()), "lag-max-ms")
	b.ReportMetric(float64(len(lags))/float64(b.N), "runs/tick")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%-of-a-core")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/minute")
	if runner.Duplicates() != 0 {
		b.Fatalf("%d ticks ran twice", runner.Duplicates())
	}
}

// BenchmarkFailover1000Jobs: two operator replicas (managers with leader
// election on the real API server) over one database; 1,000 CronJobs fire
// every 10 s. The leader dies without releasing its Lease after a tick; the
// standby takes over when the Lease expires and fires the next ticks. It
// reports the takeover time, how many ticks the standby fired, how many ran
// twice (must be 0) and how many are missing (must be 0).
func BenchmarkFailover1000Jobs(b *testing.B) {
	need(b)
	const jobs = 1000
	var takeover time.Duration
	var afterFailover, duplicates, missing, counted int
	for range b.N {
		b.StopTimer()
		ns := newNamespace(b)
		dsn := pg.NewDatabase(b)
		createCronJobs(b, ns, "tick", "*/10 * * * * *", jobs)
		runner := &schedulertest.Runner{}
		a, ra := operator(b, ns, "failover-bench", scheduler.Config{Store: schedulertest.Open(b, dsn), Runner: runner}, nil)
		c, rc := operator(b, ns, "failover-bench", scheduler.Config{Store: schedulertest.Open(b, dsn), Runner: runner}, nil)
		b.StartTimer()
		if !waitFor(time.Minute, func() bool { return ra.Scheduler() != nil || rc.Scheduler() != nil }) {
			b.Fatal("no leader")
		}
		leader, standby, standbyR := a, c, rc
		if rc.Scheduler() != nil {
			leader, standby, standbyR = c, a, ra
		}
		// Let the leader fire two full ticks, then kill it right after one.
		if !waitFor(time.Minute, func() bool { return len(runner.Calls()) >= 2*jobs }) {
			b.Fatal("the leader did not fire")
		}
		last := lastTick(runner)
		time.Sleep(time.Until(last.Add(500 * time.Millisecond)))
		leader.stop()
		killed := time.Now()
		if !waitFor(time.Minute, func() bool { return standbyR.Scheduler() != nil }) {
			b.Fatal("the standby did not take over")
		}
		takeover += time.Since(killed)
		// The standby fires the tick after the failover (and any it
		// missed while the Lease ran out).
		next := killed.Truncate(10 * time.Second).Add(20 * time.Second)
		if !waitFor(time.Minute, func() bool { return countAt(runner, next) == jobs }) {
			b.Fatalf("the standby fired %d of %d jobs at %s", countAt(runner, next), jobs, next)
		}
		standby.stop()
		for _, call := range runner.Calls() {
			if call.Started.After(killed) {
				afterFailover++
			}
		}
		duplicates += runner.Duplicates()
		// Every job has every tick from its first to the next one.
		per := map[string][]time.Time{}
		for _, call := range runner.Calls() {
			per[call.Req.Job] = append(per[call.Req.Job], call.Req.ScheduledTime)
		}
		for _, ticks := range per {
			slices.SortFunc(ticks, func(x, y time.Time) int { return x.Compare(y) })
			want := int(next.Sub(ticks[0])/(10*time.Second)) + 1
			missing += max(0, want-countUntil(ticks, next))
			counted += want
		}
	}
	b.ReportMetric(takeover.Seconds()/float64(b.N), "takeover-s")
	b.ReportMetric(float64(afterFailover)/float64(b.N), "ticks-fired-by-standby")
	b.ReportMetric(float64(counted)/float64(b.N), "ticks-counted")
	b.ReportMetric(float64(duplicates), "ticks-run-twice")
	b.ReportMetric(float64(missing), "ticks-missing")
	if duplicates != 0 || missing != 0 {
		b.Fatalf("%d ticks ran twice, %d are missing", duplicates, missing)
	}
}

func lastTick(r *schedulertest.Runner) time.Time {
	var last time.Time
	for _, c := range r.Calls() {
		if c.Req.ScheduledTime.After(last) {
			last = c.Req.ScheduledTime
		}
	}
	return last
}

func countAt(r *schedulertest.Runner, tick time.Time) int {
	n := 0
	for _, c := range r.Calls() {
		if c.Req.ScheduledTime.Equal(tick) {
			n++
		}
	}
	return n
}

func countUntil(ticks []time.Time, until time.Time) int {
	n := 0
	for _, t := range ticks {
		if !t.After(until) {
			n++
		}
	}
	return n
}
