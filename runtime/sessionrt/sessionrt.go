// Package sessionrt is the session runtime of both modes: it serves a chat by
// reading the chat's inbound stream (protocol.ChatStream) with a bus.Consumer,
// runs each message in order through session.Manager.Handle, maps the turn's
// error to a protocol code, reports the turn's events and outcome, and acks
// the message once its turn is stored. /stop drops the chat's queued messages
// and cancels its running turn.
//
// What differs between the modes is two small strategies:
//
//   - Owner says who serves a chat. Embedded mode keeps an in-process map
//     (runtime/embedded); cluster mode holds the chat's lease in the store,
//     renewed by heartbeat, and the Redis owner hint the gateway reads
//     (runtime/cluster).
//   - Reporter says where a message's events and outcome go: to the waiting
//     gateway call in the same process (embedded), or onto the chat's Redis
//     event channel, with the reply queued for the outbound dispatcher when
//     the chat is a chat platform's (cluster).
//
// The walk of one message is the same in both modes: gateway → bus (the
// chat's stream) → Runtime.Serve → session.Manager → agent loop → tools →
// store → Reporter.
package sessionrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/logctx"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// Defaults of Config.
const (
	DefaultIdleTimeout   = time.Minute
	DefaultBlock         = time.Second
	DefaultClaimInterval = 30 * time.Second
)

// Chat is one chat of the runtime's agent: the session channel and the chat
// key sessions know it by (protocol.ChatKey).
type Chat struct {
	Channel, Key string
}

// Owner decides who serves a chat. Serve's caller acquires the chat first
// (Acquire, or a wake in cluster mode); Serve keeps it while it serves and
// releases it when the chat has gone quiet.
type Owner interface {
	// Acquire takes the chat; false when another runtime serves it.
	Acquire(ctx context.Context, c Chat) (bool, error)
	// Keep holds the acquired chat while it is served: the returned context
	// ends when the chat is lost (a lease that could not be renewed), and
	// stop ends the holding (Serve calls it before Release). An error ends
	// serving; Serve still releases the chat.
	Keep(ctx context.Context, c Chat) (held context.Context, stop func(), err error)
	// Release gives the chat up.
	Release(ctx context.Context, c Chat)
}

// Reporter receives what happens to a chat's messages.
type Reporter interface {
	// Begin is called before a message's turn runs; end is called once,
	// before Done, or when the message is left pending (shutdown, lost
	// chat).
	Begin(ctx context.Context, c Chat, msgID string) (end func())
	// Event is one event of the running turn.
	Event(ctx context.Context, c Chat, msgID string, e turn.Event)
	// Done is the message's outcome; err is nil when the turn succeeded.
	// The message is acked after Done returns.
	Done(ctx context.Context, c Chat, msgID string, out protocol.Outcome, err *protocol.CodedError)
}

