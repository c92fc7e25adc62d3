// Package delegate implements the delegate tool: an agent hands explicit,
// self-contained tasks to the named sub-agents its spec.delegates allows.
// Each task runs as a fresh session of the target Agent — with its own model,
// keys and tools — that sees only the task and the context the caller wrote,
// never the caller's history. Every run is recorded in agent_runs.
//
// A foreground delegation waits for its runs (a batch runs concurrently and
// answers in request order), and cancelling the calling turn (/stop) cancels
// them. A background delegation (the root agent only) records each run with
// a reserved completion slot in the calling session and returns at once;
// when a run ends, the session gets a continuation turn that processes its
// result (background.go). agent_task (task.go) reads and cancels runs, and
// background runs talk to their parent with emit_signal (signal.go).
package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/todo"
)

// Name is the tool's name.
const Name = "delegate"

// Limits of Config (defaults).
const (
	// DefaultMaxDepth is how deep delegations nest: the root agent's
	// delegation runs at depth 1, a sub-agent's at 2, and so on.
	DefaultMaxDepth = 3
	// DefaultMaxFanOut caps the runs of one call (a tasks batch).
	DefaultMaxFanOut = 8
)

// Modes.
const (
	ModeForeground = "foreground"
	ModeBackground = "background"
)

// Request is one delegated run for a Runner.
type Request struct {
	// RunID names the run (its agent_runs record and its session's chat).
	RunID string
	// Agent is the target Agent; Parent the delegating one, in session
	// ParentSession.
	Agent, Parent, ParentSession string
	// Text is the run's only user message: the task and its context.
	Text string
	// Tools, when not nil, is the narrowed tool set of the run.
	Tools []string
	// Mode is ModeBackground for a background run (which gets emit_signal);
	// empty or ModeForeground otherwise.
	Mode string
	// Spawn, set for a run sessions_spawn started, carries what that tool
	// adds to a background run.
	Spawn *Spawn
}

// Spawn is what sessions_spawn adds to a background run.
type Spawn struct {
	// Label names the run for people (its result's message shows it).
	Label string `json:"label,omitempty"`
	// TimeoutSeconds, when positive, stops the run after that long
	// (runTimeoutSeconds); it then ends as failed.
	TimeoutSeconds int `json:"run_timeout_seconds,omitempty"`
	// Delete: the run's session is deleted once the run has ended
	// (cleanup delete).
	Delete bool `json:"delete,omitempty"`
}

// Runner runs delegated tasks as sessions of their target Agents.
type Runner interface {
	// Tools returns the effective tools the target Agent's sub-agent runs
	// get (without todo, which sub-agents never get).
	Tools(ctx context.Context, agent string) ([]string, error)
	// Run runs one task as a fresh session of the target Agent and returns
	// its final answer and session. ctx ending cancels it.
	Run(ctx context.Context, req Request) (answer, sessionID string, err error)
}

// RunStore records runs (agent_runs).
type RunStore interface {
	CreateAgentRun(ctx context.Context, r store.AgentRun) (store.AgentRun, error)
	UpdateAgentRun(ctx context.Context, id string, u store.AgentRunUpdate) (store.AgentRun, error)
}

// Config configures the tool of one agent.
type Config struct {
	// Agent is the delegating Agent; Edges its spec.delegates.
	Agent string
	Edges []picobotv1alpha1.Delegate
	// Runner runs the tasks; nil answers every call with Unavailable.
	Runner Runner
	// Unavailable says why delegation does not work here (with Runner nil).
	Unavailable string
	Runs        RunStore
	// Background starts background runs; nil answers mode background with
	// an error saying it is not available here.
	Background Background
	// Plans is the sessions' todo plans: plan_item_id binds a run to an
	// item of the calling session's active plan. Nil records the id only.
	Plans todo.Store
	// Active registers the runs in progress in this process, so agent_task
	// can cancel them; a private registry when nil.
	Active *ActiveRuns
	// MaxDepth and MaxFanOut default to DefaultMaxDepth and DefaultMaxFanOut.
	MaxDepth, MaxFanOut int
}

