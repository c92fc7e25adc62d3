package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// sessions_send in cluster mode. Each turn of an agent-to-agent exchange
// (the first turn in the target session, the ping-pong replies, the
// announce step) is a message queued on the chat stream of its session,
// like a gateway message, with a wake when the chat has no runtime; the
// pod that answers it drives the exchange on:
//
//   - the exchange's state (sessions.ExchangeState) is a Redis value of the
//     tenant, written when sessions_send starts it; the pod that answers a
//     turn moves it past that turn in one optimistic transaction (so only
//     one pod ever does, however often the turn is answered) and then
//     queues the next turn on its chat's stream;
//   - every turn's message id is fixed by the exchange and step, so a turn
//     queued twice runs once (the second answer is the stored one, marked
//     duplicate, which moves nothing);
//   - a pod that dies mid-turn leaves the message pending on the chat's
//     stream, and one that dies after moving the state before queuing the
//     next turn leaves a state whose turn is not queued: the gateway's
//     RunWatch looks at every exchange whose state has not moved for a
//     while and whose turn's chat no runtime owns, queues that turn again
//     and wakes a runtime for its chat.
//
// The sessions_send call that waits (timeoutSeconds > 0) listens for the
// first turn's outcome on the target chat's event channel; its pod may go
// away meanwhile without stopping the exchange.

// exchangeTTL bounds how long an exchange's state is kept: its turns have
// run long before (a turn waits at most for the one in progress in its
// chat).
const exchangeTTL = 24 * time.Hour

// exchangesKey is the hash whose fields are a tenant's exchanges in
// progress (a hash, not a set: a tenant's Redis user may not run set
// commands, see redisbus.TenantACLRules); exchangeKey holds one's state.
func exchangesKey(tenant string) string    { return bus.Key(tenant, "a2a") }
func exchangeKey(tenant, id string) string { return bus.Key(tenant, "a2a", id) }

// storedExchange is the Redis value of an exchange.
type storedExchange struct {
	sessions.ExchangeState
	// UpdatedAt is when the state last moved, or its turn was queued
	// again.
	UpdatedAt time.Time `json:"updatedAt"`
}

// Exchanges is sessions.Exchanger in cluster mode, for one tenant: a
// session pod's (Start, Answered) and the gateway's RunWatch (Check).
type Exchanges struct {
	Tenant string
	Bus    bus.Bus
	Redis  *redis.Client
	// Wake queues a wake: session pods use wake.Queue (the default), the
	// gateway wake.Publish.
	Wake func(ctx context.Context, b bus.Bus, w Wake) error
	// Rewake is how often a sessions_send call that waits checks that the
	// first turn's chat has a runtime (2 s when zero).
	Rewake time.Duration
	Clk    clock.Clock
	Log    *slog.Logger
}

var _ sessions.Exchanger = (*Exchanges)(nil)

// Clock implements sessions.Exchanger.
func (x *Exchanges) Clock() clock.Clock {
	if x.Clk == nil {
		return clock.RealClock{}
	}
	return x.Clk
}

