package scheduler

import (
	"fmt"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/schedule"
)

// action is what the scheduler does with one tick: run it, or record it as
// skipped with the reason.
type action struct {
	job    *Job
	tick   time.Time
	run    bool
	reason string
	// missed counts the missed ticks the action stands for (Options.OnMissed):
	// 1 for a missed tick, run or skipped, plus the older ones left out of
	// the records for the skipped tick that summarises them; 0 for a tick
	// that is merely late.
	missed int
}

// dueTicks are the ticks of a schedule in (after, until], oldest first. At
// most keep are returned (the newest); omitted counts older ones left out and
// from is the first of those. A schedule with more than maxWalk ticks in the
// range (every second, offline for days) is only walked for its last day:
// cutFrom then says where the uncounted ticks begin.
type dueTicks struct {
	ticks   []time.Time
	omitted int
	from    time.Time
	cutFrom time.Time
}

const maxWalk = 200_000

func collectTicks(s schedule.Schedule, after, until time.Time, keep int) dueTicks {
	d, walked := walkTicks(s, after, until, keep)
	if walked > maxWalk {
		d, _ = walkTicks(s, until.Add(-24*time.Hour), until, keep)
		d.cutFrom = after
	}
	return d
}

func walkTicks(s schedule.Schedule, after, until time.Time, keep int) (dueTicks, int) {
	var d dueTicks
	ring := make([]time.Time, 0, min(keep, 64))
	start, walked := 0, 0 // start: index of the oldest in ring once it is full
	for t := s.Next(after); !t.IsZero() && !t.After(until) && walked <= maxWalk; t = s.Next(t) {
		t = t.UTC()
		walked++
		if len(ring) < keep {
			ring = append(ring, t)
			continue
		}
		if d.omitted == 0 {
			d.from = ring[start]
		}
		d.omitted++
		ring[start] = t
		start = (start + 1) % keep
	}
	d.ticks = append(ring[start:len(ring):len(ring)], ring[:start]...)
	return d, walked
}

// planParams are the knobs of plan.
type planParams struct {
	now         time.Time
	missedAfter time.Duration
	catchUp     time.Duration // window when the job sets none
	maxCatchUp  int
}

// plan decides what becomes of a job's due ticks. A tick at most
// missedAfter old is merely late and runs. Older ticks were missed (the
// scheduler was down or stalled) and follow the job's missed-run policy —
// skip records them as skipped; run_once runs the newest of them unless a
// late tick runs anyway, and records the rest as skipped; catch_up runs
// those inside the catch-up window (at most maxCatchUp, the newest) and
// records the rest as skipped. Every tick ends as a run or a record.
func plan(j *Job, d dueTicks, p planParams) []action {
	var late, missed []time.Time
	for _, t := range d.ticks {
		if p.now.Sub(t) <= p.missedAfter {
			late = append(late, t)
		} else {
			missed = append(missed, t)
		}
	}
	out := make([]action, 0, len(d.ticks))
	// Only missed ticks are skipped.
	skip := func(t time.Time, why string) {
		out = append(out, action{job: j, tick: t, reason: why, missed: 1})
	}
	policy := j.Spec.MissedRunPolicy
	if policy == "" {
		policy = picobotv1alpha1.MissedRunOnce
	}
	const down = "Missed while the scheduler was not running"
	switch policy {
	case picobotv1alpha1.MissedSkip:
		for _, t := range missed {
			skip(t, down+" (missedRunPolicy skip)")
		}
	case picobotv1alpha1.MissedCatchUp:
		window := p.catchUp
		if j.Spec.CatchUpWindow != nil && j.Spec.CatchUpWindow.Duration > 0 {
			window = j.Spec.CatchUpWindow.Duration
		}
		var inside []time.Time
		for _, t := range missed {
			if p.now.Sub(t) <= window {
				inside = append(inside, t)
			} else {
				skip(t, fmt.Sprintf("%s, outside the catch-up window of %s (missedRunPolicy catch_up)", down, window))
			}
		}
		if n := len(inside) - p.maxCatchUp; n > 0 {
			for _, t := range inside[:n] {
				skip(t, fmt.Sprintf("%s; catch_up runs at most the newest %d missed ticks", down, p.maxCatchUp))
			}
			inside = inside[n:]
		}
		for _, t := range inside {
			out = append(out, action{job: j, tick: t, run: true, missed: 1})
		}
	default: // run_once
		if len(late) > 0 {
			for _, t := range missed {
				skip(t, fmt.Sprintf("%s; the run of %s covers it (missedRunPolicy run_once)", down, stamp(late[0])))
			}
		} else if len(missed) > 0 {
			newest := missed[len(missed)-1]
			for _, t := range missed[:len(missed)-1] {
				skip(t, fmt.Sprintf("%s; folded into the run of %s (missedRunPolicy run_once)", down, stamp(newest)))
			}
			out = append(out, action{job: j, tick: newest, run: true, missed: 1})
		}
	}
	for _, t := range late {
		out = append(out, action{job: j, tick: t, run: true})
	}
	var summary string
	if d.omitted > 0 {
		summary = fmt.Sprintf("; %d earlier missed ticks since %s are summarised here", d.omitted, stamp(d.from))
	}
	if !d.cutFrom.IsZero() && len(d.ticks) > 0 {
		summary += fmt.Sprintf("; the ticks between %s and %s were too many to count", stamp(d.cutFrom), stamp(d.ticks[0]))
	}
	if summary != "" {
		// The oldest kept tick is always a skipped one: more ticks than
		// kept means far more than catch_up runs or a minute of late ticks
		// (New keeps maxMissedRecords above both).
		for i := range out {
			if !out[i].run && out[i].tick.Equal(d.ticks[0]) {
				out[i].reason += summary
				out[i].missed += d.omitted
				break
			}
		}
	}
	return out
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
