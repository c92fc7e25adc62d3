package web

import (
	"container/list"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ttlCache keeps answers for a while, so a model that reads the same page or
// runs the same search twice in a conversation (it often does) costs one
// request. It is bounded: the least recently used entry goes first.
type ttlCache[V any] struct {
	clock clock.PassiveClock
	ttl   time.Duration
	size  int

	mu    sync.Mutex
	order *list.List // front = most recently used; values are *cacheEntry[V]
	items map[string]*list.Element
}

type cacheEntry[V any] struct {
	key     string
	value   V
	fetched time.Time
}

func newTTLCache[V any](c clock.PassiveClock, ttl time.Duration, size int) *ttlCache[V] {
	return &ttlCache[V]{clock: c, ttl: ttl, size: size, order: list.New(), items: map[string]*list.Element{}}
}

// get returns a fresh value for key and when it was fetched.
func (c *ttlCache[V]) get(key string) (V, time.Time, bool) {
	var zero V
	if c.size <= 0 || c.ttl <= 0 {
		return zero, time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return zero, time.Time{}, false
	}
	e := el.Value.(*cacheEntry[V])
	if c.clock.Since(e.fetched) >= c.ttl {
		c.order.Remove(el)
		delete(c.items, key)
		return zero, time.Time{}, false
	}
	c.order.MoveToFront(el)
	return e.value, e.fetched, true
}

func (c *ttlCache[V]) put(key string, v V) {
	if c.size <= 0 || c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if el, ok := c.items[key]; ok {
		el.Value = &cacheEntry[V]{key: key, value: v, fetched: now}
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry[V]{key: key, value: v, fetched: now})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry[V]).key)
	}
}

func (c *ttlCache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
