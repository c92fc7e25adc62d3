package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// TaskName is the name of the run query and control tool. Like delegate it
// follows the Agent's delegate edges: only an Agent with some gets it.
const TaskName = "agent_task"

// Limits of agent_task.
const (
	DefaultTaskListLimit = 20
	MaxTaskListLimit     = 100
	// maxAncestry bounds the walk from a run up to its root run.
	maxAncestry = 16
	// resultPreview is how much of a result get shows.
	resultPreview = 500
)

// TaskStore is what agent_task needs of the store.
type TaskStore interface {
	GetAgentRun(ctx context.Context, id string) (store.AgentRun, error)
	UpdateAgentRun(ctx context.Context, id string, u store.AgentRunUpdate) (store.AgentRun, error)
	ListAgentRuns(ctx context.Context, f store.AgentRunFilter) ([]store.AgentRun, error)
	MarkAgentSignals(ctx context.Context, ids []string, runID string, state store.SignalState) (int, error)
}

// TaskArgs are the arguments of agent_task.
type TaskArgs struct {
	Action          string `json:"action" jsonschema:"get: one run; list: your runs, newest first; get_result: the full result of an ended run; cancel: stop a run that has not ended"`
	RunID           string `json:"run_id,omitempty" jsonschema:"the run (get, get_result, cancel)"`
	CursorCreatedAt string `json:"cursor_created_at,omitempty" jsonschema:"list: the next_cursor created_at of the previous page (with cursor_id)"`
	CursorID        string `json:"cursor_id,omitempty" jsonschema:"list: the next_cursor id of the previous page (with cursor_created_at)"`
	Limit           int    `json:"limit,omitempty" jsonschema:"list: how many runs (default 20, at most 100)"`
}

// TaskConfig configures agent_task.
type TaskConfig struct {
	Store TaskStore
	// Active stops runs in progress in this process.
	Active *ActiveRuns
	// Stopper, when set, stops runs wherever they run (cluster mode: the
	// session pod serving the run's chat).
	Stopper RunStopper
}

// RunStopper stops a run that runs outside this process; it reports
// whether something was running to stop.
type RunStopper interface {
	StopRun(ctx context.Context, run store.AgentRun) bool
}

// NewTask returns agent_task. Who may see a run comes from the caller, never
// from knowing its id: the root agent sees the runs started in its own
// session and their sub-runs; a sub-agent the runs it started and theirs.
// Any other run id is "not found", exactly like one that does not exist.
func NewTask(cfg TaskConfig) tool.Tool {
	if cfg.Active == nil {
		cfg.Active = NewActiveRuns()
	}
	t := &tasks{cfg: cfg}
	return tool.New(TaskName, "Look at and control the runs you delegated: get one, list yours (newest first, paged with "+
		"cursor_created_at + cursor_id from next_cursor), get_result of an ended run, cancel one that has not ended.",
		t.run, tool.Enum("action", "get", "list", "get_result", "cancel"))
}

type tasks struct{ cfg TaskConfig }

