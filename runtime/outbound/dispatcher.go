// Package outbound delivers messages that agents (send_message) and the
// scheduler send to chats, and records what really happened to each one.
//
// A Dispatcher resolves the target "<channel>:<chat_id>[:<dialog_id>]" to a
// channel of the sending agent and a session of that chat, stores the
// message in the session (so the chat's history shows what was sent there)
// and a store.Delivery, then sends it and waits for the real result —
// retrying transient failures with exponential backoff and jitter, honouring
// Retry-After, for at most MaxWait (120 s). The delivery ends as delivered or
// failed, never "queued": the caller learns the truth. Deliveries left
// pending by a crash are retried by Resume.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
)

// Defaults of a Dispatcher.
const (
	DefaultMaxWait        = 120 * time.Second
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	// MaxTextBytes bounds the text of one outbound message.
	MaxTextBytes = 256 << 10
)

// Meta keys of the assistant message a delivery stores in its target session.
const (
	MetaDelivery = "delivery_id"
	MetaOrigin   = "origin"
	MetaAgent    = "agent"
	// MetaFiles lists the artifact ids of the attachments, comma-separated.
	MetaFiles = "artifacts"
)

// ErrUnknownChannel means the sending agent has no channel of the target's name.
var ErrUnknownChannel = errors.New("unknown channel")

// Channels finds an agent's channel; *channel.Manager implements it.
type Channels interface {
	Lookup(tenant, agent, name string) (channel.Channel, error)
}

// WebSink delivers to gateway clients (web UI, terminal): the host shows the
// message to the target session's connected clients. The message is already
// stored in the session under MessageID, so a sink that appends it again
// with that id stores nothing twice.
type WebSink interface {
	DeliverWeb(ctx context.Context, m WebMessage) error
}

// StoredOnly is the web sink of a gateway that pushes nothing to open
// connections: the message the dispatcher stored in the session shows when
// the history is loaded. Both modes use it (in cluster mode the connection
// may be on another replica).
type StoredOnly struct{}

// DeliverWeb implements WebSink.
func (StoredOnly) DeliverWeb(context.Context, WebMessage) error { return nil }

// WebMessage is a delivery to a gateway client's session.
type WebMessage struct {
	Agent     string
	SessionID string
	// MessageID is the id of the assistant message in the session.
	MessageID string
	Text      string
	Files     []channel.File
	// Artifacts are the stored copies of Files (when an ArtifactStore is
	// configured), in the same order.
	Artifacts []store.Artifact
	Origin    string
}

// ArtifactStore keeps attachments, so a resumed delivery still has them and
// clients can fetch them; artifact.Store implements it.
type ArtifactStore interface {
	Save(ctx context.Context, sessionID, name, mediaType string, data []byte) (store.Artifact, error)
	Open(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error)
}

// Config wires a Dispatcher.
type Config struct {
	Store    store.Store
	Channels Channels
	// Web delivers to the channels in WebChannels; without it they fail.
	Web WebSink
	// Artifacts stores attachments. Without it a delivery with files that a
	// crash interrupts cannot be resumed (it is marked failed).
	Artifacts ArtifactStore
	// WebChannels are the channel names served by Web
	// (protocol.PushChannels when nil), used when the agent has no channel
	// of that name.
	WebChannels []string
	// MaxWait caps how long Deliver waits for a result (DefaultMaxWait).
	MaxWait time.Duration
	// InitialBackoff and MaxBackoff bound the waits between attempts.
	InitialBackoff, MaxBackoff time.Duration
	Clock                      clock.WithTicker
	// Rand returns a number in [0, 1) for jitter (math/rand/v2 when nil).
	Rand func() float64
	Log  *slog.Logger
}

// Dispatcher is the outbound dispatcher. Safe for concurrent use.
type Dispatcher struct {
	cfg Config
	// onSleep, when set (tests), is told of each wait between attempts once
	// its timer is running.
	onSleep func(time.Duration)
}

// New returns a Dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Store == nil {
		return nil, errors.New("outbound dispatcher needs a store")
	}
	if cfg.Channels == nil {
		cfg.Channels = noChannels{}
	}
	if cfg.WebChannels == nil {
		cfg.WebChannels = protocol.PushChannels()
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Dispatcher{cfg: cfg}, nil
}

