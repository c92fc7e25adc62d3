package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/dialog"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// codeNotReady answers a message for an agent the operator reports not
// ready for another reason than its model (image, quota, references).
const codeNotReady = "not_ready"

// BackendConfig configures the gateway side of cluster mode.
type BackendConfig struct {
	Bus       bus.Bus
	Redis     *redis.Client
	Store     store.Store
	Artifacts artifact.Store
	// Kube reads Agents (a cache-backed client in the gateway).
	Kube client.Reader
	// ReplyTimeout bounds how long a send waits for its reply.
	ReplyTimeout time.Duration
	// Rewake is how often a waiting send checks that its chat still has a
	// runtime, waking a new one when the owner died.
	Rewake time.Duration
	// QueueTimeout bounds how long a send retries queueing its message
	// while Redis is unreachable (a restart) before it fails with
	// CodeUnavailable.
	QueueTimeout time.Duration
	// Limits returns the tenant's session and message caps (its
	// TenantQuota); nil is no caps.
	Limits func(ctx context.Context, tenant string) quota.Limits
	// Admitter counts the tenants' messages against their caps, across
	// the gateway's replicas (quota.RedisAdmitter); nil admits all.
	Admitter quota.Admitter
	// Metrics counts the messages refused for the caps and the wakes of
	// runtimes; nil records nothing.
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// Backend implements gateway.Backend for cluster mode: it never runs a turn
// itself; it queues messages and relays the events of the session pods. The
// tenant of every call is the one in ctx (store.WithTenant), set by the
// gateway from the caller's API key.
type Backend struct {
	// Service implements the dialog methods of gateway.Backend.
	dialog.Service

	cfg  BackendConfig
	sig  signals
	read *session.Manager // dialog listing only; never runs a turn
}

// NewBackend returns the cluster backend.
func NewBackend(cfg BackendConfig) *Backend {
	if cfg.ReplyTimeout <= 0 {
		cfg.ReplyTimeout = 10 * time.Minute
	}
	if cfg.Rewake <= 0 {
		cfg.Rewake = 2 * time.Second
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	b := &Backend{cfg: cfg, sig: signals{cfg.Redis}, read: session.NewManager(session.Config{Store: cfg.Store})}
	b.Service = dialog.Service{Store: cfg.Store, Manager: b.manager}
	return b
}

// ListAgents implements gateway.Backend: the agents of the tenant in ctx.
func (b *Backend) ListAgents(ctx context.Context) ([]gateway.AgentInfo, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return nil, err
	}
	var list picobotv1alpha1.AgentList
	if err := b.cfg.Kube.List(ctx, &list, client.InNamespace(tenant)); err != nil {
		return nil, fmt.Errorf("failed to list agents: %w", err)
	}
	out := make([]gateway.AgentInfo, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, agentInfo(&list.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func agentInfo(a *picobotv1alpha1.Agent) gateway.AgentInfo {
	info := gateway.AgentInfo{Name: a.Name, Tools: a.Status.EffectiveTools}
	if c := meta.FindStatusCondition(a.Status.Conditions, picobotv1alpha1.ConditionReady); c != nil {
		info.Ready = c.Status == "True"
		info.Reason, info.Message = c.Reason, c.Message
	} else {
		info.Reason, info.Message = "Pending", "the operator has not reconciled this agent yet"
	}
	if e := a.Status.EffectiveModel; e != nil {
		info.Model = &gateway.ModelInfo{Provider: string(e.Provider), Model: e.Model, Source: string(e.Source)}
	}
	return info
}

// agent checks that the agent exists in the tenant and can answer.
func (b *Backend) agent(ctx context.Context, tenant, name string) error {
	_, err := b.readyAgent(ctx, tenant, name)
	return err
}

// readyAgent returns the agent when it exists in the tenant and can answer.
func (b *Backend) readyAgent(ctx context.Context, tenant, name string) (*picobotv1alpha1.Agent, error) {
	var a picobotv1alpha1.Agent
	if err := b.cfg.Kube.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &gateway.CodedError{Code: gateway.CodeUnknownAgent, Err: fmt.Errorf("no agent %q", name)}
		}
		return nil, fmt.Errorf("failed to read agent %q: %w", name, err)
	}
	info := agentInfo(&a)
	if !info.Ready {
		code := codeNotReady
		if c := meta.FindStatusCondition(a.Status.Conditions, picobotv1alpha1.ConditionModelResolved); c != nil && c.Status != "True" {
			code = gateway.CodeNoModel
		}
		return nil, &gateway.CodedError{Code: code, Err: fmt.Errorf("agent %s is not ready (%s): %s", name, info.Reason, info.Message)}
	}
	return &a, nil
}

// Handle queues the message for the chat's runtime, wakes one when the chat
// has none, and relays the turn's events until it is done.
func (b *Backend) Handle(ctx context.Context, s gateway.Send) (gateway.Outcome, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return gateway.Outcome{}, err
	}
	if err := b.agent(ctx, tenant, s.Agent); err != nil {
		return gateway.Outcome{}, err
	}
	c := s.Chat()
	channel, chat := c.ChannelName(), c.Key()
	if cmd, ok := session.ParseCommand(s.Text); ok && cmd.Name == "stop" {
		text := "Stopped."
		if !b.stop(ctx, tenant, s.Agent, channel, chat) {
			text = "Nothing is running."
		}
		return gateway.Outcome{Command: "stop", Text: text}, nil
	}
	if code, approve, ok := approval.ParseAnswer(s.Text); ok {
		// An answer to an exec approval goes to the waiting turn, not
		// into the queue behind it.
		answered := b.approve(ctx, tenant, s.Agent, channel, chat, code, approve)
		return gateway.Outcome{Command: approval.CommandOf(approve), Text: gateway.ApprovalReply(code, approve, answered)}, nil
	}
	if err := b.admit(ctx, tenant, quota.Session(channel, s.Agent, s.ChatID)); err != nil {
		return gateway.Outcome{}, err
	}
	msgID := chat + "/" + s.ID
	// Subscribing and queueing ride out a Redis restart: both are retried
	// with backoff for QueueTimeout. A publish retried after a lost reply
	// may queue the message twice; the runtime's idempotent append keyed by
	// msgID answers it once.
	queueBy := time.Now().Add(b.cfg.QueueTimeout)
	var ps *redis.PubSub
	var events <-chan received
	err = b.retryRedis(ctx, queueBy, "subscribe to the chat's events", func() (err error) {
		ps, events, err = b.sig.subscribe(ctx, eventChannel(tenant, s.Agent, channel, chat))
		return err
	})
	if err != nil {
		return gateway.Outcome{}, err
	}
	defer func() { _ = ps.Close() }()
	payload, err := protocol.EncodeInbound(protocol.Inbound{ID: msgID, Channel: channel, ChatKey: chat, Text: s.Text, Files: s.Files, Actor: gateway.ActorFrom(ctx)})
	if err != nil {
		return gateway.Outcome{}, err
	}
	err = b.retryRedis(ctx, queueBy, "queue message", func() error {
		return b.cfg.Bus.Publish(ctx, chatStream(tenant, s.Agent, channel, chat), bus.Message{ID: msgID, Payload: payload, Headers: bus.QueuedAt(time.Now())})
	})
	if err != nil {
		return gateway.Outcome{}, err
	}
	if err := b.ensureRuntime(ctx, tenant, s.Agent, channel, chat); err != nil {
		// Queued is what matters: the rewake below tries again.
		b.cfg.Log.ErrorContext(ctx, "Failed to wake chat", "chat", chat, "err", err)
	}
	out, err := b.await(ctx, s, tenant, msgID, events)
	if len(s.Files) > 0 {
		err = filesRefused(s.Agent, err)
	}
	return out, err
}

// codeFilesUnsupported answers a message with files whose session runtime
// is older than files: it refused the message (protocol.InboundVersion)
// rather than answer its text and lose the files.
const codeFilesUnsupported = "files_unsupported"

// filesRefused turns a session runtime's refusal of a message of a newer
// wire version, when the message carried files (the only reason a
// message is version 3), into an error that says so and what to do. Other
// errors are returned as they are. The runtime's refusal starts with
// protocol.ErrUnknownVersion's text; a frame this gateway cannot read
// (a runtime newer than the gateway) reads otherwise.
func filesRefused(agent string, err error) error {
	var coded *gateway.CodedError
	if !errors.As(err, &coded) || coded.Code != gateway.CodeUnavailable || !strings.HasPrefix(coded.Err.Error(), protocol.ErrUnknownVersion.Error()) {
		return err
	}
	return &gateway.CodedError{Code: codeFilesUnsupported, Status: http.StatusUnprocessableEntity, Err: fmt.Errorf(
		"the session runtime of agent %s is older than the gateway and cannot take attached files (%s); nothing was answered: "+
			"send the message without files, or upgrade the Agent's runtime image", agent, coded.Err)}
}

// await relays the events of message msgID to the send's sink until its
// outcome arrives, re-waking the chat every Rewake in case its owner died
// mid-turn.
func (b *Backend) await(ctx context.Context, s gateway.Send, tenant, msgID string, events <-chan received) (gateway.Outcome, error) {
	c := s.Chat()
	deadline := time.NewTimer(b.cfg.ReplyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(b.cfg.Rewake)
	defer tick.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return gateway.Outcome{}, errors.New("lost the event subscription; the reply will be in the history")
			}
			if e.MessageID != msgID {
				continue
			}
			if out, err, done := relay(e, s.Sink); done {
				return out, err
			}
		case <-tick.C:
			// The owner may have died mid-turn: its lease and hint expire,
			// and a new runtime reclaims the message.
			a, err := b.readyAgent(ctx, tenant, s.Agent)
			if err != nil {
				return gateway.Outcome{}, err // e.g. its pods cannot start
			}
			if err := b.podsHeld(ctx, tenant, a, c.ChannelName(), c.Key()); err != nil {
				return gateway.Outcome{}, err
			}
			if err := b.ensureRuntime(ctx, tenant, s.Agent, c.ChannelName(), c.Key()); err != nil {
				b.cfg.Log.Error("Failed to re-wake chat", "chat", c.Key(), "err", err)
			}
		case <-deadline.C:
			return gateway.Outcome{}, fmt.Errorf("no reply within %s; the reply will be in the history when it comes", b.cfg.ReplyTimeout)
		case <-ctx.Done():
			return gateway.Outcome{}, ctx.Err()
		}
	}
}