// Item is one task of a tasks batch.
type Item struct {
	Target       string   `json:"target,omitempty" jsonschema:"the sub-agent (default: the call's target)"`
	Task         string   `json:"task" jsonschema:"a clear, self-contained, checkable task"`
	Context      string   `json:"context,omitempty" jsonschema:"explicit facts the sub-agent needs; it does not see this conversation"`
	AllowedTools []string `json:"allowed_tools,omitempty" jsonschema:"narrow the sub-agent's tools to these"`
	PlanItemID   string   `json:"plan_item_id,omitempty" jsonschema:"the todo plan item this run works on"`
}

// Args are the arguments of delegate.
type Args struct {
	Target       string   `json:"target,omitempty" jsonschema:"the sub-agent to hand the task to (one of your delegates)"`
	Task         string   `json:"task,omitempty" jsonschema:"a clear, self-contained, checkable task (single delegation)"`
	Context      string   `json:"context,omitempty" jsonschema:"explicit facts the sub-agent needs; it does not see this conversation"`
	Mode         string   `json:"mode,omitempty" jsonschema:"foreground (default): wait for the result; background: return at once with the run ids, each result comes back later in a turn of its own"`
	Tasks        []Item   `json:"tasks,omitempty" jsonschema:"several tasks run concurrently; results come back in this order (target, context and allowed_tools default to the call's)"`
	AllowedTools []string `json:"allowed_tools,omitempty" jsonschema:"narrow the sub-agent's tools to these (never widen)"`
	PlanItemID   string   `json:"plan_item_id,omitempty" jsonschema:"the todo plan item this run works on"`
}

