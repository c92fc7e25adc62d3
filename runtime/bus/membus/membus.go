// Package membus is the in-process bus of embedded mode (`picobot serve`): the
// same streams, consumer groups, pending lists, acks, claims and trimming as the
// Redis implementation, held in memory. Nothing survives the process, which is
// what embedded mode wants: a session's messages are persisted by the store
// before they are acked, and the gateway republishes what was never persisted.
//
// It is built for throughput (over a million messages a second through
// publish, fetch and ack in batches): one lock per stream, entries in a slice
// ordered by sequence number, pending entries in a map plus an ordered index.
package membus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/bus"
)

// Options tune a Bus. Zero values pick the defaults.
type Options struct {
	// MaxLen bounds every stream on publish (bus.DefaultMaxLen when zero;
	// negative: unbounded). The bound is kept exactly, which satisfies the
	// approximate contract.
	MaxLen int64
	// Clock measures idle time for Claim and Pending and times blocking
	// fetches; tests inject a fake one.
	Clock clock.Clock
}

// Bus is the in-memory bus.Bus.
type Bus struct {
	maxLen int64
	clock  clock.Clock

	mu      sync.RWMutex
	streams map[string]*stream
	closed  chan struct{}
}

var _ bus.Bus = (*Bus)(nil)

// New returns an empty in-memory bus.
func New(opts Options) *Bus {
	if opts.MaxLen == 0 {
		opts.MaxLen = bus.DefaultMaxLen
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Bus{maxLen: opts.MaxLen, clock: opts.Clock, streams: map[string]*stream{}, closed: make(chan struct{})}
}

type stream struct {
	mu sync.Mutex
	// entries holds the retained entries, whose seqs are consecutive: the entry
	// with seq n is entries.at(n - firstSeq). A ring, so trimming the front and
	// appending at the back never move what is kept.
	entries  ring
	firstSeq uint64 // seq of the oldest retained entry (lastSeq+1 when empty)
	lastSeq  uint64
	groups   map[string]*group
	// wake is closed (and replaced) when entries are appended, waking blocked
	// fetchers without a condition variable (which could not select on ctx).
	wake chan struct{}
}

type entry struct {
	seq     uint64
	id      string
	payload []byte
	headers map[string]string
}

type group struct {
	lastDelivered uint64
	pending       map[uint64]pending
	// order lists pending seqs in the order they were first delivered, which is
	// seq order since a group delivers each entry once. Acked seqs linger until
	// the next compaction, so acks stay O(1).
	order []uint64
}

type pending struct {
	consumer   string
	delivered  time.Time
	deliveries int
}

func (b *Bus) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// stream returns the named stream, creating it when create is set (nil
// otherwise when it does not exist).
func (b *Bus) stream(name string, create bool) (*stream, error) {
	if b.isClosed() {
		return nil, bus.ErrClosed
	}
	b.mu.RLock()
	s := b.streams[name]
	b.mu.RUnlock()
	if s != nil || !create {
		return s, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed() { // Close won the race.
		return nil, bus.ErrClosed
	}
	if s = b.streams[name]; s == nil {
		s = &stream{groups: map[string]*group{}, wake: make(chan struct{}), firstSeq: 1}
		b.streams[name] = s
	}
	return s, nil
}

// Publish implements bus.Bus. Payload is copied, so the caller may reuse its
// buffer once Publish returns; the Headers map is kept as is (see
// bus.Message), which halves the cost of a publish.
func (b *Bus) Publish(ctx context.Context, name string, msgs ...bus.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := bus.Validate(name, msgs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("failed to publish messages to %q: %w", name, err)
	}
	msgs, span := bus.TracePublish(ctx, name, msgs)
	defer span.End()
	s, err := b.stream(name, true)
	if err != nil {
		return fmt.Errorf("failed to publish messages to %q: %w", name, err)
	}
	// Copy outside the lock: it is the bulk of the work.
	batch := make([]entry, len(msgs))
	for i := range msgs {
		batch[i] = entry{id: msgs[i].ID, payload: cloneBytes(msgs[i].Payload), headers: msgs[i].Headers}
	}
	s.mu.Lock()
	for i := range batch {
		s.lastSeq++
		batch[i].seq = s.lastSeq
	}
	s.entries.push(batch)
	if b.maxLen > 0 {
		s.trim(b.maxLen)
	}
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	return nil
}

// Fetch implements bus.Bus.
func (b *Bus) Fetch(ctx context.Context, name, groupName, consumer string, opts bus.FetchOptions) ([]bus.Message, error) {
	count := opts.Count
	if count <= 0 {
		count = bus.DefaultBatch
	}
	s, err := b.stream(name, true)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch messages from %q: %w", name, err)
	}
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("failed to fetch messages from %q: %w", name, err)
		}
		s.mu.Lock()
		msgs := s.deliverNew(name, s.group(groupName), consumer, count, b.clock.Now())
		wake := s.wake
		s.mu.Unlock()
		if len(msgs) > 0 || opts.Block <= 0 {
			return msgs, nil
		}
		if timer == nil {
			timer = b.clock.NewTimer(opts.Block)
		}
		select {
		case <-wake:
		case <-timer.C():
			return nil, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("failed to fetch messages from %q: %w", name, ctx.Err())
		case <-b.closed:
			return nil, fmt.Errorf("failed to fetch messages from %q: %w", name, bus.ErrClosed)
		}
	}
}