type noChannels struct{}

func (noChannels) Lookup(_, agent, name string) (channel.Channel, error) {
	return nil, fmt.Errorf("%w %q of agent %s: no channels are configured", channel.ErrUnknownChannel, name, agent)
}

// Message is an outbound message.
type Message struct {
	// Agent is the sender; the target channel is one of its channels.
	Agent string
	// Target is "<channel>:<chat_id>[:<dialog_id>]".
	Target string
	Text   string
	Files  []channel.File
	// Origin says where the message comes from (the sending session's id,
	// a cron run); it is recorded with the message.
	Origin string
	// Stored says the target session already holds this text (a turn's
	// reply to a chat platform): nothing is appended, only the delivery is
	// recorded. Such a delivery cannot be resumed after a crash.
	Stored bool
}

// Result is what became of a message.
type Result struct {
	DeliveryID string
	// SessionID is the target session the message was stored in.
	SessionID string
	Status    store.DeliveryStatus
	Attempts  int
	Receipt   channel.Receipt
}

// DeliveryError is a delivery that failed: permanently, or with transient
// failures until MaxWait ran out.
type DeliveryError struct {
	Result Result
	Err    error
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("delivery %s failed after %d attempt(s): %v", e.Result.DeliveryID, e.Result.Attempts, e.Err)
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// job is one delivery being attempted.
type job struct {
	tenant, agent string
	target        Target
	id, sessionID string
	messageID     string
	text, origin  string
	files         []channel.File
	artifacts     []store.Artifact
	web           bool
	ch            channel.Channel
}

// Deliver sends m and waits for the result (at most MaxWait). ctx carries
// the tenant. A failure returns the Result (Status failed, unless the
// message could not even be recorded) and an error: ErrBadTarget or
// ErrUnknownChannel before anything is recorded, a *DeliveryError after.
func (d *Dispatcher) Deliver(ctx context.Context, m Message) (res Result, err error) {
	// The last step of a turn's trace: the message leaving on its channel.
	ctx, span := tracing.Start(ctx, tracing.SpanOutbound, trace.WithAttributes(tracing.AttrAgent.String(m.Agent),
		tracing.AttrChannel.String(strings.SplitN(m.Target, ":", 2)[0])))
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.String("picobot.delivery.status", string(res.Status)))
			tracing.Fail(span, err)
		}
		span.End()
	}()
	return d.deliver(ctx, m)
}

func (d *Dispatcher) deliver(ctx context.Context, m Message) (Result, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("failed to deliver message: %w", err)
	}
	if strings.TrimSpace(m.Text) == "" && len(m.Files) == 0 {
		return Result{}, errors.New("failed to deliver message: it has no text and no files")
	}
	if len(m.Text) > MaxTextBytes {
		return Result{}, fmt.Errorf("failed to deliver message: text of %d bytes exceeds the %d byte limit", len(m.Text), MaxTextBytes)
	}
	t, err := ParseTarget(m.Target)
	if err != nil {
		return Result{}, err
	}
	j := &job{tenant: tenant, agent: m.Agent, target: t, text: m.Text, origin: m.Origin, files: m.Files}
	if err := d.route(j); err != nil {
		return Result{}, err
	}
	sid, err := d.resolveSession(ctx, m.Agent, t)
	if err != nil {
		return Result{}, err
	}
	j.sessionID = sid
	j.id = store.NewID()
	j.messageID = "out_" + j.id

	if d.cfg.Artifacts != nil {
		for _, f := range m.Files {
			a, err := d.cfg.Artifacts.Save(ctx, sid, f.Name, f.MediaType, f.Data)
			if err != nil {
				return Result{}, fmt.Errorf("failed to store attachment %q: %w", f.Name, err)
			}
			j.artifacts = append(j.artifacts, a)
		}
	}
	del, err := d.cfg.Store.CreateDelivery(ctx, store.Delivery{ID: j.id, Channel: t.Channel, ChatID: t.ChatID,
		SessionID: sid, Status: store.DeliveryPending})
	if err != nil {
		return Result{}, fmt.Errorf("failed to record delivery to %s: %w", t, err)
	}
	res := Result{DeliveryID: j.id, SessionID: sid, Status: store.DeliveryPending}
	meta := map[string]string{MetaDelivery: j.id, MetaAgent: m.Agent}
	if m.Origin != "" {
		meta[MetaOrigin] = m.Origin
	}
	if len(j.artifacts) > 0 {
		ids := make([]string, len(j.artifacts))
		for i, a := range j.artifacts {
			ids[i] = a.ID
		}
		meta[MetaFiles] = strings.Join(ids, ",")
	}
	if m.Stored {
		return d.run(ctx, j, res)
	}
	// The message carries the delivery's creation time (the store's clock),
	// which is where Resume looks for it.
	if _, err := d.cfg.Store.AppendMessages(ctx, sid, store.Message{ID: j.messageID, Role: llm.RoleAssistant,
		Content: outboundContent(m.Text, m.Files), CreatedAt: del.CreatedAt, Meta: meta}); err != nil {
		err = fmt.Errorf("failed to store the message in session %q: %w", sid, err)
		return d.fail(ctx, res, err)
	}
	return d.run(ctx, j, res)
}

