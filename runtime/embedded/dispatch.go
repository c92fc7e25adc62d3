package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
)

// worker is the goroutine of one chat: it runs the chat's messages in order,
// one at a time, and ends after a minute without messages (sessions scale to
// zero; the next message starts a new one and restores from the store).
type worker struct {
	mu    sync.Mutex
	queue []bus.Message
	wake  chan struct{}
}

func (w *worker) push(m bus.Message) {
	w.mu.Lock()
	w.queue = append(w.queue, m)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) pop() (bus.Message, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return bus.Message{}, false
	}
	m := w.queue[0]
	w.queue = w.queue[1:]
	return m, true
}

// dropQueued empties the queue (/stop); the dropped messages are answered and
// acknowledged by the worker.
func (w *worker) dropQueued() []bus.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	dropped := w.queue
	w.queue = nil
	return dropped
}

// dispatch reads a tenant's inbound stream of an agent and hands each
// message to its chat's worker. Messages are acknowledged after the turn is
// persisted.
func (r *Runtime) dispatch(a *agentRuntime, ta *tenantAgent) {
	for r.ctx.Err() == nil {
		msgs, err := r.bus.Fetch(r.ctx, ta.stream, consumerGroup, "embedded", bus.FetchOptions{Count: 100, Block: time.Second})
		if err != nil {
			if r.ctx.Err() != nil || errors.Is(err, bus.ErrClosed) {
				return
			}
			r.log.Error("Failed to read inbound stream", "agent", a.name, "tenant", ta.tenant, "err", err)
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for _, m := range msgs {
			var in inbound
			if err := json.Unmarshal(m.Payload, &in); err != nil {
				r.log.Error("Dropping malformed inbound message", "id", m.ID, "err", err)
				_ = r.bus.Ack(r.ctx, ta.stream, consumerGroup, m.Seq)
				continue
			}
			if in.Channel == "" {
				in.Channel = Channel // queued before channels were recorded
			}
			r.workerFor(a, ta, in.Channel, in.ChatID).push(m)
		}
	}
}

func (r *Runtime) workerFor(a *agentRuntime, ta *tenantAgent, channel, chatID string) *worker {
	key := workerKey(ta.tenant, channel, gateway.Chat{Channel: channel, Agent: a.name, ChatID: chatID}.Key())
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[key]; w != nil {
		return w
	}
	w := &worker{wake: make(chan struct{}, 1)}
	r.workers[key] = w
	r.wg.Go(func() { r.runWorker(a, ta, key, w) })
	return w
}

func (r *Runtime) runWorker(a *agentRuntime, ta *tenantAgent, key string, w *worker) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		m, ok := w.pop()
		if ok {
			r.process(a, ta, m)
			idle.Reset(workerIdle)
			continue
		}
		select {
		case <-w.wake:
		case <-idle.C:
			r.mu.Lock()
			// Exit only if nothing arrived meanwhile.
			w.mu.Lock()
			empty := len(w.queue) == 0
			w.mu.Unlock()
			if empty {
				delete(r.workers, key)
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
		case <-r.ctx.Done():
			return
		}
	}
}

// process runs one message through the tenant's session manager, answers
// the waiting gateway call, and acknowledges the bus entry.
func (r *Runtime) process(a *agentRuntime, ta *tenantAgent, m bus.Message) {
	var in inbound
	_ = json.Unmarshal(m.Payload, &in)
	if in.Channel == "" {
		in.Channel = Channel
	}
	key := waiterKey(ta.stream, in.Channel, m.ID)
	r.mu.Lock()
	wt := r.waiters[key]
	r.mu.Unlock()
	inb := session.Inbound{Channel: in.Channel, ChatID: gateway.Chat{Channel: in.Channel, Agent: a.name, ChatID: in.ChatID}.Key(), MessageID: m.ID, Text: in.Text, Stream: true}
	if wt != nil {
		inb.Sink = wt.sink
	}
	reply, err := ta.manager.Handle(store.WithTenant(r.ctx, ta.tenant), inb)
	if errors.Is(err, context.Canceled) && r.ctx.Err() != nil {
		return // shutting down: the entry stays pending and is redelivered
	}
	switch {
	case errors.Is(err, session.ErrBusy):
		err = &gateway.CodedError{Code: gateway.CodeBusy, Err: err}
	case errors.Is(err, context.Canceled):
		err = &gateway.CodedError{Code: gateway.CodeStopped, Err: errors.New("stopped; what was done so far is kept")}
	}
	if ackErr := r.bus.Ack(r.ctx, ta.stream, consumerGroup, m.Seq); ackErr != nil {
		r.log.Error("Failed to acknowledge inbound message", "id", m.ID, "err", ackErr)
	}
	r.answer(key, result{out: gateway.Outcome{SessionID: reply.SessionID, Command: reply.Command, Text: reply.Text, Duplicate: reply.Duplicate}, err: err})
}

// answer hands a result to the gateway call waiting for a message, if any
// (the client may have gone; the turn is persisted either way).
func (r *Runtime) answer(key string, res result) {
	r.mu.Lock()
	wt := r.waiters[key]
	r.mu.Unlock()
	if wt != nil {
		select {
		case wt.done <- res:
		default:
		}
	}
}

// messageWaiterKey is the waiter key of a queued message.
func messageWaiterKey(stream string, m bus.Message) string {
	var in inbound
	_ = json.Unmarshal(m.Payload, &in)
	if in.Channel == "" {
		in.Channel = Channel
	}
	return waiterKey(stream, in.Channel, m.ID)
}
