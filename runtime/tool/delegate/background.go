package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/sessions"
	"github.com/picobot/picobot/runtime/tracing"
)

// A background run's life, the same in both modes:
//
//  1. delegate records it (agent_runs: mode background, status running,
//     completion slot reserved in the calling session) and hands it to a
//     Background; the call returns with the run id.
//  2. BackgroundRuns runs it outside the calling turn and, when it ends,
//     records the outcome and fills the slot (status terminal, completion
//     ready) in one conditional update: a run ends once, whether it finishes
//     or agent_task cancels it first.
//  3. Completions wakes the parent session: the host queues the
//     continuation message (ContinuationID, ContinuationText) on the parent
//     chat's inbound stream, so the continuation is an ordinary turn of that
//     chat whose answer goes where its answers go. The message id makes it
//     idempotent: queued twice, it runs once (the session stores a message
//     id once and answers a repeat from the stored answer).
//  4. When that turn is done the host marks the slot delivered
//     (MarkDelivered).
//
// A process that dies anywhere in between loses nothing: Recover, at
// start, runs again the background runs still running (the sub-agent's
// session resumes its turn from its stored steps) and queues again the
// continuations of ready slots.

// Background starts recorded background runs outside the calling turn.
type Background interface {
	// Start runs req (recorded already, completion slot reserved) in the
	// background and returns at once; ctx carries the tenant.
	Start(ctx context.Context, req Request) error
}

// Completions hands a finished background run's outcome to its parent
// session. Embedded mode queues the continuation on the parent chat's
// in-process stream; cluster mode can publish it on its bus and wake the
// chat's runtime the same way.
type Completions interface {
	// Ready queues the continuation turn of run (its completion is ready)
	// in its parent session. Queuing it again must be harmless.
	Ready(ctx context.Context, run store.AgentRun) error
}

// ErrCancelledByTask is the cause of a run's context cancelled with
// agent_task cancel.
var ErrCancelledByTask = errors.New("cancelled with agent_task")

// ActiveRuns registers the runs in progress in this process by id, so
// agent_task can stop them. Safe for concurrent use.
type ActiveRuns struct {
	mu   sync.Mutex
	runs map[string]context.CancelCauseFunc
}

// NewActiveRuns returns an empty registry.
func NewActiveRuns() *ActiveRuns {
	return &ActiveRuns{runs: map[string]context.CancelCauseFunc{}}
}

// Add registers a run; the returned func unregisters it.
func (a *ActiveRuns) Add(id string, cancel context.CancelCauseFunc) (remove func()) {
	a.mu.Lock()
	a.runs[id] = cancel
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.runs, id)
		a.mu.Unlock()
	}
}

// Cancel stops a run in progress here; it reports whether one was.
func (a *ActiveRuns) Cancel(id string) bool {
	a.mu.Lock()
	cancel := a.runs[id]
	a.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelledByTask)
	}
	return cancel != nil
}

// Len is how many runs are in progress.
func (a *ActiveRuns) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.runs)
}

// BackgroundStore is what BackgroundRuns needs of the store.
type BackgroundStore interface {
	GetAgentRun(ctx context.Context, id string) (store.AgentRun, error)
	UpdateAgentRun(ctx context.Context, id string, u store.AgentRunUpdate) (store.AgentRun, error)
	ListAgentRuns(ctx context.Context, f store.AgentRunFilter) ([]store.AgentRun, error)
	DeleteAgentRuns(ctx context.Context, before time.Time) (int, error)
	UpdateSession(ctx context.Context, id string, u store.SessionUpdate) (store.Session, error)
}

// DefaultRetention is how long ended runs are kept.
const DefaultRetention = 24 * time.Hour

// BackgroundConfig configures BackgroundRuns.
type BackgroundConfig struct {
	Runner      Runner
	Store       BackgroundStore
	Completions Completions
	// Active is shared with the delegate and agent_task tools.
	Active *ActiveRuns
	// Retention is how long ended runs are kept (DefaultRetention).
	Retention time.Duration
	Clock     clock.Clock
	Log       *slog.Logger
}

// BackgroundRuns runs background runs in this process. It implements
// Background.
type BackgroundRuns struct {
	cfg BackgroundConfig
	// ctx bounds every run: its end (shutdown) leaves runs as they are in
	// the store, for Recover in the next process.
	ctx context.Context
	wg  sync.WaitGroup
}

var _ Background = (*BackgroundRuns)(nil)