// outboundContent is the stored text of a message: its text, plus the names
// of its attachments, so the history says what was sent.
func outboundContent(text string, files []channel.File) string {
	if len(files) == 0 {
		return text
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	att := "[attachments: " + strings.Join(names, ", ") + "]"
	if text == "" {
		return att
	}
	return text + "\n\n" + att
}

// route picks the channel or the web sink for j.
func (d *Dispatcher) route(j *job) error {
	c, err := d.cfg.Channels.Lookup(j.tenant, j.agent, j.target.Channel)
	if err == nil {
		j.ch = c
		return nil
	}
	if slices.Contains(d.cfg.WebChannels, j.target.Channel) {
		j.web = true
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnknownChannel, err)
}

// resolveSession finds the target's session: the named dialog, which must
// exist, or the chat's current one (created as "default" for a new chat).
func (d *Dispatcher) resolveSession(ctx context.Context, agent string, t Target) (string, error) {
	if t.DialogID != "" {
		id := session.ID{Channel: t.Channel, ChatID: t.ChatID, DialogID: t.DialogID}
		if err := id.Validate(); err != nil {
			return "", fmt.Errorf("%w: %w", ErrBadTarget, err)
		}
		s, err := d.cfg.Store.GetSession(ctx, id.String())
		switch {
		case errors.Is(err, store.ErrNotFound) || err == nil && s.DeletedAt != nil:
			return "", fmt.Errorf("%w: no dialog %q in chat %s:%s", ErrBadTarget, t.DialogID, t.Channel, t.ChatID)
		case err != nil:
			return "", fmt.Errorf("failed to read session %q: %w", id, err)
		}
		return s.ID, nil
	}
	id, err := session.NewManager(session.Config{Store: d.cfg.Store, Agent: agent}).Resolve(ctx, t.Channel, t.ChatID)
	if err != nil {
		return "", fmt.Errorf("failed to resolve the session of %s: %w", t, err)
	}
	return id.String(), nil
}

// run attempts j until it is delivered, fails permanently, or MaxWait is
// spent, recording every attempt.
func (d *Dispatcher) run(ctx context.Context, j *job, res Result) (Result, error) {
	deadline := d.cfg.Clock.Now().Add(d.cfg.MaxWait)
	from := 0
	for n := 1; ; n++ {
		rec, err := d.attempt(ctx, j, from, deadline)
		res.Attempts = n
		if err == nil {
			res.Status, res.Receipt = store.DeliveryDelivered, rec
			if _, uerr := d.cfg.Store.UpdateDelivery(context.WithoutCancel(ctx), j.id,
				store.DeliveryUpdate{Status: ptr(store.DeliveryDelivered), AddAttempt: true}); uerr != nil {
				d.cfg.Log.Error("Failed to record a made delivery", "delivery", j.id, "err", uerr)
			}
			return res, nil
		}
		from += channel.PartsSent(err)
		last := err.Error()
		if _, uerr := d.cfg.Store.UpdateDelivery(context.WithoutCancel(ctx), j.id,
			store.DeliveryUpdate{LastError: &last, AddAttempt: true}); uerr != nil {
			d.cfg.Log.Error("Failed to record a delivery attempt", "delivery", j.id, "err", uerr)
		}
		if ctx.Err() != nil {
			return d.fail(ctx, res, fmt.Errorf("cancelled while delivering: %w", err))
		}
		if !channel.IsTransient(err) && !errors.Is(err, errTimedOut) {
			return d.fail(ctx, res, err)
		}
		wait := d.backoff(n, channel.RetryAfter(err))
		if errors.Is(err, errTimedOut) || !d.cfg.Clock.Now().Add(wait).Before(deadline) {
			return d.fail(ctx, res, fmt.Errorf("gave up: no delivery within %s: %w", d.cfg.MaxWait, err))
		}
		d.cfg.Log.Info("Retrying delivery", "delivery", j.id, "target", j.target.String(), "attempt", n, "wait", wait, "err", err)
		if !d.sleep(ctx, wait) {
			return d.fail(ctx, res, fmt.Errorf("cancelled while waiting to retry: %w", err))
		}
	}
}

var errTimedOut = errors.New("no result from the channel before the deadline")

// attempt makes one attempt, waiting for its result until deadline. A send
// still running then is cancelled; if it succeeds anyway, that counts.
func (d *Dispatcher) attempt(ctx context.Context, j *job, from int, deadline time.Time) (channel.Receipt, error) {
	type outcome struct {
		rec channel.Receipt
		err error
	}
	sendCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		if j.web {
			if d.cfg.Web == nil {
				o.err = &channel.SendError{Channel: j.target.Channel, Err: errors.New("this runtime has no gateway clients to deliver to")}
			} else {
				o.err = d.cfg.Web.DeliverWeb(sendCtx, WebMessage{Agent: j.agent, SessionID: j.sessionID, MessageID: j.messageID,
					Text: j.text, Files: j.files, Artifacts: j.artifacts, Origin: j.origin})
				if o.err != nil && !errors.As(o.err, new(*channel.SendError)) {
					o.err = &channel.SendError{Channel: j.target.Channel, Transient: true, Err: o.err}
				}
			}
		} else {
			o.rec, o.err = j.ch.Send(sendCtx, channel.Outbound{ChatID: j.target.ChatID, Text: j.text, Files: j.files, FromPart: from})
		}
		done <- o
	}()
	timer := d.cfg.Clock.NewTimer(deadline.Sub(d.cfg.Clock.Now()))
	defer timer.Stop()
	select {
	case o := <-done:
		return o.rec, o.err
	case <-timer.C():
		cancel()
		if o := <-done; o.err == nil {
			return o.rec, nil
		}
		return channel.Receipt{}, errTimedOut
	}
}