// codeQuotaExceeded answers a message whose chat gets no session pod
// because the tenant's maxSessionPods is reached.
const codeQuotaExceeded = "quota_exceeded"

// podsHeld tells a send waiting for a runtime that none is coming soon:
// the chat has no runtime and the operator reports, on the Agent's
// WithinQuota condition, that the tenant's session pod cap holds chats
// back. The message stays queued; a pod answers it once one exits.
func (b *Backend) podsHeld(ctx context.Context, tenant string, a *picobotv1alpha1.Agent, channel, chat string) error {
	c := meta.FindStatusCondition(a.Status.Conditions, picobotv1alpha1.ConditionWithinQuota)
	if c == nil || c.Status != "False" || c.Reason != picobotv1alpha1.ReasonSessionPodLimit {
		return nil
	}
	owned, err := b.sig.owned(ctx, ownerKey(tenant, a.Name, channel, chat))
	if err != nil {
		// Redis unreachable: the send keeps waiting (its re-wake reports
		// it); a quota answer would be a guess.
		b.cfg.Log.Warn("Failed to check the chat's runtime", "chat", chat, "err", err)
		return nil
	}
	if owned {
		return nil
	}
	return &gateway.CodedError{Code: codeQuotaExceeded, Status: http.StatusTooManyRequests, Err: fmt.Errorf(
		"agent %s has no session pod free for this chat: %s. The message stays queued and is answered once a pod is free", a.Name, c.Message)}
}

