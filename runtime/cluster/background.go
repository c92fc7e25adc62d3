package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// Background delegate runs in cluster mode. A run is a chat of its target
// Agent (channel delegate, chat key the run id) like a foreground one, but
// nobody waits for it: the delegating pod records it (agent_runs, completion
// slot reserved), queues its task on the run chat's stream, wakes a runtime
// of the target and returns. From then on the run lives in the session pods
// of the target, leased like any chat:
//
//   - the pod that answers the run's message records the outcome and fills
//     the slot in one conditional update (a run ends once), then queues the
//     continuation on the parent chat's stream (message id
//     delegate.ContinuationID, so it runs once however often it is queued)
//     and wakes a runtime of the parent agent;
//   - the parent's pod that answers the continuation marks the slot
//     delivered;
//   - a pod that dies anywhere in between leaves the run chat's message or
//     the continuation pending on its stream, and the gateway's RunWatch
//     wakes a runtime for the chat that has none (and queues again what was
//     never queued), so the next pod resumes the turn from its stored steps.
//
// Neither pod's life bounds the run: the delegating pod may go idle and exit
// while the run goes on, and the run's pod may die mid-turn.

// BackgroundRuns is delegate.Background in a session pod. It also stops
// runs for agent_task cancel (delegate.RunStopper) wherever they run.
type BackgroundRuns struct {
	Delegates *Delegates
}

var (
	_ delegate.Background = (*BackgroundRuns)(nil)
	_ delegate.RunStopper = (*BackgroundRuns)(nil)
)

// Start implements delegate.Background: it queues the run's task for the
// target's pods and returns.
func (b *BackgroundRuns) Start(ctx context.Context, req delegate.Request) error {
	d := b.Delegates
	if err := d.ready(ctx, req.Agent); err != nil {
		return err
	}
	if err := d.queue(ctx, req, 1); err != nil {
		return err
	}
	d.ensureRuntime(ctx, req.Agent, req.RunID)
	return nil
}

// StopRun implements delegate.RunStopper: the run's chat gets a stop on its
// control channel (a pod serving it stops the turn; one that takes it later
// refuses it, its record no longer running).
func (b *BackgroundRuns) StopRun(ctx context.Context, run store.AgentRun) bool {
	n, err := b.Delegates.sig().publishCount(context.WithoutCancel(ctx),
		controlChannel(b.Delegates.Tenant, run.Agent, protocol.ChannelDelegate, run.ID), protocol.Frame{Kind: protocol.FrameStop})
	return err == nil && n > 0
}

// queue puts req's task on its run chat's stream, carrying what the pod
// that takes it needs (protocol.Delegation).
func (d *Delegates) queue(ctx context.Context, req delegate.Request, depth int) error {
	payload, err := protocol.EncodeInbound(protocol.Inbound{ID: req.RunID, Channel: protocol.ChannelDelegate, ChatKey: req.RunID, Text: req.Text,
		Delegation: &protocol.Delegation{RunID: req.RunID, ParentAgent: req.Parent, ParentSession: req.ParentSession,
			Depth: depth, Tools: req.Tools}})
	if err != nil {
		return err
	}
	if err := d.Bus.Publish(ctx, chatStream(d.Tenant, req.Agent, protocol.ChannelDelegate, req.RunID),
		bus.Message{ID: req.RunID, Payload: payload, Headers: bus.QueuedAt(time.Now())}); err != nil {
		return fmt.Errorf("failed to queue the task for agent %q: %w", req.Agent, err)
	}
	return nil
}

func (d *Delegates) sig() signals { return signals{d.Redis} }

// RunStore is what the completion of background runs needs of the store.
type RunStore interface {
	delegate.BackgroundStore
}

// Continuations is delegate.Completions in cluster mode: a run's
// continuation is queued on its parent chat's stream and a runtime of the
// parent agent is woken for the chat when it has none.
type Continuations struct {
	Tenant string
	Bus    bus.Bus
	Redis  *redis.Client
	// Wake queues a wake; session pods use wake.Queue (their Redis user
	// cannot write the operator's notice stream), the gateway
	// wake.Publish.
	Wake func(ctx context.Context, b bus.Bus, w Wake) error
}

var _ delegate.Completions = Continuations{}

// Ready implements delegate.Completions.
func (c Continuations) Ready(ctx context.Context, run store.AgentRun) error {
	id, err := session.ParseID(run.SessionID)
	if err != nil {
		return fmt.Errorf("failed to queue the continuation of run %q: %w", run.ID, err)
	}
	if run.ParentAgent == "" {
		return fmt.Errorf("failed to queue the continuation of run %q: it names no parent agent", run.ID)
	}
	msgID := delegate.ContinuationID(run.ID)
	payload, err := protocol.EncodeInbound(protocol.Inbound{ID: msgID, Channel: id.Channel, ChatKey: id.ChatID, DialogID: id.DialogID,
		Text: delegate.ContinuationText(run)})
	if err != nil {
		return err
	}
	if err := c.Bus.Publish(ctx, chatStream(c.Tenant, run.ParentAgent, id.Channel, id.ChatID),
		bus.Message{ID: msgID, Payload: payload, Headers: bus.QueuedAt(time.Now())}); err != nil {
		return fmt.Errorf("failed to queue the continuation of run %q: %w", run.ID, err)
	}
	return c.ensureRuntime(ctx, run.ParentAgent, id.Channel, id.ChatID)
}

