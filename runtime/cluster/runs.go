package cluster

import (
	"context"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

var _ gateway.RunCards = (*Backend)(nil)

// RunCard implements gateway.RunCards: the card of a run the chat
// started.
func (b *Backend) RunCard(ctx context.Context, c protocol.Chat, runID string) (delegate.Card, error) {
	run, err := delegate.ChatRun(ctx, b.Store, c, runID)
	if err != nil {
		return delegate.Card{}, err
	}
	return delegate.CardOf(ctx, b.Store, run)
}

// CancelRun implements gateway.RunCards: the user cancels a run of the
// chat from its card, as agent_task cancel does; the pod serving the run
// gets a stop on the run chat's control channel.
func (b *Backend) CancelRun(ctx context.Context, c protocol.Chat, runID string) (delegate.Card, error) {
	run, err := delegate.ChatRun(ctx, b.Store, c, runID)
	if err != nil {
		return delegate.Card{}, err
	}
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return delegate.Card{}, err
	}
	stopper := &BackgroundRuns{Delegates: &Delegates{Tenant: tenant, Redis: b.cfg.Redis}}
	if _, _, _, err := delegate.CancelRun(ctx, b.Store, run, "cancelled by the user", nil, stopper); err != nil {
		return delegate.Card{}, err
	}
	run, err = b.Store.GetAgentRun(ctx, runID)
	if err != nil {
		return delegate.Card{}, err
	}
	return delegate.CardOf(ctx, b.Store, run)
}