// NewBackgroundRuns returns the background runs of a process; ctx is the
// process's (its end stops the runs, which resume at the next start).
func NewBackgroundRuns(ctx context.Context, cfg BackgroundConfig) *BackgroundRuns {
	if cfg.Active == nil {
		cfg.Active = NewActiveRuns()
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &BackgroundRuns{cfg: cfg, ctx: ctx}
}

// Start implements Background.
func (b *BackgroundRuns) Start(ctx context.Context, req Request) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return fmt.Errorf("failed to start run %q: %w", req.RunID, err)
	}
	if b.ctx.Err() != nil {
		return fmt.Errorf("failed to start run %q: the runtime is shutting down", req.RunID)
	}
	rctx, cancel := context.WithCancelCause(store.WithTenant(b.ctx, tenant))
	// The run is a trace of its own, linked to the turn that started it.
	rctx, span := tracing.StartLinked(ctx, rctx, tracing.SpanBackgroundRun, trace.WithAttributes(tracing.AttrRunID.String(req.RunID),
		tracing.AttrAgent.String(req.Agent)))
	remove := b.cfg.Active.Add(req.RunID, cancel)
	b.wg.Go(func() {
		defer span.End()
		defer remove()
		defer cancel(nil)
		b.run(rctx, req)
	})
	return nil
}

// Wait waits for the runs started here (after the process context ended).
func (b *BackgroundRuns) Wait() { b.wg.Wait() }

// errRunTimeout ends a spawned run that ran past its runTimeoutSeconds.
var errRunTimeout = errors.New("run timeout")

// run runs one background run to its end and hands its completion on.
func (b *BackgroundRuns) run(ctx context.Context, req Request) {
	rctx := ctx
	if req.Spawn != nil && req.Spawn.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeoutCause(ctx, time.Duration(req.Spawn.TimeoutSeconds)*time.Second, errRunTimeout)
		defer cancel()
	}
	answer, sessionID, err := b.cfg.Runner.Run(WithRun(WithDepth(rctx, 1), req.RunID), req)
	if ctx.Err() != nil {
		// Cancelled with agent_task (recorded there), or the process is
		// stopping: the run stays running in the store and Recover runs it
		// again in the next process.
		return
	}
	status, text := store.RunSucceeded, answer
	switch {
	case errors.Is(context.Cause(rctx), errRunTimeout):
		status, text = store.RunFailed, fmt.Sprintf("timed out: the run did not finish within runTimeoutSeconds (%d s) and was stopped", req.Spawn.TimeoutSeconds)
	case err != nil:
		status, text = store.RunFailed, err.Error()
	}
	wctx := context.WithoutCancel(ctx)
	ready := store.CompletionReady
	run, err := b.cfg.Store.UpdateAgentRun(wctx, req.RunID, store.AgentRunUpdate{Status: &status, Result: &text, Completion: &ready, IfActive: true})
	if errors.Is(err, store.ErrRunFinished) {
		return // cancelled meanwhile: nothing to deliver
	}
	if err != nil {
		b.cfg.Log.Error("Failed to record a background run's outcome; it runs again at the next start", "run", req.RunID, "err", err)
		return
	}
	if req.Spawn != nil && req.Spawn.Delete && sessionID != "" {
		// cleanup delete: the result lives on in the run's record and the
		// continuation; the transcript goes.
		deleted := true
		if _, err := b.cfg.Store.UpdateSession(wctx, sessionID, store.SessionUpdate{Deleted: &deleted}); err != nil {
			b.cfg.Log.Error("Failed to delete a spawned run's session", "run", req.RunID, "session", sessionID, "err", err)
		}
	}
	b.ready(wctx, run)
}

func (b *BackgroundRuns) ready(ctx context.Context, run store.AgentRun) {
	if err := b.cfg.Completions.Ready(ctx, run); err != nil {
		b.cfg.Log.Error("Failed to queue a background run's continuation; it is queued again at the next start", "run", run.ID,
			"session", run.SessionID, "err", err)
	}
}

// Recover resumes the background runs of the tenant in ctx that a previous
// process left: it runs again those still running and queues again the
// continuations of those whose completion is ready. It returns how many of
// each it found.
func (b *BackgroundRuns) Recover(ctx context.Context) (rerun, requeued int, err error) {
	// Ready ones first: a run started again below may be ready before
	// this looks, and would be queued twice.
	ready, err := b.cfg.Store.ListAgentRuns(ctx, store.AgentRunFilter{Mode: store.RunBackground, Completion: store.CompletionReady, Limit: 100_000})
	if err != nil {
		return rerun, requeued, err
	}
	for _, r := range ready {
		b.ready(ctx, r)
		requeued++
	}
	runs, err := b.cfg.Store.ListAgentRuns(ctx, store.AgentRunFilter{Mode: store.RunBackground, Active: true, Limit: 100_000})
	if err != nil {
		return rerun, requeued, err
	}
	for _, r := range runs {
		if b.activeHere(r.ID) {
			continue
		}
		req, err := RequestOf(r)
		if err != nil {
			b.recordBroken(ctx, r, err)
			continue
		}
		if err := b.Start(ctx, req); err != nil {
			return rerun, requeued, err
		}
		rerun++
	}
	return rerun, requeued, nil
}

