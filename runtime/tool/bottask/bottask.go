// Package bottask implements the dsh-bot task queue and agenda tools,
// bot_task and bot_agenda, as an feature.Feature built on the scheduler.
//
// A task is a store record (store.TaskStore). Every task that is not
// cancelled has a scheduled job ("task-<id>") that runs its prompt in the
// agent: at due_at, at once when there is none, or on the cron ticks of its
// repeat ("day 09:00" becomes "0 0 9 * * *" in the task's tz). A run is, as
// every scheduled run, a fresh session without chat history, so continuity
// maps onto the prompt: "continue" tells the run to read its previous
// conclusion (bot_task list, field result) and build on it; "fresh" tells
// it to start from zero. The task's state follows its job's latest run:
// none yet is queued, claimed or running is running, ok is succeeded, alert
// is awaiting (the alert message is what it waits for), failed or refused
// is failed; cancel deletes the job and is final.
//
// An agenda item (bot_agenda) is a dated entry; one with a time of day in the
// future gets a one-shot reminder job ("agenda-<id>") whose outcome is
// delivered to the chat it was added from. Times are ISO 8601 with a UTC
// offset only: "tomorrow afternoon" is refused with the reason.
//
// In embedded mode jobs live in the store (store.CronStore), as its
// scheduler reads them, and Config.Changed tells that scheduler about each
// change. In cluster mode (Host.Kube set) each job is a CronJob resource in
// the agent's namespace, labelled agent-made like the cron tools' (package
// agentjobs): the operator's scheduler fires it, delivers a reminder's
// outcome through the gateway to spec.target, and records its runs in
// PostgreSQL under the CronJob's name, where the session pod reads them.
// update rewrites the CronJob; cancel, and an agenda item's done or
// remove, delete it. Run records come from the store in both modes.
package bottask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/agentjobs"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Config configures the task and agenda tools.
type Config struct {
	// Clock judges due times; real when nil.
	Clock clock.PassiveClock
	// Changed is told about every scheduled job the tools create, change or
	// delete in embedded mode, so the running scheduler picks it up at once
	// (the same function the cron tools get). Cluster mode's operator
	// watches the CronJobs instead.
	Changed func(ctx context.Context, tenant, name string)
	// TimeZone is the IANA zone of repeat's pinned times when a task gives
	// no tz ("" for UTC).
	TimeZone string
}

// Feature adds bot_task and bot_agenda to agents.
type Feature struct{ cfg Config }

var _ feature.Feature = (*Feature)(nil)

// NewFeature returns the task and agenda tools feature.
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
func (f *Feature) Name() string { return "bottask" }

// Build implements feature.Feature.
func (f *Feature) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	ts, ok := a.Host.Store.(store.TaskStore)
	if !ok {
		return feature.Parts{}, fmt.Errorf("the store (%T) does not keep tasks (store.TaskStore)", a.Host.Store)
	}
	t := &tools{ts: ts, tenant: a.Host.Tenant, agent: a.Spec.Name, spec: a.Spec, cfg: f.cfg}
	// Run records are in the store in both modes; without them a task's
	// state could not follow its runs, so nothing is scheduled.
	if cs, ok := a.Host.Store.(store.CronStore); ok {
		t.runs = cs
		if a.Host.Kube != nil {
			t.jobs = kubeJobs{k: agentjobs.New(a.Host.Kube, a.Host.Tenant, a.Spec.Name, f.cfg.Clock.Now)}
		} else {
			t.jobs = storeJobs{cs: cs, agent: a.Spec.Name, changed: f.cfg.Changed}
		}
	}
	return feature.Parts{Tools: t.all()}, nil
}

// tools is the state bot_task and bot_agenda share for one agent.
type tools struct {
	ts     store.TaskStore
	jobs   jobKeeper       // nil: nothing is scheduled
	runs   store.CronStore // the jobs' run records
	tenant string
	agent  string
	spec   *picobotv1alpha1.Agent // its connectors (spec.channels)
	cfg    Config
}

func (t *tools) all() []tool.Tool {
	return []tool.Tool{
		tool.New("bot_task", taskDescription, t.task,
			tool.Enum("action", "add", "update", "cancel", "list"), tool.Enum("continuity", "continue", "fresh"),
			tool.Range("priority", tool.Bound(store.MinTaskPriority), tool.Bound(store.MaxTaskPriority))),
		tool.New("bot_agenda", agendaDescription, t.agenda, tool.Enum("action", "add", "list", "done", "remove")),
	}
}

