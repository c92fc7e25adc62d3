package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// Defaults of a session runtime.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultLeaseTTL    = 30 * time.Second
	fetchBlock         = time.Second
)

// RuntimeConfig configures a session runtime.
type RuntimeConfig struct {
	Tenant, Agent string
	// Pod names this runtime: lease holder and consumer name.
	Pod   string
	Bus   bus.Bus
	Redis *redis.Client
	Store store.Store
	// Manager runs the agent's turns (agenthost.Built.Manager); its Holder
	// must be Pod.
	Manager *session.Manager
	// IdleTimeout ends the runtime after a chat had no message that long.
	IdleTimeout time.Duration
	// LeaseTTL bounds how long a dead runtime keeps a chat.
	LeaseTTL time.Duration
	// Runs executes scheduled runs carried by wakes (localrun's Runner);
	// without it such wakes are answered with an error.
	Runs scheduler.Runner
	// Stateless runs the stateless turns carried by wakes
	// (agenthost.Built.Complete); without it they are answered with an
	// error.
	Stateless func(ctx context.Context, req protocol.Stateless, stream bool, sink func(turn.Event)) (protocol.Outcome, error)
	// Delegated runs the delegated tasks of the agent's sub-agent runs
	// (SubAgentRuns); without it they are answered with an error.
	Delegated func(ctx context.Context, d protocol.Delegation) (context.Context, *session.Manager, error)
	// Completion completes background delegate runs: the outcome of a
	// run's message and the delivery of a continuation (see
	// RunCompletion); nil leaves them to another runtime.
	Completion *RunCompletion
	// OnQuiet is called when the chat has gone quiet after messages were
	// processed (the first empty poll after them), and when the runtime is
	// ready and starts waiting for a wake; session pods return memory to
	// the OS there.
	OnQuiet func()
	// Drain, when closed, stops the pod taking wakes and messages
	// (SIGTERM); Run's context then bounds the turn still running (see
	// sessionrt.Config.Drain).
	Drain <-chan struct{}
	// Metrics records the turns and the chat served; nil records nothing.
	Metrics *metrics.Metrics
	// AuditRetention is how long the tenant's audit records are kept
	// (audit.DefaultRetention when 0): a pod that served a chat deletes
	// older ones before it exits.
	AuditRetention time.Duration
	// TracerProvider traces the turns, continuing the trace each message
	// carries from the gateway; nil traces nothing.
	TracerProvider trace.TracerProvider
	Log            *slog.Logger
}

// Runtime is a session pod's main loop: wait as a warm pod for a wake, claim
// it, serve that chat until it is idle, and return (the pod then exits and the
// operator replaces it).
type Runtime struct {
	cfg     RuntimeConfig
	sig     signals
	tracer  trace.Tracer
	rt      *sessionrt.Runtime
	running atomic.Value // string: the running marker of the turn in progress
}

// NewRuntime returns a runtime.
func NewRuntime(cfg RuntimeConfig) *Runtime {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Runtime{cfg: cfg, sig: signals{cfg.Redis}, tracer: tracing.Tracer(cfg.TracerProvider)}
	s := strategy{r}
	// A busy session is the lease of a dead owner that has not expired yet
	// (this pod owns the chat): wait for it rather than fail the turn.
	r.rt = sessionrt.New(sessionrt.Config{Tenant: cfg.Tenant, Agent: cfg.Agent, Consumer: cfg.Pod, Bus: cfg.Bus, Store: cfg.Store,
		Manager: cfg.Manager, Delegated: cfg.Delegated, Owner: s, Reporter: s, IdleTimeout: cfg.IdleTimeout, Block: fetchBlock, BusyWait: cfg.LeaseTTL / 6,
		OnQuiet: cfg.OnQuiet, Drain: cfg.Drain, Metrics: cfg.Metrics, TracerProvider: cfg.TracerProvider, Log: cfg.Log})
	return r
}

// registerWithin bounds how long a starting pod retries its registration:
// right after a Redis restart the tenant's user is gone (WRONGPASS) until
// the operator sets it again, within seconds. A pod that exited instead
// failed "before serving", and its Agent read not Ready meanwhile.
const registerWithin = 30 * time.Second

