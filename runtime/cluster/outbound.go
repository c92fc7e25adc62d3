package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/store"
)

// resultWait bounds a send_message's wait: the dispatcher's own cap plus
// the trip.
const resultWait = outbound.DefaultMaxWait + 15*time.Second

// groupGateway is the gateway replicas' group on wake.OutboundStream.
const groupGateway = "gateway"

// RemoteSender is the pods' messaging.Sender: it queues the message for the
// gateway and waits for the real delivery result.
type RemoteSender struct {
	Bus   bus.Bus
	Redis *redis.Client
}

// Deliver implements messaging.Sender.
func (s RemoteSender) Deliver(ctx context.Context, m outbound.Message) (outbound.Result, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return outbound.Result{}, err
	}
	req := wake.OutboundRequest{ID: bus.NewID(), Tenant: tenant, Wait: true,
		Message: wake.OutboundMessage{Agent: m.Agent, Target: m.Target, Text: m.Text, Origin: m.Origin}}
	for _, f := range m.Files {
		req.Files = append(req.Files, wake.OutboundFile{Name: f.Name, MediaType: f.MediaType, Data: f.Data})
	}
	ps, events, err := subscribeRaw(ctx, s.Redis, wake.ResultChannel(tenant, req.ID))
	if err != nil {
		return outbound.Result{}, err
	}
	defer func() { _ = ps.Close() }()
	if err := wake.QueueOutbound(ctx, s.Bus, req); err != nil {
		return outbound.Result{}, err
	}
	wait := time.NewTimer(resultWait)
	defer wait.Stop()
	select {
	case raw, ok := <-events:
		if !ok {
			return outbound.Result{}, errors.New("lost the delivery result subscription; see cron_runs or the session for the outcome")
		}
		var r wake.OutboundResult
		var res outbound.Result
		if err := json.Unmarshal([]byte(raw), &r); err != nil || json.Unmarshal(r.Result, &res) != nil {
			return outbound.Result{}, fmt.Errorf("malformed delivery result: %s", raw)
		}
		if r.Error != "" {
			return res, &outbound.DeliveryError{Result: res, Err: errors.New(r.Error)}
		}
		return res, nil
	case <-wait.C:
		return outbound.Result{}, fmt.Errorf("no delivery result within %s; the delivery is still recorded and retried", resultWait)
	case <-ctx.Done():
		return outbound.Result{}, ctx.Err()
	}
}

// QueueReply hands the final reply of a turn that came from an external
// channel to the gateway, without waiting.
func QueueReply(ctx context.Context, b bus.Bus, tenant string, m outbound.Message) error {
	return wake.QueueOutbound(ctx, b, wake.OutboundRequest{ID: bus.NewID(), Tenant: tenant,
		Message: wake.OutboundMessage{Agent: m.Agent, Target: m.Target, Text: m.Text, Origin: m.Origin, Stored: m.Stored}})
}

func subscribeRaw(ctx context.Context, rdb *redis.Client, ch string) (*redis.PubSub, <-chan string, error) {
	ps := rdb.Subscribe(ctx, ch)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("failed to subscribe to %s: %w", ch, err)
	}
	out := make(chan string, 1)
	go func() {
		defer close(out)
		for m := range ps.Channel() {
			select {
			case out <- m.Payload:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ps, out, nil
}

// Deliverer is what the relay delivers with (*outbound.Dispatcher).
type Deliverer interface {
	Deliver(ctx context.Context, m outbound.Message) (outbound.Result, error)
}

// OutboundRelay is the gateway's consumer of wake.OutboundStream.
type OutboundRelay struct {
	Bus        bus.Bus
	Redis      *redis.Client
	Dispatcher Deliverer
	// Consumer names this replica in the consumer group (hostname).
	Consumer string
	// Parallel bounds concurrent deliveries (16 when zero).
	Parallel int
	Log      *slog.Logger
}

// Start runs the relay until ctx ends; it is a manager.Runnable that every
// replica runs.
func (o *OutboundRelay) Start(ctx context.Context) error {
	if o.Consumer == "" {
		o.Consumer, _ = os.Hostname()
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	// Requests a dead replica took are taken over after the longest a
	// delivery may take.
	c := bus.NewConsumer(o.Bus, wake.OutboundStream, groupGateway, o.Consumer, func(ctx context.Context, msgs []bus.Message) error {
		for _, m := range msgs {
			if err := o.deliver(ctx, m); err != nil {
				return err
			}
		}
		return nil
	}, bus.ConsumerOptions{Concurrency: o.Parallel, ClaimMinIdle: resultWait + time.Minute, ClaimInterval: time.Minute, Logger: o.Log})
	return c.Start(ctx)
}

// NeedLeaderElection reports false: every gateway replica relays.
func (o *OutboundRelay) NeedLeaderElection() bool { return false }

// deliver delivers one request and publishes its result when the sender
// waits for it. It returns an error only when shutting down mid-delivery: the
// request stays pending and another replica takes it over.
func (o *OutboundRelay) deliver(ctx context.Context, m bus.Message) error {
	var req wake.OutboundRequest
	err := json.Unmarshal(m.Payload, &req)
	if err == nil && req.Tenant == "" {
		err = errors.New("no tenant")
	}
	if err != nil {
		// Dropped (acked): no replica could ever deliver it.
		o.Log.Error("Dropping malformed outbound request", "id", m.ID, "err", err)
		return nil //nolint:nilerr // a malformed request is dropped, not retried
	}
	msg := outbound.Message{Agent: req.Message.Agent, Target: req.Message.Target, Text: req.Message.Text, Origin: req.Message.Origin,
		Stored: req.Message.Stored}
	for _, f := range req.Files {
		msg.Files = append(msg.Files, channel.File{Name: f.Name, MediaType: f.MediaType, Size: int64(len(f.Data)), Data: f.Data})
	}
	res, err := o.Dispatcher.Deliver(store.WithTenant(ctx, req.Tenant), msg)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		o.Log.Warn("Outbound delivery failed", "tenant", req.Tenant, "target", msg.Target, "err", err)
	}
	if req.Wait {
		out := wake.OutboundResult{}
		out.Result, _ = json.Marshal(res)
		if err != nil {
			out.Error = err.Error()
		}
		b, _ := json.Marshal(out)
		if perr := o.Redis.Publish(ctx, wake.ResultChannel(req.Tenant, req.ID), b).Err(); perr != nil {
			o.Log.Error("Failed to publish delivery result", "err", perr)
		}
	}
	return nil
}
