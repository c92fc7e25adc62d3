package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
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
	// OnQuiet is called when the chat has gone quiet after messages were
	// processed (the first empty poll after them), and when the runtime is
	// ready and starts waiting for a wake; session pods return memory to
	// the OS there.
	OnQuiet func()
	Log     *slog.Logger
}

// Runtime is a session pod's main loop: wait as a warm pod for a wake, claim
// it, serve that chat until it is idle, and return (the pod then exits and the
// operator replaces it).
type Runtime struct {
	cfg     RuntimeConfig
	sig     signals
	ctx     context.Context // tenant-scoped
	running atomic.Value    // string: the running marker of the turn in progress
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
	return &Runtime{cfg: cfg, sig: signals{cfg.Redis}}
}

// Run waits for a wake and serves its chat. It returns nil after the chat went
// idle, or the context's error when cancelled while warm.
func (r *Runtime) Run(ctx context.Context) error {
	ctx = store.WithTenant(ctx, r.cfg.Tenant)
	r.ctx = ctx
	pods := podsKey(r.cfg.Tenant, r.cfg.Agent)
	if err := r.cfg.Redis.HSet(ctx, pods, r.cfg.Pod, "warm").Err(); err != nil {
		return fmt.Errorf("failed to register pod: %w", err)
	}
	defer r.cfg.Redis.HDel(context.WithoutCancel(ctx), pods, r.cfg.Pod)
	wakes := wakeStream(r.cfg.Tenant, r.cfg.Agent)
	r.quiet()
	for {
		msgs, err := r.cfg.Bus.Fetch(ctx, wakes, groupPods, r.cfg.Pod, bus.FetchOptions{Count: 1, Block: 5 * time.Second})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.cfg.Log.Error("Failed to read wakes; retrying", "err", err)
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		m := msgs[0]
		var w Wake
		if err := json.Unmarshal(m.Payload, &w); err != nil || w.ChatKey == "" {
			r.cfg.Log.Error("Dropping malformed wake", "id", m.ID)
			_ = r.cfg.Bus.Ack(ctx, wakes, groupPods, m.Seq)
			continue
		}
		if w.Run != nil {
			// A scheduled run: a fresh session, then the pod exits like
			// after a chat.
			_ = r.cfg.Bus.Ack(ctx, wakes, groupPods, m.Seq)
			r.run(ctx, w)
			return nil
		}
		served, err := r.serve(ctx, w, func() { _ = r.cfg.Bus.Ack(ctx, wakes, groupPods, m.Seq) })
		if err != nil {
			return err
		}
		if served {
			return nil
		}
		// The chat had an owner or nothing to do: stay warm.
		if err := r.cfg.Redis.HSet(ctx, pods, r.cfg.Pod, "warm").Err(); err != nil {
			r.cfg.Log.Error("Failed to mark pod warm", "err", err)
		}
	}
}

