package outbound

import (
	"context"
	"fmt"
	"slices"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/store"
)

// Act runs a channel action other than send (react, edit, read, pin...)
// on agent's channel name, with the connector's own credentials, and
// returns what the platform answered. Unlike Deliver it records nothing
// and does not retry: an action is one API call whose result the caller
// (the message tool) reports at once. An action the channel's platform
// lacks is a *channel.UnsupportedActionError naming the channel.
func (d *Dispatcher) Act(ctx context.Context, agent, name string, r channel.ActionRequest) (channel.ActionResult, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return channel.ActionResult{}, fmt.Errorf("failed to run action %q: %w", r.Action, err)
	}
	c, err := d.cfg.Channels.Lookup(tenant, agent, name)
	if err != nil {
		if slices.Contains(d.cfg.WebChannels, name) {
			return channel.ActionResult{}, fmt.Errorf("%w: channel %q is the gateway's own client channel, which offers only send",
				channel.ErrUnsupportedAction, name)
		}
		return channel.ActionResult{}, fmt.Errorf("%w: %w", ErrUnknownChannel, err)
	}
	a, ok := c.(channel.Actor)
	if !ok {
		return channel.ActionResult{}, channel.Unsupported(c, r.Action, "")
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.MaxWait)
	defer cancel()
	return a.Act(ctx, r)
}