// register enters the pod in the agent's registry as warm, retrying with
// backoff for registerWithin while Redis refuses.
func (r *Runtime) register(ctx context.Context, pods string) error {
	until := time.Now().Add(registerWithin)
	var backoff time.Duration
	for {
		err := r.cfg.Redis.HSet(ctx, pods, r.cfg.Pod, "warm").Err()
		if err == nil || ctx.Err() != nil || time.Now().After(until) {
			return err
		}
		backoff = sessionrt.NextBackoff(backoff)
		r.cfg.Log.Warn("Redis refused the pod's registration; retrying", "err", err, "backoff", backoff)
		if !sessionrt.Sleep(ctx, backoff) {
			return ctx.Err()
		}
	}
}

// Run waits for a wake and serves its chat. It returns nil after the chat went
// idle, or the context's error when cancelled while warm.
func (r *Runtime) Run(ctx context.Context) error {
	ctx = store.WithTenant(ctx, r.cfg.Tenant)
	pods := podsKey(r.cfg.Tenant, r.cfg.Agent)
	if err := r.register(ctx, pods); err != nil {
		return fmt.Errorf("failed to register pod: %w", err)
	}
	defer r.cfg.Redis.HDel(context.WithoutCancel(ctx), pods, r.cfg.Pod)
	r.cfg.Metrics.PoolWaiting(r.cfg.Tenant, r.cfg.Agent)
	ready := r.redisNow(ctx)
	r.quiet()
	for {
		taking, stopTaking := r.rt.UntilDrain(ctx)
		w, m, err := r.claim(taking)
		stopTaking()
		if err != nil || w == nil {
			return err
		}
		r.cfg.Metrics.PoolClaimed(r.cfg.Tenant, r.cfg.Agent, !queuedAt(m, *w).Before(ready))
		switch {
		case w.Run != nil:
			// A scheduled run: a fresh session, then the pod exits like
			// after a chat.
			rctx, span := r.continueTrace(ctx, m, *w)
			r.run(rctx, *w)
			span.End()
			return nil
		case w.Stateless != nil:
			// A stateless turn stores nothing and leaves nothing behind:
			// the pod stays warm for the next wake.
			sctx, span := r.continueTrace(ctx, m, *w)
			r.complete(sctx, *w)
			span.End()
			r.quiet()
		default:
			served, err := r.rt.Serve(ctx, sessionrt.Chat{Channel: w.Channel, Key: w.ChatKey})
			if served {
				r.sweepAudit(ctx)
			}
			if err != nil || served {
				return err
			}
		}
		// Nothing was waiting: stay warm.
		if err := r.cfg.Redis.HSet(ctx, pods, r.cfg.Pod, "warm").Err(); err != nil {
			r.cfg.Log.Error("Failed to mark pod warm", "err", err)
		}
		ready = r.redisNow(ctx)
	}
}

// redisNow is Redis's clock now, which stamps the wake stream's entry ids:
// a pod that notes it when it starts waiting for wakes tells a wake queued
// while it waited (a warm claim) from one queued before (a cold one)
// without comparing the clocks of two hosts. The pod's own clock stands in
// when Redis does not answer. It is in milliseconds, as entry ids are.
func (r *Runtime) redisNow(ctx context.Context) time.Time {
	now, err := r.cfg.Redis.Time(ctx).Result()
	if err != nil {
		r.cfg.Log.Debug("Could not read Redis's clock; the pod's own times its warm claims", "err", err)
		now = time.Now()
	}
	return now.Truncate(time.Millisecond)
}

// queuedAt is when the wake entry m (of wake w) was queued by Redis's
// clock: the time of its stream entry id ("<ms>-<n>"), or the wake's own
// time when the bus gives no such id.
func queuedAt(m bus.Message, w Wake) time.Time {
	ms, _, _ := strings.Cut(m.Seq, "-")
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		return time.UnixMilli(n)
	}
	return w.At
}

// claim consumes the agent's wake stream until a wake is this pod's: a
// scheduled run, or a chat whose lease it took. Wakes of chats another
// runtime owns are acked (the owner sees their messages), and so is the
// claimed one, before serving starts: serving outlasts any claim timeout. A
// wake left pending by a pod that died before acking it is claimed from it.
// It returns nil when ctx ends first.
func (r *Runtime) claim(ctx context.Context) (*Wake, bus.Message, error) {
	var claimed *Wake
	var entry bus.Message
	c := bus.NewConsumer(r.cfg.Bus, wakeStream(r.cfg.Tenant, r.cfg.Agent), groupPods, r.cfg.Pod,
		func(ctx context.Context, msgs []bus.Message) error {
			entry = msgs[0]
			w, err := decodeWake(msgs[0].Payload)
			if err != nil {
				r.cfg.Log.Error("Dropping malformed wake", "id", msgs[0].ID, "err", err)
				return nil // acked: it can never be served
			}
			switch {
			case w.Stateless != nil:
				if err := r.takeStateless(ctx, w); err != nil {
					return err
				}
			case w.Run == nil:
				ok, err := r.acquire(ctx, w)
				if err != nil || !ok {
					return err // not ok: another runtime owns the chat
				}
			}
			claimed = &w
			return bus.ErrDone
		}, bus.ConsumerOptions{Batch: 1, Logger: r.cfg.Log})
	if err := c.Start(ctx); err != nil {
		return nil, bus.Message{}, err
	}
	if claimed == nil {
		return nil, bus.Message{}, ctx.Err()
	}
	return claimed, entry, nil
}

