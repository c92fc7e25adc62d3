// Package bot implements dsh-bot's bot_status and bot_connector tools as a
// feature.Feature.
//
// bot_status reads where the agent runs (instances with their heartbeat
// ages), what waits for it (queue depth) and the effective model with where
// that choice came from (spec, fallback, namespace default). Its model line
// keeps apart the cases that all look like "no model": none configured (a
// configuration gap), one configured but unusable (a missing key: the
// configuration names what), and one configured that this runtime cannot
// reach (a network or endpoint problem, when a Probe says so).
//
// bot_connector lists the agent's connectors (its spec.channels: Telegram,
// Slack, Feishu, webhook, web, terminal) and sends a message through one to
// the chat its spec names, so the agent can speak on its own initiative;
// bot_task and bot_agenda deliver to a connector by the same name.
package bot

import (
	"context"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/tool"
)

// Instance is one process serving the agent: embedded mode's own process,
// or a session pod in cluster mode.
type Instance struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// State is what it does ("serving 2 chats", "idle", "busy web:c1").
	State string `json:"state,omitempty"`
	// HeartbeatAge is how long ago it last renewed its lease, in seconds;
	// nil when it holds none (idle, or embedded mode's own process, which
	// is alive since it answers).
	HeartbeatAge *float64 `json:"heartbeat_age_s,omitempty"`
}

// Queue is what waits for the agent.
type Queue struct {
	// Waiting are messages accepted and not started yet (pending wakes in
	// cluster mode).
	Waiting int64 `json:"waiting"`
	// Running are turns in progress.
	Running int64 `json:"running"`
}

// ModelProbe checks that the effective model answers from here (a
// reachability probe); ok false with the reason when it does not. The
// health service's probe plugs in here.
type ModelProbe func(ctx context.Context, a *feature.Agent) (ok bool, detail string)

// Sender delivers messages and waits for the result;
// *outbound.Dispatcher and cluster.RemoteSender implement it.
type Sender interface {
	Deliver(ctx context.Context, m outbound.Message) (outbound.Result, error)
}

// ChannelStatus reports an agent's channels; *channel.Manager implements it.
type ChannelStatus interface {
	Status(tenant, agent string) []channel.Status
}

// Config says where the tools read and send.
type Config struct {
	// Instances lists the processes serving an agent of a tenant; nil
	// reports them as unknown.
	Instances func(ctx context.Context, tenant, agent string) ([]Instance, error)
	// Queue reports what waits for an agent of a tenant; nil reports it as
	// unknown.
	Queue func(ctx context.Context, tenant, agent string) (Queue, error)
	// Probe, when set, checks the effective model's reachability.
	Probe ModelProbe
	// Sender delivers bot_connector send; without it send says delivery
	// is unavailable here.
	Sender Sender
	// Channels reports connector readiness (the spec's channels are listed
	// as declared without it).
	Channels ChannelStatus
}

// Feature adds bot_status to every agent and bot_connector to agents with
// channels.
type Feature struct{ cfg Config }

var _ feature.Feature = (*Feature)(nil)

// NewFeature returns the feature.
func NewFeature(cfg Config) *Feature { return &Feature{cfg: cfg} }

// Name implements feature.Feature.
func (f *Feature) Name() string { return "bot" }

// Build implements feature.Feature.
func (f *Feature) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	tools := []tool.Tool{newStatus(f.cfg, a)}
	if len(a.Spec.Spec.Channels) > 0 {
		tools = append(tools, newConnector(f.cfg, a))
	}
	return feature.Parts{Tools: tools}, nil
}
