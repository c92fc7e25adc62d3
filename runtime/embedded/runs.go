package embedded

import (
	"context"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

var _ gateway.RunCards = (*Runtime)(nil)

// RunCard implements gateway.RunCards: the card of a run the chat
// started.
func (r *Runtime) RunCard(ctx context.Context, c protocol.Chat, runID string) (delegate.Card, error) {
	if err := r.checkTenant(ctx); err != nil {
		return delegate.Card{}, err
	}
	run, err := delegate.ChatRun(ctx, r.state.Store, c, runID)
	if err != nil {
		return delegate.Card{}, err
	}
	return delegate.CardOf(ctx, r.state.Store, run)
}

// CancelRun implements gateway.RunCards: the user cancels a run of the
// chat from its card, as agent_task cancel does (a run of this process
// stops at once).
func (r *Runtime) CancelRun(ctx context.Context, c protocol.Chat, runID string) (delegate.Card, error) {
	if err := r.checkTenant(ctx); err != nil {
		return delegate.Card{}, err
	}
	run, err := delegate.ChatRun(ctx, r.state.Store, c, runID)
	if err != nil {
		return delegate.Card{}, err
	}
	if _, _, _, err := delegate.CancelRun(ctx, r.state.Store, run, "cancelled by the user", r.active, nil); err != nil {
		return delegate.Card{}, err
	}
	run, err = r.state.Store.GetAgentRun(ctx, runID)
	if err != nil {
		return delegate.Card{}, err
	}
	return delegate.CardOf(ctx, r.state.Store, run)
}
