// Package redisbus is the bus of cluster mode, on Redis Streams: XADD with
// MAXLEN ~ (pipelined for batches), consumer groups created with XGROUP CREATE
// MKSTREAM, XREADGROUP with COUNT and BLOCK, batched XACK, XAUTOCLAIM to take
// over a dead consumer's pending entries, XPENDING for inspection.
//
// Durability is Redis's. Entries, groups and pending lists survive a restart
// only when Redis persists them: production runs Redis with the append-only file
// (appendonly yes). With `--appendonly no` (the throwaway test servers of
// hack/redis.sh) a restart loses every stream, unacked entries included, and
// the bus recreates groups on empty streams as consumers return. The tests that
// restart Redis run it with appendonly yes.
//
// Connections are go-redis's: a command after a restart dials again, and
// bus.Consumer backs off between failed rounds, so consumers ride out a restart
// and then take up their own unacked entries through Claim.
package redisbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/tracing"
)

// Entry fields. Short, because they are stored with every entry.
const (
	fieldID         = "id"
	fieldPayload    = "p"
	fieldHeaderPref = "h:"
)

// ackChunk bounds the ids of one XACK, so a huge ack does not become one huge
// command (chunks still go in one round trip).
const ackChunk = 1000

// maxIdleBlockingConns bounds the dedicated connections kept for blocking reads.
const maxIdleBlockingConns = 8

// maxKnownGroups bounds the cache of groups known to exist; past it the cache
// starts over (an XGROUP CREATE that finds the group is harmless).
const maxKnownGroups = 10_000

// Options tune a Bus. Zero values pick the defaults.
type Options struct {
	// MaxLen bounds every stream on publish with XADD MAXLEN ~ (approximate:
	// Redis trims whole nodes, so a stream may hold a little more).
	// bus.DefaultMaxLen when zero; negative: unbounded.
	MaxLen int64
}

// Bus is the Redis Streams bus.Bus.
//
// A blocking Fetch holds a connection of the client's pool for its wait (a
// dedicated one, so a cancelled context can end the wait with CLIENT UNBLOCK):
// the pool must be larger than the number of concurrent blocking fetches.
type Bus struct {
	client *redis.Client
	owned  bool
	maxLen int64

	// closing ends blocked reads when the bus closes.
	closing context.Context
	close   context.CancelFunc
	reads   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	idle   []*blockingConn
	groups map[string]struct{} // stream + "\x00" + group, known to exist
}

var _ bus.Bus = (*Bus)(nil)

// New returns a bus on client. The caller keeps ownership: Close leaves the
// client open.
func New(client *redis.Client, opts Options) *Bus {
	if opts.MaxLen == 0 {
		opts.MaxLen = bus.DefaultMaxLen
	}
	closing, cancel := context.WithCancel(context.Background())
	return &Bus{client: client, maxLen: opts.MaxLen, closing: closing, close: cancel, groups: map[string]struct{}{}}
}

// Open connects to a redis:// or rediss:// URL. The bus owns the client and
// closes it on Close. Context deadlines bound commands (go-redis ignores them
// unless told).
func Open(url string, opts Options) (*Bus, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("failed to parse Redis URL: %w", err)
	}
	o.ContextTimeoutEnabled = true
	b := New(redis.NewClient(o), opts)
	b.owned = true
	return b, nil
}

// Client returns the underlying client, for health checks and tests.
func (b *Bus) Client() *redis.Client { return b.client }

func (b *Bus) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Publish implements bus.Bus.
func (b *Bus) Publish(ctx context.Context, stream string, msgs ...bus.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := bus.Validate(stream, msgs); err != nil {
		return err
	}
	if b.isClosed() {
		return fmt.Errorf("failed to publish messages to %q: %w", stream, bus.ErrClosed)
	}
	msgs, span := bus.TracePublish(ctx, stream, msgs)
	defer span.End()
	var err error
	if len(msgs) == 1 {
		err = b.client.XAdd(ctx, b.xaddArgs(stream, &msgs[0])).Err()
	} else {
		_, err = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range msgs {
				p.XAdd(ctx, b.xaddArgs(stream, &msgs[i]))
			}
			return nil
		})
	}
	if err != nil {
		err = fmt.Errorf("failed to publish %d messages to %q: %w", len(msgs), stream, err)
		tracing.Fail(span, err)
		return err
	}
	return nil
}