// ensureRuntime wakes a runtime of agent for a chat no runtime owns.
func (c Continuations) ensureRuntime(ctx context.Context, agent, channel, chat string) error {
	owned, err := signals{c.Redis}.owned(ctx, ownerKey(c.Tenant, agent, channel, chat))
	if err != nil || owned {
		return err
	}
	wk := c.Wake
	if wk == nil {
		wk = wake.Queue
	}
	return wk(ctx, c.Bus, Wake{Tenant: c.Tenant, Agent: agent, Channel: channel, ChatKey: chat})
}

// RunCompletion is the part of a session pod's Reporter that completes
// background runs: the pod answering a run's message records its outcome
// and queues the continuation; the pod answering a continuation marks it
// delivered and keeps an ANNOUNCE_SKIP from a chat platform.
type RunCompletion struct {
	Store       RunStore
	Completions delegate.Completions
	// Exchanges moves sessions_send's exchanges on past the turns this
	// pod answers (nil: it answers none).
	Exchanges *Exchanges
	Clock     func() time.Time
	Log       *slog.Logger
}

// didNotRun reports whether a message's outcome says its turn never ran (it
// is queued again or taken by the next owner).
func didNotRun(err *protocol.CodedError) bool {
	return err != nil && (err.Code == protocol.CodeBusy || err.Code == protocol.CodeUnavailable)
}

// Silent reports whether a chat platform must not get a turn's reply: a
// sessions_spawn announce step that chose silence, and a turn of a
// sessions_send exchange (only its announce step posts to the chat, unless
// it chose silence).
func (rc *RunCompletion) Silent(msgID string, out protocol.Outcome) bool {
	if _, announce, ok := sessions.ParseTurnMsgID(msgID); ok {
		return !announce || strings.TrimSpace(out.Text) == sessions.AnnounceSkip || strings.TrimSpace(out.Text) == ""
	}
	_, ok := delegate.ContinuationRun(msgID)
	return ok && strings.TrimSpace(out.Text) == sessions.AnnounceSkip
}

// Done completes what msgID's answer completes; c is the chat it answered.
func (rc *RunCompletion) Done(ctx context.Context, c sessionrt.Chat, msgID string, out protocol.Outcome, cerr *protocol.CodedError) {
	if rc == nil || didNotRun(cerr) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if _, _, ok := sessions.ParseTurnMsgID(msgID); ok {
		if rc.Exchanges == nil {
			return
		}
		if err := rc.Exchanges.Answered(ctx, msgID, out.Text, cerr != nil); err != nil {
			rc.log().Error("Failed to move an agent-to-agent exchange on; the gateway queues its turn again", "turn", msgID, "err", err)
		}
		return
	}
	if runID, ok := delegate.ContinuationRun(msgID); ok {
		if err := delegate.MarkDelivered(ctx, rc.Store, runID); err != nil {
			rc.log().Error("Failed to mark a background run's completion delivered", "run", runID, "err", err)
		}
		return
	}
	if c.Channel != protocol.ChannelDelegate || msgID != c.Key {
		return
	}
	run, err := rc.Store.GetAgentRun(ctx, msgID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			rc.log().Error("Failed to read a delegated run to complete it", "run", msgID, "err", err)
		}
		return
	}
	if run.Mode != store.RunBackground {
		return // its delegating turn waits for the answer
	}
	rc.finish(ctx, run, out, cerr)
}

// finish records a background run's outcome (once: the update is
// conditional) and queues its continuation. A run another pod already
// recorded is queued again while its slot is ready (an earlier pod died
// before queuing it); queuing twice is harmless.
func (rc *RunCompletion) finish(ctx context.Context, run store.AgentRun, out protocol.Outcome, cerr *protocol.CodedError) {
	if run.Terminal() {
		if run.Completion == store.CompletionReady {
			rc.ready(ctx, run)
		}
		return
	}
	status, text := store.RunSucceeded, out.Text
	if cerr != nil {
		status, text = store.RunFailed, protocol.ClientMessage(cerr.Code, cerr)
		if req, err := delegate.RequestOf(run); err == nil && req.Spawn != nil && req.Spawn.TimeoutSeconds > 0 &&
			!rc.now().Before(run.CreatedAt.Add(time.Duration(req.Spawn.TimeoutSeconds)*time.Second)) {
			text = fmt.Sprintf("timed out: the run did not finish within runTimeoutSeconds (%d s) and was stopped", req.Spawn.TimeoutSeconds)
		}
	}
	ready := store.CompletionReady
	updated, err := rc.Store.UpdateAgentRun(ctx, run.ID, store.AgentRunUpdate{Status: &status, Result: &text, Completion: &ready, IfActive: true})
	if errors.Is(err, store.ErrRunFinished) {
		return // cancelled meanwhile, or another pod recorded it
	}
	if err != nil {
		rc.log().Error("Failed to record a background run's outcome", "run", run.ID, "err", err)
		return
	}
	if req, err := delegate.RequestOf(run); err == nil && req.Spawn != nil && req.Spawn.Delete && out.SessionID != "" {
		deleted := true
		if _, err := rc.Store.UpdateSession(ctx, out.SessionID, store.SessionUpdate{Deleted: &deleted}); err != nil {
			rc.log().Error("Failed to delete a spawned run's session", "run", run.ID, "session", out.SessionID, "err", err)
		}
	}
	rc.ready(ctx, updated)
}

func (rc *RunCompletion) ready(ctx context.Context, run store.AgentRun) {
	if err := rc.Completions.Ready(ctx, run); err != nil {
		rc.log().Error("Failed to queue a background run's continuation; the gateway queues it again", "run", run.ID, "err", err)
	}
}

func (rc *RunCompletion) now() time.Time {
	if rc.Clock == nil {
		return time.Now()
	}
	return rc.Clock()
}

func (rc *RunCompletion) log() *slog.Logger {
	if rc.Log == nil {
		return slog.Default()
	}
	return rc.Log
}
