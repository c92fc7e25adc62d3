// Package cron implements the scheduling tools — cron_add, cron_list,
// cron_runs, cron_update, cron_remove, cron_enable and cron_disable — as an
// feature.Feature. The host adds the feature only when its scheduler is
// enabled, so agents see the tools only when something will fire their jobs.
//
// In cluster mode (Host.Kube set) jobs are CronJob resources in the agent's
// namespace, labelled agent-made, so `kubectl get pcj` shows them; CronJobs
// without the label come from manifests and are read-only to the tools. In
// embedded mode jobs are store records beside the manifests folder's
// (read-only) CronJobs, and every change is passed to the running scheduler.
// Run records come from the store in both modes. Bad input — an invalid cron
// expression, an unknown time zone, every below 60 s, a schedule that never
// fires, an `at` in the past on create, update or enable — is a tool error
// saying what to change.
package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/agentjobs"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Config configures the cron tools.
type Config struct {
	// Clock judges `at` times and next runs; real when nil.
	Clock clock.PassiveClock
	// Manifest returns a tenant's read-only CronJobs (embedded mode's
	// manifests folder); nil when there are none.
	Manifest func(tenant string) []picobotv1alpha1.CronJob
	// Changed is told about every job the tools create, change or delete in
	// embedded mode, so the scheduler picks it up at once.
	Changed func(ctx context.Context, tenant, name string)
	// Agents lists the agents a job may name in embedded mode (cluster mode
	// lists the namespace's Agents); nil skips the check.
	Agents func(tenant string) []string
}

// Feature adds the cron tools to agents.
type Feature struct{ cfg Config }

var _ feature.Feature = (*Feature)(nil)

// NewFeature returns the cron tools feature; add it only when the host runs
// a scheduler.
func NewFeature(cfg Config) *Feature {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Changed == nil {
		cfg.Changed = func(context.Context, string, string) {}
	}
	return &Feature{cfg: cfg}
}

// Name implements feature.Feature.
func (f *Feature) Name() string { return "cron" }

// Build implements feature.Feature.
func (f *Feature) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	runs, ok := a.Host.Store.(store.CronStore)
	if !ok {
		return feature.Parts{}, fmt.Errorf("the store (%T) does not keep scheduled jobs and runs (store.CronStore)", a.Host.Store)
	}
	var b backend
	if a.Host.Kube != nil {
		b = &kubeBackend{jobs: agentjobs.New(a.Host.Kube, a.Host.Tenant, a.Spec.Name, f.cfg.Clock.Now), c: a.Host.Kube, ns: a.Host.Tenant}
	} else {
		b = &storeBackend{cs: runs, tenant: a.Host.Tenant, agent: a.Spec.Name, manifest: f.cfg.Manifest, changed: f.cfg.Changed, agents: f.cfg.Agents}
	}
	t := &tools{b: b, runs: runs, tenant: a.Host.Tenant, clock: f.cfg.Clock, maxJobs: a.Host.MaxCronJobs}
	return feature.Parts{Tools: t.all()}, nil
}

// tools is the state the seven tools share for one agent.
type tools struct {
	b      backend
	runs   store.CronStore
	tenant string
	clock  clock.PassiveClock
	// maxJobs is the tenant's maxCronJobs; nil or not ok: no cap.
	maxJobs func(ctx context.Context, tenant string) (int32, bool)
}

func (t *tools) all() []tool.Tool {
	return []tool.Tool{
		tool.New("cron_add", addDescription, t.add,
			tool.Enum("delivery_policy", "always", "on_alert", "never"),
			tool.Enum("missed_run_policy", "skip", "run_once", "catch_up"), scheduleEnum),
		tool.New("cron_list", "List scheduled jobs with their next and last run. status: all (default), enabled or disabled.", t.list,
			tool.ReadOnly(), tool.Enum("status", "all", "enabled", "disabled")),
		tool.New("cron_runs", "Show a job's run records, newest first: outcome, message and delivery result, including suppressed (silent) ones.",
			t.runsOf, tool.ReadOnly(), tool.Range("limit", tool.Bound(1), tool.Bound(maxRuns))),
		newUpdateTool(t),
		tool.New("cron_remove", "Delete a job for good. Refused while one of its runs or deliveries is pending.", t.remove),
		tool.New("cron_enable", "Enable a job; its next run is computed from now.", t.enable),
		tool.New("cron_disable", "Disable a job without deleting it.", t.disable),
	}
}