// Ack implements bus.Bus.
func (b *Bus) Ack(_ context.Context, name, groupName string, seqs ...string) error {
	if len(seqs) == 0 {
		return nil
	}
	parsed := make([]uint64, len(seqs))
	for i, q := range seqs {
		n, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			return fmt.Errorf("failed to ack messages of %q: invalid seq %q", name, q)
		}
		parsed[i] = n
	}
	s, err := b.stream(name, false)
	if err != nil {
		return fmt.Errorf("failed to ack messages of %q: %w", name, err)
	}
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupName]
	if g == nil {
		return nil
	}
	for _, n := range parsed {
		delete(g.pending, n)
	}
	g.compact()
	return nil
}

// Claim implements bus.Bus.
func (b *Bus) Claim(_ context.Context, name, groupName, consumer string, minIdle time.Duration, count int) ([]bus.Message, error) {
	if count <= 0 {
		count = bus.DefaultBatch
	}
	s, err := b.stream(name, true)
	if err != nil {
		return nil, fmt.Errorf("failed to claim messages of %q: %w", name, err)
	}
	now := b.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.group(groupName)
	var out []bus.Message
	for _, n := range g.order {
		if len(out) == count {
			break
		}
		p, ok := g.pending[n]
		if !ok || now.Sub(p.delivered) < minIdle {
			continue
		}
		e, ok := s.find(n)
		if !ok { // Trimmed away: nothing left to redeliver.
			delete(g.pending, n)
			continue
		}
		p.consumer, p.delivered = consumer, now
		p.deliveries++
		g.pending[n] = p
		out = append(out, e.message(name, p.deliveries))
	}
	g.compact()
	return out, nil
}

// Pending implements bus.Bus.
func (b *Bus) Pending(_ context.Context, name, groupName string, count int) ([]bus.PendingEntry, error) {
	if count <= 0 {
		count = bus.DefaultBatch
	}
	s, err := b.stream(name, false)
	if err != nil {
		return nil, fmt.Errorf("failed to list pending messages of %q: %w", name, err)
	}
	if s == nil {
		return nil, nil
	}
	now := b.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupName]
	if g == nil {
		return nil, nil
	}
	var out []bus.PendingEntry
	for _, n := range g.order {
		if len(out) == count {
			break
		}
		if p, ok := g.pending[n]; ok {
			out = append(out, bus.PendingEntry{
				Seq: strconv.FormatUint(n, 10), Consumer: p.consumer, Idle: now.Sub(p.delivered), Deliveries: p.deliveries,
			})
		}
	}
	return out, nil
}