const taskDescription = "Task queue: each task runs as a scheduled run of this agent at due_at, at once without one, " +
	"or on every repeat. add needs title; update/cancel need id; list shows state " +
	"(queued/running/awaiting/succeeded/failed/cancelled, awaiting with what it asks) and last result."

type taskArgs struct {
	Action     string `json:"action"`
	ID         string `json:"id,omitempty"`
	Title      string `json:"title,omitempty"`
	Note       string `json:"note,omitempty"`
	Priority   int    `json:"priority,omitempty" jsonschema:"1 (most urgent) to 5; default 3"`
	DueAt      string `json:"due_at,omitempty" jsonschema:"ISO 8601 with offset, e.g. 2026-10-01T18:30:00+08:00"`
	Repeat     string `json:"repeat,omitempty" jsonschema:"hour, day or week; pin a time: day 09:00, week mon 09:00, hour :30"`
	TZ         string `json:"tz,omitempty" jsonschema:"IANA zone of repeat's time"`
	Continuity string `json:"continuity,omitempty" jsonschema:"continue (default: build on the last result) or fresh"`
	Connector  string `json:"connector,omitempty" jsonschema:"deliver results to this bot_connector id, not this chat"`
}

const (
	maxTitle   = 200
	maxNote    = 4000
	jobChannel = protocol.ChannelCron // the session channel of scheduled runs
)

// ctxTenant is ctx scoped to the call's tenant (the agent's when the call
// carries none), and that tenant.
func (t *tools) ctxTenant(ctx context.Context) (context.Context, string) {
	if tn, err := store.TenantFrom(ctx); err == nil {
		return ctx, tn
	}
	return store.WithTenant(ctx, t.tenant), t.tenant
}

func (t *tools) now() time.Time { return t.cfg.Clock.Now() }

func (t *tools) task(ctx context.Context, env tool.Env, a taskArgs) (tool.Result, error) {
	ctx, tenant := t.ctxTenant(ctx)
	switch a.Action {
	case "add":
		return t.addTask(ctx, env, tenant, a)
	case "update":
		return t.updateTask(ctx, env, tenant, a)
	case "cancel":
		return t.cancelTask(ctx, tenant, a)
	case "list":
		return t.listTasks(ctx, tenant, a.ID)
	}
	return tool.Errorf("error: action %q is unknown; use add, update, cancel or list", a.Action), nil
}

func checkText(title, note string) error {
	if n := len([]rune(title)); n > maxTitle {
		return fmt.Errorf("title has %d characters; the limit is %d", n, maxTitle)
	}
	if n := len([]rune(note)); n > maxNote {
		return fmt.Errorf("note has %d characters; the limit is %d", n, maxNote)
	}
	if strings.ContainsRune(title+note, 0) {
		return errors.New("title and note must not contain NUL bytes")
	}
	return nil
}

func (t *tools) addTask(ctx context.Context, env tool.Env, tenant string, a taskArgs) (tool.Result, error) {
	title := strings.TrimSpace(a.Title)
	if title == "" {
		return tool.Errorf("error: add needs a title saying what to do"), nil
	}
	if err := checkText(title, a.Note); err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	task := store.Task{ID: newID("t-"), Agent: env.Agent, Title: title, Note: strings.TrimSpace(a.Note), Priority: a.Priority,
		Continuity: a.Continuity}
	if task.Agent == "" {
		task.Agent = t.agent
	}
	if err := t.setWhen(&task, a.DueAt, a.Repeat, a.TZ); err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	task = task.Defaulted()
	spec, err := t.taskSpec(env, task, true, a.Connector)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if spec != nil {
		task.Job = "task-" + task.ID
	}
	created, err := t.ts.CreateTask(ctx, task)
	if err != nil {
		return tool.Result{}, err
	}
	note := ""
	if spec != nil {
		if err := t.putJob(ctx, tenant, task.Job, created.Title, *spec); err != nil {
			return tool.Result{}, err
		}
	} else {
		note = " It is not scheduled: this runtime has no scheduler for tasks."
	}
	return t.report(fmt.Sprintf("Added task %q.%s", created.ID, note), created)
}

// setWhen parses due_at, repeat and tz into task.
func (t *tools) setWhen(task *store.Task, dueAt, repeat, tz string) error {
	if dueAt != "" {
		due, _, err := parseISO("due_at", dueAt, false)
		if err != nil {
			return err
		}
		due = due.UTC()
		task.DueAt = &due
	}
	if tz != "" || repeat != "" {
		_, name, err := loadZone(tz, t.cfg.TimeZone)
		if err != nil {
			return err
		}
		task.TZ = name
	}
	if repeat != "" {
		task.Repeat = strings.Join(strings.Fields(strings.ToLower(repeat)), " ")
	}
	return nil
}