// serve owns the chat of w until it is idle. It reports false when it did not
// serve it (another runtime owns it, or nothing was waiting).
func (r *Runtime) serve(ctx context.Context, w Wake, ack func()) (bool, error) {
	lease := leaseKey(w.Channel, w.ChatKey)
	var ok bool
	var err error
	// The wake is ours until acknowledged: while the store is down (a
	// PostgreSQL restart) wait for it rather than exit, which would leave
	// the chat to the gateway's rewakes and mark the pod failed.
	for backoff := time.Duration(0); ; {
		ok, err = r.cfg.Store.AcquireLease(ctx, lease, r.cfg.Pod, r.cfg.LeaseTTL)
		if !errors.Is(err, store.ErrUnavailable) {
			break
		}
		backoff = nextBackoff(backoff)
		r.cfg.Log.Warn("Store unavailable; retrying the chat lease", "chat", w.ChatKey, "err", err, "backoff", backoff)
		if !sleep(ctx, backoff) {
			return false, ctx.Err()
		}
	}
	if err != nil {
		return false, fmt.Errorf("failed to take chat lease: %w", err)
	}
	if !ok {
		ack() // someone serves the chat; it will see the message
		return false, nil
	}
	ack()
	owner := ownerKey(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)
	if err := r.sig.setOwner(ctx, owner, r.cfg.Pod, r.cfg.LeaseTTL); err != nil {
		r.cfg.Log.Error("Failed to record chat owner", "err", err)
	}
	_ = r.cfg.Redis.HSet(ctx, podsKey(r.cfg.Tenant, r.cfg.Agent), r.cfg.Pod, "busy "+w.Channel+" "+w.ChatKey).Err()

	chatCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	startHeartbeat := func() (stop func()) {
		hbCtx, hbCancel := context.WithCancel(chatCtx)
		var wg sync.WaitGroup
		wg.Go(func() { r.heartbeat(hbCtx, cancel, lease, owner) })
		return func() { hbCancel(); wg.Wait() }
	}
	stopHeartbeat := startHeartbeat()
	defer func() { stopHeartbeat() }()
	stopSub, err := r.watchStops(chatCtx, w)
	if err != nil {
		return false, err
	}
	defer stopSub()

	stream := chatStream(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)
	// Messages a dead owner fetched but never acknowledged come first; only
	// the lease holder reads the chat, so everything pending is orphaned.
	orphans, err := r.cfg.Bus.Claim(chatCtx, stream, groupRuntime, r.cfg.Pod, 0, bus.DefaultBatch)
	if err != nil {
		return false, fmt.Errorf("failed to reclaim chat messages: %w", err)
	}
	served := false
	for _, m := range orphans {
		r.process(chatCtx, w, stream, m)
		served = true
	}
	idle := time.Now()
	busy := served
	for chatCtx.Err() == nil { // until the lease is lost or we shut down
		msgs, err := r.cfg.Bus.Fetch(chatCtx, stream, groupRuntime, r.cfg.Pod, bus.FetchOptions{Count: 10, Block: fetchBlock})
		if err != nil {
			if chatCtx.Err() != nil {
				break
			}
			r.cfg.Log.Error("Failed to read chat stream; retrying", "chat", w.ChatKey, "err", err)
			sleep(chatCtx, time.Second)
			continue
		}
		for _, m := range msgs {
			r.process(chatCtx, w, stream, m)
			served = true
		}
		if len(msgs) > 0 {
			idle, busy = time.Now(), true
			continue
		}
		if busy {
			busy = false
			r.quiet()
		}
		if !served || time.Since(idle) >= r.cfg.IdleTimeout {
			// Give the chat up, then look once more: a message queued
			// before the owner hint went away is ours to serve, one queued
			// after it woke another runtime.
			stopHeartbeat()
			_ = r.sig.clearOwner(context.WithoutCancel(ctx), owner, r.cfg.Pod)
			if err := r.cfg.Store.ReleaseLease(context.WithoutCancel(ctx), lease, r.cfg.Pod); err != nil {
				r.cfg.Log.Error("Failed to release chat lease", "err", err)
			}
			_ = r.cfg.Manager.ReleaseAll(context.WithoutCancel(ctx))
			late, err := r.cfg.Bus.Fetch(ctx, stream, groupRuntime, r.cfg.Pod, bus.FetchOptions{Count: 10})
			if err != nil || len(late) == 0 {
				return served, nil
			}
			if ok, _ := r.cfg.Store.AcquireLease(ctx, lease, r.cfg.Pod, r.cfg.LeaseTTL); !ok {
				return served, nil // the new owner reclaims them
			}
			_ = r.sig.setOwner(ctx, owner, r.cfg.Pod, r.cfg.LeaseTTL)
			stopHeartbeat = startHeartbeat()
			for _, m := range late {
				r.process(chatCtx, w, stream, m)
			}
			served, idle = true, time.Now()
		}
	}
	_ = r.cfg.Manager.ReleaseAll(context.WithoutCancel(ctx))
	return served, nil
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
	}
	b, _ := json.Marshal(out)
	if err := r.cfg.Redis.Publish(context.WithoutCancel(ctx), wake.RunResultChannel(w.Run.RunID), b).Err(); err != nil {
		r.cfg.Log.Error("Failed to publish the run's result", "run", w.Run.RunID, "err", err)
	}
}

// heartbeat renews the chat lease and owner hint; a lost lease ends serving.
func (r *Runtime) heartbeat(ctx context.Context, cancel context.CancelFunc, lease, owner string) {
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

// watchStops cancels the chat's running turn when the gateway sends a stop.
func (r *Runtime) watchStops(ctx context.Context, w Wake) (func(), error) {
	ps, events, err := r.sig.subscribe(ctx, controlChannel(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey))
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range events {
			if e.Kind != kindStop {
				continue
			}
			if id, err := r.cfg.Manager.Resolve(ctx, w.Channel, w.ChatKey); err == nil {
				r.cfg.Manager.Stop(id.String())
			}
		}
	}()
	return func() { _ = ps.Close(); <-done }, nil
}

