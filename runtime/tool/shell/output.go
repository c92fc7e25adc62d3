package shell

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// headTail keeps the first head and the last tail bytes written to it: the
// start of a command's output says what it did, the end how it finished;
// the middle of a huge log is what a model can best do without.
type headTail struct {
	mu    sync.Mutex
	head  []byte
	tail  []byte // ring buffer, next write at pos once full
	pos   int
	limit struct{ head, tail int }
	total int64
}

func newHeadTail(head, tail int) *headTail {
	h := &headTail{}
	h.limit.head, h.limit.tail = head, tail
	return h
}

// Write implements io.Writer; it never fails.
func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += int64(n)
	if room := h.limit.head - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		if len(h.tail) < h.limit.tail {
			k := min(h.limit.tail-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		if len(p) >= h.limit.tail {
			copy(h.tail, p[len(p)-h.limit.tail:])
			h.pos = 0
			return n, nil
		}
		k := copy(h.tail[h.pos:], p)
		h.pos = (h.pos + k) % h.limit.tail
		p = p[k:]
	}
	return n, nil
}

// String returns the kept output with a marker where bytes were dropped.
func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail := append(append([]byte(nil), h.tail[h.pos:]...), h.tail[:h.pos]...)
	kept := int64(len(h.head) + len(tail))
	if kept == h.total {
		return string(h.head) + string(tail)
	}
	head := strings.ToValidUTF8(trimRuneEnd(string(h.head)), "")
	t := trimRuneStart(string(tail))
	return fmt.Sprintf("%s\n\n[... %d bytes of output omitted ...]\n\n%s", head, h.total-kept, t)
}

// trimRuneEnd drops a rune cut in half at the end of s.
func trimRuneEnd(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// trimRuneStart drops a rune cut in half at the start of s.
func trimRuneStart(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
		s = s[1:]
	}
	return s
}

// ringBuffer keeps the last size bytes written to it and counts everything
// ever written, so readers can ask for "output since byte N" and learn how
// much of it is gone. Background processes write to one for their whole life.
type ringBuffer struct {
	mu      sync.Mutex
	buf     []byte
	size    int
	total   int64         // bytes ever written; the end offset
	changed chan struct{} // closed and replaced on every write
}

func newRingBuffer(size int) *ringBuffer {
	return &ringBuffer{size: size, changed: make(chan struct{})}
}

// Write implements io.Writer; it never fails.
func (r *ringBuffer) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += int64(len(p))
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.size; over > 0 {
		// Compact now and then rather than on every write.
		if over > r.size/4 || len(p) >= r.size {
			r.buf = append(r.buf[:0:0], r.buf[len(r.buf)-r.size:]...)
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return len(p), nil
}

// since returns the output from offset on, the offset it ends at, and how
// many bytes after offset were already dropped.
func (r *ringBuffer) since(offset int64) (data []byte, end int64, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	buf := r.buf
	if len(buf) > r.size {
		buf = buf[len(buf)-r.size:]
	}
	start := r.total - int64(len(buf))
	if offset < start {
		dropped = start - offset
		offset = start
	}
	if offset > r.total {
		offset = r.total
	}
	return append([]byte(nil), buf[offset-start:]...), r.total, dropped
}

// end returns the current end offset and a channel closed at the next write.
func (r *ringBuffer) end() (int64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total, r.changed
}