// runView is a run as agent_task shows it.
type runView struct {
	RunID      string `json:"run_id"`
	Agent      string `json:"agent"`
	Target     string `json:"target,omitempty"`
	Mode       string `json:"mode"`
	Status     string `json:"status"`
	Completion string `json:"completion,omitempty"`
	Task       string `json:"task,omitempty"`
	Parent     string `json:"parent_run_id,omitempty"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
	Result     string `json:"result,omitempty"`
	Truncated  bool   `json:"result_truncated,omitempty"`
}

func view(r store.AgentRun, full bool) runView {
	var rec runRecord
	_ = json.Unmarshal([]byte(r.Input), &rec)
	v := runView{RunID: r.ID, Agent: r.Agent, Target: rec.Target, Mode: string(r.Mode), Status: string(r.Status),
		Completion: string(r.Completion), Task: rec.Task, Parent: r.ParentRunID,
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: r.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	if v.Mode == "" {
		v.Mode = string(store.RunForeground)
	}
	if r.Terminal() {
		v.Result = r.Result
		if !full && len(v.Result) > resultPreview {
			v.Result, v.Truncated = v.Result[:resultPreview], true
		}
	}
	return v
}

func (t *tasks) run(ctx context.Context, env tool.Env, a TaskArgs) (tool.Result, error) {
	switch a.Action {
	case "list":
		return t.list(ctx, env, a)
	case "get", "get_result", "cancel":
	default:
		return tool.Errorf("error: action %q is not get, list, get_result or cancel", a.Action), nil
	}
	id := strings.TrimSpace(a.RunID)
	if id == "" {
		return tool.Errorf("error: %s needs run_id", a.Action), nil
	}
	r, ok, err := t.visible(ctx, env, id)
	if err != nil {
		return tool.Result{}, err
	}
	if !ok {
		return tool.Errorf("error: run %q not found", id), nil
	}
	switch a.Action {
	case "get":
		return jsonResult(view(r, false))
	case "get_result":
		if !r.Terminal() {
			return tool.Errorf("error: run %s has not ended (%s); get_result answers once it has", r.ID, r.Status), nil
		}
		return jsonResult(view(r, true))
	default:
		return t.cancel(ctx, r)
	}
}

// visible returns run id when the caller may see it.
func (t *tasks) visible(ctx context.Context, env tool.Env, id string) (store.AgentRun, bool, error) {
	caller := runOf(ctx)
	r, err := t.cfg.Store.GetAgentRun(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("failed to get run %q: %w", id, err)
	}
	cur := r
	for range maxAncestry {
		switch {
		case caller != "" && cur.ParentRunID == caller:
			return r, true, nil
		case cur.ParentRunID == "":
			// A root run: the root agent's own when started in its session.
			return r, caller == "" && cur.SessionID == env.SessionID && env.SessionID != "", nil
		}
		next, err := t.cfg.Store.GetAgentRun(ctx, cur.ParentRunID)
		if errors.Is(err, store.ErrNotFound) {
			return r, false, nil
		}
		if err != nil {
			return r, false, fmt.Errorf("failed to get run %q: %w", cur.ParentRunID, err)
		}
		cur = next
	}
	return r, false, nil
}

func (t *tasks) list(ctx context.Context, env tool.Env, a TaskArgs) (tool.Result, error) {
	limit := a.Limit
	switch {
	case limit == 0:
		limit = DefaultTaskListLimit
	case limit < 0 || limit > MaxTaskListLimit:
		return tool.Errorf("error: limit %d is not between 1 and %d", limit, MaxTaskListLimit), nil
	}
	f := store.AgentRunFilter{Limit: limit}
	if caller := runOf(ctx); caller != "" {
		f.ParentRunID = caller
	} else {
		f.SessionID = env.SessionID
	}
	if (a.CursorCreatedAt == "") != (a.CursorID == "") {
		return tool.Errorf("error: cursor_created_at and cursor_id go together: pass both from next_cursor, or neither"), nil
	}
	if a.CursorCreatedAt != "" {
		at, err := time.Parse(time.RFC3339Nano, a.CursorCreatedAt)
		if err != nil {
			// Bad input goes back to the model, not up as a failure.
			return tool.Errorf("error: cursor_created_at %q is not an RFC 3339 time (%v): pass next_cursor.created_at as it came", a.CursorCreatedAt, err), nil
		}
		f.CursorCreatedAt, f.CursorID = at, a.CursorID
	}
	runs, err := t.cfg.Store.ListAgentRuns(ctx, f)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to list runs: %w", err)
	}
	out := struct {
		Runs       []runView          `json:"runs"`
		NextCursor *map[string]string `json:"next_cursor,omitempty"`
	}{Runs: []runView{}}
	for _, r := range runs {
		if f.SessionID != "" && r.ParentRunID != "" {
			continue // a sub-agent's run in the root session cannot exist; be strict anyway
		}
		out.Runs = append(out.Runs, view(r, false))
	}
	if len(runs) == limit {
		last := runs[len(runs)-1]
		out.NextCursor = &map[string]string{"created_at": last.CreatedAt.UTC().Format(time.RFC3339Nano), "id": last.ID}
	}
	return jsonResult(out)
}

// cancel stops a run that has not ended (CancelRun).
func (t *tasks) cancel(ctx context.Context, r store.AgentRun) (tool.Result, error) {
	if r.Terminal() {
		return tool.Errorf("error: run %s has already ended (%s)", r.ID, r.Status), nil
	}
	updated, stopped, superseded, err := CancelRun(ctx, t.cfg.Store, r, "cancelled with agent_task", t.cfg.Active, t.cfg.Stopper)
	if errors.Is(err, store.ErrRunFinished) {
		return tool.Errorf("error: run %s ended before it could be cancelled; get_result has its result", r.ID), nil
	}
	if err != nil {
		return tool.Result{}, err
	}
	v := view(updated, false)
	return jsonResult(struct {
		runView
		Stopped           bool `json:"stopped_here"`
		SupersededSignals int  `json:"superseded_signals"`
	}{v, stopped, superseded})
}

// CancelRun cancels a run that has not ended, for agent_task and the
// chat's run cards: the record first (so a run that ends meanwhile is not
// delivered as well; store.ErrRunFinished when it already ended), then the
// run itself where it runs (active in this process, or through stopper),
// and its unconsumed signals are superseded; a background run's slot is
// closed, so no continuation comes.
// reason becomes the run's result.
func CancelRun(ctx context.Context, s TaskStore, r store.AgentRun, reason string, active *ActiveRuns, stopper RunStopper) (updated store.AgentRun, stopped bool, superseded int, err error) {
	wctx := context.WithoutCancel(ctx)
	status, text := store.RunCancelled, reason
	u := store.AgentRunUpdate{Status: &status, Result: &text, IfActive: true}
	if r.Mode == store.RunBackground {
		closed := store.CompletionClosed
		u.Completion = &closed
	}
	updated, err = s.UpdateAgentRun(wctx, r.ID, u)
	if err != nil {
		if errors.Is(err, store.ErrRunFinished) {
			return store.AgentRun{}, false, 0, err
		}
		return store.AgentRun{}, false, 0, fmt.Errorf("failed to cancel run %q: %w", r.ID, err)
	}
	if active != nil {
		stopped = active.Cancel(r.ID)
	}
	if !stopped && stopper != nil {
		stopped = stopper.StopRun(wctx, updated)
	}
	superseded, err = s.MarkAgentSignals(wctx, nil, r.ID, store.SignalSuperseded)
	if err != nil {
		return updated, stopped, 0, fmt.Errorf("failed to supersede the signals of run %q: %w", r.ID, err)
	}
	return updated, stopped, superseded, nil
}

func jsonResult(v any) (tool.Result, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode the answer: %w", err)
	}
	return tool.Text(string(b)), nil
}