// Config configures a Runtime: one agent of one tenant.
type Config struct {
	Tenant, Agent string
	// Consumer names this runtime in the chat streams' consumer group (the
	// pod's name); stable across restarts, so a restarted runtime finds its
	// own leftovers.
	Consumer string
	Bus      bus.Bus
	// Store lists a chat's dialogs for /stop.
	Store store.Store
	// Manager runs the turns (agenthost.Built.Manager).
	Manager *session.Manager
	// Delegated returns the manager and the context of a delegated task's
	// turn (a message carrying a protocol.Delegation): the sub-agent's
	// session config and the run's depth. An error answers the message
	// with it (a run its delegating turn already gave up). Without it such
	// messages are answered with an error: they must never run on Manager,
	// whose tools the run may not have.
	Delegated func(ctx context.Context, d protocol.Delegation) (context.Context, *session.Manager, error)
	Owner     Owner
	Reporter  Reporter
	// IdleTimeout ends serving a chat after it had no message that long
	// (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Block bounds one wait for the chat's next message (DefaultBlock):
	// idleness is noticed at this granularity.
	Block time.Duration
	// ClaimInterval is how often the chat's stream is checked for messages
	// left pending by a failed ack (DefaultClaimInterval). At start
	// everything pending is claimed: only the chat's owner reads it.
	ClaimInterval time.Duration
	// BusyWait, when positive, is how long to wait before trying again a
	// message whose session is leased by another holder (cluster mode: the
	// lease of a dead owner that has not expired yet). Zero answers such a
	// message with CodeBusy.
	BusyWait time.Duration
	// OnQuiet is called when the chat has gone quiet after messages (the
	// first empty wait after them); session pods return memory there.
	OnQuiet func()
	// MaxDeliveries bounds how often one message is handed to a runtime
	// (DefaultMaxDeliveries). A message whose turn kills its runtime every
	// time (a poison message) would otherwise be taken over by the next
	// owner for ever; past the bound it is answered with one clear error and
	// set aside on the tenant's dead-letter stream (DeadLetterStream).
	MaxDeliveries int
	// Drain, when closed, stops the runtime taking messages (SIGTERM): the
	// turn running goes on until it ends or Serve's context does (the grace
	// period), and Serve then returns with the chat released; what was not
	// taken stays queued for the chat's next owner.
	Drain <-chan struct{}
	// Metrics records the turns and the chats served; nil records
	// nothing.
	Metrics *metrics.Metrics
	// TracerProvider traces each turn (a span continuing the trace its
	// message carries, package tracing); nil traces nothing.
	TracerProvider trace.TracerProvider
	Log            *slog.Logger
}

// DefaultMaxDeliveries is Config.MaxDeliveries' default.
const DefaultMaxDeliveries = 5

// DeadLetterStream is the stream of a tenant's messages set aside after
// MaxDeliveries (DeadLetter entries), for an operator to look at.
func DeadLetterStream(tenant string) string { return bus.Key(tenant, "dead-letter") }

// DeadLetter is an entry of DeadLetterStream.
type DeadLetter struct {
	// Stream and MessageID say where the message was; Payload is its bus
	// payload, so it can be queued there again as it was.
	Stream     string `json:"stream"`
	MessageID  string `json:"message_id"`
	Deliveries int    `json:"deliveries"`
	Payload    []byte `json:"payload"`
}

// Runtime serves the chats of one agent of one tenant.
type Runtime struct {
	cfg    Config
	tracer trace.Tracer
	// approvals holds the exec approval requests of the running turns.
	approvals *approval.Broker
	// canvas holds the canvas commands of running turns that wait for
	// their web client's answer (eval, snapshot).
	canvas *canvasWaits
	// delegated holds the manager of each chat's running delegated turn
	// (Chat -> *session.Manager), for Stop.
	delegated sync.Map
}

// New returns a Runtime.
func New(cfg Config) *Runtime {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Block <= 0 {
		cfg.Block = DefaultBlock
	}
	if cfg.ClaimInterval <= 0 {
		cfg.ClaimInterval = DefaultClaimInterval
	}
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Log = cfg.Log.With("tenant", cfg.Tenant, "agent", cfg.Agent)
	return &Runtime{cfg: cfg, tracer: tracing.Tracer(cfg.TracerProvider), approvals: approval.NewBroker(), canvas: newCanvasWaits()}
}

// Stream is the inbound stream of a chat.
func (r *Runtime) Stream(c Chat) string {
	return protocol.ChatStream(r.cfg.Tenant, r.cfg.Agent, c.Channel, c.Key)
}

// Serve serves chat c, which the caller has acquired (Owner), until it has had
// no message for IdleTimeout, the chat is lost or ctx ends, and releases it.
// It reports whether it processed a message. A message queued while the chat
// was being released is served here when the chat can be taken back, and by
// its new owner otherwise.
func (r *Runtime) Serve(ctx context.Context, c Chat) (served bool, err error) {
	ctx = store.WithTenant(ctx, r.cfg.Tenant)
	for {
		n, lost, err := r.serveHeld(ctx, c)
		served = served || n
		r.cfg.Owner.Release(context.WithoutCancel(ctx), c)
		if err != nil || lost || ctx.Err() != nil || r.draining() {
			return served, err
		}
		if !r.retake(ctx, c) {
			return served, nil
		}
	}
}

