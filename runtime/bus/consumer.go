package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Handler processes a batch of messages of one stream. It returns nil only once
// the work the messages ask for is persisted (or deliberately dropped): the
// Consumer then acks the whole batch. On an error nothing of the batch is acked;
// the messages stay pending and come back through Claim after ClaimMinIdle, to
// this consumer or another, with Deliveries incremented, so a handler must
// tolerate seeing a message again (the store's idempotent append keyed by
// Message.ID makes that safe).
//
// A handler that has what it came for returns ErrDone (or an error wrapping
// it): the batch is acked and Start returns nil without fetching again. A
// warm session pod ends its wait this way once it has claimed a chat. Not
// with Concurrency (there a handler's error only leaves its message
// pending).
type Handler func(ctx context.Context, msgs []Message) error

// ErrDone is what a Handler returns to ack its batch and end Start.
var ErrDone = errors.New("consumer is done")

// ConsumerOptions tune a Consumer. Zero values pick the defaults.
type ConsumerOptions struct {
	// Batch is the largest batch handed to the handler (DefaultBatch).
	Batch int
	// Block is how long one fetch waits for new messages (5s). Cancelling the
	// context ends the wait at once, so it only bounds how often an idle
	// consumer asks.
	Block time.Duration
	// ClaimMinIdle is how long a message must sit unacked before this consumer
	// takes it over from its owner, presumed dead (30s). It must exceed the
	// longest time a live consumer spends on a batch, or a batch still in
	// progress is taken over and only the store's idempotent append keeps it
	// from being processed twice. Negative disables claiming.
	ClaimMinIdle time.Duration
	// ClaimInterval is how often pending messages are checked for idle ones
	// (ClaimMinIdle/2). The first check happens at start, which is how a
	// restarted consumer picks up what its previous incarnation left.
	ClaimInterval time.Duration
	// Dedup filters redeliveries of messages this consumer already processed;
	// they are acked without calling the handler. Optional.
	Dedup *Dedup
	// BackoffInitial and BackoffMax bound the exponential, jittered wait after
	// a failed bus call or handler (100ms, 10s), so a Redis restart or a
	// store outage is ridden out without a retry storm.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// Concurrency, when above 1, hands messages to the handler one at a
	// time on up to that many goroutines, each acked as soon as its handler
	// returns, while the loop goes on fetching (Batch defaults to
	// Concurrency then). For work whose items are independent and may be
	// slow (a delivery waiting out a platform's retries): one slow item
	// holds one slot, not the stream. Order across messages is not kept; a
	// failed message stays pending and comes back through Claim.
	Concurrency int
	// Idle, when set, is called after a fetch that found nothing; when it
	// returns true, Start returns nil. A consumer that serves one chat ends
	// this way once the chat has gone quiet.
	Idle func() bool
	// Clock is injected for tests (the real clock when nil).
	Clock clock.Clock
	// Logger receives errors the loop recovers from (discarded when nil).
	Logger *slog.Logger
}

// Consumer is the long-running reader of one stream for one member of a
// consumer group: it reclaims messages left pending by dead members, fetches
// new ones in batches, drops known duplicates, hands batches to a Handler and
// acks them once handled. It has the manager.Runnable shape, so a binary adds it
// to its controller-runtime manager or runs it on a goroutine.
type Consumer struct {
	bus                 Bus
	stream, group, name string
	handle              Handler
	opts                ConsumerOptions
	log                 *slog.Logger

	// Loop state, owned by Start.
	backoff   time.Duration
	nextClaim time.Time
	// slots and inflight bound and track concurrent handlers
	// (ConsumerOptions.Concurrency).
	slots    chan struct{}
	inflight sync.WaitGroup
}

// NewConsumer returns a Consumer reading stream as member name of group.
// Names must be unique within a group and stable across restarts of the same
// worker when possible (a pod name), so its own leftovers are found first.
func NewConsumer(b Bus, stream, group, name string, h Handler, opts ConsumerOptions) *Consumer {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
		if opts.Concurrency > 1 {
			opts.Batch = opts.Concurrency
		}
	}
	if opts.Block <= 0 {
		opts.Block = 5 * time.Second
	}
	if opts.ClaimMinIdle == 0 {
		opts.ClaimMinIdle = 30 * time.Second
	}
	if opts.ClaimInterval <= 0 {
		opts.ClaimInterval = max(opts.ClaimMinIdle/2, time.Millisecond)
	}
	if opts.BackoffInitial <= 0 {
		opts.BackoffInitial = 100 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{
		bus: b, stream: stream, group: group, name: name, handle: h, opts: opts,
		log: log.With("stream", stream, "group", group, "consumer", name),
	}
	if opts.Concurrency > 1 {
		c.slots = make(chan struct{}, opts.Concurrency)
	}
	return c
}

// errIdle ends Start when ConsumerOptions.Idle says so.
var errIdle = errors.New("consumer is idle")

