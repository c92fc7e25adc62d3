package wake

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/picobot/picobot/runtime/bus"
)

// OutboundStream carries a tenant's outbound messages from its session pods
// (send_message, replies to chat platforms) and from the operator
// (scheduled runs' outcomes) to the gateway, which alone holds channel
// credentials: a gateway replica delivers them with its outbound dispatcher
// and, when asked, publishes the result on ResultChannel. There is one per
// tenant, under the tenant's keys, so a tenant's Redis user can write its
// own and no other, and the gateway knows the tenant from the stream it
// read, not from what the entry claims.
func OutboundStream(tenant string) string { return bus.Key(tenant, "outbound") }

// ResultChannel is the Pub/Sub channel of one request's delivery result. It
// is the tenant's, so the pod waiting on it needs only its tenant's channels.
func ResultChannel(tenant, id string) string { return bus.Key(tenant, "outbound-result", id) }

// OutboundRequest is one queued delivery.
type OutboundRequest struct {
	ID      string          `json:"id"`
	Tenant  string          `json:"tenant"`
	Message OutboundMessage `json:"message"`
	// Wait asks for the result on ResultChannel(Tenant, ID).
	Wait  bool           `json:"wait"`
	Files []OutboundFile `json:"files,omitempty"`
	// Action, when set, asks for a channel action (the message tool's
	// react, edit, read...) instead of a delivery; Message gives only the
	// agent. It always waits.
	Action *OutboundAction `json:"action,omitempty"`
}

// OutboundAction is a channel action run by the gateway, which holds the
// channel's credentials: Request is a channel.ActionRequest, and the result
// published is a channel.ActionResult.
type OutboundAction struct {
	Channel string          `json:"channel"`
	Request json.RawMessage `json:"request"`
}

// OutboundMessage mirrors outbound.Message.
type OutboundMessage struct {
	Agent, Target, Text, Origin string
	Stored                      bool
}

// OutboundFile is an attachment.
type OutboundFile struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"`
}

// OutboundResult is what the gateway publishes for a waiting request:
// Result is an outbound.Result; Error is set when the delivery failed.
type OutboundResult struct {
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error,omitempty"`
}

// QueueOutbound puts a request on its tenant's OutboundStream.
func QueueOutbound(ctx context.Context, b bus.Bus, req OutboundRequest) error {
	if req.Tenant == "" {
		return fmt.Errorf("failed to queue outbound message %q: no tenant", req.ID)
	}
	payload, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := b.Publish(ctx, OutboundStream(req.Tenant), bus.Message{ID: req.ID, Payload: payload}); err != nil {
		return fmt.Errorf("failed to queue outbound message: %w", err)
	}
	return nil
}
