// Package cluster is the data plane of cluster mode: the gateway side that
// queues a chat's messages in Redis and wakes a runtime when the chat has none,
// the session runtime (`picobot session`) that claims wakes and serves one chat
// at a time, and the Redis channels that carry turn events back to the
// gateway.
//
// The unit a runtime owns is a chat (channel + chat id): a chat talks to one
// dialog at a time (its session), and /new or /switch change dialogs inside
// the chat, so the runtime that owns the chat owns whichever session is
// current. Ownership is a lease in the store ("chat:" + chat key) renewed by
// heartbeat; a dead runtime's lease expires and its unacknowledged messages
// are reclaimed by the next one.
//
// Streams (bus keys, all prefixed by tenant):
//
//	<tenant>/<agent>/chat/<channel>/<chat>   inbound messages of one chat (group "runtime")
//	<tenant>/<agent>/wake                    wakes: chats with no runtime (group "pods")
//	{<tenant>:outbound}                      outbound messages for the gateway (group "gateway")
//	picobot/wakes                            every wake, for the operator to size pools (gateway and operator only)
//
// Events of a turn travel on the Redis Pub/Sub channel of the chat; the final
// outcome is also recoverable from the store, so a lost event only delays a
// reply, never loses it.
package cluster

import (
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
)

const (
	groupRuntime = wake.GroupRuntime
	groupPods    = wake.GroupPods
)

// Aliases of the wake protocol (runtime/cluster/wake).
var (
	chatStream     = wake.ChatStream
	wakeStream     = wake.Stream
	eventChannel   = wake.EventChannel
	controlChannel = wake.ControlChannel
	leaseKey       = wake.LeaseKey
	ownerKey       = wake.OwnerKey
	podsKey        = wake.PodsKey
	runningKey     = wake.RunningKey
)

// Wake asks for a runtime for a chat.
type Wake = wake.Wake

// Inbound is a queued user message (runtime/protocol's wire format).
type Inbound = protocol.Inbound