const addDescription = "Schedule a prompt to run at a time or repeatedly, as a fresh session of an agent without chat history " +
	"(the prompt must carry all context). schedule: {type:at, at:unix ms} | {type:every, every_ms:>=60000} | " +
	"{type:cron, expr:'sec min hour day month weekday', tz}. The run ends with complete_scheduled_run; its outcome goes to " +
	"channel/chat_id (default: this chat) by delivery_policy: always (default), on_alert (not ok) or never."

var scheduleEnum = tool.Adjust(func(s *jsonschema.Schema) {
	if p := s.Properties["schedule"]; p != nil {
		if typ := p.Properties["type"]; typ != nil {
			typ.Enum = []any{"at", "every", "cron"}
		}
	}
})

const (
	maxRuns        = 50
	defaultRuns    = 10
	maxNameLength  = 200
	cronRunChannel = protocol.ChannelCron
)

type addArgs struct {
	Schedule        scheduleArg `json:"schedule"`
	Prompt          string      `json:"prompt" jsonschema:"the full instructions of each run"`
	Channel         string      `json:"channel,omitempty" jsonschema:"channel the outcome goes to (default: this chat's)"`
	ChatID          string      `json:"chat_id,omitempty" jsonschema:"chat the outcome goes to (default: this chat)"`
	Name            string      `json:"name,omitempty" jsonschema:"a short human name"`
	AgentID         string      `json:"agent_id,omitempty" jsonschema:"agent that runs it (default: Root)"`
	DeliveryPolicy  string      `json:"delivery_policy,omitempty"`
	MissedRunPolicy string      `json:"missed_run_policy,omitempty" jsonschema:"ticks missed while down: skip, run_once (default) or catch_up"`
}

// toolErr is the result for input the model can fix.
func toolErr(err error) tool.Result { return tool.Errorf("error: %v", err) }

// fail turns a backend error into a tool result (input the model can fix) or
// a Go error (everything else).
func (t *tools) fail(id string, err error) (tool.Result, error) {
	switch {
	case errors.Is(err, errNoJob):
		return tool.Errorf("error: no job %q; cron_list shows the jobs", id), nil
	case isToolError(err):
		return toolErr(err), nil
	}
	return tool.Result{}, err
}

func (t *tools) now() time.Time { return t.clock.Now() }

// tenantOf is the tenant of the call (the gateway may serve several).
func (t *tools) tenantOf(ctx context.Context) string {
	if tn, err := store.TenantFrom(ctx); err == nil {
		return tn
	}
	return t.tenant
}

