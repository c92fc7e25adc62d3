package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/turn"
)

// A stateless turn (the OpenAI endpoint's stateless mode) runs in a session
// pod, which alone holds the agent's model keys and tools. The gateway
// queues it as a wake carrying the request; a warm pod claims it like a
// scheduled run, runs the turn on exactly the client's messages and
// publishes its frames on the event channel of a pseudo-chat named by the
// request (channel protocol.ChannelStateless), then goes back to waiting
// warm: nothing of the turn is stored, and its scratch workspace is
// removed. The pod's running key says it is alive; a request whose pod
// died gets a 503 to retry, as the OpenAI API would answer its own fault.

// doneMarker is what a stateless turn's running key holds once its outcome
// is published: the gateway, which may read the key before the frame
// arrives, keeps waiting.
const doneMarker = "done"

// Complete implements gateway.StatelessBackend: it queues the turn for one
// of the agent's pods and relays its frames until the outcome.
func (b *Backend) Complete(ctx context.Context, c gateway.Completion) (gateway.Completed, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return gateway.Completed{}, err
	}
	a, err := b.readyAgent(ctx, tenant, c.Agent)
	if err != nil {
		return gateway.Completed{}, err
	}
	if err := checkClientTools(a, c.Tools); err != nil {
		return gateway.Completed{}, err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:])
	ch := protocol.ChannelStateless
	queueBy := time.Now().Add(b.cfg.QueueTimeout)
	var ps *redis.PubSub
	var events <-chan received
	err = b.retryRedis(ctx, queueBy, "subscribe to the request's events", func() (err error) {
		ps, events, err = b.sig.subscribe(ctx, eventChannel(tenant, c.Agent, ch, id))
		return err
	})
	if err != nil {
		return gateway.Completed{}, err
	}
	defer func() { _ = ps.Close() }()
	w := Wake{Tenant: tenant, Agent: c.Agent, Channel: ch, ChatKey: id, Stateless: &c.Stateless, Stream: c.Stream}
	if err := b.retryRedis(ctx, queueBy, "queue the request", func() error { return wake.Publish(ctx, b.cfg.Bus, w) }); err != nil {
		return gateway.Completed{}, err
	}
	out, err := b.awaitStateless(ctx, c, tenant, id, events)
	if ctx.Err() != nil {
		// The client left: the pod stops the turn.
		_ = b.sig.publish(context.WithoutCancel(ctx), controlChannel(tenant, c.Agent, ch, id), protocol.Frame{Kind: protocol.FrameStop})
	}
	return gateway.Completed{Text: out.Text, ToolCalls: out.ToolCalls}, err
}

// awaitStateless relays the frames of stateless request id until its
// outcome. Every Rewake it reads the request's running key: once a pod has
// taken the request (the key names it), the key's expiry means the pod
// died, and the request fails with CodeUnavailable.
func (b *Backend) awaitStateless(ctx context.Context, c gateway.Completion, tenant, id string, events <-chan received) (protocol.Outcome, error) {
	deadline := time.NewTimer(b.cfg.ReplyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(b.cfg.Rewake)
	defer tick.Stop()
	running := runningKey(tenant, c.Agent, protocol.ChannelStateless, id)
	taken := false
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return protocol.Outcome{}, &gateway.CodedError{Code: gateway.CodeUnavailable, Err: errors.New("lost the request's event subscription; send it again")}
			}
			if e.MessageID != id {
				continue
			}
			if out, err, done := relay(e, c.Sink); done {
				return out, err
			}
		case <-tick.C:
			switch err := b.cfg.Redis.Get(ctx, running).Err(); {
			case err == nil:
				taken = true
			case errors.Is(err, redis.Nil) && taken:
				return protocol.Outcome{}, &gateway.CodedError{Code: gateway.CodeUnavailable,
					Err: errors.New("the session pod running this request stopped before it answered; nothing was stored: send it again")}
			case err != nil && !errors.Is(err, redis.Nil):
				b.cfg.Log.Warn("Failed to check a stateless request's pod", "err", err)
			}
		case <-deadline.C:
			return protocol.Outcome{}, &gateway.CodedError{Code: gateway.CodeUnavailable,
				Err: fmt.Errorf("no session pod answered within %s; send the request again", b.cfg.ReplyTimeout)}
		case <-ctx.Done():
			return protocol.Outcome{}, ctx.Err()
		}
	}
}

