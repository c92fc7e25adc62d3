// Package schedule computes when a PicoBot CronJob fires. It is shared by the
// operator (status.nextRunTime, firing) and embedded mode's scheduler, so both
// agree on every tick.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// MinEvery is the floor of an `every` schedule; the CRD enforces it too, the
// check here covers embedded mode and tools.
const MinEvery = time.Minute

// ErrAtInPast reports a one-shot schedule whose time has passed.
var ErrAtInPast = errors.New("at is in the past")

// parser accepts exactly the 6-field form (with seconds) and descriptors such as
// @daily. robfig/cron is the de-facto Go cron library; we only pin its options.
var parser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a parsed schedule that yields its next tick.
type Schedule interface {
	// Next returns the first tick strictly after t, or the zero time when the
	// schedule never fires again.
	Next(t time.Time) time.Time
}

// Parse validates s and returns its schedule. anchor is the start of `every`
// intervals (the CronJob's creation time), so ticks stay on a stable grid across
// restarts instead of drifting with the operator's clock.
func Parse(s picobotv1alpha1.Schedule, anchor time.Time) (Schedule, error) {
	set := 0
	for _, ok := range []bool{s.At != nil, s.Every != nil, s.Cron != ""} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return nil, errors.New("schedule needs exactly one of at, every or cron")
	}
	if s.TZ != "" && s.Cron == "" {
		return nil, errors.New("tz applies only to a cron schedule")
	}
	switch {
	case s.At != nil:
		return atSchedule(time.UnixMilli(*s.At)), nil
	case s.Every != nil:
		d := time.Duration(*s.Every) * time.Millisecond
		if d < MinEvery {
			return nil, fmt.Errorf("every must be at least %d ms (one minute), got %d", MinEvery.Milliseconds(), *s.Every)
		}
		return everySchedule{anchor: anchor, every: d}, nil
	default:
		return parseCron(s.Cron, s.TZ)
	}
}

func parseCron(expr, tz string) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if !strings.HasPrefix(expr, "@") {
		if n := len(strings.Fields(expr)); n != 6 {
			return nil, fmt.Errorf("cron %q has %d fields; want 6: second minute hour day-of-month month day-of-week", expr, n)
		}
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return nil, fmt.Errorf("cron %q: set the time zone with tz, not inside the expression", expr)
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("unknown time zone %q: %w", tz, err)
		}
		loc = l
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid cron %q: %w", expr, err)
	}
	// Reject expressions that can never fire (e.g. 30 February): robfig returns
	// the zero time after searching five years ahead.
	if sched.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return nil, fmt.Errorf("cron %q never fires", expr)
	}
	return cronSchedule{s: sched, loc: loc}, nil
}

type cronSchedule struct {
	s   cron.Schedule
	loc *time.Location
}

func (c cronSchedule) Next(t time.Time) time.Time { return c.s.Next(t.In(c.loc)) }

type everySchedule struct {
	anchor time.Time
	every  time.Duration
}

func (e everySchedule) Next(t time.Time) time.Time {
	if t.Before(e.anchor) {
		return e.anchor.Add(e.every)
	}
	n := t.Sub(e.anchor)/e.every + 1
	return e.anchor.Add(n * e.every)
}

type atSchedule time.Time

func (a atSchedule) Next(t time.Time) time.Time {
	if at := time.Time(a); at.After(t) {
		return at
	}
	return time.Time{}
}