// Start runs the loop until ctx is cancelled (or ConsumerOptions.Idle ends
// it), then returns nil. It returns an error only when the bus is closed under
// it.
func (c *Consumer) Start(ctx context.Context) error {
	c.nextClaim = c.opts.Clock.Now()
	defer c.inflight.Wait()
	for {
		err := c.step(ctx)
		if errors.Is(err, errIdle) || errors.Is(err, ErrDone) {
			return nil
		}
		select {
		case <-ctx.Done(): // cancelled: whatever the round returned, stop cleanly
			return nil
		default:
		}
		switch {
		case err == nil:
			c.backoff = 0
		case errors.Is(err, ErrClosed):
			return fmt.Errorf("failed to consume stream %q: %w", c.stream, err)
		default:
			d := c.nextBackoff()
			c.log.Error("Consuming failed, backing off", "err", err, "backoff", d)
			c.sleep(ctx, d)
		}
	}
}

// step does one round: a claim when due, then one fetch.
func (c *Consumer) step(ctx context.Context) error {
	if c.opts.ClaimMinIdle >= 0 && !c.opts.Clock.Now().Before(c.nextClaim) {
		for {
			msgs, err := c.bus.Claim(ctx, c.stream, c.group, c.name, c.opts.ClaimMinIdle, c.opts.Batch)
			if err != nil {
				return err
			}
			if len(msgs) > 0 {
				c.log.Info("Claimed idle pending messages", "count", len(msgs))
				if err := c.process(ctx, msgs); err != nil {
					return err
				}
			}
			if len(msgs) < c.opts.Batch {
				break
			}
		}
		c.nextClaim = c.opts.Clock.Now().Add(c.opts.ClaimInterval)
	}
	block := c.opts.Block
	if c.opts.ClaimMinIdle >= 0 {
		block = min(block, max(c.nextClaim.Sub(c.opts.Clock.Now()), time.Millisecond))
	}
	msgs, err := c.bus.Fetch(ctx, c.stream, c.group, c.name, FetchOptions{Count: c.opts.Batch, Block: block})
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		if c.opts.Idle != nil && ctx.Err() == nil && c.opts.Idle() {
			return errIdle
		}
		return nil
	}
	return c.process(ctx, msgs)
}

// process hands the new messages of a batch to the handler and acks the batch
// (with Concurrency, each message on its own goroutine). A failed ack is not
// retried here: the messages stay pending, come back through Claim, and Dedup
// (or the store) recognises them.
func (c *Consumer) process(ctx context.Context, msgs []Message) error {
	if c.slots != nil {
		return c.dispatch(ctx, msgs)
	}
	return c.processBatch(ctx, msgs)
}

// dispatch starts a handler per message once a slot is free. A handler's
// error is logged; its message stays pending.
func (c *Consumer) dispatch(ctx context.Context, msgs []Message) error {
	for _, m := range msgs {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.inflight.Go(func() {
			defer func() { <-c.slots }()
			if err := c.processBatch(ctx, []Message{m}); err != nil && ctx.Err() == nil {
				c.log.Error("Handling a message failed; it stays pending", "id", m.ID, "err", err)
			}
		})
	}
	return nil
}

// ackTimeout bounds the ack of a handled batch.
const ackTimeout = 5 * time.Second

// processBatch handles msgs and acks them once the handler succeeded.
func (c *Consumer) processBatch(ctx context.Context, msgs []Message) error {
	fresh := msgs
	if c.opts.Dedup != nil {
		fresh = make([]Message, 0, len(msgs))
		for _, m := range msgs {
			if !c.opts.Dedup.Seen(m.ID) {
				fresh = append(fresh, m)
			}
		}
		if dups := len(msgs) - len(fresh); dups > 0 {
			c.log.Debug("Skipping redelivered messages", "count", dups)
		}
	}
	var done error
	if len(fresh) > 0 {
		if err := c.handle(ctx, fresh); errors.Is(err, ErrDone) {
			done = err
		} else if err != nil {
			return fmt.Errorf("failed to handle %d messages: %w", len(fresh), err)
		}
		if c.opts.Dedup != nil {
			ids := make([]string, len(fresh))
			for i := range fresh {
				ids[i] = fresh[i].ID
			}
			c.opts.Dedup.Mark(ids...)
		}
	}
	seqs := make([]string, len(msgs))
	for i := range msgs {
		seqs[i] = msgs[i].Seq
	}
	// A handled batch is acked even when the consumer is stopping (a
	// draining runtime finished its turn): otherwise it would be handled
	// again by the next consumer.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	err := c.bus.Ack(actx, c.stream, c.group, seqs...)
	if done != nil {
		if err != nil {
			// Handled all the same; the messages come back through Claim.
			c.log.Error("Failed to ack the last batch", "err", err)
		}
		return done
	}
	return err
}

// nextBackoff doubles the wait after each failure in a row, up to BackoffMax,
// with ±20% jitter so the consumers of a restarted Redis do not return in step.
func (c *Consumer) nextBackoff() time.Duration {
	if c.backoff == 0 {
		c.backoff = c.opts.BackoffInitial
	} else {
		c.backoff = min(2*c.backoff, c.opts.BackoffMax)
	}
	return time.Duration(float64(c.backoff) * (0.8 + 0.4*rand.Float64()))
}

// sleep waits for d on the injected clock, or until ctx ends.
func (c *Consumer) sleep(ctx context.Context, d time.Duration) {
	t := c.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}