// continueTrace starts the span of the work of wake w (a scheduled run or
// a stateless request), continuing the trace its wake entry m carries (the
// operator's cron fire, the gateway's request).
func (r *Runtime) continueTrace(ctx context.Context, m bus.Message, w Wake) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{tracing.AttrTenant.String(r.cfg.Tenant), tracing.AttrAgent.String(r.cfg.Agent), tracing.AttrChannel.String(w.Channel)}
	if w.Run != nil {
		attrs = append(attrs, tracing.AttrRunID.String(w.Run.RunID), tracing.AttrCronJob.String(w.Run.JobName))
	}
	return r.tracer.Start(bus.TraceContext(ctx, m), tracing.SpanTurn, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

func decodeWake(payload []byte) (Wake, error) {
	var w Wake
	if err := json.Unmarshal(payload, &w); err != nil {
		return Wake{}, err
	}
	if w.ChatKey == "" {
		return Wake{}, errors.New("no chat key")
	}
	return w, nil
}

// acquire takes the lease of w's chat. While the store is down (a PostgreSQL
// restart) it waits for it rather than give the wake up, which would leave
// the chat to the gateway's rewakes.
func (r *Runtime) acquire(ctx context.Context, w Wake) (bool, error) {
	c := sessionrt.Chat{Channel: w.Channel, Key: w.ChatKey}
	for backoff := time.Duration(0); ; {
		ok, err := strategy{r}.Acquire(ctx, c)
		if err == nil {
			return ok, nil
		}
		if !errors.Is(err, store.ErrUnavailable) {
			return false, fmt.Errorf("failed to take the lease of chat %q: %w", w.ChatKey, err)
		}
		backoff = sessionrt.NextBackoff(backoff)
		r.cfg.Log.Warn("Store unavailable; retrying the chat lease", "chat", w.ChatKey, "err", err, "backoff", backoff)
		if !sessionrt.Sleep(ctx, backoff) {
			return false, ctx.Err()
		}
	}
}

// quiet calls OnQuiet, if set.
func (r *Runtime) quiet() {
	if r.cfg.OnQuiet != nil {
		r.cfg.OnQuiet()
	}
}

// run executes a scheduled run and publishes its result for the operator.
func (r *Runtime) run(ctx context.Context, w Wake) {
	_ = r.cfg.Redis.HSet(ctx, podsKey(r.cfg.Tenant, r.cfg.Agent), r.cfg.Pod, "busy "+w.Channel+" "+w.ChatKey).Err()
	out := wake.RunResult{}
	if r.cfg.Runs == nil {
		out.Error = "this session pod cannot execute scheduled runs"
	} else {
		res, err := r.cfg.Runs.Run(ctx, scheduler.RunRequest{Tenant: r.cfg.Tenant, Job: w.Run.Job, JobName: w.Run.JobName,
			RunID: w.Run.RunID, ScheduledTime: w.Run.ScheduledTime, Agent: r.cfg.Agent, Prompt: w.Run.Prompt})
		out.Result = res
		if err != nil {
			out.Error = err.Error()
		}
		tracing.Fail(trace.SpanFromContext(ctx), err)
	}
	b, _ := json.Marshal(out)
	if err := r.cfg.Redis.Publish(context.WithoutCancel(ctx), wake.RunResultChannel(r.cfg.Tenant, w.Run.RunID), b).Err(); err != nil {
		r.cfg.Log.ErrorContext(ctx, "Failed to publish the run's result", "run", w.Run.RunID, "err", err)
	}
}

// sweepAudit deletes the tenant's audit records past the retention. Pods
// that served a chat do it as they exit: no other process of a tenant
// holds its credentials, and the delete walks an index, so it is cheap
// enough to repeat.
func (r *Runtime) sweepAudit(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	sw := audit.Sweeper{Store: r.cfg.Store, Retention: r.cfg.AuditRetention, Log: r.cfg.Log}
	if _, err := sw.Sweep(sctx, r.cfg.Tenant); err != nil {
		r.cfg.Log.Warn("Failed to delete audit records past their retention", "err", err)
	}
}

// strategy is cluster mode's Owner and Reporter of the session runtime
// (runtime/sessionrt): a chat is owned through its lease in the store,
// renewed by heartbeat, and the Redis owner hint the gateway reads; a
// message's events and outcome go onto the chat's Redis event channel, and a
// chat platform's reply onto the outbound stream.
type strategy struct{ *Runtime }

// Acquire implements sessionrt.Owner: it takes the chat's lease and records
// this pod as the chat's owner.
func (r strategy) Acquire(ctx context.Context, c sessionrt.Chat) (bool, error) {
	ok, err := r.cfg.Store.AcquireLease(ctx, leaseKey(c.Channel, c.Key), r.cfg.Pod, r.cfg.LeaseTTL)
	if err != nil || !ok {
		return false, err
	}
	if err := r.sig.setOwner(ctx, ownerKey(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key), r.cfg.Pod, r.cfg.LeaseTTL); err != nil {
		r.cfg.Log.Error("Failed to record chat owner", "err", err)
	}
	_ = r.cfg.Redis.HSet(ctx, podsKey(r.cfg.Tenant, r.cfg.Agent), r.cfg.Pod, "busy "+c.Channel+" "+c.Key).Err()
	return true, nil
}

// Keep implements sessionrt.Owner: a heartbeat renews the lease and the
// owner hint (a lost lease ends serving), and the gateway's stops on the
// chat's control channel stop its turn.
func (r strategy) Keep(ctx context.Context, c sessionrt.Chat) (context.Context, func(), error) {
	held, cancel := context.WithCancel(ctx)
	ps, events, err := r.sig.subscribe(held, controlChannel(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.heartbeat(held, cancel, c) })
	wg.Go(func() {
		for e := range events {
			// A stop from a newer gateway (e.Err says its version is
			// unknown) still names what it asks.
			switch {
			case e.Kind == protocol.FrameStop:
				if _, err := r.rt.Stop(held, c); err != nil {
					r.cfg.Log.Error("Failed to stop the chat's turn", "chat", c.Key, "err", err)
				}
			case e.Kind == protocol.FrameApprove && e.Approval != nil && e.Err == nil:
				r.rt.Answer(c, e.Approval.Code, e.Approval.Approve)
			case e.Kind == protocol.FrameCanvasAnswer && e.CanvasAnswer != nil && e.Err == nil:
				r.rt.CanvasAnswer(c, e.CanvasAnswer.ID, e.CanvasAnswer.Answer)
			}
		}
	})
	return held, func() { cancel(); _ = ps.Close(); wg.Wait() }, nil
}

// Release implements sessionrt.Owner.
func (r strategy) Release(ctx context.Context, c sessionrt.Chat) {
	_ = r.sig.clearOwner(ctx, ownerKey(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key), r.cfg.Pod)
	if err := r.cfg.Store.ReleaseLease(ctx, leaseKey(c.Channel, c.Key), r.cfg.Pod); err != nil {
		r.cfg.Log.Error("Failed to release chat lease", "err", err)
	}
	_ = r.cfg.Manager.ReleaseAll(ctx)
}

// heartbeat renews the chat lease and owner hint; a lost lease ends serving.
func (r strategy) heartbeat(ctx context.Context, cancel context.CancelFunc, c sessionrt.Chat) {
	lease, owner := leaseKey(c.Channel, c.Key), ownerKey(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key)
	t := time.NewTicker(r.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.cfg.Store.RenewLease(ctx, lease, r.cfg.Pod, r.cfg.LeaseTTL); errors.Is(err, store.ErrLeaseLost) {
				r.cfg.Log.Error("Lost chat lease; stopping", "lease", lease)
				cancel()
				return
			} else if err != nil {
				r.cfg.Log.Error("Failed to renew chat lease", "err", err)
			}
			_ = r.sig.setOwner(ctx, owner, r.cfg.Pod, r.cfg.LeaseTTL)
			if key, _ := r.running.Load().(string); key != "" {
				_ = r.cfg.Redis.Expire(ctx, key, r.cfg.LeaseTTL).Err()
			}
		}
	}
}