func (t *tools) add(ctx context.Context, env tool.Env, a addArgs) (tool.Result, error) {
	sched, err := a.Schedule.toSchedule()
	if err != nil {
		return toolErr(err), nil
	}
	name := strings.TrimSpace(a.Name)
	if utf8.RuneCountInString(name) > maxNameLength {
		return tool.Errorf("error: name has more than %d characters", maxNameLength), nil
	}
	spec := picobotv1alpha1.CronJobSpec{Schedule: sched, Prompt: a.Prompt,
		DeliveryPolicy: picobotv1alpha1.DeliveryPolicy(a.DeliveryPolicy), MissedRunPolicy: picobotv1alpha1.MissedRunPolicy(a.MissedRunPolicy)}
	if spec.DeliveryPolicy == "" {
		spec.DeliveryPolicy = picobotv1alpha1.DeliveryAlways
	}
	if spec.MissedRunPolicy == "" {
		spec.MissedRunPolicy = picobotv1alpha1.MissedRunOnce
	}
	target, err := targetFor(env, a.Channel, a.ChatID, spec.DeliveryPolicy)
	if err != nil {
		return toolErr(err), nil
	}
	spec.Target = target
	if res, ok, err := t.setAgent(ctx, &spec, a.AgentID); !ok {
		return res, err
	}
	if err := scheduler.ValidateSpec(spec, t.now(), true); err != nil {
		return toolErr(err), nil
	}
	if res, ok, err := t.withinCap(ctx); !ok {
		return res, err
	}
	j, err := t.b.create(ctx, &job{ID: newID(name), Name: name, Agent: env.Agent, Spec: spec})
	if err != nil {
		return t.fail("", err)
	}
	return t.report(fmt.Sprintf("Created job %q.", j.ID), j)
}

// targetFor is the delivery target: the given channel and chat, else the
// current chat. A job that delivers needs one.
func targetFor(env tool.Env, channel, chatID string, policy picobotv1alpha1.DeliveryPolicy) (*picobotv1alpha1.DeliveryTarget, error) {
	channel, chatID = strings.TrimSpace(channel), strings.TrimSpace(chatID)
	if channel == "" && chatID == "" {
		if ch, chat, _, err := store.ParseSessionID(env.SessionID); err == nil && ch != cronRunChannel {
			channel, chatID = ch, chat
		}
	}
	switch {
	case channel == "" && chatID == "" && policy == picobotv1alpha1.DeliveryNever:
		return nil, nil
	case channel == "" && chatID == "":
		return nil, errors.New("no target: give channel and chat_id (this session has no chat to default to), or delivery_policy never")
	case channel == "" || chatID == "":
		return nil, errors.New("give both channel and chat_id, or neither to deliver to this chat")
	}
	return &picobotv1alpha1.DeliveryTarget{Channel: channel, ChatID: chatID}, nil
}

// setAgent points spec at agent ("" or "root": the Root agent); ok is false
// with the result to return when the agent does not exist.
func (t *tools) setAgent(ctx context.Context, spec *picobotv1alpha1.CronJobSpec, agent string) (tool.Result, bool, error) {
	agent = strings.TrimSpace(agent)
	if agent == "" || agent == scheduler.RootAgent {
		spec.AgentRef = nil
		return tool.Result{}, true, nil
	}
	names, err := t.b.agentNames(ctx)
	if err != nil {
		return tool.Result{}, false, err
	}
	if names != nil && !slices.Contains(names, agent) {
		return tool.Errorf("error: no agent %q; known agents: %s (omit agent_id for Root)", agent, strings.Join(names, ", ")), false, nil
	}
	spec.AgentRef = &corev1.LocalObjectReference{Name: agent}
	return tool.Result{}, true, nil
}

// report is a short sentence plus the job as JSON.
func (t *tools) report(sentence string, j *job) (tool.Result, error) {
	out := j.out(t.now(), true)
	if out.NextRun != "" {
		sentence += " Next run: " + out.NextRun + "."
	} else if !out.Enabled {
		sentence += " It is disabled."
	} else {
		sentence += " It will not run again."
	}
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode job %q: %w", j.ID, err)
	}
	return tool.Text(sentence + "\n" + string(b)), nil
}

type listArgs struct {
	Status string `json:"status,omitempty"`
}

func (t *tools) list(ctx context.Context, _ tool.Env, a listArgs) (tool.Result, error) {
	jobs, err := t.b.list(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	now := t.now()
	out := []jobOut{}
	for _, j := range jobs {
		if (a.Status == "enabled" && !j.enabled()) || (a.Status == "disabled" && j.enabled()) {
			continue
		}
		if j.LastRun == nil {
			if runs, err := t.runs.ListDetailedCronRuns(ctx, scheduler.JobKey(t.tenantOf(ctx), j.ID), 1); err == nil && len(runs) > 0 {
				j.LastRun = &runs[0].CronRun
			}
		}
		out = append(out, j.out(now, false))
	}
	if len(out) == 0 {
		return tool.Text("No scheduled jobs."), nil
	}
	b, err := json.Marshal(map[string]any{"jobs": out})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode jobs: %w", err)
	}
	return tool.Text(string(b)), nil
}