// Len implements bus.Bus.
func (b *Bus) Len(_ context.Context, name string) (int64, error) {
	s, err := b.stream(name, false)
	if err != nil {
		return 0, fmt.Errorf("failed to measure stream %q: %w", name, err)
	}
	if s == nil {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.entries.len()), nil
}

// Trim implements bus.Bus.
func (b *Bus) Trim(_ context.Context, name string, maxLen int64) error {
	s, err := b.stream(name, false)
	if err != nil {
		return fmt.Errorf("failed to trim stream %q: %w", name, err)
	}
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trim(max(maxLen, 0))
	return nil
}

// Close implements bus.Bus: blocked fetches return bus.ErrClosed, and so does
// every later call. The messages are dropped with the bus.
func (b *Bus) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.isClosed() {
		close(b.closed)
		b.streams = nil
	}
	return nil
}

// group returns the named group, creating it at the start of the stream.
func (s *stream) group(name string) *group {
	g := s.groups[name]
	if g == nil {
		g = &group{pending: map[uint64]pending{}}
		s.groups[name] = g
	}
	return g
}

// deliverNew hands up to count entries after the group's cursor to consumer.
func (s *stream) deliverNew(name string, g *group, consumer string, count int, now time.Time) []bus.Message {
	from := max(g.lastDelivered+1, s.firstSeq) // entries trimmed unread are skipped
	if from > s.lastSeq {
		return nil
	}
	n := int(min(uint64(count), s.lastSeq-from+1))
	out := make([]bus.Message, n)
	for j := range n {
		e := s.entries.at(int(from-s.firstSeq) + j)
		out[j] = e.message(name, 1)
		g.pending[e.seq] = pending{consumer: consumer, delivered: now, deliveries: 1}
		g.order = append(g.order, e.seq)
	}
	g.lastDelivered = from + uint64(n) - 1
	return out
}

func (s *stream) find(seq uint64) (*entry, bool) {
	if seq < s.firstSeq || seq > s.lastSeq {
		return nil, false
	}
	return s.entries.at(int(seq - s.firstSeq)), true
}

// trim drops the oldest entries beyond maxLen.
func (s *stream) trim(maxLen int64) {
	if drop := int64(s.entries.len()) - maxLen; drop > 0 {
		s.entries.dropFront(int(drop))
		s.firstSeq += uint64(drop)
	}
}

// ring is a growable circular buffer of entries.
type ring struct {
	buf  []entry // len(buf) is zero or a power of two
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) at(i int) *entry { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) push(batch []entry) {
	if need := r.n + len(batch); need > len(r.buf) {
		r.resize(need)
	}
	for i := range batch {
		r.buf[(r.head+r.n+i)&(len(r.buf)-1)] = batch[i]
	}
	r.n += len(batch)
}

// dropFront removes the k oldest entries, releasing their payloads, and gives
// memory back once the ring is mostly empty.
func (r *ring) dropFront(k int) {
	for i := range k {
		*r.at(i) = entry{}
	}
	r.head = (r.head + k) & (len(r.buf) - 1)
	r.n -= k
	if len(r.buf) > 64 && r.n < len(r.buf)/4 {
		r.resize(r.n)
	}
}

// resize moves the entries into a power-of-two buffer that holds at least
// need (and at least 16) entries.
func (r *ring) resize(need int) {
	size := 16
	for size < need {
		size *= 2
	}
	buf := make([]entry, size)
	for i := range r.n {
		buf[i] = *r.at(i)
	}
	r.buf, r.head = buf, 0
}

// compact drops acked seqs from order once they outnumber the pending ones.
func (g *group) compact() {
	if len(g.order) < 64 || len(g.order) < 2*len(g.pending) {
		return
	}
	kept := g.order[:0]
	for _, n := range g.order {
		if _, ok := g.pending[n]; ok {
			kept = append(kept, n)
		}
	}
	clear(g.order[len(kept):])
	g.order = kept
}

func (e *entry) message(stream string, deliveries int) bus.Message {
	return bus.Message{
		ID: e.id, Stream: stream, Payload: e.payload, Headers: e.headers,
		Seq: strconv.FormatUint(e.seq, 10), Deliveries: deliveries,
	}
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
