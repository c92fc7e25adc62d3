package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// NameSend is the name of the tool that talks to another session.
const NameSend = "sessions_send"

// Limits of sessions_send.
const (
	// MaxPingPongTurns bounds the reply ping-pong (OpenClaw's
	// session.agentToAgent.maxPingPongTurns, 0-5); it is also the default.
	MaxPingPongTurns = 5
	// maxSendTimeout bounds timeoutSeconds.
	maxSendTimeout = time.Hour
	// stepTimeout bounds each turn of an exchange the tool no longer
	// waits for.
	stepTimeout = 30 * time.Minute
	// ExchangePrefix starts the message ids of an exchange's turns.
	ExchangePrefix = "a2a:"
)

// Sender runs turns in the sessions of the caller's tenant (from ctx).
type Sender interface {
	// Turn queues text as message msgID of session sessionID (a repeat of
	// msgID is the same turn) and returns the reply once the session's
	// agent has answered it. ctx ending ends the wait, not the turn.
	Turn(ctx context.Context, sessionID, msgID, text string) (string, error)
	// Announce delivers text, an announce step's reply that the session
	// has stored already, to the session's chat where the chat's replies
	// go (a chat platform's chat; a web chat reads it in its history).
	Announce(ctx context.Context, sessionID, text string) error
}

// SendStore is what sessions_send reads: sessions of the caller's tenant.
type SendStore interface {
	GetSession(ctx context.Context, id string) (store.Session, error)
}

// Exchanger runs the agent-to-agent exchanges sessions_send starts, past
// the calling turn: the first turn, the reply ping-pong and the announce
// step. Exchanges runs them in the process (embedded mode); cluster mode's
// runs each turn in the session pods of its chat and survives their deaths.
type Exchanger interface {
	// Start starts ex for the tenant of ctx. Its First channel gets the
	// outcome of ex's first turn (at most one value); Stop ends that wait,
	// not the exchange.
	Start(ctx context.Context, ex Exchange) (Started, error)
	// Clock times timeoutSeconds.
	Clock() clock.Clock
}

// Started is a started exchange as its sessions_send call sees it.
type Started struct {
	First <-chan StepResult
	// Stop, if set, ends the wait for First.
	Stop func()
}

// Exchanges runs the agent-to-agent exchanges sessions_send starts in this
// process (a restart ends those in progress; the turns already run are
// stored). Safe for concurrent use.
type Exchanges struct {
	ctx    context.Context
	sender Sender
	clock  clock.Clock
	log    *slog.Logger
	wg     sync.WaitGroup
}

var _ Exchanger = (*Exchanges)(nil)

// NewExchanges returns the exchanges of a process whose context is ctx (its
// end stops them); clock times timeoutSeconds.
func NewExchanges(ctx context.Context, s Sender, clk clock.Clock, log *slog.Logger) *Exchanges {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Exchanges{ctx: ctx, sender: s, clock: clk, log: log}
}

// Wait waits for the exchanges in progress (after the process context
// ended).
func (x *Exchanges) Wait() { x.wg.Wait() }

// Clock implements Exchanger.
func (x *Exchanges) Clock() clock.Clock { return x.clock }

// SendConfig configures sessions_send of one agent.
type SendConfig struct {
	// Agent is the calling Agent; Edges its spec.delegates: it may send to
	// its own sessions and to those of the Agents its edges name.
	Agent string
	Edges []picobotv1alpha1.Delegate
	Store SendStore
	// Exchanges runs the exchanges; nil answers every call with
	// Unavailable.
	Exchanges   Exchanger
	Unavailable string
}

// SendArgs are the arguments of sessions_send.
type SendArgs struct {
	SessionKey       string `json:"sessionKey,omitempty" jsonschema:"the session to send to (sessions_list shows yours)"`
	SessionID        string `json:"sessionId,omitempty" jsonschema:"same as sessionKey"`
	Message          string `json:"message" jsonschema:"what to tell the other session's agent"`
	TimeoutSeconds   *int   `json:"timeoutSeconds,omitempty" jsonschema:"how long to wait for its reply, up to 3600 (default 30); 0 = do not wait (fire and forget)"`
	MaxPingPongTurns *int   `json:"maxPingPongTurns,omitempty" jsonschema:"after its reply, how many more replies the two agents exchange, 0-5 (default 5); either ends it early by replying exactly REPLY_SKIP"`
}