// retake looks at a released chat once more: a message queued before the
// release found the chat owned and woke no one. It reports whether there was
// one and the chat could be taken back to serve it. What the look fetches is
// pending for this consumer; whoever serves the chat next claims it, which is
// also what happens when the look or the retake fails.
func (r *Runtime) retake(ctx context.Context, c Chat) bool {
	late, err := r.cfg.Bus.Fetch(ctx, r.Stream(c), protocol.ChatGroup, r.cfg.Consumer, bus.FetchOptions{Count: 1})
	if err != nil {
		r.cfg.Log.Warn("Could not look for late messages of a released chat; its next owner serves them", "chat", c.Key, "err", err)
		return false
	}
	if len(late) == 0 {
		return false
	}
	ok, err := r.cfg.Owner.Acquire(ctx, c)
	if err != nil {
		r.cfg.Log.Warn("Could not take a released chat back; its next owner serves it", "chat", c.Key, "err", err)
	}
	return ok && err == nil
}

// serveHeld runs the chat's consumer while the chat is held; it reports
// whether a message was processed and whether the chat was lost.
func (r *Runtime) serveHeld(ctx context.Context, c Chat) (served, lost bool, err error) {
	held, stop, err := r.cfg.Owner.Keep(ctx, c)
	if err != nil {
		return false, false, err
	}
	defer stop()
	defer r.cfg.Metrics.SessionStarted(r.cfg.Tenant, r.cfg.Agent)()
	// The consumer stops taking messages when the runtime drains; the
	// turn it handed over goes on with the chat's own context.
	taking, stopTaking := r.UntilDrain(held)
	defer stopTaking()
	var last time.Time
	quiet := true
	// A delegated run's chat has its one message: once it is answered
	// there is nothing to wait for.
	done := false
	handle := func(_ context.Context, msgs []bus.Message) error {
		for _, m := range msgs {
			once, err := r.process(held, c, m)
			if err != nil {
				return err
			}
			done = done || once
		}
		served, quiet, last = true, false, time.Now()
		return nil
	}
	idle := func() bool {
		if !quiet {
			quiet = true
			if r.cfg.OnQuiet != nil {
				r.cfg.OnQuiet()
			}
		}
		return !served || done || time.Since(last) >= r.cfg.IdleTimeout
	}
	consumer := bus.NewConsumer(r.cfg.Bus, r.Stream(c), protocol.ChatGroup, r.cfg.Consumer, handle, bus.ConsumerOptions{
		Batch: 1, Block: r.cfg.Block, ClaimMinIdle: time.Nanosecond, ClaimInterval: r.cfg.ClaimInterval,
		Idle: idle, Logger: r.cfg.Log})
	err = consumer.Start(taking)
	return served, held.Err() != nil && ctx.Err() == nil, err
}

// draining reports whether Config.Drain is closed.
func (r *Runtime) draining() bool {
	select {
	case <-r.cfg.Drain:
		return true
	default:
		return false
	}
}

// UntilDrain returns a context that ends with ctx or when the runtime
// starts draining (Config.Drain): what takes new work (a chat's consumer, a
// session pod waiting for wakes) runs under it. stop releases it.
func (r *Runtime) UntilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(ctx)
	if r.cfg.Drain != nil {
		go func() {
			select {
			case <-r.cfg.Drain:
				cancel()
			case <-out.Done():
			}
		}()
	}
	return out, cancel
}