// checkClientTools refuses client tools the agent declines, and any named
// like one of its tools (its status lists them); the pod checks again with
// its MCP servers' tools.
func checkClientTools(a *picobotv1alpha1.Agent, defs []llm.ToolDef) error {
	if len(defs) == 0 {
		return nil
	}
	if t := a.Spec.Tools; t != nil && t.ClientTools != nil && !*t.ClientTools {
		return &gateway.CodedError{Code: gateway.CodeBadRequest, Err: protocol.ErrClientToolsRefused}
	}
	for _, d := range defs {
		if slices.Contains(a.Status.EffectiveTools, d.Name) {
			return &gateway.CodedError{Code: gateway.CodeBadRequest, Err: fmt.Errorf("%w: %q; rename it", protocol.ErrClientToolClash, d.Name)}
		}
	}
	return nil
}

// takeStateless records this pod as the one running stateless request w,
// before its wake is acknowledged: from then on the gateway treats the
// key's expiry as the pod's death.
func (r *Runtime) takeStateless(ctx context.Context, w Wake) error {
	key := runningKey(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)
	if err := r.cfg.Redis.Set(ctx, key, r.cfg.Pod, r.cfg.LeaseTTL).Err(); err != nil {
		return fmt.Errorf("failed to take stateless request %s: %w", w.ChatKey, err)
	}
	return nil
}

// complete runs stateless request w and publishes its frames: its events,
// then its outcome or error. A stop on the request's control channel (the
// client left) cancels the turn; so does the end of ctx (the pod's grace
// after SIGTERM ran out).
func (r *Runtime) complete(ctx context.Context, w Wake) {
	c := sessionrt.Chat{Channel: w.Channel, Key: w.ChatKey}
	pods, running := podsKey(r.cfg.Tenant, r.cfg.Agent), runningKey(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)
	_ = r.cfg.Redis.HSet(ctx, pods, r.cfg.Pod, "busy "+w.Channel+" "+w.ChatKey).Err()
	turnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopped := errors.New("stopped by the client")
	if ps, controls, err := r.sig.subscribe(turnCtx, controlChannel(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)); err == nil {
		defer func() { _ = ps.Close() }()
		go func() {
			for f := range controls {
				if f.Kind == protocol.FrameStop {
					cancel(stopped)
				}
			}
		}()
	} else {
		r.cfg.Log.Error("Failed to watch a stateless request's stop", "err", err)
	}
	go r.keepRunning(turnCtx, running)
	s := strategy{r}
	var out protocol.Outcome
	var err error
	if r.cfg.Stateless == nil {
		err = errors.New("this session pod cannot run stateless requests")
	} else {
		out, err = r.cfg.Stateless(turnCtx, *w.Stateless, w.Stream, func(e turn.Event) { s.Event(turnCtx, c, w.ChatKey, e) })
	}
	var ce *protocol.CodedError
	switch {
	case err == nil:
	case errors.Is(context.Cause(turnCtx), stopped):
		ce = &protocol.CodedError{Code: protocol.CodeStopped, Err: errors.New("stopped; nothing was stored")}
	case ctx.Err() != nil:
		ce = &protocol.CodedError{Code: protocol.CodeUnavailable, Err: errors.New("the session pod shut down mid-request; nothing was stored: send it again")}
	default:
		var known bool
		if ce, known = sessionrt.Coded(err); !known {
			r.cfg.Log.Error("Stateless turn failed", "request", w.ChatKey, "err", err)
		}
	}
	cancel(nil)
	s.Done(ctx, c, w.ChatKey, out, ce)
	_ = r.cfg.Redis.Set(context.WithoutCancel(ctx), running, doneMarker, 2*r.cfg.LeaseTTL).Err()
}

// keepRunning renews a stateless request's running key until ctx ends.
func (r *Runtime) keepRunning(ctx context.Context, key string) {
	t := time.NewTicker(r.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = r.cfg.Redis.Expire(ctx, key, r.cfg.LeaseTTL).Err()
		}
	}
}
