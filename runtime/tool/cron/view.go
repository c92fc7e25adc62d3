package cron

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"regexp"
	"strings"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/schedule"
	"github.com/picobot/picobot/runtime/store"
)

// job is a job as the tools see it, whatever keeps it (a CronJob resource
// or an embedded-mode store record).
type job struct {
	ID   string
	Name string // display name
	// Agent made the job (empty for manifest jobs).
	Agent   string
	Spec    picobotv1alpha1.CronJobSpec
	Created time.Time
	// ReadOnly, when set, says why the tools may not change the job.
	ReadOnly string
	// LastRun is the latest run, when known.
	LastRun *store.CronRun
}

func (j *job) enabled() bool { return j.Spec.Suspend == nil || !*j.Spec.Suspend }

// nextRun is when the job fires next (zero: never, disabled or done).
func (j *job) nextRun(now time.Time) time.Time {
	if !j.enabled() {
		return time.Time{}
	}
	s, err := schedule.Parse(j.Spec.Schedule, j.Created)
	if err != nil {
		return time.Time{}
	}
	return s.Next(now)
}

// scheduleArg is the schedule as the model writes it (the cron tool schema):
// {"type":"at","at":ms} | {"type":"every","every_ms":ms} |
// {"type":"cron","expr":"0 0 9 * * *","tz":"Asia/Shanghai"}.
type scheduleArg struct {
	Type    string `json:"type" jsonschema:"at, every or cron"`
	At      *int64 `json:"at,omitempty" jsonschema:"at: Unix time in ms"`
	EveryMS *int64 `json:"every_ms,omitempty" jsonschema:"every: interval in ms, at least 60000"`
	Expr    string `json:"expr,omitempty" jsonschema:"cron: 6 fields: second minute hour day-of-month month day-of-week"`
	TZ      string `json:"tz,omitempty" jsonschema:"cron: IANA time zone (default UTC)"`
}

// toSchedule converts the model's schedule, refusing fields of another type.
func (a scheduleArg) toSchedule() (picobotv1alpha1.Schedule, error) {
	var s picobotv1alpha1.Schedule
	extra := func(name string) error {
		return fmt.Errorf("schedule type %s does not take %s", a.Type, name)
	}
	switch a.Type {
	case "at":
		if a.At == nil {
			return s, fmt.Errorf(`schedule type at needs "at": a Unix time in milliseconds`)
		}
		if a.EveryMS != nil {
			return s, extra("every_ms")
		}
		if a.Expr != "" || a.TZ != "" {
			return s, extra("expr or tz")
		}
		s.At = a.At
	case "every":
		if a.EveryMS == nil {
			return s, fmt.Errorf(`schedule type every needs "every_ms": the interval in milliseconds (at least 60000)`)
		}
		if a.At != nil {
			return s, extra("at")
		}
		if a.Expr != "" || a.TZ != "" {
			return s, extra("expr or tz")
		}
		s.Every = a.EveryMS
	case "cron":
		if strings.TrimSpace(a.Expr) == "" {
			return s, fmt.Errorf(`schedule type cron needs "expr": 6 fields, e.g. "0 0 9 * * *" for 09:00 every day`)
		}
		if a.At != nil || a.EveryMS != nil {
			return s, extra("at or every_ms")
		}
		s.Cron, s.TZ = strings.TrimSpace(a.Expr), a.TZ
	default:
		return s, fmt.Errorf("schedule type %q is unknown; use at, every or cron", a.Type)
	}
	return s, nil
}

func fromSchedule(s picobotv1alpha1.Schedule) scheduleArg {
	switch {
	case s.At != nil:
		return scheduleArg{Type: "at", At: s.At}
	case s.Every != nil:
		return scheduleArg{Type: "every", EveryMS: s.Every}
	default:
		return scheduleArg{Type: "cron", Expr: s.Cron, TZ: s.TZ}
	}
}

// jobOut is a job as the tools report it.
type jobOut struct {
	JobID    string      `json:"job_id"`
	Name     string      `json:"name,omitempty"`
	Enabled  bool        `json:"enabled"`
	Schedule scheduleArg `json:"schedule"`
	// AgentID is null for the Root agent.
	AgentID         *string  `json:"agent_id"`
	Channel         string   `json:"channel,omitempty"`
	ChatID          string   `json:"chat_id,omitempty"`
	DeliveryPolicy  string   `json:"delivery_policy"`
	MissedRunPolicy string   `json:"missed_run_policy"`
	NextRun         string   `json:"next_run,omitempty"`
	LastRun         *lastOut `json:"last_run,omitempty"`
	CreatedBy       string   `json:"created_by,omitempty"`
	ReadOnly        string   `json:"read_only,omitempty"`
	Prompt          string   `json:"prompt"`
}

type lastOut struct {
	RunID     string `json:"run_id"`
	Scheduled string `json:"scheduled"`
	Outcome   string `json:"outcome,omitempty"`
	State     string `json:"state"`
}

// maxListedPrompt is how much of a prompt cron_list shows.
const maxListedPrompt = 200

func (j *job) out(now time.Time, fullPrompt bool) jobOut {
	o := jobOut{JobID: j.ID, Name: j.Name, Enabled: j.enabled(), Schedule: fromSchedule(j.Spec.Schedule),
		DeliveryPolicy: string(j.Spec.DeliveryPolicy), MissedRunPolicy: string(j.Spec.MissedRunPolicy),
		CreatedBy: j.Agent, ReadOnly: j.ReadOnly, Prompt: j.Spec.Prompt}
	if o.DeliveryPolicy == "" {
		o.DeliveryPolicy = string(picobotv1alpha1.DeliveryAlways)
	}
	if o.MissedRunPolicy == "" {
		o.MissedRunPolicy = string(picobotv1alpha1.MissedRunOnce)
	}
	if r := j.Spec.AgentRef; r != nil {
		o.AgentID = &r.Name
	}
	if t := j.Spec.Target; t != nil {
		o.Channel, o.ChatID = t.Channel, t.ChatID
	}
	if n := j.nextRun(now); !n.IsZero() {
		o.NextRun = stamp(n)
	}
	if r := j.LastRun; r != nil {
		o.LastRun = &lastOut{RunID: r.RunID, Scheduled: stamp(r.ScheduledTime), Outcome: string(r.Outcome), State: runState(*r)}
	}
	if !fullPrompt {
		if p := []rune(o.Prompt); len(p) > maxListedPrompt {
			o.Prompt = string(p[:maxListedPrompt]) + "…"
		}
	}
	return o
}

// runState names a run's state for the model: a claimed run that started is
// running.
func runState(r store.CronRun) string {
	if r.State == store.CronClaimed && r.StartedAt != nil {
		return string(store.CronRunning)
	}
	return string(r.State)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

var (
	nonSlug   = regexp.MustCompile(`[^a-z0-9]+`)
	idSuffix  = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
	validID   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	maxSlug   = 40
	maxIDName = 253
)

// newID makes a job id from its name: a DNS label (valid as a Kubernetes
// object name) with a random suffix, e.g. "daily-digest-k3x9q".
func newID(name string) string {
	slug := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(slug) > maxSlug {
		slug = strings.TrimRight(slug[:maxSlug], "-")
	}
	if slug == "" {
		slug = "job"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return slug + "-" + idSuffix.EncodeToString(b[:])[:5]
}

// checkID refuses ids that cannot name a job, before any lookup.
func checkID(id string) error {
	if len(id) == 0 || len(id) > maxIDName || !validID.MatchString(id) {
		return fmt.Errorf("job_id %q is not a job id; cron_list shows the ids", id)
	}
	return nil
}