// Result is one run's outcome, as the model reads it.
type Result struct {
	Target     string `json:"target"`
	RunID      string `json:"run_id,omitempty"`
	PlanItemID string `json:"plan_item_id,omitempty"`
	// Status is succeeded, failed or cancelled; running for a background
	// run just started.
	Status string `json:"status"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// New returns the delegate tool of one agent.
func New(cfg Config) tool.Tool {
	if cfg.MaxDepth <= 0 {
		cfg.MaxDepth = DefaultMaxDepth
	}
	if cfg.MaxFanOut <= 0 {
		cfg.MaxFanOut = DefaultMaxFanOut
	}
	if cfg.Active == nil {
		cfg.Active = NewActiveRuns()
	}
	d := &delegator{cfg: cfg}
	return tool.New(Name, d.description(), d.run, tool.Enum("mode", ModeForeground, ModeBackground))
}

type delegator struct{ cfg Config }

func (d *delegator) description() string {
	var b strings.Builder
	b.WriteString("Hand self-contained tasks to a sub-agent and wait for its answer. It sees only task and context, never this conversation. " +
		"tasks[] runs several at once (results in request order). mode background returns at once with run ids; each run's result comes " +
		"back later as a message of its own, which you then process. Sub-agents:")
	for _, e := range d.cfg.Edges {
		b.WriteString(" " + e.Name)
		if e.Description != "" {
			b.WriteString(" (" + e.Description + ")")
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// depthKey carries how deep the current turn is in a delegation chain.
type depthKey struct{}

// WithDepth marks ctx as the context of a sub-agent run at depth n (the
// Runner does it for the runs it starts).
func WithDepth(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, depthKey{}, n)
}

// Depth is the delegation depth of ctx's turn: 0 for a turn nobody delegated.
func Depth(ctx context.Context) int {
	n, _ := ctx.Value(depthKey{}).(int)
	return n
}

// runKey carries the agent_runs id of the run a turn belongs to.
type runKey struct{}

// WithRun marks ctx as the context of the run with id.
func WithRun(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, runKey{}, id)
}

func runOf(ctx context.Context) string {
	id, _ := ctx.Value(runKey{}).(string)
	return id
}

func (d *delegator) run(ctx context.Context, env tool.Env, a Args) (tool.Result, error) {
	if d.cfg.Runner == nil {
		return tool.Errorf("error: delegation is not available here: %s", d.cfg.Unavailable), nil
	}
	items, res := d.items(a)
	if res != nil {
		return *res, nil
	}
	depth := Depth(ctx)
	background := false
	switch a.Mode {
	case "", ModeForeground:
	case ModeBackground:
		if depth > 0 {
			return tool.Errorf("error: a sub-agent delegates in the foreground only; omit mode or set foreground"), nil
		}
		if d.cfg.Background == nil {
			return tool.Errorf("error: background runs are not available here; delegate in the foreground (omit mode)"), nil
		}
		if env.SessionID == "" || strings.HasPrefix(env.SessionID, protocol.ChannelStateless+":") {
			// A continuation needs a stored chat to run in.
			return tool.Errorf("error: a background run reports back in a later turn of this chat, and this turn has no stored chat " +
				"(a stateless request); delegate in the foreground (omit mode)"), nil
		}
		background = true
	default:
		return tool.Errorf("error: mode %q is not foreground or background", a.Mode), nil
	}
	if depth+1 > d.cfg.MaxDepth {
		return tool.Errorf("error: delegation depth limit reached: this run is %d levels deep and runs nest at most %d; do the task yourself", depth, d.cfg.MaxDepth), nil
	}
	if len(items) > d.cfg.MaxFanOut {
		return tool.Errorf("error: %d tasks in one call; at most %d run at once: split the batch", len(items), d.cfg.MaxFanOut), nil
	}
	reqs := make([]Request, len(items))
	for i, it := range items {
		req, msg, err := d.request(ctx, env, it)
		if err != nil {
			return tool.Result{}, err
		}
		if msg != "" {
			if len(items) > 1 {
				msg = fmt.Sprintf("tasks[%d]: %s", i, msg)
			}
			return tool.Errorf("error: %s", msg), nil
		}
		reqs[i] = req
	}
	if res := d.bindPlan(ctx, env, items, reqs, depth); res != nil {
		return *res, nil
	}
	out := make([]Result, len(items))
	if background {
		for i := range items {
			out[i] = d.startOne(ctx, env, items[i], reqs[i])
		}
		return encode(out, len(items) > 1)
	}
	var wg sync.WaitGroup
	for i := range items {
		wg.Go(func() { out[i] = d.runOne(ctx, env, items[i], reqs[i], depth) })
	}
	wg.Wait()
	d.finishPlan(ctx, env, items, out, depth)
	return encode(out, len(items) > 1)
}

// bindPlan binds the items' plan_item_id to the calling session's active
// todo plan (the root agent's: sub-agents have no plan), after checking
// every one; res is the tool's error when one is not an item of it.
func (d *delegator) bindPlan(ctx context.Context, env tool.Env, items []Item, reqs []Request, depth int) *tool.Result {
	if d.cfg.Plans == nil || depth > 0 || env.SessionID == "" {
		return nil
	}
	for i, it := range items {
		if it.PlanItemID == "" {
			continue
		}
		msg, err := todo.CheckItem(ctx, d.cfg.Plans, env.SessionID, it.PlanItemID)
		if err != nil {
			r := tool.Errorf("error: failed to read the plan: %v", err)
			return &r
		}
		if msg != "" {
			if len(items) > 1 {
				msg = fmt.Sprintf("tasks[%d]: %s", i, msg)
			}
			r := tool.Errorf("error: %s", msg)
			return &r
		}
	}
	for i, it := range items {
		if it.PlanItemID != "" {
			if err := todo.BindItem(ctx, d.cfg.Plans, env.SessionID, it.PlanItemID, reqs[i].RunID); err != nil {
				r := tool.Errorf("error: %v", err)
				return &r
			}
		}
	}
	return nil
}

// finishPlan ends the plan items bound to foreground runs with them.
func (d *delegator) finishPlan(ctx context.Context, env tool.Env, items []Item, out []Result, depth int) {
	if d.cfg.Plans == nil || depth > 0 || env.SessionID == "" {
		return
	}
	for i, it := range items {
		if it.PlanItemID == "" {
			continue
		}
		// The run's outcome is what the model gets; a plan not updated
		// is what it can still fix with todo.
		_ = todo.FinishItem(context.WithoutCancel(ctx), d.cfg.Plans, env.SessionID, it.PlanItemID, out[i].RunID, out[i].Status)
	}
}

// items turns the arguments into the tasks to run; res is set on bad input.
func (d *delegator) items(a Args) ([]Item, *tool.Result) {
	bad := func(format string, args ...any) ([]Item, *tool.Result) {
		r := tool.Errorf("error: "+format, args...)
		return nil, &r
	}
	if len(a.Tasks) == 0 {
		if strings.TrimSpace(a.Task) == "" {
			return bad("give a task (or tasks[] for a batch)")
		}
		return []Item{{Target: a.Target, Task: a.Task, Context: a.Context, AllowedTools: a.AllowedTools, PlanItemID: a.PlanItemID}}, nil
	}
	if strings.TrimSpace(a.Task) != "" {
		return bad("give either task or tasks[], not both")
	}
	items := slices.Clone(a.Tasks)
	for i := range items {
		if items[i].Target == "" {
			items[i].Target = a.Target
		}
		if items[i].AllowedTools == nil {
			items[i].AllowedTools = a.AllowedTools
		}
		if strings.TrimSpace(items[i].Context) == "" {
			items[i].Context = a.Context
		}
		if strings.TrimSpace(items[i].Task) == "" {
			return bad("tasks[%d] has no task", i)
		}
	}
	return items, nil
}

// request checks one task against the delegate edges and the target's
// tools; msg says what is wrong with it.
func (d *delegator) request(ctx context.Context, env tool.Env, it Item) (req Request, msg string, err error) {
	target := strings.TrimSpace(it.Target)
	var names []string
	agent := ""
	for _, e := range d.cfg.Edges {
		names = append(names, e.Name)
		if e.Name == target {
			agent = e.AgentRef.Name
		}
	}
	switch {
	case target == "":
		return req, fmt.Sprintf("name a target: one of %s", strings.Join(names, ", ")), nil
	case agent == "":
		return req, fmt.Sprintf("%q is not one of your sub-agents; you may delegate to %s", target, strings.Join(names, ", ")), nil
	}
	req = Request{RunID: store.NewID(), Agent: agent, Parent: d.cfg.Agent, ParentSession: env.SessionID, Text: taskText(d.cfg.Agent, it)}
	if it.AllowedTools != nil {
		have, err := d.cfg.Runner.Tools(ctx, agent)
		if errors.Is(err, ErrUnknownAgent) {
			return req, fmt.Sprintf("sub-agent %s names Agent %q, which does not exist here", target, agent), nil
		}
		if err != nil {
			return req, "", fmt.Errorf("failed to get the tools of agent %q: %w", agent, err)
		}
		var wider []string
		for _, t := range it.AllowedTools {
			if !slices.Contains(have, t) {
				wider = append(wider, t)
			}
		}
		if len(wider) > 0 {
			return req, fmt.Sprintf("allowed_tools can only narrow the tools of %s, which does not have %s (it has %s)",
				target, strings.Join(wider, ", "), strings.Join(have, ", ")), nil
		}
		req.Tools = slices.Clone(it.AllowedTools)
	}
	return req, "", nil
}

// taskText is the sub-agent's only user message.
func taskText(parent string, it Item) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Task delegated by agent %s]\n\n%s", parent, strings.TrimSpace(it.Task))
	if c := strings.TrimSpace(it.Context); c != "" {
		b.WriteString("\n\nContext:\n" + c)
	}
	return b.String()
}

// runOne records, runs and finishes one run.
func (d *delegator) runOne(ctx context.Context, env tool.Env, it Item, req Request, depth int) Result {
	res := Result{Target: strings.TrimSpace(it.Target), RunID: req.RunID, PlanItemID: it.PlanItemID}
	wctx := context.WithoutCancel(ctx)
	if _, err := d.cfg.Runs.CreateAgentRun(wctx, store.AgentRun{ID: req.RunID, Agent: req.Agent, SessionID: env.SessionID,
		ParentRunID: runOf(ctx), ParentAgent: req.Parent, Mode: store.RunForeground, Status: store.RunRunning,
		Input: runInput(ModeForeground, req, it, depth+1)}); err != nil {
		res.Status, res.Error = string(store.RunFailed), fmt.Sprintf("failed to record the run: %v", err)
		return res
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer d.cfg.Active.Add(req.RunID, cancel)()
	answer, _, err := d.cfg.Runner.Run(WithRun(WithDepth(rctx, depth+1), req.RunID), req)
	status, text := store.RunSucceeded, answer
	switch {
	case errors.Is(context.Cause(rctx), ErrCancelledByTask):
		status, text = store.RunCancelled, "cancelled with agent_task"
		res.Error = text
	case ctx.Err() != nil: // the child's turn ended with ours, whatever it said
		status, text = store.RunCancelled, "cancelled: the delegating turn was stopped"
		res.Error = text
	case err != nil:
		status, text = store.RunFailed, err.Error()
		res.Error = text
	default:
		res.Result = answer
	}
	res.Status = string(status)
	_, err = d.cfg.Runs.UpdateAgentRun(wctx, req.RunID, store.AgentRunUpdate{Status: &status, Result: &text, IfActive: true})
	switch {
	case errors.Is(err, store.ErrRunFinished): // agent_task cancelled it first
		res.Status, res.Result, res.Error = string(store.RunCancelled), "", "cancelled with agent_task"
	case err != nil:
		res.Error = strings.TrimSpace(res.Error + "; failed to record the outcome: " + err.Error())
	}
	return res
}

// startOne records a background run with its completion slot reserved in
// the calling session and starts it.
func (d *delegator) startOne(ctx context.Context, env tool.Env, it Item, req Request) Result {
	res := Result{Target: strings.TrimSpace(it.Target), RunID: req.RunID, PlanItemID: it.PlanItemID}
	req.Mode = ModeBackground
	wctx := context.WithoutCancel(ctx)
	if _, err := d.cfg.Runs.CreateAgentRun(wctx, store.AgentRun{ID: req.RunID, Agent: req.Agent, SessionID: env.SessionID,
		ParentAgent: req.Parent, Mode: store.RunBackground, Status: store.RunRunning, Completion: store.CompletionReserved,
		Input: runInput(ModeBackground, req, it, 1)}); err != nil {
		res.Status, res.Error = string(store.RunFailed), fmt.Sprintf("failed to record the run: %v", err)
		return res
	}
	if err := d.cfg.Background.Start(wctx, req); err != nil {
		status, text, closed := store.RunFailed, "failed to start: "+err.Error(), store.CompletionClosed
		_, _ = d.cfg.Runs.UpdateAgentRun(wctx, req.RunID, store.AgentRunUpdate{Status: &status, Result: &text, Completion: &closed, IfActive: true})
		res.Status, res.Error = string(status), text
		return res
	}
	res.Status = string(store.RunRunning)
	res.Result = "started in the background: its result comes back as a message of its own; agent_task get shows its state"
	return res
}

// runInput is a run's recorded input: enough to run it again (a background
// run the process died in) and to show what it was asked.
func runInput(mode string, req Request, it Item, depth int) string {
	b, _ := json.Marshal(runRecord{Mode: mode, ParentAgent: req.Parent, Target: strings.TrimSpace(it.Target), Task: it.Task,
		Context: it.Context, AllowedTools: it.AllowedTools, Tools: req.Tools, PlanItemID: it.PlanItemID, Depth: depth, Text: req.Text,
		Spawn: req.Spawn})
	return string(b)
}

// runRecord is the JSON of AgentRun.Input.
type runRecord struct {
	Mode         string   `json:"mode"`
	ParentAgent  string   `json:"parent_agent"`
	Target       string   `json:"target"`
	Task         string   `json:"task"`
	Context      string   `json:"context,omitempty"`
	AllowedTools []string `json:"allowed_tools,omitempty"`
	// Tools is the run's narrowed tool set (null: the target's own).
	Tools      []string `json:"tools"`
	PlanItemID string   `json:"plan_item_id,omitempty"`
	Depth      int      `json:"depth"`
	// Text is the run's user message.
	Text string `json:"text,omitempty"`
	// Spawn is set for a run sessions_spawn started.
	Spawn *Spawn `json:"spawn,omitempty"`
}

// encode answers one run with its result object and a batch with the
// array in request order; the call is an error only when every run failed.
func encode(out []Result, batch bool) (tool.Result, error) {
	var v any = out
	if !batch {
		v = out[0]
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode delegation results: %w", err)
	}
	failed := 0
	for _, r := range out {
		if r.Status != string(store.RunSucceeded) && r.Status != string(store.RunRunning) {
			failed++
		}
	}
	return tool.Result{Content: string(b), IsError: failed == len(out)}, nil
}

// ErrUnknownAgent is returned (wrapped) by a Runner for a target Agent that
// does not exist.
var ErrUnknownAgent = errors.New("unknown agent")