func (b *BackgroundRuns) activeHere(id string) bool {
	b.cfg.Active.mu.Lock()
	defer b.cfg.Active.mu.Unlock()
	_, ok := b.cfg.Active.runs[id]
	return ok
}

// recordBroken ends a run whose record cannot be run again, and delivers
// that as its outcome.
func (b *BackgroundRuns) recordBroken(ctx context.Context, r store.AgentRun, cause error) {
	status, text, ready := store.RunFailed, "failed: it could not be resumed after a restart: "+cause.Error(), store.CompletionReady
	run, err := b.cfg.Store.UpdateAgentRun(ctx, r.ID, store.AgentRunUpdate{Status: &status, Result: &text, Completion: &ready, IfActive: true})
	if err == nil {
		b.ready(ctx, run)
	}
}

// RequestOf rebuilds a background run's Request from its record: what a
// host needs to run it again after the process that started it died.
func RequestOf(r store.AgentRun) (Request, error) {
	var rec runRecord
	if err := json.Unmarshal([]byte(r.Input), &rec); err != nil {
		return Request{}, fmt.Errorf("failed to read the input of run %q: %w", r.ID, err)
	}
	if rec.Text == "" {
		rec.Text = taskText(r.ParentAgent, Item{Task: rec.Task, Context: rec.Context})
	}
	return Request{RunID: r.ID, Agent: r.Agent, Parent: r.ParentAgent, ParentSession: r.SessionID, Text: rec.Text, Tools: rec.Tools,
		Mode: ModeBackground, Spawn: rec.Spawn}, nil
}

// Sweep deletes the tenant's ended runs older than the retention whose
// completion has nothing left to deliver; it returns how many.
func (b *BackgroundRuns) Sweep(ctx context.Context) (int, error) {
	return b.cfg.Store.DeleteAgentRuns(ctx, b.cfg.Clock.Now().Add(-b.cfg.Retention))
}

// ContinuationPrefix starts the message id of a continuation turn.
const ContinuationPrefix = "agent-run:"

// ContinuationID is the message id of run's continuation turn in its parent
// session: one id per run, so the turn runs once however often it is
// queued.
func ContinuationID(runID string) string { return ContinuationPrefix + runID }

// ContinuationRun returns the run of a continuation turn's message id.
func ContinuationRun(msgID string) (runID string, ok bool) {
	return strings.CutPrefix(msgID, ContinuationPrefix)
}

// ContinuationText is the message of run's continuation turn: the outcome
// for the parent agent to process (the user does not see the run's own
// session).
func ContinuationText(run store.AgentRun) string {
	var rec runRecord
	_ = json.Unmarshal([]byte(run.Input), &rec)
	target := rec.Target
	if target == "" {
		target = run.Agent
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[Background run %s of sub-agent %s ended: %s]\n", run.ID, target, run.Status)
	if rec.Spawn != nil && rec.Spawn.Label != "" {
		fmt.Fprintf(&b, "Label: %s\n", rec.Spawn.Label)
	}
	if rec.Task != "" {
		fmt.Fprintf(&b, "Task: %s\n", strings.TrimSpace(rec.Task))
	}
	if rec.PlanItemID != "" {
		fmt.Fprintf(&b, "Plan item: %s\n", rec.PlanItemID)
	}
	fmt.Fprintf(&b, "\nResult:\n%s\n\n", run.Result)
	if rec.Spawn != nil {
		// sessions_spawn's announce step: the reply is the announcement.
		b.WriteString("This message comes from the runtime, not the user: the run you started with sessions_spawn ended. " +
			"Announce its result to the user in your reply, or reply exactly " + sessions.AnnounceSkip + " to stay silent.")
		return b.String()
	}
	b.WriteString("This message comes from the runtime, not the user. Process the result and tell the user what they need to know of it.")
	return b.String()
}

// MarkDelivered marks a run's completion delivered once its continuation
// turn is done; a second call (the turn answered again from the store)
// changes nothing.
func MarkDelivered(ctx context.Context, s BackgroundStore, runID string) error {
	delivered := store.CompletionDelivered
	_, err := s.UpdateAgentRun(ctx, runID, store.AgentRunUpdate{Completion: &delivered, IfCompletion: store.CompletionReady})
	if err != nil && !errors.Is(err, store.ErrRunFinished) {
		return err
	}
	return nil
}