// Start implements sessions.Exchanger: it stores the exchange's state,
// queues its first turn and returns; First gets that turn's outcome as the
// target chat's event channel carries it.
func (x *Exchanges) Start(ctx context.Context, ex sessions.Exchange) (sessions.Started, error) {
	s := storedExchange{ExchangeState: sessions.NewExchangeState(ex), UpdatedAt: x.Clock().Now()}
	t := s.Current()
	c, err := chatOf(t.Session)
	if err != nil {
		return sessions.Started{}, err
	}
	// Subscribed before the turn is queued: its outcome cannot come first.
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	ps, events, err := signals{x.Redis}.subscribe(wctx, eventChannel(x.Tenant, t.Agent, c.Channel, c.ChatID))
	if err != nil {
		stop()
		return sessions.Started{}, fmt.Errorf("failed to start exchange %q: %w", ex.ID, err)
	}
	if err := x.save(ctx, s); err != nil {
		stop()
		_ = ps.Close()
		return sessions.Started{}, err
	}
	if err := x.queue(ctx, t); err != nil {
		// RunWatch queues it again.
		x.log().Error("Failed to queue the first turn of an agent-to-agent exchange", "exchange", ex.ID, "err", err)
	}
	first := make(chan sessions.StepResult, 1)
	go func() {
		defer func() { _ = ps.Close() }()
		every := x.Rewake
		if every <= 0 {
			every = 2 * time.Second
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return
				}
				if e.MessageID != t.MsgID || e.Err != nil {
					continue
				}
				switch e.Kind {
				case protocol.FrameDone:
					first <- sessions.StepResult{Reply: e.Outcome.Text}
					return
				case protocol.FrameError:
					first <- sessions.StepResult{Err: fmt.Errorf("the turn of agent %s failed (%s): %s", t.Agent, e.Code, e.Message)}
					return
				}
			case <-tick.C:
				// Its pod died: as the gateway does for a message it
				// waits for.
				x.ensureRuntime(wctx, t.Agent, c)
			case <-wctx.Done():
				return
			}
		}
	}()
	return sessions.Started{First: first, Stop: stop}, nil
}

// chatOf parses a session id.
func chatOf(sessionID string) (session.ID, error) {
	id, err := session.ParseID(sessionID)
	if err != nil {
		return session.ID{}, fmt.Errorf("failed to parse session %q: %w", sessionID, err)
	}
	return id, nil
}

// queue puts turn t on its chat's stream and wakes a runtime for the chat
// when it has none. Queuing a turn again is harmless: its message id makes
// it run once.
func (x *Exchanges) queue(ctx context.Context, t sessions.ExchangeTurn) error {
	c, err := chatOf(t.Session)
	if err != nil {
		return err
	}
	// In the session's own dialog, even if the chat moved on to another.
	payload, err := protocol.EncodeInbound(protocol.Inbound{ID: t.MsgID, Channel: c.Channel, ChatKey: c.ChatID, DialogID: c.DialogID, Text: t.Text})
	if err != nil {
		return err
	}
	if err := x.Bus.Publish(ctx, chatStream(x.Tenant, t.Agent, c.Channel, c.ChatID),
		bus.Message{ID: t.MsgID, Payload: payload, Headers: bus.QueuedAt(x.Clock().Now())}); err != nil {
		return fmt.Errorf("failed to queue turn %q of an agent-to-agent exchange: %w", t.MsgID, err)
	}
	x.ensureRuntime(ctx, t.Agent, c)
	return nil
}

// ensureRuntime wakes a runtime of agent for chat c unless one owns it.
func (x *Exchanges) ensureRuntime(ctx context.Context, agent string, c session.ID) {
	owned, err := signals{x.Redis}.owned(ctx, ownerKey(x.Tenant, agent, c.Channel, c.ChatID))
	if err == nil && !owned {
		wk := x.Wake
		if wk == nil {
			wk = wake.Queue
		}
		err = wk(ctx, x.Bus, Wake{Tenant: x.Tenant, Agent: agent, Channel: c.Channel, ChatKey: c.ChatID})
	}
	if err != nil && ctx.Err() == nil {
		x.log().Error("Failed to wake a runtime for an agent-to-agent exchange", "agent", agent, "chat", c.ChatID, "err", err)
	}
}

// save writes an exchange's state and enters it in the tenant's set.
func (x *Exchanges) save(ctx context.Context, s storedExchange) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = x.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, exchangeKey(x.Tenant, s.ID), b, exchangeTTL)
		p.HSet(ctx, exchangesKey(x.Tenant), s.ID, "")
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to store exchange %q: %w", s.ID, err)
	}
	return nil
}

// load reads an exchange's state; nil when it has none (ended, expired).
func (x *Exchanges) load(ctx context.Context, get func(ctx context.Context, key string) *redis.StringCmd, id string) (*storedExchange, error) {
	b, err := get(ctx, exchangeKey(x.Tenant, id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read exchange %q: %w", id, err)
	}
	var s storedExchange
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("failed to decode exchange %q: %w", id, err)
	}
	return &s, nil
}