// taskSpec is the job that runs task; nil when nothing schedules jobs.
// future refuses a due_at in the past (add, or an update that moves it).
// connector, when set, names the bot_connector the outcomes go to.
func (t *tools) taskSpec(env tool.Env, task store.Task, future bool, connector string) (*picobotv1alpha1.CronJobSpec, error) {
	if t.jobs == nil {
		return nil, nil
	}
	now := t.now()
	var sched picobotv1alpha1.Schedule
	switch {
	case task.Repeat != "":
		loc, name, err := loadZone(task.TZ, t.cfg.TimeZone)
		if err != nil {
			return nil, err
		}
		ref := now
		if task.DueAt != nil {
			ref = *task.DueAt
		}
		expr, err := repeatCron(task.Repeat, ref, loc)
		if err != nil {
			return nil, err
		}
		sched = picobotv1alpha1.Schedule{Cron: expr, TZ: name}
	case task.DueAt != nil:
		if future && !task.DueAt.After(now) {
			return nil, fmt.Errorf("due_at %s is in the past (now is %s); give a future time, or omit due_at to run the task now",
				task.DueAt.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		sched.At = new(task.DueAt.UnixMilli())
	default:
		// No due time: the task runs as soon as the scheduler gets to it.
		sched.At = new(now.Add(time.Second).UnixMilli())
	}
	spec := picobotv1alpha1.CronJobSpec{Schedule: sched, Prompt: taskPrompt(task), MissedRunPolicy: picobotv1alpha1.MissedRunOnce}
	var err error
	if spec.Target, spec.DeliveryPolicy, err = t.target(env, connector); err != nil {
		return nil, err
	}
	if agent := task.Agent; agent != "" && agent != scheduler.RootAgent {
		spec.AgentRef = &corev1.LocalObjectReference{Name: agent}
	}
	if err := scheduler.ValidateSpec(spec, now, future); err != nil {
		return nil, err
	}
	return &spec, nil
}

// target delivers run outcomes to the named connector (its chat), or
// else to the chat the call came from; a call from a scheduled run (or
// without a chat) records them only.
func (t *tools) target(env tool.Env, connector string) (*picobotv1alpha1.DeliveryTarget, picobotv1alpha1.DeliveryPolicy, error) {
	ch, chat, _, err := store.ParseSessionID(env.SessionID)
	if err != nil {
		ch, chat = "", "" // no chat's session: nothing to deliver to
	}
	if connector != "" {
		name, chatID, err := agentspec.ConnectorTarget(t.spec, connector, ch, chat)
		if err != nil {
			return nil, "", fmt.Errorf("%w (bot_connector list shows them)", err)
		}
		return &picobotv1alpha1.DeliveryTarget{Channel: name, ChatID: chatID}, picobotv1alpha1.DeliveryAlways, nil
	}
	if ch == jobChannel || ch == "" || chat == "" {
		return nil, picobotv1alpha1.DeliveryNever, nil
	}
	return &picobotv1alpha1.DeliveryTarget{Channel: ch, ChatID: chat}, picobotv1alpha1.DeliveryAlways, nil
}

// connectorTarget reports whether target is one of the agent's connectors
// with its own chat (a task added with connector), which an update without
// connector keeps.
func (t *tools) connectorTarget(target *picobotv1alpha1.DeliveryTarget) bool {
	if target == nil || t.spec == nil {
		return false
	}
	for _, c := range agentspec.Connectors(t.spec) {
		if c.Name == target.Channel && c.ChatID != "" && c.ChatID == target.ChatID {
			return true
		}
	}
	return false
}

// taskPrompt is a run's whole context: the task, and how to treat earlier
// conclusions (continuity).
func taskPrompt(task store.Task) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s from your task queue (priority %d): %s\n", task.ID, task.Priority, task.Title)
	if task.Note != "" {
		fmt.Fprintf(&b, "Note: %s\n", task.Note)
	}
	if task.Continuity == store.ContinuityFresh {
		b.WriteString("\nContinuity fresh: start from zero. Do not read or rely on earlier conclusions of this task; judge anew.\n")
	} else {
		fmt.Fprintf(&b, "\nContinuity continue: first call bot_task with action list and id %s; its result field is your previous "+
			"conclusion (if any). Build on it rather than starting over.\n", task.ID)
	}
	b.WriteString("\nEnd with complete_scheduled_run: ok with your conclusion when done; alert with your question when you need " +
		"the user's answer (the task then shows as awaiting it); failed if you could not do it.")
	return b.String()
}

// putJob creates or replaces the job that runs a task or reminds of an item.
func (t *tools) putJob(ctx context.Context, tenant, name, title string, spec picobotv1alpha1.CronJobSpec) error {
	return t.jobs.put(ctx, tenant, name, title, spec)
}

// dropJob deletes a job; one already gone is fine.
func (t *tools) dropJob(ctx context.Context, tenant, name string) error {
	if t.jobs == nil || name == "" {
		return nil
	}
	return t.jobs.drop(ctx, tenant, name)
}

// getTask returns the task, or a tool error result when there is none.
func (t *tools) getTask(ctx context.Context, id string) (store.Task, *tool.Result, error) {
	if err := checkID("task", id, "bot_task list"); err != nil {
		r := tool.Errorf("error: %v", err)
		return store.Task{}, &r, nil
	}
	task, err := t.ts.GetTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		r := tool.Errorf("error: no task %q; bot_task list shows the tasks", id)
		return store.Task{}, &r, nil
	}
	return task, nil, err
}