// process runs one message and acknowledges it once its turn is stored.
func (r *Runtime) process(ctx context.Context, w Wake, stream string, m bus.Message) {
	var in Inbound
	if err := json.Unmarshal(m.Payload, &in); err != nil {
		r.cfg.Log.Error("Dropping malformed chat message", "id", m.ID, "err", err)
		_ = r.cfg.Bus.Ack(ctx, stream, groupRuntime, m.Seq)
		return
	}
	events := eventChannel(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)
	pub := func(e Event) {
		e.MessageID = m.ID
		if err := r.sig.publish(context.WithoutCancel(ctx), events, e); err != nil {
			r.cfg.Log.Error("Failed to publish turn event", "err", err)
		}
	}
	// The running marker tells the gateway whether a /stop has anything
	// to stop; the heartbeat keeps it alive while the turn runs.
	running := runningKey(r.cfg.Tenant, r.cfg.Agent, w.Channel, w.ChatKey)
	_ = r.cfg.Redis.Set(ctx, running, m.ID, r.cfg.LeaseTTL).Err()
	r.running.Store(running)
	// Cleared before the outcome is published: a client that sends /stop
	// as soon as it has the reply must find nothing running.
	clearRunning := sync.OnceFunc(func() {
		r.running.Store("")
		_ = r.cfg.Redis.Del(context.WithoutCancel(ctx), running).Err()
	})
	defer clearRunning()
	var reply session.Reply
	var err error
	var backoff time.Duration
	for {
		reply, err = r.cfg.Manager.Handle(ctx, session.Inbound{Channel: w.Channel, ChatID: w.ChatKey, MessageID: m.ID, Text: in.Text,
			Stream: true, Sink: func(e agent.Event) { pub(Event{Kind: string(e.Kind), Event: wireEvent(e)}) }})
		var wait time.Duration
		switch {
		case errors.Is(err, session.ErrBusy):
			// We own the chat, so a busy session is the lease of a dead
			// owner that has not expired yet: wait for it rather than fail
			// the turn.
			wait = r.cfg.LeaseTTL / 6
		case errors.Is(err, store.ErrUnavailable):
			// The store is down (a PostgreSQL restart): the message stays
			// unacknowledged and is tried again once the store is back,
			// rather than answered with an error and dropped. The turn's
			// writes are idempotent (keyed by the message id), and a turn
			// whose results were not stored runs again.
			backoff = nextBackoff(backoff)
			wait = backoff
			r.cfg.Log.Warn("Store unavailable; retrying the message", "id", m.ID, "err", err, "backoff", wait)
		}
		if wait == 0 || !sleep(ctx, wait) {
			break
		}
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable)) {
		// Lease lost or shutting down: leave the message pending for the
		// next owner.
		return
	}
	clearRunning()
	if ackErr := r.cfg.Bus.Ack(context.WithoutCancel(ctx), stream, groupRuntime, m.Seq); ackErr != nil {
		r.cfg.Log.Error("Failed to acknowledge chat message", "id", m.ID, "err", ackErr)
	}
	out := gateway.Outcome{SessionID: reply.SessionID, Command: reply.Command, Text: reply.Text, Duplicate: reply.Duplicate}
	if err != nil {
		code := gateway.CodeInternal
		var ce *gateway.CodedError
		switch {
		case errors.As(err, &ce):
			code = ce.Code
		case errors.Is(err, session.ErrBusy):
			code = gateway.CodeBusy
		case errors.Is(err, context.Canceled):
			code, err = gateway.CodeStopped, errors.New("stopped; what was done so far is kept")
		default:
			r.cfg.Log.Error("Turn failed", "chat", w.ChatKey, "err", err)
		}
		pub(Event{Kind: kindError, Code: code, Message: err.Error(), Outcome: &out})
		return
	}
	pub(Event{Kind: kindDone, Outcome: &out})
	// A message from a chat platform is answered there, through the
	// gateway's dispatcher (which alone holds the channel's credentials).
	if replyByDispatcher(w.Channel) && out.Text != "" && !out.Duplicate {
		err := QueueReply(context.WithoutCancel(ctx), r.cfg.Bus, r.cfg.Tenant, outbound.Message{Agent: r.cfg.Agent,
			Target: w.Channel + ":" + w.ChatKey, Text: out.Text, Origin: out.SessionID, Stored: true})
		if err != nil {
			r.cfg.Log.Error("Failed to queue the reply for delivery", "chat", w.ChatKey, "err", err)
		}
	}
}

// replyByDispatcher tells the channels whose replies go out through the
// outbound dispatcher: every chat platform, not the gateway's own clients
// (which get the turn's events) nor scheduled runs (delivered by policy).
func replyByDispatcher(channel string) bool {
	switch channel {
	case gateway.ChannelWeb, gateway.ChannelOpenAI, "terminal", "cron":
		return false
	}
	return true
}

// nextBackoff doubles a retry's wait, from 100ms up to 5s.
func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return 100 * time.Millisecond
	}
	return min(2*d, 5*time.Second)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