// process runs one message; once reports a delegated task's (its chat has
// no other). It returns an error only to leave the message pending: the
// runtime is shutting down or lost the chat mid-turn, and the chat's next
// owner runs it.
func (r *Runtime) process(ctx context.Context, c Chat, m bus.Message) (once bool, err error) {
	if m.Deliveries > r.cfg.MaxDeliveries {
		return false, r.deadLetter(ctx, c, m)
	}
	in, err := protocol.DecodeInbound(m.Payload)
	if err != nil {
		r.cfg.Log.ErrorContext(ctx, "Dropping a chat message this runtime cannot read", "id", m.ID, "err", err)
		code := protocol.CodeBadRequest
		if errors.Is(err, protocol.ErrUnknownVersion) {
			code = protocol.CodeUnavailable
		}
		r.cfg.Reporter.Done(ctx, c, m.ID, protocol.Outcome{}, &protocol.CodedError{Code: code, Err: err})
		return false, nil
	}
	mgr, tctx := r.cfg.Manager, ctx
	if d := in.Delegation; d != nil {
		once = true
		if mgr, tctx, err = r.delegatedTurn(ctx, c, *d); err != nil {
			if ctx.Err() != nil {
				return once, ctx.Err()
			}
			r.cfg.Reporter.Done(context.WithoutCancel(ctx), c, m.ID, protocol.Outcome{}, r.coded(ctx, r.cfg.Log.With("channel", c.Channel, "chat", c.Key), err))
			return once, nil
		}
		defer func() {
			r.delegated.Delete(c)
			// The run's session has nothing more to do: its lease goes
			// now, also when the next owner is to resume it.
			_ = mgr.ReleaseAll(context.WithoutCancel(ctx))
		}()
	}
	// The turn continues the trace of whoever queued the message (the
	// gateway's request, a cron fire, a delegating turn): its span's parent
	// is the bus entry's publish span.
	tctx, span := r.tracer.Start(bus.TraceContext(tctx, m), tracing.SpanTurn, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(tracing.AttrTenant.String(r.cfg.Tenant), tracing.AttrAgent.String(r.cfg.Agent),
			tracing.AttrChannel.String(c.Channel), tracing.AttrMessageID.String(m.ID), tracing.AttrDeliveries.Int(m.Deliveries)))
	defer span.End()
	end := r.cfg.Reporter.Begin(ctx, c, m.ID)
	tctx = audit.WithActor(tctx, actorOf(c, in))
	// Every line the turn logs names its tenant, agent (r.cfg.Log), chat
	// and turn; the session manager adds the session.
	tlog := r.cfg.Log.With("channel", c.Channel, "chat", c.Key, "turn", m.ID)
	tctx = logctx.With(tctx, tlog)
	tctx, timer := r.cfg.Metrics.StartTurn(tctx, r.cfg.Tenant, r.cfg.Agent)
	if at, ok := m.QueuedTime(); ok && m.Deliveries <= 1 {
		// A message handed over again waited for a crashed owner, not
		// in the queue.
		timer.QueuedAt(at)
	}
	reply, err := r.handle(tctx, mgr, c, m.ID, in)
	end()
	if err != nil && ctx.Err() != nil {
		// Shutting down or the chat was lost mid-turn: whatever the error
		// (a store call cut short need not say it was cancelled), the
		// message stays pending and its next owner resumes it.
		return once, ctx.Err()
	}
	out := protocol.Outcome{SessionID: reply.SessionID, Command: reply.Command, Text: reply.Text, Duplicate: reply.Duplicate, Failed: reply.Failed}
	if reply.SessionID != "" {
		tlog = tlog.With("session", reply.SessionID)
	}
	ce := r.coded(tctx, tlog, err)
	if reply.Command == "" {
		// A slash command is no model turn.
		timer.End(outcome(ce))
	}
	span.SetAttributes(tracing.AttrSession.String(reply.SessionID), tracing.AttrOutcome.String(outcome(ce)))
	if ce != nil {
		tracing.Fail(span, ce)
	}
	r.recordFailure(logctx.With(tctx, tlog), reply.SessionID, m.ID, ce)
	// Delivering the outcome (to the client waiting on the gateway, or the
	// outbound stream of a chat platform) is the turn's last step.
	_, deliver := tracing.Start(tctx, tracing.SpanDeliver)
	r.cfg.Reporter.Done(trace.ContextWithSpan(context.WithoutCancel(ctx), deliver), c, m.ID, out, ce)
	deliver.End()
	// One line per turn (never its text): what `kubectl logs` of a session
	// pod shows of the work it did.
	r.cfg.Log.InfoContext(tctx, "Turn done", "chat", c.Key, "id", m.ID, "session", reply.SessionID, "outcome", outcome(ce))
	return once, nil
}

