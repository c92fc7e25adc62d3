package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// RunWatch is the gateway's watch over background delegate runs: nobody
// waits for such a run the way the gateway waits for a message, so when
// the pod serving a run's chat, or the parent chat's continuation, dies,
// RunWatch is what wakes the next runtime. Every Every it looks, per
// tenant, at
//
//   - runs still running whose chat no runtime owns: their task is queued
//     again if it never reached the stream (the delegating pod died between
//     recording and queuing it) and a runtime of the target is woken; the
//     next pod resumes the turn from its stored steps;
//   - runs whose completion is ready (recorded, continuation not yet
//     answered) and whose parent chat no runtime owns: the continuation is
//     queued again (its message id makes it run once) and a runtime of the
//     parent woken;
//   - sessions_send's exchanges whose turn's chat no runtime owns (see
//     Exchanges.Check).
//
// Runs younger than Grace are left alone: their pods are still being woken.
// It is safe to run in every gateway replica: each step is idempotent.
// Retention (deleting ended runs) is here too, once an hour.
type RunWatch struct {
	Bus     bus.Bus
	Redis   *redis.Client
	Store   RunStore
	Tenants *TenantSet
	// Every is how often it looks (5 s when zero).
	Every time.Duration
	// Grace is how old a run or a ready completion is before it is looked
	// at (15 s when zero).
	Grace time.Duration
	// Retention is how long ended runs are kept (delegate.DefaultRetention
	// when zero).
	Retention time.Duration
	Log       *slog.Logger
}

// Start runs the watch until ctx ends.
func (w *RunWatch) Start(ctx context.Context) error {
	every := w.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	if w.Log == nil {
		w.Log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var swept time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		tenants, _ := w.Tenants.Snapshot()
		sweep := time.Since(swept) >= time.Hour
		for _, tenant := range tenants {
			if err := w.Check(store.WithTenant(ctx, tenant), tenant); err != nil && ctx.Err() == nil {
				w.Log.Error("Failed to check background runs", "tenant", tenant, "err", err)
			}
			if sweep {
				w.sweep(store.WithTenant(ctx, tenant), tenant)
			}
		}
		if sweep {
			swept = time.Now()
		}
	}
}

func (w *RunWatch) sweep(ctx context.Context, tenant string) {
	retention := w.Retention
	if retention <= 0 {
		retention = delegate.DefaultRetention
	}
	n, err := w.Store.DeleteAgentRuns(ctx, time.Now().Add(-retention))
	if err != nil {
		w.Log.Error("Could not delete old delegate runs", "tenant", tenant, "err", err)
	} else if n > 0 {
		w.Log.Info("Deleted delegate runs past their retention", "tenant", tenant, "count", n)
	}
}

// Check looks once at the tenant's background runs (ctx carries the
// tenant).
func (w *RunWatch) Check(ctx context.Context, tenant string) error {
	grace := w.Grace
	if grace <= 0 {
		grace = 15 * time.Second
	}
	old := time.Now().Add(-grace)
	sig := signals{w.Redis}
	d := &Delegates{Tenant: tenant, Bus: w.Bus, Redis: w.Redis, Log: w.Log}
	running, err := w.Store.ListAgentRuns(ctx, store.AgentRunFilter{Mode: store.RunBackground, Active: true, Limit: 10_000})
	if err != nil {
		return fmt.Errorf("failed to list running background runs: %w", err)
	}
	for _, r := range running {
		if r.CreatedAt.After(old) {
			continue
		}
		if owned, err := sig.owned(ctx, ownerKey(tenant, r.Agent, protocol.ChannelDelegate, r.ID)); err != nil || owned {
			continue
		}
		stream := chatStream(tenant, r.Agent, protocol.ChannelDelegate, r.ID)
		if n, err := w.Bus.Len(ctx, stream); err == nil && n == 0 {
			req, err := delegate.RequestOf(r)
			if err != nil {
				w.Log.Error("Cannot queue a background run again", "run", r.ID, "err", err)
				continue
			}
			w.Log.Info("Queuing a background run's task again: it never reached its stream", "run", r.ID, "agent", r.Agent)
			if err := d.queue(ctx, req, 1); err != nil {
				w.Log.Error("Failed to queue a background run again", "run", r.ID, "err", err)
				continue
			}
		}
		w.Log.Debug("Waking a runtime for a background run no runtime serves", "run", r.ID, "agent", r.Agent)
		if err := wake.Publish(ctx, w.Bus, Wake{Tenant: tenant, Agent: r.Agent, Channel: protocol.ChannelDelegate, ChatKey: r.ID}); err != nil {
			w.Log.Error("Failed to wake a runtime for a background run", "run", r.ID, "err", err)
		}
	}
	ready, err := w.Store.ListAgentRuns(ctx, store.AgentRunFilter{Mode: store.RunBackground, Completion: store.CompletionReady, Limit: 10_000})
	if err != nil {
		return fmt.Errorf("failed to list ready background completions: %w", err)
	}
	x := &Exchanges{Tenant: tenant, Bus: w.Bus, Redis: w.Redis, Wake: wake.Publish, Log: w.Log}
	if err := x.Check(ctx, grace); err != nil {
		w.Log.Error("Failed to check agent-to-agent exchanges", "tenant", tenant, "err", err)
	}
	cont := Continuations{Tenant: tenant, Bus: w.Bus, Redis: w.Redis, Wake: wake.Publish}
	for _, r := range ready {
		if r.UpdatedAt.After(old) {
			continue
		}
		id, err := session.ParseID(r.SessionID)
		if err != nil {
			continue
		}
		if owned, err := sig.owned(ctx, ownerKey(tenant, r.ParentAgent, id.Channel, id.ChatID)); err != nil || owned {
			continue
		}
		if err := cont.Ready(ctx, r); err != nil {
			w.Log.Error("Failed to queue a background run's continuation again", "run", r.ID, "err", err)
		}
	}
	return nil
}
