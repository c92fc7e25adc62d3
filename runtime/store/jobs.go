package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrVersionConflict reports that an update named the version it read
// (IfVersion) and the record has changed since: read it again and retry.
var ErrVersionConflict = errors.New("version conflict")

// CronStore is what scheduled runs need beyond Store: the job definitions
// agents make in embedded mode (cluster mode keeps them as CronJob
// resources), per-run details (agent, session, delivery target and error),
// claims in batches for a scheduler firing thousands of jobs in one tick, and
// the queries a scheduler recovers with after a restart. Both store
// implementations provide it; a consumer type-asserts its Store. Every
// operation is scoped to the tenant in ctx, like Store's.
type CronStore interface {
	// CreateCronJob stores a new job definition; ErrExists when the name is
	// taken. Version becomes 1; zero timestamps are set by the store.
	CreateCronJob(ctx context.Context, j CronJob) (CronJob, error)
	// GetCronJob returns a job definition by name.
	GetCronJob(ctx context.Context, name string) (CronJob, error)
	// ListCronJobs returns job definitions in name order.
	ListCronJobs(ctx context.Context, f CronJobFilter) ([]CronJob, error)
	// UpdateCronJob changes the fields set in u, increments Version and
	// returns the result; ErrVersionConflict when u.IfVersion is set and
	// differs from the stored version.
	UpdateCronJob(ctx context.Context, name string, u CronJobUpdate) (CronJob, error)
	// DeleteCronJob removes a job definition (its runs stay as history).
	DeleteCronJob(ctx context.Context, name string) error

	// ClaimCronRuns is ClaimCronRun for many ticks in one round trip: the
	// result says, per claim in order, whether it won its tick. A claim whose
	// Run.State is CronDone records a finished run in one step (a skipped
	// tick); the others are stored as claimed.
	ClaimCronRuns(ctx context.Context, claims []CronClaim) ([]bool, error)
	// UpdateCronRunDetail changes the run fields set in u and the detail
	// fields set in d in one write.
	UpdateCronRunDetail(ctx context.Context, runID string, u CronRunUpdate, d CronRunDetailUpdate) (DetailedCronRun, error)
	// GetDetailedCronRun returns a run with its detail.
	GetDetailedCronRun(ctx context.Context, runID string) (DetailedCronRun, error)
	// ListDetailedCronRuns returns a job's runs with their details, latest
	// ScheduledTime first.
	ListDetailedCronRuns(ctx context.Context, job string, limit int) ([]DetailedCronRun, error)
	// LastCronRunTimes returns, for each job of until that has a run
	// scheduled at or before its bound, the latest such ScheduledTime: where
	// a scheduler that first saw the job at that bound picks up. The bound
	// keeps out the ticks it has claimed since (ahead of time, even), which
	// would hide the gap before them.
	LastCronRunTimes(ctx context.Context, until map[string]time.Time) (map[string]time.Time, error)
	// ListUnfinishedCronRuns returns runs not done or with a delivery still
	// pending, oldest ScheduledTime first; job "" means every job.
	ListUnfinishedCronRuns(ctx context.Context, job string, limit int) ([]DetailedCronRun, error)
}