func (b *Bus) xaddArgs(stream string, m *bus.Message) *redis.XAddArgs {
	values := make([]any, 0, 4+2*len(m.Headers))
	values = append(values, fieldID, m.ID, fieldPayload, m.Payload)
	for k, v := range m.Headers {
		values = append(values, fieldHeaderPref+k, v)
	}
	a := &redis.XAddArgs{Stream: stream, ID: "*", Values: values}
	if b.maxLen > 0 {
		a.MaxLen, a.Approx = b.maxLen, true
	}
	return a
}

// Fetch implements bus.Bus.
func (b *Bus) Fetch(ctx context.Context, stream, group, consumer string, opts bus.FetchOptions) ([]bus.Message, error) {
	return b.fetch(ctx, []string{stream}, group, consumer, opts, strconv.Quote(stream))
}

// Ack implements bus.Bus.
func (b *Bus) Ack(ctx context.Context, stream, group string, seqs ...string) error {
	if len(seqs) == 0 {
		return nil
	}
	if b.isClosed() {
		return fmt.Errorf("failed to ack messages of %q: %w", stream, bus.ErrClosed)
	}
	var err error
	if len(seqs) <= ackChunk {
		err = b.client.XAck(ctx, stream, group, seqs...).Err()
	} else {
		_, err = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for chunk := range slices.Chunk(seqs, ackChunk) {
				p.XAck(ctx, stream, group, chunk...)
			}
			return nil
		})
	}
	if err != nil && !isNoGroup(err) {
		return fmt.Errorf("failed to ack %d messages of %q: %w", len(seqs), stream, err)
	}
	return nil
}

// Claim implements bus.Bus. XAUTOCLAIM scans a bounded part of the pending
// list per call, so Claim follows its cursor (a few times at most) to find idle
// entries behind busy ones; a second round trip reads the claimed entries'
// delivery counts, which XAUTOCLAIM does not return.
func (b *Bus) Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]bus.Message, error) {
	if count <= 0 {
		count = bus.DefaultBatch
	}
	if b.isClosed() {
		return nil, fmt.Errorf("failed to claim messages of %q: %w", stream, bus.ErrClosed)
	}
	if err := b.ensureGroup(ctx, stream, group); err != nil {
		return nil, err
	}
	var claimed []redis.XMessage
	start := "0-0"
	for range 16 {
		msgs, next, err := b.client.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: group, Consumer: consumer, MinIdle: minIdle, Start: start, Count: int64(count - len(claimed)),
		}).Result()
		if isNoGroup(err) {
			b.forgetGroup(stream, group) // a new group has nothing pending
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("failed to claim messages of %q: %w", stream, err)
		}
		claimed = append(claimed, msgs...)
		if next == "0-0" || len(claimed) >= count {
			break
		}
		start = next
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	// The entries are claimed by now: if reading their counts fails, hand them
	// out with a lower bound rather than leave them to idle out again.
	cmds := make([]*redis.XPendingExtCmd, len(claimed))
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, xm := range claimed {
			cmds[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: xm.ID, End: xm.ID, Count: 1})
		}
		return nil
	})
	out := make([]bus.Message, len(claimed))
	for i, xm := range claimed {
		deliveries := 2 // at least: the first delivery and this claim
		if p, err := cmds[i].Result(); err == nil && len(p) == 1 {
			deliveries = int(p[0].RetryCount)
		}
		out[i] = decode(stream, xm, deliveries)
	}
	return out, nil
}

