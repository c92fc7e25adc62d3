package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
)

// resultWait bounds a send_message's wait: the dispatcher's own cap plus
// the trip.
const resultWait = outbound.DefaultMaxWait + 15*time.Second

// groupGateway is the gateway replicas' group on the outbound streams.
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
	var res outbound.Result
	r, err := s.request(ctx, req, "no delivery result within %s; the delivery is still recorded and retried")
	if err != nil {
		return res, err
	}
	if json.Unmarshal(r.Result, &res) != nil {
		return outbound.Result{}, fmt.Errorf("malformed delivery result: %s", r.Result)
	}
	if r.Error != "" {
		return res, &outbound.DeliveryError{Result: res, Err: errors.New(r.Error)}
	}
	return res, nil
}

// Act implements messaging.Actor: the gateway, which holds the channel's
// credentials, runs the action, as it delivers messages.
func (s RemoteSender) Act(ctx context.Context, agent, name string, a channel.ActionRequest) (channel.ActionResult, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return channel.ActionResult{}, err
	}
	body, err := json.Marshal(a)
	if err != nil {
		return channel.ActionResult{}, fmt.Errorf("failed to encode action %q: %w", a.Action, err)
	}
	req := wake.OutboundRequest{ID: bus.NewID(), Tenant: tenant, Wait: true, Message: wake.OutboundMessage{Agent: agent},
		Action: &wake.OutboundAction{Channel: name, Request: body}}
	r, err := s.request(ctx, req, "no result of the action within %s; it may or may not have been done")
	if err != nil {
		return channel.ActionResult{}, err
	}
	if r.Error != "" {
		return channel.ActionResult{}, errors.New(r.Error)
	}
	var res channel.ActionResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return channel.ActionResult{}, fmt.Errorf("malformed action result: %s", r.Result)
	}
	return res, nil
}

