package web

import (
	"container/list"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// pageCache keeps extracted pages for a while, so a model that reads the same
// page twice in a conversation (it often does) costs one request. It is
// bounded: the least recently used page goes first.
type pageCache struct {
	clock clock.PassiveClock
	ttl   time.Duration
	size  int

	mu    sync.Mutex
	order *list.List // front = most recently used; values are *cacheEntry
	items map[string]*list.Element
}

type cacheEntry struct {
	key     string
	page    page
	fetched time.Time
}

func newPageCache(c clock.PassiveClock, ttl time.Duration, size int) *pageCache {
	return &pageCache{clock: c, ttl: ttl, size: size, order: list.New(), items: map[string]*list.Element{}}
}

// get returns a fresh page for key and when it was fetched.
func (c *pageCache) get(key string) (page, time.Time, bool) {
	if c.size <= 0 || c.ttl <= 0 {
		return page{}, time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return page{}, time.Time{}, false
	}
	e := el.Value.(*cacheEntry)
	if c.clock.Since(e.fetched) >= c.ttl {
		c.order.Remove(el)
		delete(c.items, key)
		return page{}, time.Time{}, false
	}
	c.order.MoveToFront(el)
	return e.page, e.fetched, true
}

func (c *pageCache) put(key string, p page) {
	if c.size <= 0 || c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if el, ok := c.items[key]; ok {
		el.Value = &cacheEntry{key: key, page: p, fetched: now}
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, page: p, fetched: now})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}

func (c *pageCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