// Begin implements sessionrt.Reporter: the running marker tells the gateway
// whether a /stop has anything to stop; the heartbeat keeps it alive while
// the turn runs. It is cleared before the outcome is published: a client
// that sends /stop as soon as it has the reply must find nothing running.
func (r strategy) Begin(ctx context.Context, c sessionrt.Chat, msgID string) func() {
	running := runningKey(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key)
	_ = r.cfg.Redis.Set(ctx, running, msgID, r.cfg.LeaseTTL).Err()
	r.running.Store(running)
	return sync.OnceFunc(func() {
		r.running.Store("")
		_ = r.cfg.Redis.Del(context.WithoutCancel(ctx), running).Err()
	})
}

// Event implements sessionrt.Reporter.
func (r strategy) Event(ctx context.Context, c sessionrt.Chat, msgID string, e turn.Event) {
	r.publish(ctx, c, protocol.Frame{MessageID: msgID, Kind: string(e.Kind), Event: &e})
}

// Done implements sessionrt.Reporter: the outcome goes to the gateway; a
// message from a chat platform is answered there, through the gateway's
// dispatcher (which alone holds the channel's credentials).
func (r strategy) Done(ctx context.Context, c sessionrt.Chat, msgID string, out protocol.Outcome, err *protocol.CodedError) {
	// Last: a background run's outcome is recorded (and its continuation
	// queued), or a continuation marked delivered once its reply is queued
	// for a chat platform. A pod dying before leaves the message pending
	// for the chat's next runtime, which RunWatch wakes.
	defer r.cfg.Completion.Done(ctx, c, msgID, out, err)
	if err != nil {
		r.publish(ctx, c, protocol.Frame{MessageID: msgID, Kind: protocol.FrameError, Code: err.Code, Message: err.Error(), Outcome: &out,
			Status: err.Status, RetryAfterMS: err.RetryAfter.Milliseconds()})
		r.tellBudget(ctx, c, err)
		return
	}
	r.publish(ctx, c, protocol.Frame{MessageID: msgID, Kind: protocol.FrameDone, Outcome: &out})
	if !protocol.GatewayClient(c.Channel) && out.Text != "" && !out.Duplicate && !r.cfg.Completion.Silent(msgID, out) {
		err := QueueReply(ctx, r.cfg.Bus, r.cfg.Tenant, outbound.Message{Agent: r.cfg.Agent,
			Target: c.Channel + ":" + c.Key, Text: out.Text, Origin: out.SessionID, Stored: true})
		if err != nil {
			r.cfg.Log.ErrorContext(ctx, "Failed to queue the reply for delivery", "chat", c.Key, "err", err)
		}
	}
}