type runsArgs struct {
	JobID string `json:"job_id"`
	RunID string `json:"run_id,omitempty" jsonschema:"one run only"`
	Limit int    `json:"limit,omitempty" jsonschema:"runs to show (default 10)"`
}

type runOut struct {
	RunID     string      `json:"run_id"`
	Scheduled string      `json:"scheduled"`
	State     string      `json:"state"`
	Outcome   string      `json:"outcome,omitempty"`
	Message   string      `json:"message,omitempty"`
	Started   string      `json:"started,omitempty"`
	Finished  string      `json:"finished,omitempty"`
	Agent     string      `json:"agent,omitempty"`
	SessionID string      `json:"session_id,omitempty"`
	Delivery  deliveryOut `json:"delivery"`
}

type deliveryOut struct {
	Status  string `json:"status,omitempty"`
	Channel string `json:"channel,omitempty"`
	ChatID  string `json:"chat_id,omitempty"`
	Error   string `json:"error,omitempty"`
}

func toRunOut(r store.DetailedCronRun) runOut {
	o := runOut{RunID: r.RunID, Scheduled: stamp(r.ScheduledTime), State: runState(r.CronRun), Outcome: string(r.Outcome),
		Message: r.Message, Agent: r.Detail.Agent, SessionID: r.Detail.SessionID,
		Delivery: deliveryOut{Status: string(r.Delivery), Channel: r.Detail.Channel, ChatID: r.Detail.ChatID, Error: r.Detail.DeliveryError}}
	if r.StartedAt != nil {
		o.Started = stamp(*r.StartedAt)
	}
	if r.FinishedAt != nil {
		o.Finished = stamp(*r.FinishedAt)
	}
	return o
}

func (t *tools) runsOf(ctx context.Context, _ tool.Env, a runsArgs) (tool.Result, error) {
	if err := checkID(a.JobID); err != nil {
		return toolErr(err), nil
	}
	key := scheduler.JobKey(t.tenantOf(ctx), a.JobID)
	var runs []store.DetailedCronRun
	if a.RunID != "" {
		r, err := t.runs.GetDetailedCronRun(ctx, a.RunID)
		if errors.Is(err, store.ErrNotFound) || err == nil && r.Job != key {
			return tool.Errorf("error: job %q has no run %q; cron_runs without run_id lists its runs", a.JobID, a.RunID), nil
		}
		if err != nil {
			return tool.Result{}, err
		}
		runs = append(runs, r)
	} else {
		limit := a.Limit
		if limit <= 0 {
			limit = defaultRuns
		}
		var err error
		if runs, err = t.runs.ListDetailedCronRuns(ctx, key, min(limit, maxRuns)); err != nil {
			return tool.Result{}, err
		}
	}
	if len(runs) == 0 {
		if _, err := t.b.get(ctx, a.JobID); err != nil {
			return t.fail(a.JobID, err)
		}
		return tool.Text(fmt.Sprintf("Job %q has not run yet.", a.JobID)), nil
	}
	out := make([]runOut, len(runs))
	for i, r := range runs {
		out[i] = toRunOut(r)
	}
	b, err := json.Marshal(map[string]any{"job_id": a.JobID, "runs": out})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode runs: %w", err)
	}
	return tool.Text(string(b)), nil
}

type idArgs struct {
	JobID string `json:"job_id"`
}