// defaultSendTimeout is timeoutSeconds when not given.
const defaultSendTimeout = 30

// Sent is sessions_send's answer.
type Sent struct {
	Status     string `json:"status"`
	RunID      string `json:"runId"`
	SessionKey string `json:"sessionKey"`
	Reply      string `json:"reply,omitempty"`
	Error      string `json:"error,omitempty"`
}

// NewSend returns sessions_send.
func NewSend(cfg SendConfig) tool.Tool {
	return tool.New(NameSend, "Send a message to another session (one of yours, or of an agent agents_list shows) and, unless "+
		"timeoutSeconds is 0, wait for its reply. Afterwards the two agents may exchange replies (maxPingPongTurns; reply exactly "+
		"REPLY_SKIP to end that), then the other agent announces the outcome in its own chat (unless it replies ANNOUNCE_SKIP).",
		func(ctx context.Context, env tool.Env, a SendArgs) (tool.Result, error) {
			return send(ctx, cfg, env, a)
		})
}

// Exchange is one sessions_send's conversation between two sessions.
type Exchange struct {
	// ID starts the message ids of its turns (ExchangePrefix and a new id).
	ID string `json:"id"`
	// Requester and Target are sessions; RequesterAgent and TargetAgent
	// their Agents.
	Requester      string `json:"requester"`
	Target         string `json:"target"`
	RequesterAgent string `json:"requesterAgent"`
	TargetAgent    string `json:"targetAgent"`
	Message        string `json:"message"`
	MaxTurns       int    `json:"maxTurns"`
	// RequesterCanListen says the requester's session takes replies (see
	// chatSession): without it there is no ping-pong.
	RequesterCanListen bool `json:"requesterCanListen"`
}

// StepResult is the outcome of a turn of an exchange.
type StepResult struct {
	Reply string
	Err   error
}

func send(ctx context.Context, cfg SendConfig, env tool.Env, a SendArgs) (tool.Result, error) {
	if cfg.Exchanges == nil {
		return tool.Errorf("error: sessions_send is not available here: %s", cfg.Unavailable), nil
	}
	msg := strings.TrimSpace(a.Message)
	timeout, turns := defaultSendTimeout, MaxPingPongTurns
	if a.TimeoutSeconds != nil {
		timeout = *a.TimeoutSeconds
	}
	if a.MaxPingPongTurns != nil {
		turns = *a.MaxPingPongTurns
	}
	switch {
	case msg == "":
		return tool.Errorf("error: give a message"), nil
	case timeout < 0 || time.Duration(timeout)*time.Second > maxSendTimeout:
		return tool.Errorf("error: timeoutSeconds must be 0 (do not wait) to %d, got %d", int(maxSendTimeout.Seconds()), timeout), nil
	case turns < 0 || turns > MaxPingPongTurns:
		return tool.Errorf("error: maxPingPongTurns must be 0-%d, got %d", MaxPingPongTurns, turns), nil
	}
	key := strings.TrimSpace(a.SessionKey)
	if key == "" {
		key = strings.TrimSpace(a.SessionID)
	}
	if key == "" {
		return tool.Errorf("error: name the session with sessionKey (sessions_list shows yours)"), nil
	}
	s, err := cfg.Store.GetSession(ctx, key)
	// Outside the caller's reach reads as missing: another tenant's session
	// (the store does not see it), or one of an Agent that is neither the
	// caller nor along its delegate edges.
	if errors.Is(err, store.ErrNotFound) || (err == nil && (s.DeletedAt != nil || !reachable(cfg, s.Agent))) {
		return tool.Errorf("error: no session %q you can send to (your own sessions, or those of %s)", key, reach(cfg)), nil
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to get session %q: %w", key, err)
	}
	switch {
	case s.ID == env.SessionID:
		return tool.Errorf("error: session %q is this one; send to another session", key), nil
	case s.Channel == protocol.ChannelStateless:
		return tool.Errorf("error: session %q is a stateless request's; it takes no messages", key), nil
	case s.Channel == protocol.ChannelDelegate:
		// A sub-agent run's session belongs to its run: a message of its
		// own would run with the Agent's chat tools, todo included.
		return tool.Errorf("error: session %q is a sub-agent run's; it takes no messages: start another run "+
			"(sessions_spawn or delegate) with what it needs to know", key), nil
	}
	ex := Exchange{ID: ExchangePrefix + store.NewID(), Requester: env.SessionID, Target: s.ID, RequesterAgent: cfg.Agent, TargetAgent: s.Agent,
		Message: msg, MaxTurns: turns, RequesterCanListen: chatSession(env.SessionID)}
	started, err := cfg.Exchanges.Start(ctx, ex)
	if err != nil {
		return tool.Result{}, err
	}
	if started.Stop != nil {
		defer started.Stop()
	}
	out := Sent{RunID: ex.ID, SessionKey: s.ID}
	if timeout == 0 {
		out.Status = "accepted"
		return jsonResult(out)
	}
	timer := cfg.Exchanges.Clock().NewTimer(time.Duration(timeout) * time.Second)
	defer timer.Stop()
	select {
	case r := <-started.First:
		if r.Err != nil {
			out.Status, out.Error = "error", r.Err.Error()
			b, _ := jsonResult(out)
			b.IsError = true
			return b, nil
		}
		out.Status, out.Reply = "ok", r.Reply
	case <-timer.C():
		out.Status, out.Error = "timeout", fmt.Sprintf("no reply within %d s; the turn goes on: sessions_history shows its reply later", timeout)
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
	return jsonResult(out)
}

func reachable(cfg SendConfig, agent string) bool {
	return agent == cfg.Agent || slices.ContainsFunc(cfg.Edges, func(e picobotv1alpha1.Delegate) bool { return e.AgentRef.Name == agent })
}

func reach(cfg SendConfig) string {
	if len(cfg.Edges) == 0 {
		return "no other agent"
	}
	names := make([]string, len(cfg.Edges))
	for i, e := range cfg.Edges {
		names[i] = e.AgentRef.Name
	}
	return "agents " + strings.Join(names, ", ")
}

// Start implements Exchanger: ex runs in this process, past the calling
// turn, for the tenant of ctx.
func (x *Exchanges) Start(ctx context.Context, ex Exchange) (Started, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return Started{}, fmt.Errorf("failed to start exchange %q: %w", ex.ID, err)
	}
	if x.ctx.Err() != nil {
		return Started{}, fmt.Errorf("failed to start exchange %q: the runtime is shutting down", ex.ID)
	}
	xctx := store.WithTenant(x.ctx, tenant)
	first := make(chan StepResult, 1)
	x.wg.Go(func() { x.run(xctx, ex, first) })
	return Started{First: first}, nil
}

