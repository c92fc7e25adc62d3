// Package bus is PicoBot's message queue: the gateway appends a session's inbound
// messages to a stream, session runtimes consume them, and outbound replies travel
// back the same way. It is a pure queue and does not route: callers name streams
// (see Key) and decide who reads which.
//
// Semantics shared by every implementation (runtime/bus/redisbus for cluster mode,
// runtime/bus/membus for embedded mode; runtime/bus/bustest checks both):
//
//   - Streams are append-only logs. A consumer group reads a stream once: each
//     message goes to one consumer of the group, and every group sees every
//     message. A group created after messages were published still sees the
//     messages the stream retains.
//   - Delivery is at least once. A fetched message stays pending for its consumer
//     until acked; a consumer acks only after it persisted the work the message
//     asked for (for a session, after the turn is in the store). The pending
//     messages of a consumer that died are taken over by another with Claim once
//     they have been idle for a while, and their Deliveries count goes up.
//   - Duplicates happen: a redelivery after a crash between persisting and
//     acking, or a publisher retrying a batch whose reply it lost. Message.ID is
//     the idempotency key. Consumers filter recent duplicates with Dedup, but the
//     final guard is the store's idempotent append keyed by that ID: a Dedup is
//     per process and forgets. The bus itself does not deduplicate publishes.
//   - Streams are bounded: every publish trims the stream to about the
//     implementation's MaxLen (approximate, like Redis's MAXLEN ~). Trimming
//     drops the oldest entries whether or not every group has read them, so
//     MaxLen must exceed the largest backlog a stream may build up.
package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// DefaultMaxLen bounds a stream when an implementation is not told otherwise: a
// session's inbound backlog never comes near it, and it keeps a forgotten stream
// from growing without end.
const DefaultMaxLen = 100_000

// DefaultBatch is the batch size used when a caller passes no count: large
// enough to amortise a round trip, small enough to keep a batch's processing
// short.
const DefaultBatch = 100

// HeaderTraceparent carries the W3C trace context of the publisher, so a turn's
// trace continues across the bus (otel's propagation.MapCarrier(msg.Headers)
// reads and writes it).
const HeaderTraceparent = "traceparent"

// HeaderQueuedAt carries when the publisher queued the message (Unix
// milliseconds), so the consumer can tell how long it waited (the queue
// phase of a turn in package metrics). Across hosts it is only as exact as
// their clocks agree.
const HeaderQueuedAt = "queued-at"

// QueuedAt returns the headers of a message queued at t.
func QueuedAt(t time.Time) map[string]string {
	return map[string]string{HeaderQueuedAt: strconv.FormatInt(t.UnixMilli(), 10)}
}

// QueuedTime is when m was queued, false when its publisher did not say.
func (m Message) QueuedTime() (time.Time, bool) {
	ms, err := strconv.ParseInt(m.Headers[HeaderQueuedAt], 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// ErrClosed is returned by the operations of a bus after Close.
var ErrClosed = errors.New("bus is closed")

// Message is one entry of a stream.
//
// Publishers set ID, Payload and Headers; the bus sets Stream, Seq and
// Deliveries on the messages it hands to consumers. Publish copies Payload (a
// publisher may reuse its buffer) but may keep the Headers map: build a map per
// message and leave it alone once published, as with http.Request.Header.
// Consumers treat Payload and Headers as read-only: the in-process bus shares
// them between groups.
type Message struct {
	// ID is the idempotency key chosen by the publisher (NewID makes one). A
	// message published twice with the same ID is the same message to the
	// consumer's store.
	ID string
	// Stream is the stream the message was read from.
	Stream string
	// Payload is the opaque body.
	Payload []byte
	// Headers carry metadata that is not the body, trace context above all
	// (HeaderTraceparent).
	Headers map[string]string
	// Seq is the transport's id for this entry (the Redis entry id), which Ack
	// takes. Seqs grow within a stream.
	Seq string
	// Deliveries counts how many times the entry was handed to a consumer: 1 on
	// the first fetch, more after each Claim.
	Deliveries int
}

// FetchOptions tune one Fetch.
type FetchOptions struct {
	// Count is the largest batch returned; DefaultBatch when zero.
	Count int
	// Block is how long Fetch waits for a message when none is ready. Zero or
	// negative returns at once. Cancelling the context ends the wait early.
	Block time.Duration
}

// PendingEntry describes a message fetched by a consumer and not yet acked.
type PendingEntry struct {
	Seq        string
	Consumer   string
	Idle       time.Duration
	Deliveries int
}

// Bus is a set of streams with consumer groups. Implementations are safe for
// concurrent use. Operations that name a group create it on first use
// (starting at the beginning of the stream), except Pending and Ack, which treat
// a missing group as empty.
type Bus interface {
	// Publish appends msgs to stream, in order, in one round trip, and trims the
	// stream to about MaxLen. Every message needs an ID. An empty batch is a
	// no-op. On error some of the batch may have been appended: retrying the
	// whole batch is safe because consumers deduplicate by ID.
	Publish(ctx context.Context, stream string, msgs ...Message) error
	// Fetch returns up to opts.Count messages of stream that no consumer of
	// group has received yet, and records them as pending for consumer. When
	// none is ready it waits up to opts.Block; an empty result is not an error.
	// A cancelled context ends the wait with the context's error.
	Fetch(ctx context.Context, stream, group, consumer string, opts FetchOptions) ([]Message, error)
	// Ack marks messages of group as processed, so they are never redelivered.
	// Acking an unknown or already acked seq is a no-op.
	Ack(ctx context.Context, stream, group string, seqs ...string) error
	// Claim takes over up to count pending messages of group that have been
	// idle for at least minIdle (their consumer died or stalled), oldest
	// first, hands them to consumer and returns them with Deliveries
	// incremented. Pending messages the stream no longer holds (trimmed) are
	// dropped from the pending list and not returned.
	Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]Message, error)
	// Pending lists up to count pending messages of group, oldest first.
	Pending(ctx context.Context, stream, group string, count int) ([]PendingEntry, error)
	// Len returns the number of entries stream holds (zero when it does not
	// exist).
	Len(ctx context.Context, stream string) (int64, error)
	// Trim drops the oldest entries of stream until it holds at most maxLen.
	Trim(ctx context.Context, stream string, maxLen int64) error
	// Close releases the bus's resources and ends pending waits with
	// ErrClosed.
	Close() error
}

// Validate checks a batch before it is published: every message needs an ID,
// since without one a redelivered message cannot be told from a new one.
// Implementations call it so that a bad batch publishes nothing.
func Validate(stream string, msgs []Message) error {
	if stream == "" {
		return errors.New("failed to publish messages: empty stream name")
	}
	for i := range msgs {
		if msgs[i].ID == "" {
			return fmt.Errorf("failed to publish messages to %q: message %d has no ID", stream, i)
		}
	}
	return nil
}

// NewID returns a random message ID (128 bits, hex) for publishers that have no
// natural idempotency key. A publisher that retries must reuse the ID of the
// first attempt.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics instead).
	return hex.EncodeToString(b[:])
}