// relay hands one event frame of the awaited message to sink; done reports
// the message's outcome.
func relay(e received, sink func(turn.Event)) (out gateway.Outcome, err error, done bool) {
	if err := e.Err; err != nil {
		// A session pod newer than this gateway (a rolling upgrade): the
		// turn runs, its events cannot be read here.
		return gateway.Outcome{}, &gateway.CodedError{Code: gateway.CodeUnavailable,
			Err: fmt.Errorf("the session runtime answered in a format this gateway cannot read (%w); the reply will be in the history", err)}, true
	}
	switch e.Kind {
	case protocol.FrameDone:
		return *e.Outcome, nil, true
	case protocol.FrameError:
		if e.Outcome != nil {
			out = *e.Outcome
		}
		return out, &gateway.CodedError{Code: e.Code, Err: errors.New(e.Message), Status: e.Status,
			RetryAfter: time.Duration(e.RetryAfterMS) * time.Millisecond}, true
	}
	if e.Event != nil && sink != nil {
		sink(*e.Event)
	}
	return gateway.Outcome{}, nil, false
}

// retryRedis runs op until it succeeds, backing off exponentially between
// attempts, so that a send rides out a Redis restart. Once the next attempt
// would come after deadline it gives up with CodeUnavailable: the message was
// not queued, and the client may send it again with the same id.
func (b *Backend) retryRedis(ctx context.Context, deadline time.Time, what string, op func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := op()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !time.Now().Add(wait).Before(deadline):
			return &gateway.CodedError{Code: gateway.CodeUnavailable,
				Err: fmt.Errorf("failed to %s, so the message was not queued; send it again: %w", what, err)}
		}
		b.cfg.Log.WarnContext(ctx, "Redis unreachable; retrying", "op", what, "err", err, "backoff", wait)
		if !sessionrt.Sleep(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// admit counts a message of the session (quota.Session) against the
// tenant's session and message caps; only a refusal is an error. When the
// counts cannot be reached (Redis down), the message goes on: the queue, in
// the same Redis, decides whether it can be taken.
func (b *Backend) admit(ctx context.Context, tenant, session string) error {
	if b.cfg.Admitter == nil || b.cfg.Limits == nil {
		return nil
	}
	err := b.cfg.Admitter.Admit(ctx, tenant, session, b.cfg.Limits(ctx, tenant))
	var ce *gateway.CodedError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ce):
		b.cfg.Log.Warn("Failed to count a message against the tenant's quota; admitting it", "tenant", tenant, "err", err)
		return nil
	}
	b.cfg.Metrics.QuotaRefused(tenant, ce.Code)
	return err
}