func (t *tools) updateTask(ctx context.Context, env tool.Env, tenant string, a taskArgs) (tool.Result, error) {
	task, res, err := t.getTask(ctx, a.ID)
	if res != nil || err != nil {
		return deref(res), err
	}
	if task.State == store.TaskCancelled {
		return tool.Errorf("error: task %q is cancelled; add a new task instead", task.ID), nil
	}
	if a.Title == "" && a.Note == "" && a.Priority == 0 && a.DueAt == "" && a.Repeat == "" && a.TZ == "" && a.Continuity == "" && a.Connector == "" {
		return tool.Errorf("error: update needs at least one of title, note, priority, due_at, repeat, tz, continuity, connector"), nil
	}
	if a.Title != "" {
		task.Title = strings.TrimSpace(a.Title)
	}
	if a.Note != "" {
		task.Note = strings.TrimSpace(a.Note)
	}
	if err := checkText(task.Title, task.Note); err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if a.Priority != 0 {
		task.Priority = a.Priority
	}
	if a.Continuity != "" {
		task.Continuity = a.Continuity
	}
	rescheduled := a.DueAt != "" || a.Repeat != "" || a.TZ != ""
	if err := t.setWhen(&task, a.DueAt, a.Repeat, a.TZ); err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	u := store.TaskUpdate{Title: &task.Title, Note: &task.Note, Priority: &task.Priority, DueAt: task.DueAt, Repeat: &task.Repeat,
		TZ: &task.TZ, Continuity: &task.Continuity, IfVersion: task.Version}
	var spec *picobotv1alpha1.CronJobSpec
	if rescheduled || task.Job != "" {
		if spec, err = t.taskSpec(env, task, rescheduled, a.Connector); err != nil {
			return tool.Errorf("error: %v", err), nil
		}
	}
	if spec != nil && task.Job != "" {
		// Keep the job's schedule unless rescheduled (a one-shot may have
		// fired), and its connector unless another is named; the prompt
		// and otherwise the target follow the task.
		old, ok, err := t.jobs.current(ctx, task.Job)
		if err != nil {
			return tool.Result{}, err
		}
		if ok && !rescheduled {
			spec.Schedule = old.Schedule
		}
		if ok && a.Connector == "" && t.connectorTarget(old.Target) {
			spec.Target, spec.DeliveryPolicy = old.Target, old.DeliveryPolicy
		}
	}
	if spec != nil && rescheduled {
		task.Job = "task-" + task.ID
		u.Job, u.State, u.Awaiting = &task.Job, new(store.TaskQueued), new("")
	}
	updated, err := t.ts.UpdateTask(ctx, task.ID, u)
	if errors.Is(err, store.ErrVersionConflict) {
		return tool.Errorf("error: task %q changed meanwhile (a run finished?); read it with bot_task list and try again", task.ID), nil
	}
	if err != nil {
		return tool.Result{}, err
	}
	if spec != nil {
		if err := t.putJob(ctx, tenant, updated.Job, updated.Title, *spec); err != nil {
			return tool.Result{}, err
		}
	}
	return t.report(fmt.Sprintf("Updated task %q.", updated.ID), updated)
}