// run is one exchange: the first turn in the target session, then up to
// MaxTurns replies alternating between the requester's session and the
// target's (either ends it with REPLY_SKIP), then the target's announce
// step, whose reply goes to its chat unless it is ANNOUNCE_SKIP. The turns
// are those of ExchangeState, run one after the other.
func (x *Exchanges) run(ctx context.Context, ex Exchange, first chan<- StepResult) {
	s := NewExchangeState(ex)
	for !s.Done {
		t := s.Current()
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		reply, err := x.sender.Turn(sctx, t.Session, t.MsgID, t.Text)
		cancel()
		if s.Step == 1 {
			first <- StepResult{Reply: reply, Err: err}
		}
		if err != nil {
			x.log.Warn("A turn of an agent-to-agent exchange failed", "exchange", ex.ID, "session", t.Session, "step", t.Step, "err", err)
		}
		if t.Announce && err == nil && !skip(reply, AnnounceSkip) {
			if err := x.sender.Announce(ctx, ex.Target, reply); err != nil {
				x.log.Warn("Failed to deliver an agent-to-agent announcement", "exchange", ex.ID, "session", ex.Target, "err", err)
			}
		}
		s.Advance(reply, err != nil)
	}
}

// chatSession reports whether replies can go back to session: a chat's,
// not a stateless request's, a scheduled run's or a sub-agent run's (a
// message of its own would run there as a chat turn). A caller in one of
// those gets the first reply and the announce step, no ping-pong.
func chatSession(session string) bool {
	if session == "" {
		return false
	}
	for _, ch := range []string{protocol.ChannelStateless, protocol.ChannelCron, protocol.ChannelDelegate} {
		if strings.HasPrefix(session, ch+":") {
			return false
		}
	}
	return true
}

// skip reports whether reply is the token (or empty: nothing to pass on).
func skip(reply, token string) bool {
	r := strings.TrimSpace(reply)
	return r == "" || r == token
}
