package embedded

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/turn"
)

// waiter is what the gateway calls waiting for one message share: the turn's
// events go to each of their sinks, and its outcome to all of them.
type waiter struct {
	sinks []func(turn.Event) // under Runtime.mu
	calls int                // under Runtime.mu: the calls waiting
	once  sync.Once
	done  chan struct{} // closed once res is set
	res   result
}

type result struct {
	out gateway.Outcome
	err error
}

// errShuttingDown answers messages while the runtime drains or after it
// stopped: nothing of them is lost, they are answered after the restart.
var errShuttingDown = &gateway.CodedError{Code: gateway.CodeUnavailable,
	Err: errors.New("the server is restarting; send the message again with the same id to get its answer")}

// await registers a gateway call waiting for a message; first says it is
// the only one, which queues the message.
func (r *Runtime) await(key string, sink func(turn.Event)) (w *waiter, first bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return nil, false, errShuttingDown
	}
	w = r.waiters[key]
	if w == nil {
		w, first = &waiter{done: make(chan struct{})}, true
		r.waiters[key] = w
	}
	w.calls++
	if sink != nil {
		w.sinks = append(w.sinks, sink)
	}
	return w, first, nil
}

// leave ends a gateway call's wait; the last one forgets the waiter (the
// turn goes on and is stored; a later call with the same id reads it).
func (r *Runtime) leave(key string, w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.calls--; w.calls == 0 && r.waiters[key] == w {
		delete(r.waiters, key)
	}
}

// finish sets the message's outcome, once.
func (w *waiter) finish(res result) {
	w.once.Do(func() {
		w.res = res
		close(w.done)
	})
}

// wait returns the message's outcome, marked as a duplicate for a call that
// joined the wait of an earlier one; stopped is the runtime's context.
func (w *waiter) wait(ctx, stopped context.Context, joined bool) (gateway.Outcome, error) {
	select {
	case <-w.done:
	case <-ctx.Done():
		return gateway.Outcome{}, ctx.Err()
	case <-stopped.Done():
		select {
		case <-w.done:
		default:
			return gateway.Outcome{}, errShuttingDown
		}
	}
	out := w.res.out
	out.Duplicate = out.Duplicate || joined
	return out, w.res.err
}

// sinksOf returns the sinks of the calls waiting for a message.
func (r *Runtime) sinksOf(key string) []func(turn.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.waiters[key]; w != nil {
		return w.sinks
	}
	return nil
}

// Drain prepares a clean shutdown: no new message is taken (gateway calls
// get CodeUnavailable, to resend with the same id), and it waits until the
// turns in progress have ended or ctx ends. Close then cuts short what
// still runs: those turns keep their stored steps and resume at the next
// start.
func (r *Runtime) Drain(ctx context.Context) {
	r.mu.Lock()
	r.draining = true
	n := r.turns
	if n > 0 && r.drained == nil {
		r.drained = make(chan struct{})
	}
	drained := r.drained
	r.mu.Unlock()
	if n == 0 {
		return
	}
	select {
	case <-drained:
	case <-ctx.Done():
		r.mu.Lock()
		n = r.turns
		r.mu.Unlock()
		r.log.Warn("Shutting down with turns still running; they resume at the next start", "turns", n)
	}
}

// resumeWindow is how far back Open looks for turns a crash left unfinished.
const resumeWindow = time.Hour

// resumeUnfinished queues again the turns that the previous process left
// without an answer (the in-process bus lost its queue with it), so they
// resume from their last stored step now rather than when their client
// sends the message again.
func (r *Runtime) resumeUnfinished() {
	since := time.Now().Add(-resumeWindow)
	for _, a := range r.agents {
		for _, ta := range a.byTenant {
			ctx := store.WithTenant(r.ctx, ta.tenant)
			turns, err := ta.manager.Unfinished(ctx, since)
			if err != nil {
				r.log.Error("Could not look for unfinished turns", "agent", ta.agent, "tenant", ta.tenant, "err", err)
			}
			for _, u := range turns {
				if u.Session.Channel == protocol.ChannelDelegate {
					// A sub-agent run's turn: its run resumes it
					// (resumeBackground) or died with its caller.
					continue
				}
				r.requeue(ctx, ta, u)
			}
		}
	}
}

// requeue queues an unfinished turn's message on its chat's stream.
func (r *Runtime) requeue(ctx context.Context, ta *tenantAgent, u session.UnfinishedTurn) {
	chat := sessionrt.Chat{Channel: u.Session.Channel, Key: u.Session.ChatID}
	// In the dialog it started in, which need not be the chat's current one
	// (a continuation's dialog, or a chat switched with /new meanwhile).
	in := protocol.Inbound{ID: u.MessageID, Channel: chat.Channel, ChatKey: chat.Key, DialogID: u.Session.DialogID, Text: u.Text}
	if err := r.queue(ctx, ta, chat, in); err != nil {
		r.log.Error("Could not resume a turn", "session", u.Session.String(), "message", u.MessageID, "err", err)
		return
	}
	r.log.Info("Resuming a turn left unfinished", "session", u.Session.String(), "message", u.MessageID)
}