func (t *tools) remove(ctx context.Context, _ tool.Env, a idArgs) (tool.Result, error) {
	if err := checkID(a.JobID); err != nil {
		return toolErr(err), nil
	}
	j, err := t.b.get(ctx, a.JobID)
	if err != nil {
		return t.fail(a.JobID, err)
	}
	if j.ReadOnly != "" {
		return toolErr(&readOnlyError{id: j.ID, why: j.ReadOnly}), nil
	}
	if j.ID == scheduler.MaintenanceJobName {
		return tool.Errorf("error: %q is the daily maintenance job, which the scheduler creates again at its next start; disable it with cron_disable instead", j.ID), nil
	}
	open, err := t.runs.ListUnfinishedCronRuns(ctx, scheduler.JobKey(t.tenantOf(ctx), j.ID), 1)
	if err != nil {
		return tool.Result{}, err
	}
	if len(open) > 0 {
		r := open[0]
		what := "is still running"
		if r.Outcome != "" {
			what = "has a delivery pending"
		}
		return tool.Errorf("error: run %s of job %q (scheduled %s) %s; remove the job once it has finished (cron_runs shows it), or cron_disable it now",
			r.RunID, j.ID, stamp(r.ScheduledTime), what), nil
	}
	if err := t.b.remove(ctx, j.ID); err != nil {
		return t.fail(j.ID, err)
	}
	return tool.Text(fmt.Sprintf("Removed job %q; its run records stay for cron_runs.", j.ID)), nil
}

func (t *tools) enable(ctx context.Context, _ tool.Env, a idArgs) (tool.Result, error) {
	return t.setEnabled(ctx, a.JobID, true)
}

func (t *tools) disable(ctx context.Context, _ tool.Env, a idArgs) (tool.Result, error) {
	return t.setEnabled(ctx, a.JobID, false)
}

func (t *tools) setEnabled(ctx context.Context, id string, enabled bool) (tool.Result, error) {
	if err := checkID(id); err != nil {
		return toolErr(err), nil
	}
	cur, err := t.b.get(ctx, id)
	if err != nil {
		return t.fail(id, err)
	}
	verb := map[bool]string{true: "enabled", false: "disabled"}[enabled]
	if cur.ReadOnly != "" {
		return toolErr(&readOnlyError{id: id, why: cur.ReadOnly}), nil
	}
	if cur.enabled() == enabled {
		return t.report(fmt.Sprintf("Job %q is already %s.", id, verb), cur)
	}
	j, err := t.b.update(ctx, id, func(j *job) error {
		if enabled {
			j.Spec.Suspend = nil
			if err := scheduler.ValidateSpec(j.Spec, t.now(), true); err != nil {
				return &invalidError{msg: err.Error() + "; give the job a new schedule with cron_update first"}
			}
		} else {
			j.Spec.Suspend = new(true)
		}
		return nil
	})
	if err != nil {
		return t.fail(id, err)
	}
	return t.report(fmt.Sprintf("Job %q is %s.", id, verb), j)
}

// withinCap refuses a new job when the tenant's CronJobs (the daily
// routine-maintenance job excepted, as the operator counts them) already
// fill its maxCronJobs: the model is told why, rather than a job being made
// that the operator would not schedule (cluster mode) or that would exceed
// the quota manifest (embedded mode).
func (t *tools) withinCap(ctx context.Context) (tool.Result, bool, error) {
	if t.maxJobs == nil {
		return tool.Result{}, true, nil
	}
	limit, ok := t.maxJobs(ctx, t.tenant)
	if !ok {
		return tool.Result{}, true, nil
	}
	jobs, err := t.b.list(ctx)
	if err != nil {
		res, err := t.fail("", err)
		return res, false, err
	}
	n := 0
	for _, j := range jobs {
		if j.ID != scheduler.MaintenanceJobName {
			n++
		}
	}
	if n >= int(limit) {
		return tool.Errorf("error: this workspace has %d scheduled jobs, the most its quota allows (maxCronJobs %d); remove one with cron_remove, or ask the platform team to raise the cap", n, limit), false, nil
	}
	return tool.Result{}, true, nil
}
