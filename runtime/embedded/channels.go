package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/store"
)

// ChannelOptions configure the chat platforms of embedded mode.
type ChannelOptions struct {
	// PublicURL is where the platforms reach this process (for Telegram's
	// setWebhook); without it Telegram bots poll.
	PublicURL string
	// BaseURLs point the platforms' APIs elsewhere (tests).
	BaseURLs channel.BaseURLs
}

// Channels connects the agents' spec.channels (Telegram, Feishu/Lark, Slack,
// webhook): it returns the handler of their webhooks (mount it at /hooks/)
// and the dispatcher that delivers replies and send_message. An inbound
// message is answered like a gateway client's, in the session
// "<channel>:<platform chat id>:<dialog>", and the reply (or the reason
// there is none) goes back through the dispatcher. Channels with missing
// credentials are reported in the log and in the agent's list_channels.
func (r *Runtime) Channels(ctx context.Context, opts ChannelOptions) (http.Handler, *outbound.Dispatcher, *channel.Manager, error) {
	var disp *outbound.Dispatcher
	mgr := channel.NewManager(channel.Options{PublicURL: opts.PublicURL, BaseURLs: opts.BaseURLs, Log: r.log,
		OnInbound: func(ctx context.Context, agentName string, in channel.Inbound) error {
			// The turn runs in the background: the platform gets its
			// 200 once the message is queued, the reply comes as a
			// message of its own.
			r.wg.Go(func() { r.answerChannel(context.WithoutCancel(ctx), disp, agentName, in) })
			return nil
		}})
	for _, a := range r.agents {
		if len(a.spec.Spec.Channels) == 0 {
			continue
		}
		if err := mgr.SetAgent(r.opts.Tenant, a.spec, a.secrets); err != nil {
			r.log.Warn("Some channels of an agent are not usable", "agent", a.name, "err", err)
		}
	}
	disp, err := outbound.New(outbound.Config{Store: r.store, Channels: mgr, Artifacts: r.artifacts, Web: storedOnly{}, Log: r.log})
	if err != nil {
		return nil, nil, nil, err
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
	return mgr.Handler(), disp, mgr, nil
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

// storedOnly is embedded mode's web sink: a send_message to a gateway
// client's chat is stored in its session and shows when the history is
// loaded; open connections are not pushed to.
type storedOnly struct{}

func (storedOnly) DeliverWeb(context.Context, outbound.WebMessage) error { return nil }

// ChannelOwner returns the agent with a channel of that name ("" when none
// has one: gateway channels such as web belong to no agent).
func (r *Runtime) ChannelOwner(name string) string {
	for _, a := range r.agents {
		for _, c := range a.spec.Spec.Channels {
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