// ensureRuntime wakes a runtime for the chat unless one owns it.
func (b *Backend) ensureRuntime(ctx context.Context, tenant, agentName, channel, chat string) error {
	owned, err := b.sig.owned(ctx, ownerKey(tenant, agentName, channel, chat))
	if err != nil {
		return fmt.Errorf("failed to check chat owner: %w", err)
	}
	if owned {
		return nil
	}
	err = wake.Publish(ctx, b.cfg.Bus, Wake{Tenant: tenant, Agent: agentName, Channel: channel, ChatKey: chat})
	b.cfg.Metrics.Woke(tenant, agentName, err)
	return err
}

func (b *Backend) stop(ctx context.Context, tenant, agentName, channel, chat string) bool {
	running, _ := b.sig.owned(ctx, runningKey(tenant, agentName, channel, chat))
	if !running {
		return false
	}
	return b.sig.publish(ctx, controlChannel(tenant, agentName, channel, chat), protocol.Frame{Kind: protocol.FrameStop}) == nil
}

// approve sends an approval answer to the runtime serving the chat, over the
// control channel a stop takes. It reports whether a turn of the chat runs
// and a runtime received the answer; the runtime's approval_result event
// says whether the code was waiting.
func (b *Backend) approve(ctx context.Context, tenant, agentName, channel, chat, code string, approve bool) bool {
	running, _ := b.sig.owned(ctx, runningKey(tenant, agentName, channel, chat))
	if !running {
		return false
	}
	n, err := b.sig.publishCount(ctx, controlChannel(tenant, agentName, channel, chat),
		protocol.Frame{Kind: protocol.FrameApprove, Approval: &protocol.ApprovalAnswer{Code: code, Approve: approve}})
	return err == nil && n > 0
}

// Approve implements gateway.Backend.
func (b *Backend) Approve(ctx context.Context, c gateway.Chat, code string, approve bool) (bool, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return false, err
	}
	if err := b.known(ctx, tenant, c.Agent); err != nil {
		return false, err
	}
	return b.approve(ctx, tenant, c.Agent, c.ChannelName(), c.Key(), code, approve), nil
}

// CanvasAnswer implements gateway.CanvasBackend: the web client's answer
// goes to the runtime serving the chat over the control channel an approval
// answer takes. It reports whether a runtime received it.
func (b *Backend) CanvasAnswer(ctx context.Context, c gateway.Chat, id string, a tool.CanvasAnswer) (bool, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return false, err
	}
	if err := b.known(ctx, tenant, c.Agent); err != nil {
		return false, err
	}
	channel, chat := c.ChannelName(), c.Key()
	if running, _ := b.sig.owned(ctx, runningKey(tenant, c.Agent, channel, chat)); !running {
		return false, nil
	}
	n, err := b.sig.publishCount(ctx, controlChannel(tenant, c.Agent, channel, chat),
		protocol.Frame{Kind: protocol.FrameCanvasAnswer, CanvasAnswer: &protocol.CanvasAnswer{ID: id, Answer: a}})
	if err != nil {
		return false, fmt.Errorf("failed to send the canvas answer to chat %q: %w", chat, err)
	}
	return n > 0, nil
}

// Stop implements gateway.Backend: the chat's runtime cancels its turn.
func (b *Backend) Stop(ctx context.Context, c gateway.Chat) (bool, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return false, err
	}
	if err := b.known(ctx, tenant, c.Agent); err != nil {
		return false, err
	}
	return b.stop(ctx, tenant, c.Agent, c.ChannelName(), c.Key()), nil
}

func (b *Backend) known(ctx context.Context, tenant, name string) error {
	var a picobotv1alpha1.Agent
	if err := b.cfg.Kube.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return &gateway.CodedError{Code: gateway.CodeUnknownAgent, Err: fmt.Errorf("no agent %q", name)}
		}
		return err
	}
	return nil
}

