// Package messaging gives agents send_message (deliver a message and files
// to any chat of the agent's channels, or attach files to the current
// reply), chat_manager (list sessions, channels and messages) and message
// (OpenClaw's send and channel actions on chat platforms), as a
// feature.Feature.
package messaging

import (
	"context"
	"fmt"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Sender delivers messages and waits for the result; *outbound.Dispatcher
// implements it.
type Sender interface {
	Deliver(ctx context.Context, m outbound.Message) (outbound.Result, error)
}

// ChannelStatus reports an agent's channels; *channel.Manager implements it.
type ChannelStatus interface {
	Status(tenant, agent string) []channel.Status
}

// Options configure the feature.
type Options struct {
	// Sender delivers send_message's messages. Without it send_message only
	// attaches files to the current reply and says delivery is unavailable.
	Sender Sender
	// Actor runs message's channel actions other than send; when nil and
	// Sender is an Actor (both implementations are), Sender runs them.
	Actor Actor
	// Channels reports channel readiness for list_channels and health;
	// without it the agent spec's channels are listed as declared.
	Channels ChannelStatus
	// MaxFileBytes caps one attachment (DefaultMaxFileBytes).
	MaxFileBytes int64
	// ExtraRoots are folders outside the session workspace whose files may
	// be sent too (a browser's screenshot folder).
	ExtraRoots []string
	// Files, when set, reads the attachments where the programs' files
	// are (a sandbox pod's workspace, execserver.WorkspaceFiles) instead
	// of the runtime's own folder; ExtraRoots are not read then.
	Files tool.WorkspaceFiles
}

// DefaultMaxFileBytes is the attachment cap: Telegram bots may upload 50 MB,
// Feishu 30 MB, and the message passes through memory.
const DefaultMaxFileBytes = 20 << 20

// Feature is the messaging feature.
type Feature struct{ opts Options }

var _ feature.Feature = (*Feature)(nil)

// NewFeature returns the messaging feature.
func NewFeature(opts Options) *Feature {
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if a, ok := opts.Sender.(Actor); ok && opts.Actor == nil {
		opts.Actor = a
	}
	return &Feature{opts: opts}
}

// Name implements feature.Feature.
func (f *Feature) Name() string { return "messaging" }

// Build implements feature.Feature: send_message and chat_manager for one
// agent, message when it has a chat platform channel (the tool is declared
// to no other agent, which would pay for its schema in every request and
// could do nothing with it), and a health check per channel.
func (f *Feature) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	cfg := toolConfig{opts: f.opts, store: a.Host.Store, agent: a.Spec.Name, tenant: a.Host.Tenant, spec: a.Spec}
	tools := []tool.Tool{NewSendMessage(cfg), NewChatManager(cfg)}
	if cfg.hasChatChannel() {
		tools = append(tools, NewMessage(cfg))
	}
	return feature.Parts{
		Tools: tools,
		Health: func(ctx context.Context) []health.Check {
			var out []health.Check
			for _, s := range cfg.channels(ctx) {
				c := health.Check{Name: fmt.Sprintf("channel %s (%s)", s.Name, s.Type), OK: s.Ready, Message: "ready"}
				if s.Mode != "" {
					c.Message = "ready, " + s.Mode
				}
				if !s.Ready {
					c.Message, c.Fix = s.Message, "fix the channel's Secret or its entry in spec.channels"
				}
				out = append(out, c)
			}
			return out
		},
	}, nil
}

// toolConfig is what both tools need of their agent.
type toolConfig struct {
	opts   Options
	store  store.Store
	agent  string
	tenant string
	spec   *picobotv1alpha1.Agent
}

// channels lists the agent's channels: from the channel manager when there
// is one, else as the spec declares them.
func (c toolConfig) channels(ctx context.Context) []channel.Status {
	tenant := c.tenant
	if t, err := store.TenantFrom(ctx); err == nil {
		tenant = t
	}
	if c.opts.Channels != nil {
		if st := c.opts.Channels.Status(tenant, c.agent); st != nil {
			return st
		}
	}
	var out []channel.Status
	if c.spec != nil {
		for _, ch := range c.spec.Spec.Channels {
			name := ch.Name
			if name == "" {
				name = string(ch.Type)
			}
			ready := ch.Type == channel.TypeWeb || ch.Type == channel.TypeTerminal
			st := channel.Status{Name: name, Type: ch.Type, Ready: ready}
			if !ready {
				st.Message = "no channel manager in this runtime"
			}
			out = append(out, st)
		}
	}
	return out
}
