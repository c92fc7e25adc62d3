// Package wake is the small protocol between the gateway, session pods and
// the operator of cluster mode: the Redis keys of a chat and an agent, and
// the wake message that asks for a runtime. It has no heavy dependencies, so
// the operator can use it without linking the agent runtime.
package wake

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/protocol"
)

// Consumer groups.
const (
	// GroupRuntime is the group of a chat stream's runtime.
	GroupRuntime = protocol.ChatGroup
	// GroupPods is the group of an agent's session pods on its wake stream.
	GroupPods = "pods"
	// GroupOperator is the operator's group on Notices.
	GroupOperator = "operator"
)

// Notices is the stream every wake is copied to; the operator reads it to
// size pools right away instead of on its next resync. It is shared by all
// tenants, so only the gateway and the operator (Redis's admin user) write
// and read it; no tenant user's key pattern reaches it, and session pods
// never need it (they read their agent's Stream).
const Notices = "picobot/wakes"

// Wake asks for a runtime for a chat.
type Wake struct {
	Tenant  string    `json:"tenant"`
	Agent   string    `json:"agent"`
	Channel string    `json:"channel"`
	ChatKey string    `json:"chat_key"`
	At      time.Time `json:"at"`
	// Run, when set, is a scheduled run for the pod to execute.
	Run *Run `json:"run,omitempty"`
	// Stateless, when set, is a stateless turn (the OpenAI endpoint's) for
	// the pod to run: Channel is protocol.ChannelStateless, ChatKey the request's
	// id, and the turn's frames go on that pseudo-chat's EventChannel.
	Stateless *protocol.Stateless `json:"stateless,omitempty"`
	// Stream asks for the stateless turn's text as it is generated.
	Stream bool `json:"stream,omitempty"`
}

// RunningKey marks a chat whose turn is running (the message id); a
// stateless turn's holds the pod running it, renewed while it runs, then
// "done".
func RunningKey(tenant, agent, channel, chatKey string) string {
	return bus.Key(tenant, agent, "running", channel, chatKey)
}

// ChatStream is the inbound stream of a chat.
func ChatStream(tenant, agent, channel, chatKey string) string {
	return protocol.ChatStream(tenant, agent, channel, chatKey)
}

// Stream is the stream an agent's pods claim wakes from.
func Stream(tenant, agent string) string { return bus.Key(tenant, agent, "wake") }

// EventChannel is the Pub/Sub channel of a chat's turn events.
func EventChannel(tenant, agent, channel, chatKey string) string {
	return bus.Key(tenant, agent, "events", channel, chatKey)
}

// ControlChannel is the Pub/Sub channel of a chat's controls (stop).
func ControlChannel(tenant, agent, channel, chatKey string) string {
	return bus.Key(tenant, agent, "control", channel, chatKey)
}

// OwnerKey holds the pod serving a chat (a hint with a TTL; the store lease
// is the authority).
func OwnerKey(tenant, agent, channel, chatKey string) string {
	return bus.Key(tenant, agent, "owner", channel, chatKey)
}

// PodsKey is the hash of an agent's pods: pod name -> "warm" or
// "busy <channel> <chat>".
func PodsKey(tenant, agent string) string { return bus.Key(tenant, agent, "pods") }

// LeaseKey is the store lease that makes a runtime the owner of a chat.
func LeaseKey(channel, chatKey string) string { return "chat:" + channel + ":" + chatKey }

// Publish queues a wake for the agent's pods and copies it to Notices.
func Publish(ctx context.Context, b bus.Bus, w Wake) error {
	if w.At.IsZero() {
		w.At = time.Now()
	}
	if err := Queue(ctx, b, w); err != nil {
		return err
	}
	payload, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if err := b.Publish(ctx, Notices, bus.Message{ID: bus.NewID(), Payload: payload}); err != nil {
		return fmt.Errorf("failed to notify the operator of a wake: %w", err)
	}
	return nil
}

// Queue queues a wake for the agent's pods without copying it to Notices,
// which a session pod's tenant user cannot write: a session pod wakes the
// runtime of its delegated runs with it. A warm pod claims the wake at once;
// otherwise the operator finds it in the stream's lag (see Stream) when it
// next looks at the agent.
func Queue(ctx context.Context, b bus.Bus, w Wake) error {
	if w.At.IsZero() {
		w.At = time.Now()
	}
	payload, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if err := b.Publish(ctx, Stream(w.Tenant, w.Agent), bus.Message{ID: bus.NewID(), Payload: payload}); err != nil {
		return fmt.Errorf("failed to wake a runtime: %w", err)
	}
	return nil
}

// ConnectionEnv are the environment variables that connect cluster-mode
// processes to PostgreSQL, Redis and S3. The operator copies its own values
// into each tenant namespace's connection Secret for session pods, except
// the S3 ones: session pods reach S3 through the gateway's blob grant
// service (PICOBOT_BLOB_URL) and hold no S3 credential.
var ConnectionEnv = []string{"PICOBOT_POSTGRES_URL", "PICOBOT_REDIS_URL", "PICOBOT_S3_ENDPOINT", "PICOBOT_S3_BUCKET",
	"PICOBOT_S3_REGION", "PICOBOT_S3_PATH_STYLE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
