package embedded

import (
	"context"
	"errors"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/turn"
)

// Embedded mode's strategies of the session runtime (runtime/sessionrt): a
// chat is served by a goroutine of this process, recorded in Runtime.serving,
// and a message's events and outcome go to the gateway call waiting for it.

// owner is the in-process Owner of one tenant's agent.
type owner struct {
	r  *Runtime
	ta *tenantAgent
}

// Acquire implements sessionrt.Owner: the chat is free when no goroutine
// serves it.
func (o owner) Acquire(_ context.Context, c sessionrt.Chat) (bool, error) {
	key := o.ta.servingKey(c)
	o.r.mu.Lock()
	defer o.r.mu.Unlock()
	if o.r.serving[key] {
		return false, nil
	}
	o.r.serving[key] = true
	return true, nil
}

// Keep implements sessionrt.Owner: an in-process chat cannot be lost.
func (owner) Keep(ctx context.Context, _ sessionrt.Chat) (context.Context, func(), error) {
	return ctx, func() {}, nil
}

// Release implements sessionrt.Owner.
func (o owner) Release(_ context.Context, c sessionrt.Chat) {
	o.r.mu.Lock()
	delete(o.r.serving, o.ta.servingKey(c))
	o.r.mu.Unlock()
}

// servingKey names a chat of the tenant's agent in Runtime.serving.
func (ta *tenantAgent) servingKey(c sessionrt.Chat) string { return ta.rt.Stream(c) }

// wake starts a goroutine serving the chat unless one does.
func (r *Runtime) wake(ta *tenantAgent, c sessionrt.Chat) {
	if r.ctx.Err() != nil {
		return // closing: the queued message is lost with the in-process bus
	}
	if ok, _ := (owner{r, ta}).Acquire(r.ctx, c); !ok {
		return
	}
	r.opts.Metrics.Woke(ta.tenant, ta.agent, nil)
	r.wg.Go(func() {
		if _, err := ta.rt.Serve(r.ctx, c); err != nil && r.ctx.Err() == nil {
			r.log.Error("Serving a chat failed", "tenant", ta.tenant, "chat", c.Key, "err", err)
		}
	})
}

// reporter is the in-process Reporter: it hands events and outcomes to the
// gateway call waiting for the message, if any (the client may have gone;
// the turn is stored either way).
type reporter struct {
	r  *Runtime
	ta *tenantAgent
}

// Begin implements sessionrt.Reporter: it counts the turns in progress,
// which Drain waits for.
func (p reporter) Begin(context.Context, sessionrt.Chat, string) func() {
	key := agentKey(p.ta.tenant, p.ta.agent)
	p.r.mu.Lock()
	p.r.turns++
	p.r.running[key]++
	p.r.mu.Unlock()
	return func() {
		p.r.mu.Lock()
		if p.r.running[key]--; p.r.running[key] == 0 {
			delete(p.r.running, key)
		}
		if p.r.turns--; p.r.turns == 0 && p.r.drained != nil {
			close(p.r.drained)
			p.r.drained = nil
		}
		p.r.mu.Unlock()
	}
}

// Event implements sessionrt.Reporter.
func (p reporter) Event(_ context.Context, c sessionrt.Chat, msgID string, e turn.Event) {
	for _, sink := range p.r.sinksOf(p.ta.waiterKey(c, msgID)) {
		sink(e)
	}
}

// Done implements sessionrt.Reporter.
func (p reporter) Done(ctx context.Context, c sessionrt.Chat, msgID string, out protocol.Outcome, err *protocol.CodedError) {
	if runID, ok := delegate.ContinuationRun(msgID); ok {
		p.continuationDone(ctx, c, runID, out, err)
	}
	w := p.r.waiter(p.ta.waiterKey(c, msgID))
	if w == nil {
		return
	}
	res := result{out: out}
	if err != nil {
		res.err = err
	}
	w.finish(res)
}

// waiter returns the gateway call waiting for a message, or nil.
func (r *Runtime) waiter(key string) *waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiters[key]
}

// waiterKey names the gateway call waiting for a message of a chat (looked up
// for every event of the turn, so plain concatenation rather than the
// stream's escaped name).
func (ta *tenantAgent) waiterKey(c sessionrt.Chat, msgID string) string {
	return ta.tenant + "\x00" + ta.agent + "\x00" + c.Channel + "\x00" + c.Key + "\x00" + msgID
}

// chatOf is the session runtime's chat of a gateway chat.
func chatOf(c gateway.Chat) sessionrt.Chat {
	return sessionrt.Chat{Channel: c.ChannelName(), Key: c.Key()}
}

// Notify implements sessionrt.Notifier: a chat platform's chat gets the
// message through the outbound dispatcher (an exec approval request). The
// text is not added to the session: it is a question to the user, not the
// agent's answer.
func (p reporter) Notify(ctx context.Context, c sessionrt.Chat, text string) error {
	p.r.mu.Lock()
	disp := p.r.disp
	p.r.mu.Unlock()
	if disp == nil {
		return errors.New("chat platform channels are not served")
	}
	_, err := disp.Deliver(store.WithTenant(ctx, p.ta.tenant), outbound.Message{Agent: p.ta.agent, Target: c.Channel + ":" + c.Key,
		Text: text, Stored: true})
	return err
}