// backoff is the wait after the n-th failed attempt: what the platform
// asked for, else exponential from InitialBackoff up to MaxBackoff, with
// equal jitter (half fixed, half random).
func (d *Dispatcher) backoff(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	b := d.cfg.InitialBackoff
	for i := 1; i < n && b < d.cfg.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, d.cfg.MaxBackoff)
	return b/2 + time.Duration(d.cfg.Rand()*float64(b/2))
}

func (d *Dispatcher) sleep(ctx context.Context, wait time.Duration) bool {
	t := d.cfg.Clock.NewTimer(wait)
	defer t.Stop()
	if d.onSleep != nil {
		d.onSleep(wait)
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// fail records res as failed with err.
func (d *Dispatcher) fail(ctx context.Context, res Result, err error) (Result, error) {
	res.Status = store.DeliveryFailed
	msg := err.Error()
	if _, uerr := d.cfg.Store.UpdateDelivery(context.WithoutCancel(ctx), res.DeliveryID,
		store.DeliveryUpdate{Status: ptr(store.DeliveryFailed), LastError: &msg}); uerr != nil {
		d.cfg.Log.Error("Failed to record a failed delivery", "delivery", res.DeliveryID, "err", uerr)
	}
	d.cfg.Log.Info("Delivery failed", "delivery", res.DeliveryID, "attempts", res.Attempts, "err", err)
	return res, &DeliveryError{Result: res, Err: err}
}

func ptr[T any](v T) *T { return &v }