// manager is the dialog service's view of the backend: the agent must exist
// in the tenant; the dialogs are the store's (no turn runs here).
func (b *Backend) manager(ctx context.Context, agentName string) (*session.Manager, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.known(ctx, tenant, agentName); err != nil {
		return nil, err
	}
	return b.read, nil
}

// Artifact implements gateway.Backend.
func (b *Backend) Artifact(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error) {
	return b.cfg.Artifacts.Open(ctx, id)
}

// Upload implements gateway.Backend: the file becomes an artifact of the
// chat's uploads, which its session pod reads when the message comes.
func (b *Backend) Upload(ctx context.Context, c gateway.Chat, f gateway.Upload) (store.Artifact, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return store.Artifact{}, err
	}
	if err := b.known(ctx, tenant, c.Agent); err != nil {
		return store.Artifact{}, err
	}
	return gateway.SaveUpload(ctx, b.cfg.Artifacts, c, f)
}

// Health implements gateway.Backend: the shared services' reachability.
// The agents' own checks (model, features) are their status conditions,
// which the operator publishes, and each session pod's health tool.
func (b *Backend) Health(ctx context.Context) health.Report {
	var checks []health.Check
	err := b.cfg.Redis.Ping(ctx).Err()
	checks = append(checks, check("redis", err, "reachable", "check PICOBOT_REDIS_URL and that Redis is up"))
	_, err = b.cfg.Store.ListSessions(store.WithTenant(ctx, "picobot-health"), store.SessionFilter{Limit: 1})
	checks = append(checks, check("postgresql", err, "reachable", "check PICOBOT_POSTGRES_URL and that PostgreSQL is up"))
	return health.NewReport(health.Group{Kind: health.Core, Name: "gateway", Checks: checks})
}

var _ gateway.Backend = (*Backend)(nil)

func check(name string, err error, ok, fix string) health.Check {
	if err != nil {
		return health.Check{Name: name, OK: false, Message: err.Error(), Fix: fix}
	}
	return health.Check{Name: name, OK: true, Message: ok}
}

// Inbound queues a message from a chat platform for its chat's runtime and
// wakes one if needed; it returns once the message is durable in Redis, so
// an error makes the platform deliver it again. The reply goes back through
// the outbound dispatcher. ctx carries the tenant.
func (b *Backend) Inbound(ctx context.Context, agentName string, in channel.Inbound) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return err
	}
	// A platform chat is one chat of the agent's channel: the session is
	// "<channel>:<platform chat id>:<dialog>".
	chat := in.ChatID
	if code, approve, ok := approval.ParseAnswer(in.Text); ok {
		// Answered at once, not queued behind the turn waiting for it;
		// the confirmation goes back like a reply.
		answered := b.approve(ctx, tenant, agentName, in.Channel, chat, code, approve)
		return QueueReply(ctx, b.cfg.Bus, tenant, outbound.Message{Agent: agentName, Target: in.Channel + ":" + chat,
			Text: gateway.ApprovalReply(code, approve, answered), Stored: true})
	}
	if err := b.admit(ctx, tenant, quota.Session(in.Channel, agentName, in.ChatID)); err != nil {
		// Refused for the tenant's caps: the chat is told (once a
		// minute), and the platform is not asked to deliver it again.
		target := in.Channel + ":" + chat
		if !quota.ChatNotice(ctx, b.cfg.Store, time.Now(), agentName, target, err) {
			return nil
		}
		return QueueReply(ctx, b.cfg.Bus, tenant, outbound.Message{Agent: agentName, Target: target,
			Text: "Sorry, I could not answer: " + err.Error()})
	}
	id := in.Channel + "/" + in.ChatID + "/" + in.MessageID
	payload, err := protocol.EncodeInbound(protocol.Inbound{ID: id, Channel: in.Channel, ChatKey: chat, Text: in.Text, Actor: senderActor(in)})
	if err != nil {
		return err
	}
	if err := b.cfg.Bus.Publish(ctx, chatStream(tenant, agentName, in.Channel, chat), bus.Message{ID: id, Payload: payload, Headers: bus.QueuedAt(time.Now())}); err != nil {
		return fmt.Errorf("failed to queue message: %w", err)
	}
	return b.ensureRuntime(ctx, tenant, agentName, in.Channel, chat)
}

// senderActor is a chat platform's message's author as the audit log
// records it: "<channel>:<user>", or the channel when the platform named
// no user.
func senderActor(in channel.Inbound) string {
	if in.Sender == "" {
		return "channel:" + in.Channel
	}
	return in.Channel + ":" + in.Sender
}
