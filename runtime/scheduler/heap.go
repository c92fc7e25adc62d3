package scheduler

import (
	"container/heap"
	"time"

	"github.com/picobot/picobot/runtime/schedule"
)

// entry is a scheduled job: its parsed schedule and the next tick to
// process. Entries of suspended, invalid or finished jobs stay in the
// scheduler's map (so a repeated Upsert of their version is a no-op) but not
// in the heap.
type entry struct {
	job   *Job
	sched schedule.Schedule
	next  time.Time
	index int // position in the heap; -1 when not in it
}

// timeHeap orders entries by next tick, so the scheduler wakes once for the
// earliest job instead of scanning every job each second.
type timeHeap []*entry

func (h timeHeap) Len() int { return len(h) }

func (h timeHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }

func (h timeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *timeHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *timeHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.index = -1
	*h = old[:n-1]
	return e
}

// place puts e at its next tick: in the heap, moved within it, or out of it
// when it has none.
func (h *timeHeap) place(e *entry) {
	switch {
	case e.next.IsZero() && e.index >= 0:
		heap.Remove(h, e.index)
	case e.next.IsZero():
	case e.index >= 0:
		heap.Fix(h, e.index)
	default:
		heap.Push(h, e)
	}
}

// remove takes e out of the heap if it is there.
func (h *timeHeap) remove(e *entry) {
	if e.index >= 0 {
		heap.Remove(h, e.index)
	}
}