// CronJob is a job definition an agent made through its tools in embedded
// mode. The store keeps the spec as opaque JSON (an api/v1alpha1
// CronJobSpec), so the scheduler and the tools own its meaning.
type CronJob struct {
	Tenant string `json:"tenant"`
	// Name identifies the job in its tenant; run records name it
	// "<tenant>/<name>".
	Name string `json:"name"`
	// DisplayName is the human name the agent gave the job.
	DisplayName string `json:"display_name,omitempty"`
	// Agent is the agent that made the job.
	Agent string `json:"agent,omitempty"`
	// Spec is the JSON of the job's api/v1alpha1 CronJobSpec.
	Spec json.RawMessage `json:"spec"`
	// Origin is the W3C traceparent of the turn that made the job (set at
	// creation, never updated; empty with tracing off): its fires link to
	// that turn's trace.
	Origin string `json:"origin,omitempty"`
	// Version is 1 on create and grows by one with every update.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CronJobUpdate lists the job fields to change; nil fields stay.
type CronJobUpdate struct {
	DisplayName *string
	Spec        json.RawMessage
	// IfVersion, when not zero, applies the update only to that version.
	IfVersion int64
}

// CronJobFilter selects job definitions; empty fields match all.
type CronJobFilter struct {
	Agent string
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// CronRunDetail is what a run record carries beyond CronRun: who ran it, in
// which session, and where its outcome went.
type CronRunDetail struct {
	// Agent is the agent the run was given to.
	Agent string `json:"agent,omitempty"`
	// SessionID is the fresh session the run used.
	SessionID string `json:"session_id,omitempty"`
	// Channel and ChatID are the delivery target; empty when the job has
	// none.
	Channel string `json:"channel,omitempty"`
	ChatID  string `json:"chat_id,omitempty"`
	// DeliveryError says why a delivery failed (or why none was possible).
	DeliveryError string `json:"delivery_error,omitempty"`
}

// CronRunDetailUpdate lists the detail fields to change; nil fields stay.
type CronRunDetailUpdate struct {
	Agent, SessionID, Channel, ChatID, DeliveryError *string
}

// DetailedCronRun is a run record with its detail.
type DetailedCronRun struct {
	CronRun
	Detail CronRunDetail `json:"detail"`
}

// CronClaim is one tick a scheduler claims: the run record and its detail.
type CronClaim struct {
	Run    CronRun
	Detail CronRunDetail
}

// maxCronJobName bounds a job name (a Kubernetes object name's limit).
const maxCronJobName = 253

// Validate checks a job definition for CreateCronJob.
func (j CronJob) Validate() error {
	if err := required("name", j.Name); err != nil {
		return err
	}
	if len(j.Name) > maxCronJobName {
		return invalid("name is longer than %d bytes", maxCronJobName)
	}
	if err := noNUL("display_name", j.DisplayName, "agent", j.Agent, "origin", j.Origin); err != nil {
		return err
	}
	if len(j.Origin) > maxOrigin {
		return invalid("origin is longer than %d bytes", maxOrigin)
	}
	return validSpec(j.Spec)
}

// maxOrigin bounds CronJob.Origin: a W3C traceparent has 55 characters.
const maxOrigin = 256

// Validate checks the values a job update sets.
func (u CronJobUpdate) Validate() error {
	if u.DisplayName != nil {
		if err := noNUL("display_name", *u.DisplayName); err != nil {
			return err
		}
	}
	if u.Spec != nil {
		return validSpec(u.Spec)
	}
	return nil
}

func validSpec(spec json.RawMessage) error {
	if len(spec) == 0 || !json.Valid(spec) {
		return invalid("spec is not a JSON document")
	}
	if spec[0] != '{' {
		return invalid("spec is not a JSON object")
	}
	return noNUL("spec", string(spec))
}

// Validate checks a claim for ClaimCronRuns.
func (c CronClaim) Validate() error {
	if err := c.Run.Validate(); err != nil {
		return err
	}
	if c.Run.State != "" {
		if err := oneOf("state", c.Run.State, CronClaimed, CronDone); err != nil {
			return err
		}
	}
	return c.Detail.Validate()
}

// Validate checks a run detail.
func (d CronRunDetail) Validate() error {
	return noNUL("agent", d.Agent, "session_id", d.SessionID, "channel", d.Channel, "chat_id", d.ChatID,
		"delivery_error", d.DeliveryError)
}

// Validate checks the values a detail update sets.
func (u CronRunDetailUpdate) Validate() error {
	var fields []string
	for _, f := range []struct {
		name string
		v    *string
	}{{"agent", u.Agent}, {"session_id", u.SessionID}, {"channel", u.Channel}, {"chat_id", u.ChatID}, {"delivery_error", u.DeliveryError}} {
		if f.v != nil {
			fields = append(fields, f.name, *f.v)
		}
	}
	return noNUL(fields...)
}
