package bottask

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// isoExample is the accepted form, shown in every refusal.
const isoExample = "2026-10-01T18:30:00+08:00"

// errNotISO explains why a phrase such as "tomorrow afternoon" is refused.
func errNotISO(field, v string, dateOnly bool) error {
	forms := "an ISO 8601 date-time with a UTC offset, e.g. " + isoExample
	if dateOnly {
		forms += ", or a date such as 2026-10-01"
	}
	return fmt.Errorf("%s %q is not %s; phrases like \"tomorrow afternoon\" are refused because their meaning depends on when they are read",
		field, v, forms)
}

// parseISO parses an ISO 8601 date-time with a UTC offset (seconds and
// fractions optional) or, when dateOnly is allowed, a calendar date (all
// day, returned as midnight UTC). A date-time without an offset is refused:
// its zone would be a guess.
func parseISO(field, v string, dateOnly bool) (t time.Time, allDay bool, err error) {
	v = strings.TrimSpace(v)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, false, nil
		}
	}
	if dateOnly {
		if t, err := time.Parse(time.DateOnly, v); err == nil {
			return t, true, nil
		}
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04"} {
		if _, err := time.Parse(layout, v); err == nil {
			return time.Time{}, false, fmt.Errorf("%s %q has no UTC offset; add one, e.g. %s (or Z for UTC)", field, v, isoExample)
		}
	}
	return time.Time{}, false, errNotISO(field, v, dateOnly)
}

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

var cronDays = [...]string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

const repeatHelp = `use hour, day or week, optionally pinned: "hour :30", "day 09:00", "week 09:00" or "week mon 09:00"`

// repeatCron turns a repeat ("hour", "day 09:00", "week mon 09:00", ...)
// into a 6-field cron expression in loc. Fields the repeat does not pin
// come from ref (the task's due time, or now).
func repeatCron(repeat string, ref time.Time, loc *time.Location) (string, error) {
	f := strings.Fields(strings.ToLower(repeat))
	if len(f) == 0 {
		return "", nil
	}
	ref = ref.In(loc)
	hour, minute, day := ref.Hour(), ref.Minute(), ref.Weekday()
	rest := f[1:]
	bad := func() (string, error) { return "", fmt.Errorf("repeat %q is not understood; %s", repeat, repeatHelp) }
	switch f[0] {
	case "hour":
		if len(rest) > 1 {
			return bad()
		}
		if len(rest) == 1 {
			m, err := strconv.Atoi(strings.TrimPrefix(rest[0], ":"))
			if err != nil || m < 0 || m > 59 {
				return bad()
			}
			minute = m
		}
		return fmt.Sprintf("0 %d * * * *", minute), nil
	case "day", "week":
		if f[0] == "week" && len(rest) > 0 {
			w := strings.TrimSuffix(rest[0], ".")
			if len(w) > 3 {
				w = w[:3]
			}
			if d, ok := weekdays[w]; ok {
				day, rest = d, rest[1:]
			}
		}
		if len(rest) > 1 {
			return bad()
		}
		if len(rest) == 1 {
			t, err := time.Parse("15:04", rest[0])
			if err != nil {
				return bad()
			}
			hour, minute = t.Hour(), t.Minute()
		}
		if f[0] == "day" {
			return fmt.Sprintf("0 %d %d * * *", minute, hour), nil
		}
		return fmt.Sprintf("0 %d %d * * %s", minute, hour, cronDays[day]), nil
	}
	return bad()
}

// loadZone resolves an IANA time zone name ("" is def).
func loadZone(name, def string) (*time.Location, string, error) {
	if name = strings.TrimSpace(name); name == "" {
		name = def
	}
	if name == "" {
		return time.UTC, "", nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || strings.HasPrefix(name, "/") || name == "Local" {
		return nil, "", fmt.Errorf("tz %q is not an IANA time zone such as Asia/Shanghai or UTC", name)
	}
	return loc, name, nil
}

// newID is a short random id for tasks and agenda items.
func newID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(b[:])
}

// checkID refuses an id that is not one of ours before it reaches the store.
func checkID(kind, id, listHint string) error {
	if id == "" {
		return fmt.Errorf("id is required; %s shows the ids", listHint)
	}
	if len(id) > 64 || strings.ContainsAny(id, "\x00/ ") {
		return fmt.Errorf("%q is not a %s id; %s shows the ids", id, kind, listHint)
	}
	return nil
}