func (t *tools) cancelTask(ctx context.Context, tenant string, a taskArgs) (tool.Result, error) {
	task, res, err := t.getTask(ctx, a.ID)
	if res != nil || err != nil {
		return deref(res), err
	}
	if task.State == store.TaskCancelled {
		return t.report(fmt.Sprintf("Task %q is already cancelled.", task.ID), task)
	}
	if err := t.dropJob(ctx, tenant, task.Job); err != nil {
		return tool.Result{}, err
	}
	updated, err := t.ts.UpdateTask(ctx, task.ID, store.TaskUpdate{State: new(store.TaskCancelled), Awaiting: new("")})
	if err != nil {
		return tool.Result{}, err
	}
	return t.report(fmt.Sprintf("Cancelled task %q; it will not run again (a run already in progress finishes).", updated.ID), updated)
}

func (t *tools) listTasks(ctx context.Context, tenant, id string) (tool.Result, error) {
	var tasks []store.Task
	if id != "" {
		task, res, err := t.getTask(ctx, id)
		if res != nil || err != nil {
			return deref(res), err
		}
		tasks = []store.Task{task}
	} else {
		var err error
		if tasks, err = t.ts.ListTasks(ctx, store.TaskFilter{Agent: t.agent}); err != nil {
			return tool.Result{}, err
		}
	}
	out := make([]taskOut, 0, len(tasks))
	for _, task := range tasks {
		task, err := t.refresh(ctx, tenant, task)
		if err != nil {
			return tool.Result{}, err
		}
		out = append(out, toOut(task))
	}
	if len(out) == 0 {
		return tool.Text("No tasks."), nil
	}
	b, err := json.Marshal(map[string]any{"tasks": out})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode tasks: %w", err)
	}
	return tool.Text(string(b)), nil
}

// refresh brings a task's state in line with its job's latest run and
// stores the change.
func (t *tools) refresh(ctx context.Context, tenant string, task store.Task) (store.Task, error) {
	if t.jobs == nil || task.Job == "" || task.State == store.TaskCancelled {
		return task, nil
	}
	runs, err := t.runs.ListDetailedCronRuns(ctx, scheduler.JobKey(tenant, task.Job), 1)
	if err != nil {
		return task, fmt.Errorf("failed to read the runs of task %q: %w", task.ID, err)
	}
	// A queued task was (re)scheduled after any run older than its update.
	if len(runs) == 0 || task.State == store.TaskQueued && runs[0].ScheduledTime.Before(task.UpdatedAt) {
		return task, nil
	}
	state, awaiting, result := fromRun(runs[0].CronRun, task.Result)
	if state == task.State && awaiting == task.Awaiting && result == task.Result {
		return task, nil
	}
	updated, err := t.ts.UpdateTask(ctx, task.ID, store.TaskUpdate{State: &state, Awaiting: &awaiting, Result: &result,
		IfVersion: task.Version})
	if errors.Is(err, store.ErrVersionConflict) {
		return t.ts.GetTask(ctx, task.ID)
	}
	return updated, err
}

// fromRun maps a run record onto a task state.
func fromRun(r store.CronRun, prevResult string) (state store.TaskState, awaiting, result string) {
	if r.State != store.CronDone {
		return store.TaskRunning, "", prevResult
	}
	switch r.Outcome {
	case store.OutcomeOK:
		return store.TaskSucceeded, "", r.Message
	case store.OutcomeAlert:
		return store.TaskAwaiting, r.Message, r.Message
	}
	return store.TaskFailed, "", r.Message
}

type taskOut struct {
	ID         string `json:"id"`
	Title      string `json:"title"`
	Note       string `json:"note,omitempty"`
	Priority   int    `json:"priority"`
	State      string `json:"state"`
	Awaiting   string `json:"awaiting,omitempty"`
	DueAt      string `json:"due_at,omitempty"`
	Repeat     string `json:"repeat,omitempty"`
	TZ         string `json:"tz,omitempty"`
	Continuity string `json:"continuity"`
	Result     string `json:"result,omitempty"`
}

func toOut(t store.Task) taskOut {
	o := taskOut{ID: t.ID, Title: t.Title, Note: t.Note, Priority: t.Priority, State: string(t.State), Awaiting: t.Awaiting,
		Repeat: t.Repeat, Continuity: t.Continuity, Result: t.Result}
	if t.Repeat != "" {
		o.TZ = t.TZ
		if o.TZ == "" {
			o.TZ = "UTC"
		}
	}
	if t.DueAt != nil {
		o.DueAt = t.DueAt.Format(time.RFC3339)
	}
	return o
}

func (t *tools) report(sentence string, task store.Task) (tool.Result, error) {
	b, err := json.Marshal(toOut(task))
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode task %q: %w", task.ID, err)
	}
	return tool.Text(sentence + "\n" + string(b)), nil
}

func deref(r *tool.Result) tool.Result {
	if r == nil {
		return tool.Result{}
	}
	return *r
}