// Pending implements bus.Bus.
func (b *Bus) Pending(ctx context.Context, stream, group string, count int) ([]bus.PendingEntry, error) {
	if count <= 0 {
		count = bus.DefaultBatch
	}
	if b.isClosed() {
		return nil, fmt.Errorf("failed to list pending messages of %q: %w", stream, bus.ErrClosed)
	}
	res, err := b.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: int64(count)}).Result()
	if isNoGroup(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to list pending messages of %q: %w", stream, err)
	}
	out := make([]bus.PendingEntry, len(res))
	for i, p := range res {
		out[i] = bus.PendingEntry{Seq: p.ID, Consumer: p.Consumer, Idle: p.Idle, Deliveries: int(p.RetryCount)}
	}
	return out, nil
}

// Len implements bus.Bus.
func (b *Bus) Len(ctx context.Context, stream string) (int64, error) {
	if b.isClosed() {
		return 0, fmt.Errorf("failed to measure stream %q: %w", stream, bus.ErrClosed)
	}
	n, err := b.client.XLen(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("failed to measure stream %q: %w", stream, err)
	}
	return n, nil
}

// Trim implements bus.Bus, exactly (XTRIM MAXLEN =): it is an explicit request,
// unlike the approximate trimming of every publish.
func (b *Bus) Trim(ctx context.Context, stream string, maxLen int64) error {
	if b.isClosed() {
		return fmt.Errorf("failed to trim stream %q: %w", stream, bus.ErrClosed)
	}
	if err := b.client.XTrimMaxLen(ctx, stream, max(maxLen, 0)).Err(); err != nil {
		return fmt.Errorf("failed to trim stream %q: %w", stream, err)
	}
	return nil
}

// Close implements bus.Bus: blocked fetches end with bus.ErrClosed, the
// dedicated connections are released, and a client made by Open is closed.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	idle := b.idle
	b.idle = nil
	b.mu.Unlock()

	b.close()      // unblocks the reads in flight
	b.reads.Wait() // they need the client to be unblocked
	var errs []error
	for _, bc := range idle {
		errs = append(errs, bc.conn.Close())
	}
	if b.owned {
		errs = append(errs, b.client.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to close Redis bus: %w", err)
	}
	return nil
}

// ensureGroup creates group (and the stream) unless known to exist. Groups
// start at the beginning of the stream, so a consumer woken by the first
// message of a session receives that message.
func (b *Bus) ensureGroup(ctx context.Context, stream, group string) error {
	key := stream + "\x00" + group
	b.mu.Lock()
	_, ok := b.groups[key]
	b.mu.Unlock()
	if ok {
		return nil
	}
	err := b.client.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("failed to create group %q of stream %q: %w", group, stream, err)
	}
	b.mu.Lock()
	if len(b.groups) >= maxKnownGroups {
		clear(b.groups)
	}
	b.groups[key] = struct{}{}
	b.mu.Unlock()
	return nil
}

func (b *Bus) forgetGroup(stream, group string) {
	b.mu.Lock()
	delete(b.groups, stream+"\x00"+group)
	b.mu.Unlock()
}

// isNoGroup reports Redis's answer for a missing stream or group.
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// Decode reads an entry of stream as read with the Redis client itself (an
// XRANGE), for readers that look at a stream without a consumer group.
func Decode(stream string, xm redis.XMessage) bus.Message { return decode(stream, xm, 0) }

func decode(stream string, xm redis.XMessage, deliveries int) bus.Message {
	m := bus.Message{Stream: stream, Seq: xm.ID, Deliveries: deliveries}
	for k, v := range xm.Values {
		s, _ := v.(string)
		switch {
		case k == fieldID:
			m.ID = s
		case k == fieldPayload:
			m.Payload = []byte(s)
		case strings.HasPrefix(k, fieldHeaderPref):
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(xm.Values)-2)
			}
			m.Headers[k[len(fieldHeaderPref):]] = s
		}
	}
	return m
}
