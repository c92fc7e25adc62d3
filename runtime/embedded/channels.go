package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/store"
)

// ServeChannels connects the agents' spec.channels (Telegram, Feishu/Lark,
// Slack, webhook) to mgr and starts it, and resumes the deliveries disp left
// unfinished; it returns the handler of the platforms' webhooks (mount it at
// /hooks/). The caller built mgr with Inbound as its OnInbound and disp on
// mgr and the runtime's state: an inbound message is answered like a gateway
// client's, in the session "<channel>:<platform chat id>:<dialog>", and the
// reply (or the reason there is none) goes back through disp. Channels with
// missing credentials are reported in the log and in the agent's
// list_channels.
func (r *Runtime) ServeChannels(ctx context.Context, mgr *channel.Manager, disp *outbound.Dispatcher) http.Handler {
	r.mu.Lock()
	r.disp = disp
	r.mu.Unlock()
	for _, a := range r.agents {
		g := a.gen()
		if len(g.spec.Spec.Channels) == 0 {
			continue
		}
		if err := mgr.SetAgent(r.opts.Tenant, g.spec, g.secrets); err != nil {
			r.log.Warn("Some channels of an agent are not usable", "agent", a.name, "err", err)
		}
	}
	r.wg.Go(func() {
		if err := mgr.Start(r.ctx); err != nil && r.ctx.Err() == nil {
			r.log.Error("Channels stopped", "err", err)
		}
	})
	if n, err := disp.Resume(store.WithTenant(ctx, r.opts.Tenant)); err != nil {
		r.log.Error("Failed to resume deliveries", "err", err)
	} else if n > 0 {
		r.log.Info("Resumed deliveries left by the last run", "count", n)
	}
	return mgr.Handler()
}

// Inbound is the OnInbound of the channel manager given to ServeChannels: the
// turn runs in the background, so the platform gets its 200 once the message
// is queued; the reply comes as a message of its own.
func (r *Runtime) Inbound(ctx context.Context, agentName string, in channel.Inbound) error {
	r.mu.Lock()
	disp := r.disp
	r.mu.Unlock()
	if disp == nil {
		return errors.New("chat platform channels are not served yet")
	}
	r.wg.Go(func() { r.answerChannel(context.WithoutCancel(ctx), disp, agentName, in) })
	return nil
}

// answerChannel runs a platform message and delivers its reply.
func (r *Runtime) answerChannel(ctx context.Context, disp *outbound.Dispatcher, agentName string, in channel.Inbound) {
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	out, err := r.Handle(ctx, gateway.Send{ID: in.MessageID, Channel: in.Channel, Agent: agentName, ChatID: in.ChatID, Text: in.Text})
	if out.Duplicate {
		return
	}
	text, stored := out.Text, out.Command == ""
	if err != nil {
		var ce *gateway.CodedError
		if errors.As(err, &ce) && ce.Code == gateway.CodeStopped {
			return
		}
		if !quota.ChatNotice(ctx, r.state.Store, r.now(), agentName, in.Channel+":"+in.ChatID, err) {
			// Told already: a spent budget once per cap and period, a
			// session or message cap once a minute.
			return
		}
		text, stored = fmt.Sprintf("Sorry, I could not answer: %v", err), false
	}
	if text == "" {
		return
	}
	_, err = disp.Deliver(ctx, outbound.Message{Agent: agentName, Target: in.Channel + ":" + in.ChatID, Text: text,
		Origin: out.SessionID, Stored: stored})
	if err != nil {
		r.log.Error("Failed to deliver a reply", "agent", agentName, "channel", in.Channel, "chat", in.ChatID, "err", err)
	}
}

// ChannelOwner returns the agent with a channel of that name ("" when none
// has one: gateway channels such as web belong to no agent).
func (r *Runtime) ChannelOwner(name string) string {
	for _, a := range r.agents {
		for _, c := range a.gen().spec.Spec.Channels {
			cn := c.Name
			if cn == "" {
				cn = string(c.Type)
			}
			if cn == name {
				return a.name
			}
		}
	}
	return ""
}