// Answered moves the exchange of turn msgID past it (reply: the turn's
// answer; failed: it failed) and queues the next turn. A turn that is not
// the exchange's turn in progress (answered before: a duplicate, or an
// exchange ended) moves nothing. The state moves in one optimistic
// transaction, so two pods answering the same turn cannot both move it.
func (x *Exchanges) Answered(ctx context.Context, msgID, reply string, failed bool) error {
	id, _, ok := sessions.ParseTurnMsgID(msgID)
	if !ok {
		return nil
	}
	key := exchangeKey(x.Tenant, id)
	var next *sessions.ExchangeTurn
	move := func(tx *redis.Tx) error {
		next = nil
		s, err := x.load(ctx, tx.Get, id)
		if err != nil || s == nil || s.Done || s.Current().MsgID != msgID {
			return err
		}
		s.Advance(reply, failed)
		s.UpdatedAt = x.Clock().Now()
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if s.Done {
				p.Del(ctx, key)
				p.HDel(ctx, exchangesKey(x.Tenant), id)
				return nil
			}
			p.Set(ctx, key, b, exchangeTTL)
			return nil
		})
		if err == nil && !s.Done {
			t := s.Current()
			next = &t
		}
		return err
	}
	var err error
	for range 10 {
		if err = x.Redis.Watch(ctx, move, key); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("failed to move exchange %q past turn %q: %w", id, msgID, err)
	}
	if next == nil {
		return nil
	}
	return x.queue(ctx, *next)
}

// Check looks once at the tenant's exchanges (the gateway's RunWatch):
// one whose state has not moved for grace and whose turn's chat no runtime
// owns gets that turn queued again and a runtime woken; ended or expired
// ones leave the set.
func (x *Exchanges) Check(ctx context.Context, grace time.Duration) error {
	ids, err := x.Redis.HKeys(ctx, exchangesKey(x.Tenant)).Result()
	if err != nil {
		return fmt.Errorf("failed to list agent-to-agent exchanges: %w", err)
	}
	old := x.Clock().Now().Add(-grace)
	for _, id := range ids {
		s, err := x.load(ctx, x.Redis.Get, id)
		if err != nil {
			x.log().Error("Cannot check an agent-to-agent exchange", "exchange", id, "err", err)
			continue
		}
		if s == nil || s.Done {
			_ = x.Redis.HDel(ctx, exchangesKey(x.Tenant), id).Err()
			continue
		}
		if s.UpdatedAt.After(old) {
			continue
		}
		t := s.Current()
		c, err := chatOf(t.Session)
		if err != nil {
			continue
		}
		if owned, err := (signals{x.Redis}).owned(ctx, ownerKey(x.Tenant, t.Agent, c.Channel, c.ChatID)); err != nil || owned {
			continue
		}
		// Only if the state is still the one read: the turn may have
		// been answered meanwhile.
		s.UpdatedAt = x.Clock().Now()
		b, err := json.Marshal(s)
		if err != nil {
			continue
		}
		key := exchangeKey(x.Tenant, id)
		err = x.Redis.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := x.load(ctx, tx.Get, id)
			if err != nil || cur == nil || cur.Current().MsgID != t.MsgID {
				return errStale
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, b, exchangeTTL)
				return nil
			})
			return err
		}, key)
		if err != nil {
			continue
		}
		x.log().Info("Queuing an agent-to-agent exchange's turn again: its chat has no runtime", "exchange", id, "turn", t.MsgID, "agent", t.Agent)
		if err := x.queue(ctx, t); err != nil {
			x.log().Error("Failed to queue an agent-to-agent exchange's turn again", "exchange", id, "err", err)
		}
	}
	return nil
}

// errStale ends a transaction on a state that moved.
var errStale = errors.New("the exchange moved")

func (x *Exchanges) log() *slog.Logger {
	if x.Log == nil {
		return slog.Default()
	}
	return x.Log
}
