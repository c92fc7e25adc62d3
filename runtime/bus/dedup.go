package bus

import (
	"container/list"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Dedup remembers the IDs of messages a consumer processed recently, so a
// redelivery (a claim after a lost ack, a publisher's retry) is acked without
// being processed again. It is bounded both in size and in age, because
// duplicates arrive soon after the original or not at all.
//
// A Dedup is a fast first filter, not the guarantee: it lives in one process
// and forgets. The store's idempotent append, keyed by Message.ID, is the final
// guard against processing a message twice.
type Dedup struct {
	clock    clock.PassiveClock
	capacity int
	ttl      time.Duration

	mu    sync.Mutex
	order *list.List // front = oldest mark; values are *dedupEntry
	index map[string]*list.Element
}

type dedupEntry struct {
	id     string
	marked time.Time
}

// NewDedup returns a Dedup holding at most capacity IDs, each for at most ttl
// (ttl <= 0: until evicted by capacity). A nil clock means the real one.
func NewDedup(capacity int, ttl time.Duration, clk clock.PassiveClock) *Dedup {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if capacity < 1 {
		capacity = 1
	}
	return &Dedup{clock: clk, capacity: capacity, ttl: ttl, order: list.New(), index: map[string]*list.Element{}}
}

// Seen reports whether id was marked and has not expired or been evicted.
func (d *Dedup) Seen(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	el, ok := d.index[id]
	if !ok {
		return false
	}
	if d.expired(el.Value.(*dedupEntry), d.clock.Now()) {
		d.order.Remove(el)
		delete(d.index, id)
		return false
	}
	return true
}

// Mark records ids as processed. Call it after the work is persisted, never
// before: a mark for work that was then lost would drop its redelivery.
func (d *Dedup) Mark(ids ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	for _, id := range ids {
		if el, ok := d.index[id]; ok {
			el.Value.(*dedupEntry).marked = now
			d.order.MoveToBack(el)
			continue
		}
		d.index[id] = d.order.PushBack(&dedupEntry{id: id, marked: now})
	}
	// The oldest marks are at the front: expire them, then evict down to size.
	for el := d.order.Front(); el != nil; el = d.order.Front() {
		e := el.Value.(*dedupEntry)
		if d.order.Len() <= d.capacity && !d.expired(e, now) {
			break
		}
		d.order.Remove(el)
		delete(d.index, e.id)
	}
}

// Len returns how many IDs are remembered, expired ones not yet dropped
// included.
func (d *Dedup) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.order.Len()
}

func (d *Dedup) expired(e *dedupEntry, now time.Time) bool {
	return d.ttl > 0 && now.Sub(e.marked) >= d.ttl
}