// tellBudget tells a chat platform's chat that the model budget is spent,
// once per chat, cap and period across the tenant's pods (quota.ChatNotice):
// its messages go on being refused without a reply each.
func (r strategy) tellBudget(ctx context.Context, c sessionrt.Chat, err *protocol.CodedError) {
	if protocol.GatewayClient(c.Channel) || err.Code != protocol.CodeBudgetExhausted {
		return
	}
	target := c.Channel + ":" + c.Key
	if !quota.ChatNotice(store.WithTenant(context.WithoutCancel(ctx), r.cfg.Tenant), r.cfg.Store, time.Now(), r.cfg.Agent, target, err) {
		return
	}
	if qerr := QueueReply(ctx, r.cfg.Bus, r.cfg.Tenant, outbound.Message{Agent: r.cfg.Agent, Target: target,
		Text: "Sorry, I could not answer: " + err.Error()}); qerr != nil {
		r.cfg.Log.Error("Failed to queue the budget notice for delivery", "chat", c.Key, "err", qerr)
	}
}

// Notify implements sessionrt.Notifier: a chat platform's chat gets the
// message through the gateway's outbound dispatcher, like a reply (an exec
// approval request).
func (r strategy) Notify(ctx context.Context, c sessionrt.Chat, text string) error {
	return QueueReply(ctx, r.cfg.Bus, r.cfg.Tenant, outbound.Message{Agent: r.cfg.Agent, Target: c.Channel + ":" + c.Key,
		Text: text, Stored: true})
}

// publish sends a frame on the chat's event channel.
func (r strategy) publish(ctx context.Context, c sessionrt.Chat, e protocol.Frame) {
	if err := r.sig.publish(context.WithoutCancel(ctx), eventChannel(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key), e); err != nil {
		r.cfg.Log.ErrorContext(ctx, "Failed to publish turn event", "err", err)
	}
}