// request queues req on its tenant's outbound stream and waits for the
// gateway's result; timeout is the error format when none comes.
func (s RemoteSender) request(ctx context.Context, req wake.OutboundRequest, timeout string) (wake.OutboundResult, error) {
	ps, events, err := subscribeRaw(ctx, s.Redis, wake.ResultChannel(req.Tenant, req.ID))
	if err != nil {
		return wake.OutboundResult{}, err
	}
	defer func() { _ = ps.Close() }()
	if err := wake.QueueOutbound(ctx, s.Bus, req); err != nil {
		return wake.OutboundResult{}, err
	}
	wait := time.NewTimer(resultWait)
	defer wait.Stop()
	select {
	case raw, ok := <-events:
		if !ok {
			return wake.OutboundResult{}, errors.New("lost the result subscription; see cron_runs or the session for the outcome")
		}
		var r wake.OutboundResult
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			return wake.OutboundResult{}, fmt.Errorf("malformed result: %s", raw)
		}
		return r, nil
	case <-wait.C:
		return wake.OutboundResult{}, fmt.Errorf(timeout, resultWait)
	case <-ctx.Done():
		return wake.OutboundResult{}, ctx.Err()
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

// Deliverer is what the relay delivers with, and runs channel actions with
// (*outbound.Dispatcher).
type Deliverer interface {
	Deliver(ctx context.Context, m outbound.Message) (outbound.Result, error)
	Act(ctx context.Context, agent, name string, r channel.ActionRequest) (channel.ActionResult, error)
}

// OutboundBus is what the relay reads with: a bus that also reads many
// streams in one blocking call (redisbus.Bus).
type OutboundBus interface {
	bus.Bus
	FetchStreams(ctx context.Context, streams []string, group, consumer string, opts bus.FetchOptions) ([]bus.Message, error)
}

// Relay timing: how long one read blocks, how long a request must sit
// unacked before another replica takes it over (the longest a delivery may
// take, with margin), and how often each stream is checked for such.
const (
	relayBlock         = 5 * time.Second
	relayClaimMinIdle  = resultWait + time.Minute
	relayClaimInterval = time.Minute
)

// OutboundRelay is the gateway's consumer of the tenants' outbound streams
// (wake.OutboundStream). It reads the streams of every tenant in Tenants,
// StreamsPerRead of them per blocking XREADGROUP, so thousands of tenants
// take a few connections; a change of tenants ends the reads and starts
// them again over the new set.
type OutboundRelay struct {
	Bus        OutboundBus
	Redis      *redis.Client
	Dispatcher Deliverer
	// Tenants are the tenants whose streams the relay reads (the
	// namespaces with Agents).
	Tenants *TenantSet
	// Consumer names this replica in the consumer group (hostname).
	Consumer string
	// Parallel bounds concurrent deliveries (16 when zero).
	Parallel int
	// StreamsPerRead bounds the streams of one blocking read (500 when
	// zero).
	StreamsPerRead int
	// TracerProvider continues the trace of each request (the turn that
	// queued it) in the gateway; nil traces nothing.
	TracerProvider trace.TracerProvider
	Log            *slog.Logger

	slots    chan struct{}
	inflight sync.WaitGroup
}

// Start runs the relay until ctx ends; it is a manager.Runnable that every
// replica runs.
func (o *OutboundRelay) Start(ctx context.Context) error {
	if o.Tenants == nil {
		return errors.New("the outbound relay needs the set of tenants to read")
	}
	if o.Consumer == "" {
		o.Consumer, _ = os.Hostname()
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.StreamsPerRead <= 0 {
		o.StreamsPerRead = 500
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.slots = make(chan struct{}, o.Parallel)
	defer o.inflight.Wait()
	nextClaim := time.Now()
	for ctx.Err() == nil {
		tenants, changed := o.Tenants.Snapshot()
		if !time.Now().Before(nextClaim) {
			// At start too: what this replica's previous incarnation or a
			// dead replica left pending.
			o.claim(ctx, tenants)
			nextClaim = time.Now().Add(relayClaimInterval)
		}
		// A round reads until the tenants change or a claim is due.
		round, cancel := context.WithDeadline(ctx, nextClaim)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-round.Done():
			}
		}()
		var readers sync.WaitGroup
		for shard := range slices.Chunk(tenants, o.StreamsPerRead) {
			readers.Go(func() { o.read(ctx, round, shard) })
		}
		readers.Wait()
		<-round.Done() // without tenants, until the first comes
		cancel()
	}
	return nil
}

// read fetches the outbound streams of tenants until round ends and hands
// each request to a delivery; deliveries run under ctx, so a new round does
// not cut them short.
func (o *OutboundRelay) read(ctx, round context.Context, tenants []string) {
	streams := make([]string, len(tenants))
	tenantOf := make(map[string]string, len(tenants))
	for i, t := range tenants {
		streams[i] = wake.OutboundStream(t)
		tenantOf[streams[i]] = t
	}
	backoff := time.Duration(0)
	for round.Err() == nil {
		msgs, err := o.Bus.FetchStreams(round, streams, groupGateway, o.Consumer, bus.FetchOptions{Count: o.Parallel, Block: relayBlock})
		if err != nil {
			if round.Err() != nil {
				return
			}
			backoff = sessionrt.NextBackoff(backoff)
			o.Log.Error("Reading outbound requests failed, backing off", "err", err, "backoff", backoff)
			sessionrt.Sleep(round, backoff)
			continue
		}
		backoff = 0
		for _, m := range msgs {
			if !o.dispatch(ctx, tenantOf[m.Stream], m) {
				return
			}
		}
	}
}

// claim takes over the requests of tenants' streams that a dead replica
// left pending.
func (o *OutboundRelay) claim(ctx context.Context, tenants []string) {
	for _, t := range tenants {
		stream := wake.OutboundStream(t)
		msgs, err := o.Bus.Claim(ctx, stream, groupGateway, o.Consumer, relayClaimMinIdle, o.Parallel)
		if err != nil {
			if ctx.Err() == nil {
				o.Log.Error("Failed to claim pending outbound requests", "tenant", t, "err", err)
			}
			continue
		}
		for _, m := range msgs {
			if staleAction(m) {
				// Its caller stopped waiting long ago and was told it got
				// no result; running it now could, for a thread-reply, post
				// a message the model may already have sent again.
				o.Log.Warn("Dropping a channel action a dead replica left pending", "tenant", t, "id", m.ID)
				if err := o.Bus.Ack(ctx, m.Stream, groupGateway, m.Seq); err != nil && ctx.Err() == nil {
					o.Log.Error("Failed to ack a dropped channel action", "tenant", t, "id", m.ID, "err", err)
				}
				continue
			}
			if !o.dispatch(ctx, t, m) {
				return
			}
		}
	}
}

// staleAction reports whether a claimed request is a channel action.
func staleAction(m bus.Message) bool {
	var head struct {
		Action *wake.OutboundAction `json:"action"`
	}
	return json.Unmarshal(m.Payload, &head) == nil && head.Action != nil
}

// dispatch delivers m on its own goroutine once fewer than Parallel
// deliveries run, and acks it when delivered. It returns false when ctx
// ended first.
func (o *OutboundRelay) dispatch(ctx context.Context, tenant string, m bus.Message) bool {
	select {
	case o.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	o.inflight.Go(func() {
		defer func() { <-o.slots }()
		if err := o.deliver(ctx, tenant, m); err != nil {
			return // shutting down: it stays pending for another replica
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := o.Bus.Ack(actx, m.Stream, groupGateway, m.Seq); err != nil {
			o.Log.Error("Failed to ack an outbound request; it will be delivered again", "tenant", tenant, "id", m.ID, "err", err)
		}
	})
	return true
}

// NeedLeaderElection reports false: every gateway replica relays.
func (o *OutboundRelay) NeedLeaderElection() bool { return false }

// deliver delivers one request of tenant's stream and publishes its result
// when the sender waits for it. It returns an error only when shutting down mid-delivery: the
// request stays pending and another replica takes it over.
func (o *OutboundRelay) deliver(ctx context.Context, tenant string, m bus.Message) error {
	var req wake.OutboundRequest
	err := json.Unmarshal(m.Payload, &req)
	if err == nil && req.Tenant != tenant {
		// The stream is the tenant's: an entry naming another tenant was
		// forged by a pod of this one.
		err = fmt.Errorf("the request names tenant %q on tenant %q's stream", req.Tenant, tenant)
	}
	if err != nil {
		// Dropped (acked): no replica could ever deliver it.
		o.Log.Error("Dropping malformed outbound request", "tenant", tenant, "id", m.ID, "err", err)
		return nil //nolint:nilerr // a malformed request is dropped, not retried
	}
	ctx, span := tracing.Tracer(o.TracerProvider).Start(bus.TraceContext(ctx, m), tracing.SpanOutboundRelay,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(tracing.AttrTenant.String(tenant), tracing.AttrMessageID.String(m.ID)))
	defer span.End()
	if req.Action != nil {
		return o.act(ctx, req)
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
		o.Log.WarnContext(ctx, "Outbound delivery failed", "tenant", req.Tenant, "target", msg.Target, "err", err)
	}
	if req.Wait {
		o.publish(ctx, req, res, err)
	}
	return nil
}

// act runs a channel action of req's tenant and publishes its result. An
// action is not retried, and one a dead replica left pending is dropped
// (staleAction): whoever waited for it has given up by then.
func (o *OutboundRelay) act(ctx context.Context, req wake.OutboundRequest) error {
	var a channel.ActionRequest
	if err := json.Unmarshal(req.Action.Request, &a); err != nil {
		o.publish(ctx, req, nil, fmt.Errorf("malformed action request: %w", err))
		return nil
	}
	res, err := o.Dispatcher.Act(store.WithTenant(ctx, req.Tenant), req.Message.Agent, req.Action.Channel, a)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		o.Log.Warn("Channel action failed", "tenant", req.Tenant, "channel", req.Action.Channel, "action", a.Action, "err", err)
	}
	o.publish(ctx, req, res, err)
	return nil
}

// publish sends the result of a waiting request to its tenant's result
// channel.
func (o *OutboundRelay) publish(ctx context.Context, req wake.OutboundRequest, res any, err error) {
	out := wake.OutboundResult{}
	out.Result, _ = json.Marshal(res)
	if err != nil {
		out.Error = err.Error()
	}
	b, _ := json.Marshal(out)
	if perr := o.Redis.Publish(ctx, wake.ResultChannel(req.Tenant, req.ID), b).Err(); perr != nil {
		o.Log.Error("Failed to publish a result", "err", perr)
	}
}
