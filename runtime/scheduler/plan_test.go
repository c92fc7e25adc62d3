package scheduler

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/schedule"
)

var t0 = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)

func everyMinute(t *testing.T) schedule.Schedule {
	t.Helper()
	s, err := schedule.Parse(picobotv1alpha1.Schedule{Cron: "0 * * * * *"}, time.Time{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return s
}

func TestCollectTicks(t *testing.T) {
	g := NewWithT(t)
	s := everyMinute(t)

	d := collectTicks(s, t0, t0.Add(5*time.Minute), 10)
	g.Expect(d.ticks).To(HaveLen(5))
	g.Expect(d.ticks[0]).To(Equal(t0.Add(time.Minute)), "after is exclusive")
	g.Expect(d.ticks[4]).To(Equal(t0.Add(5*time.Minute)), "until is inclusive")
	g.Expect(d.omitted).To(BeZero())

	d = collectTicks(s, t0, t0.Add(10*time.Minute), 3)
	g.Expect(d.ticks).To(Equal([]time.Time{t0.Add(8 * time.Minute), t0.Add(9 * time.Minute), t0.Add(10 * time.Minute)}),
		"the newest are kept, oldest first")
	g.Expect(d.omitted).To(Equal(7))
	g.Expect(d.from).To(Equal(t0.Add(time.Minute)))

	everySecond, err := schedule.Parse(picobotv1alpha1.Schedule{Cron: "* * * * * *"}, time.Time{})
	g.Expect(err).NotTo(HaveOccurred())
	d = collectTicks(everySecond, t0, t0.Add(30*24*time.Hour), 5)
	g.Expect(d.cutFrom).To(Equal(t0), "a month of seconds is too many to walk")
	g.Expect(d.ticks[4]).To(Equal(t0.Add(30 * 24 * time.Hour)))
	g.Expect(d.omitted).To(Equal(24*3600 - 5))

	at := t0.Add(time.Hour)
	once, err := schedule.Parse(picobotv1alpha1.Schedule{At: new(at.UnixMilli())}, time.Time{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(collectTicks(once, t0, t0.Add(2*time.Hour), 5).ticks).To(Equal([]time.Time{at}))
	g.Expect(collectTicks(once, at, t0.Add(2*time.Hour), 5).ticks).To(BeEmpty(), "an at fires once")
}

func TestPlan(t *testing.T) {
	now := t0.Add(10*time.Minute + 5*time.Second)
	p := planParams{now: now, missedAfter: time.Minute, catchUp: 24 * time.Hour, maxCatchUp: 3}
	minutes := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Minute))
		}
		return out
	}
	cases := []struct {
		name      string
		policy    picobotv1alpha1.MissedRunPolicy
		window    time.Duration
		ticks     []time.Time
		omitted   int
		runs      []time.Time
		skips     []time.Time
		skipWords string
		// missed is how many missed ticks the runs and the skips stand
		// for (OnMissed).
		missed [2]int
	}{
		{name: "on time", policy: picobotv1alpha1.MissedSkip, ticks: minutes(10), runs: minutes(10)},
		{name: "skip", policy: picobotv1alpha1.MissedSkip, ticks: minutes(7, 8, 9, 10), runs: minutes(10),
			skips: minutes(7, 8, 9), skipWords: "missedRunPolicy skip", missed: [2]int{0, 3}},
		{name: "run_once with a late tick skips the missed", policy: picobotv1alpha1.MissedRunOnce, ticks: minutes(7, 8, 9, 10),
			runs: minutes(10), skips: minutes(7, 8, 9), skipWords: "the run of 2030-03-04T12:10:00Z covers it", missed: [2]int{0, 3}},
		{name: "run_once runs the newest missed", policy: "", ticks: minutes(3, 4, 5), runs: minutes(5), skips: minutes(3, 4),
			skipWords: "folded into the run of 2030-03-04T12:05:00Z", missed: [2]int{1, 2}},
		{name: "catch_up runs each in the window", policy: picobotv1alpha1.MissedCatchUp, window: 6 * time.Minute,
			ticks: minutes(2, 3, 5, 6, 10), runs: minutes(5, 6, 10), skips: minutes(2, 3), skipWords: "outside the catch-up window of 6m0s",
			missed: [2]int{2, 2}},
		{name: "catch_up caps its runs", policy: picobotv1alpha1.MissedCatchUp, ticks: minutes(1, 2, 3, 4, 5),
			runs: minutes(3, 4, 5), skips: minutes(1, 2), skipWords: "at most the newest 3", missed: [2]int{3, 2}},
		{name: "omitted ticks are summarised", policy: picobotv1alpha1.MissedSkip, ticks: minutes(8, 9), omitted: 40,
			skips: minutes(8, 9), skipWords: "40 earlier missed ticks", missed: [2]int{0, 42}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			j := &Job{Tenant: "t", Name: "n", Spec: picobotv1alpha1.CronJobSpec{MissedRunPolicy: tc.policy}}
			if tc.window > 0 {
				j.Spec.CatchUpWindow = picobotv1alpha1.NewDuration(tc.window)
			}
			acts := plan(j, dueTicks{ticks: tc.ticks, omitted: tc.omitted, from: t0}, p)
			var runs, skips []time.Time
			var missed [2]int
			for _, a := range acts {
				if a.run {
					runs = append(runs, a.tick)
					missed[0] += a.missed
				} else {
					missed[1] += a.missed
					skips = append(skips, a.tick)
					g.Expect(a.reason).To(ContainSubstring("Missed while the scheduler was not running"))
				}
			}
			g.Expect(runs).To(ConsistOf(tc.runs))
			g.Expect(skips).To(ConsistOf(tc.skips))
			g.Expect(missed).To(Equal(tc.missed), "missed ticks run and skipped")
			g.Expect(len(acts)).To(Equal(len(tc.ticks)), "every tick ends as a run or a record")
			if tc.skipWords != "" {
				g.Expect(acts[0].reason).To(ContainSubstring(tc.skipWords))
			}
		})
	}
}