// actorOf is who a message's turn acts for in the audit log: as the
// gateway knew it, else the agent that delegated the task, else the chat's
// channel (a schedule's, a webhook's).
func actorOf(c Chat, in protocol.Inbound) string {
	switch {
	case in.Actor != "":
		return in.Actor
	case in.Delegation != nil:
		return "agent:" + in.Delegation.ParentAgent
	}
	return "channel:" + c.Channel
}

// Outcome is the outcome label of a turn that ended with err (nil: ok) in
// PicoBot's metrics: "ok" or its protocol code (Coded).
func Outcome(err error) string {
	ce, _ := Coded(err)
	return outcome(ce)
}

// outcome is the turns_total outcome of a turn's coded error.
func outcome(ce *protocol.CodedError) string {
	if ce == nil {
		return metrics.OutcomeOK
	}
	return ce.Code
}

// recordFailure keeps why a turn failed beside its session's messages (the
// client was told live by Done), so a client shows the error again after a
// reload. A stopped turn stores its own marker, an interrupted one resumes,
// and a busy or already-seen message says nothing new about its turn.
func (r *Runtime) recordFailure(ctx context.Context, sessionID, msgID string, ce *protocol.CodedError) {
	if ce == nil || sessionID == "" || r.cfg.Store == nil {
		return
	}
	switch ce.Code {
	case protocol.CodeStopped, protocol.CodeUnavailable, protocol.CodeBusy, protocol.CodeUnanswered:
		return
	}
	msg := protocol.ClientMessage(ce.Code, ce)
	if len(msg) > store.MaxTurnErrorBytes {
		msg = strings.ToValidUTF8(msg[:store.MaxTurnErrorBytes-len("…")], "") + "…"
	}
	e := store.TurnError{SessionID: sessionID, MessageID: msgID, Code: ce.Code, Message: msg}
	if err := r.cfg.Store.PutTurnError(store.WithTenant(context.WithoutCancel(ctx), r.cfg.Tenant), e); err != nil {
		logctx.From(ctx, r.cfg.Log).WarnContext(ctx, "Failed to record a turn's error", "session", sessionID, "err", err)
	}
}

