package embedded

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// Embedded mode's side of background delegate runs (runtime/tool/delegate,
// background.go): a finished run's continuation is a message queued on the
// parent chat's in-process stream, so it is a turn of that chat like any
// other; once it is done its completion is marked delivered, and a reply to
// a chat platform's chat is delivered there like the chat's other replies.

// sweepEvery is how often ended runs past their retention are deleted.
const sweepEvery = time.Hour

// completions implements delegate.Completions for the runtime.
type completions struct{ r *Runtime }

// Ready implements delegate.Completions: it queues run's continuation on
// its parent session's chat, for that session's dialog (the chat's current
// one if it was deleted meanwhile).
func (c completions) Ready(ctx context.Context, run store.AgentRun) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return err
	}
	a := c.r.agents[run.ParentAgent]
	if a == nil || a.byTenant[tenant] == nil {
		return fmt.Errorf("failed to queue the continuation of run %q: no agent %q of tenant %q here", run.ID, run.ParentAgent, tenant)
	}
	id, err := session.ParseID(run.SessionID)
	if err != nil {
		return fmt.Errorf("failed to queue the continuation of run %q: %w", run.ID, err)
	}
	chat := sessionrt.Chat{Channel: id.Channel, Key: id.ChatID}
	return c.r.queue(ctx, a.byTenant[tenant], chat, protocol.Inbound{ID: delegate.ContinuationID(run.ID), Channel: chat.Channel,
		ChatKey: chat.Key, DialogID: id.DialogID, Text: delegate.ContinuationText(run)})
}

// resumeBackground resumes, for every tenant, the background runs and
// continuations a previous process left, deletes ended runs past their
// retention, and keeps deleting them every sweepEvery.
func (r *Runtime) resumeBackground() {
	for _, t := range r.Tenants() {
		ctx := store.WithTenant(r.ctx, t)
		rerun, requeued, err := r.background.Recover(ctx)
		if err != nil {
			r.log.Error("Could not resume background runs", "tenant", t, "err", err)
		}
		if rerun+requeued > 0 {
			r.log.Info("Resumed background runs left by the last run", "tenant", t, "rerun", rerun, "continuations", requeued)
		}
	}
	r.sweepRuns()
	r.wg.Go(func() {
		tick := time.NewTicker(sweepEvery)
		defer tick.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-tick.C:
				r.sweepRuns()
			}
		}
	})
}

// sweepRuns deletes every tenant's ended runs and audit records past
// their retention.
func (r *Runtime) sweepRuns() {
	sw := audit.Sweeper{Store: r.state.Store, Retention: r.opts.AuditRetention, Clock: r.opts.Clock, Log: r.log}
	for _, t := range r.Tenants() {
		if _, err := sw.Sweep(r.ctx, t); err != nil {
			r.log.Error("Could not delete old audit records", "tenant", t, "err", err)
		}
		if n, err := r.background.Sweep(store.WithTenant(r.ctx, t)); err != nil {
			r.log.Error("Could not delete old delegate runs", "tenant", t, "err", err)
		} else if n > 0 {
			r.log.Info("Deleted delegate runs past their retention", "tenant", t, "count", n)
		}
	}
}

// continuationDone marks a continuation's completion delivered and, on a
// chat platform's chat, delivers its reply there (a gateway client reads it
// in the chat's history).
func (p reporter) continuationDone(ctx context.Context, c sessionrt.Chat, runID string, out protocol.Outcome, cerr *protocol.CodedError) {
	ctx = store.WithTenant(ctx, p.ta.tenant)
	if cerr != nil && (cerr.Code == protocol.CodeBusy || cerr.Code == protocol.CodeUnavailable) {
		// The turn did not run: the completion stays ready and is queued
		// again at the next start.
		p.r.log.Warn("A background run's continuation did not run", "run", runID, "code", cerr.Code, "err", cerr.Err)
		return
	}
	if err := delegate.MarkDelivered(ctx, p.r.state.Store, runID); err != nil {
		p.r.log.Error("Failed to mark a background run's completion delivered", "run", runID, "err", err)
	}
	// ANNOUNCE_SKIP: a sessions_spawn run's announce step chose silence.
	if out.Duplicate || cerr != nil || out.Text == "" || strings.TrimSpace(out.Text) == sessions.AnnounceSkip ||
		slices.Contains(protocol.PushChannels(), c.Channel) {
		return
	}
	p.r.mu.Lock()
	disp := p.r.disp
	p.r.mu.Unlock()
	if disp == nil {
		return
	}
	if _, err := disp.Deliver(ctx, outbound.Message{Agent: p.ta.agent, Target: c.Channel + ":" + c.Key, Text: out.Text,
		Origin: out.SessionID, Stored: true}); err != nil {
		p.r.log.Error("Failed to deliver a continuation's reply", "run", runID, "channel", c.Channel, "chat", c.Key, "err", err)
	}
}
