package scheduler

import (
	"context"
	"errors"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/store"
)

// RootAgent stands for the root agent of a job's tenant in jobs naming no
// agent (and in the cron tools' agent_id). Options.RootAgent resolves it to
// an agent by the documented rule (agentspec.RootAgent); without a resolver
// it is the agent called "root". A run whose root agent cannot be found is
// recorded as failed, saying why.
const RootAgent = "root"

// ErrUnknownAgent is returned (wrapped) by a Runner when the run's agent does
// not exist; the run is recorded as failed with the error's message.
var ErrUnknownAgent = errors.New("unknown agent")

// Job is one schedule the scheduler fires. Sources (the operator's CronJob
// informer, embedded mode's manifests and store) turn their records into
// Jobs and hand them to Scheduler.Upsert.
type Job struct {
	// Tenant scopes the job's run records (the namespace in cluster mode).
	Tenant string
	// Name is unique in the tenant; run records name the job Key().
	Name string
	// DisplayName is the human name shown in deliveries; Name when empty.
	DisplayName string
	Spec        picobotv1alpha1.CronJobSpec
	// Created is where a job without runs starts counting missed ticks, and
	// anchors `every` intervals unless Anchor is set.
	Created time.Time
	// Anchor, when set, anchors `every` intervals instead of Created (jobs
	// of a manifests folder have no creation time that survives restarts,
	// so their grid starts at a fixed point).
	Anchor time.Time
	// NotBefore: ticks at or before it are never treated as missed (the job
	// was resumed or rescheduled then, so earlier ticks were not due).
	NotBefore time.Time
	// Version changes whenever Spec does (metadata.generation, a store
	// version); an Upsert of the version already scheduled changes nothing.
	Version string
	// Origin is the W3C traceparent of the turn's span that made the job
	// (tracing.Traceparent; empty for jobs of manifests, or made with
	// tracing off): each fire's trace links to it.
	Origin string
}

// Key is the job's name in run records: "<tenant>/<name>".
func (j *Job) Key() string { return JobKey(j.Tenant, j.Name) }

// JobKey is the run records' name of a job.
func JobKey(tenant, name string) string { return tenant + "/" + name }

// Agent is the agent the job's runs go to: spec.agentRef, else RootAgent
// (resolved to the tenant's root agent when the run starts).
func (j *Job) Agent() string {
	if j.Spec.AgentRef != nil && j.Spec.AgentRef.Name != "" {
		return j.Spec.AgentRef.Name
	}
	return RootAgent
}

func (j *Job) title() string {
	if j.DisplayName != "" {
		return j.DisplayName
	}
	return j.Name
}

func (j *Job) anchor() time.Time {
	if !j.Anchor.IsZero() {
		return j.Anchor
	}
	return j.Created
}

func (j *Job) suspended() bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// Runner executes scheduled runs. A run is a fresh session of the target
// agent, without chat history, whose prompt carries its own context. The
// agent ends it by calling complete_scheduled_run exactly once; the Runner
// reports that call's outcome and message. Fail closed: a run that ends
// without the call, calls it more than once, or cannot start, is
// OutcomeFailed with a message saying why.
//
// Run blocks until the run has ended (or ctx ends it). The embedded runner
// (package localrun) runs the turn in-process; a cluster runner publishes
// the request to a session pod of the agent and waits for its result.
// Implementations must be safe for concurrent use.
type Runner interface {
	Run(ctx context.Context, req RunRequest) (RunResult, error)
}

// RunRequest is one run to execute. ctx carries store.WithTenant(Tenant).
type RunRequest struct {
	Tenant string
	// Job is the job's key ("<tenant>/<name>"); JobName its display name.
	Job, JobName string
	// RunID identifies the run record; a runner may use it for idempotency.
	RunID         string
	ScheduledTime time.Time
	// Agent is the agent to run: the job's agentRef, else the tenant's root
	// agent (RootAgent when Options.RootAgent is not set).
	Agent  string
	Prompt string
}

// RunResult is how a run ended.
type RunResult struct {
	// Outcome is ok, alert, failed or refused.
	Outcome store.CronOutcome
	// Message is the complete_scheduled_run message (or why the run failed).
	Message string
	// SessionID is the session the run used, when one was created.
	SessionID string
}

// Deliverer sends a run's outcome to its target channel and chat, and
// returns once the channel has confirmed or refused it (the outbound
// dispatcher implements it). An error is recorded on the run as a failed
// delivery.
type Deliverer interface {
	Deliver(ctx context.Context, n Notice) error
}

// Notice is one outcome to deliver.
type Notice struct {
	// ID is stable for the run ("cron:<run id>"): the delivery's
	// idempotency key and the id of the store.Delivery a deliverer records.
	// A delivery retried after a restart reuses it.
	ID      string
	Tenant  string
	Job     string
	RunID   string
	Channel string
	ChatID  string
	Outcome store.CronOutcome
	// Text is what the user reads: the job's name, the outcome and the
	// run's message.
	Text string
}

// RunStore is the state the scheduler reads and writes: store.CronStore,
// implemented by both stores.
type RunStore = store.CronStore

// Annotations the cron tools put on the CronJobs they make, which the
// operator reads into a Job.
const (
	// AnnotationDisplayName holds a job's human name (any characters; the
	// object name is a DNS name derived from it).
	AnnotationDisplayName = "agents.picobot.io/display-name"
	// AnnotationNotBefore holds the RFC 3339 time the job was last enabled or
	// rescheduled (Job.NotBefore): a scheduler restarting later does not
	// count the ticks before it as missed.
	AnnotationNotBefore = "agents.picobot.io/not-before"
	// AnnotationOrigin holds the W3C traceparent of the tool call that made
	// the job (Job.Origin), so its fires' traces link back to that turn.
	AnnotationOrigin = "agents.picobot.io/origin-traceparent"
)