// delegatedTurn returns the manager and context of a delegated task's turn,
// and registers the manager for Stop.
func (r *Runtime) delegatedTurn(ctx context.Context, c Chat, d protocol.Delegation) (*session.Manager, context.Context, error) {
	if r.cfg.Delegated == nil {
		return nil, nil, &protocol.CodedError{Code: protocol.CodeInternal, Err: errors.New("this runtime cannot run delegated tasks")}
	}
	tctx, m, err := r.cfg.Delegated(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	r.delegated.Store(c, m)
	return m, tctx, nil
}

// deadLetter sets a message aside on the dead-letter stream and answers it
// with one clear error; it returns an error (leaving the message pending)
// only when the dead-letter stream cannot be written.
func (r *Runtime) deadLetter(ctx context.Context, c Chat, m bus.Message) error {
	b, err := json.Marshal(DeadLetter{Stream: r.Stream(c), MessageID: m.ID, Deliveries: m.Deliveries, Payload: m.Payload})
	if err != nil {
		return err
	}
	if err := r.cfg.Bus.Publish(ctx, DeadLetterStream(r.cfg.Tenant), bus.Message{ID: m.ID, Payload: b}); err != nil {
		return fmt.Errorf("failed to set message %q aside: %w", m.ID, err)
	}
	r.cfg.Log.ErrorContext(ctx, "Set a message aside after too many deliveries", "id", m.ID, "chat", c.Key, "deliveries", m.Deliveries,
		"dead_letter_stream", DeadLetterStream(r.cfg.Tenant))
	r.cfg.Reporter.Done(context.WithoutCancel(ctx), c, m.ID, protocol.Outcome{}, &protocol.CodedError{Code: protocol.CodeDeadLetter,
		Err: fmt.Errorf("this message was handed to the agent %d times without an answer (its turn keeps failing); it was set aside for an operator and will not be tried again", m.Deliveries)})
	return nil
}

// handle runs the turn, waiting out a session leased by a dead owner
// (BusyWait) and a store outage: the message stays unacked until the store
// is back, rather than being answered with an error and dropped. The turn's
// writes are idempotent (keyed by the message id), and a turn whose results
// were not stored runs again.
func (r *Runtime) handle(ctx context.Context, m *session.Manager, c Chat, msgID string, in protocol.Inbound) (session.Reply, error) {
	var backoff time.Duration
	for {
		reply, err := m.Handle(ctx, session.Inbound{Channel: c.Channel, ChatID: c.Key, DialogID: in.DialogID, MessageID: msgID, Text: in.Text,
			Files:  uploads(in.Files),
			Stream: true, Sink: func(e turn.Event) { r.cfg.Reporter.Event(ctx, c, msgID, e) },
			Approver: approver{r: r, c: c, msgID: msgID},
			Canvas:   canvasHost{r: r, c: c, msgID: msgID}})
		var wait time.Duration
		switch {
		case errors.Is(err, session.ErrBusy):
			wait = r.cfg.BusyWait
		case errors.Is(err, store.ErrUnavailable):
			backoff = NextBackoff(backoff)
			wait = backoff
			logctx.From(ctx, r.cfg.Log).WarnContext(ctx, "Store unavailable; retrying the message", "err", err, "backoff", wait)
		}
		if wait <= 0 || !Sleep(ctx, wait) {
			return reply, err
		}
	}
}

// uploads are the session's view of a message's files.
func uploads(files []protocol.File) []session.Upload {
	if len(files) == 0 {
		return nil
	}
	out := make([]session.Upload, len(files))
	for i, f := range files {
		out[i] = session.Upload{ID: f.ID, Name: f.Name, MediaType: f.MediaType}
	}
	return out
}

// coded maps a turn's error to the protocol (Coded) and logs an internal
// fault with the turn's logger (trace ids from ctx).
func (r *Runtime) coded(ctx context.Context, log *slog.Logger, err error) *protocol.CodedError {
	ce, known := Coded(err)
	if !known {
		log.ErrorContext(ctx, "Turn failed", "err", err)
	}
	return ce
}

// Coded maps a turn's error to the protocol: the one mapping of both modes
// and of stateless turns. known is false for an unexpected error (code
// internal), which the caller logs.
func Coded(err error) (ce *protocol.CodedError, known bool) {
	if err == nil {
		return nil, true
	}
	var se *llm.StatusError
	code := protocol.CodeInternal
	switch {
	case errors.As(err, &ce):
		return &protocol.CodedError{Code: ce.Code, Err: err, Status: ce.Status, RetryAfter: ce.RetryAfter}, true
	case errors.As(err, &se) && se.StatusCode == http.StatusTooManyRequests:
		// The model's rate limit: the client may retry after its wait.
		return &protocol.CodedError{Code: protocol.CodeRateLimited, Err: err, RetryAfter: se.RetryAfter}, true
	case errors.As(err, &se) && se.StatusCode >= 400 && se.StatusCode < 500 &&
		se.StatusCode != http.StatusUnauthorized && se.StatusCode != http.StatusForbidden:
		// The model refused the request (too long, content policy, bad
		// parameters): retrying the same message cannot help, so the
		// client gets the model's 4xx. Its 401/403 are this agent's
		// credentials, an internal fault.
		return &protocol.CodedError{Code: protocol.CodeModelRejected, Status: se.StatusCode,
			Err: fmt.Errorf("the model refused the request (HTTP %d): %s", se.StatusCode, se.Message)}, true
	case errors.Is(err, session.ErrBusy):
		code = protocol.CodeBusy
	case errors.Is(err, session.ErrUnanswered):
		code = protocol.CodeUnanswered
	case errors.Is(err, session.ErrInterrupted):
		return &protocol.CodedError{Code: protocol.CodeUnavailable, Err: errors.New(
			"the turn was cut short (its runtime lost the session or is shutting down); what it did is kept and it resumes: send the message again with the same id to get its answer")}, true
	case errors.Is(err, context.Canceled):
		return &protocol.CodedError{Code: protocol.CodeStopped, Err: errors.New("stopped; what was done so far is kept")}, true
	case errors.Is(err, store.ErrNotFound):
		code = protocol.CodeUnknownSession
	case errors.Is(err, store.ErrInvalid):
		code = protocol.CodeBadRequest
	case errors.Is(err, store.ErrNoTenant):
		code = protocol.CodeForbidden
	default:
		return &protocol.CodedError{Code: code, Err: err}, false
	}
	return &protocol.CodedError{Code: code, Err: err}, true
}

// Stop drops the chat's queued messages (each is answered as dropped) and
// cancels its running turn, in whichever dialog of the chat it runs (/new
// during a turn). It reports whether a turn was running. It is called in the
// process that serves the chat.
func (r *Runtime) Stop(ctx context.Context, c Chat) (bool, error) {
	ctx = store.WithTenant(ctx, r.cfg.Tenant)
	if err := r.dropQueued(ctx, c); err != nil {
		return false, err
	}
	list, err := r.cfg.Store.ListSessions(ctx, store.SessionFilter{Channel: c.Channel, ChatID: c.Key,
		IncludeArchived: true, IncludeDeleted: true})
	if err != nil {
		return false, err
	}
	stopped := false
	d, _ := r.delegated.Load(c)
	for _, s := range list {
		stopped = r.cfg.Manager.Stop(s.ID) || stopped
		if m, ok := d.(*session.Manager); ok {
			stopped = m.Stop(s.ID) || stopped
		}
	}
	return stopped, nil
}

// dropQueued takes every message of the chat no one has fetched yet,
// answers it as dropped and acks it. Dropping comes before cancelling: the
// cancelled turn's consumer must not pick the next message up first.
func (r *Runtime) dropQueued(ctx context.Context, c Chat) error {
	stream := r.Stream(c)
	for {
		msgs, err := r.cfg.Bus.Fetch(ctx, stream, protocol.ChatGroup, r.cfg.Consumer, bus.FetchOptions{Count: bus.DefaultBatch})
		if err != nil || len(msgs) == 0 {
			return err
		}
		seqs := make([]string, len(msgs))
		for i, m := range msgs {
			seqs[i] = m.Seq
			r.cfg.Reporter.Done(ctx, c, m.ID, protocol.Outcome{Command: "stop", Text: "Dropped by /stop before it ran."}, nil)
		}
		if err := r.cfg.Bus.Ack(ctx, stream, protocol.ChatGroup, seqs...); err != nil {
			return err
		}
		if len(msgs) < bus.DefaultBatch {
			return nil
		}
	}
}

// NextBackoff doubles a retry's wait, from 100ms up to 5s (the retry loops of
// the runtime and of the modes around it).
func NextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return 100 * time.Millisecond
	}
	return min(2*d, 5*time.Second)
}

// Sleep waits for d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// DecodeDeadLetter reads an entry of DeadLetterStream.
func DecodeDeadLetter(m bus.Message) (DeadLetter, error) {
	var dl DeadLetter
	if err := json.Unmarshal(m.Payload, &dl); err != nil {
		return DeadLetter{}, fmt.Errorf("failed to read dead letter %q: %w", m.ID, err)
	}
	if dl.Stream == "" || dl.MessageID == "" {
		return DeadLetter{}, fmt.Errorf("failed to read dead letter %q: it names no stream or message", m.ID)
	}
	return dl, nil
}

// Requeue puts a dead letter's message back on its chat's stream, as it was
// first queued: its next owner handles it again (it resumes its turn from
// the last stored step), with a fresh delivery count.
func Requeue(ctx context.Context, b bus.Bus, dl DeadLetter) error {
	if err := b.Publish(ctx, dl.Stream, bus.Message{ID: dl.MessageID, Payload: dl.Payload}); err != nil {
		return fmt.Errorf("failed to requeue message %q: %w", dl.MessageID, err)
	}
	return nil
}
