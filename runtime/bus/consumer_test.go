package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
)

// runClock advances clk whenever something waits on it, until stop is
// closed, so a Consumer's backoff and block timers fire without real waiting.
func runClock(clk *testingclock.FakeClock, step time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if clk.HasWaiters() {
				clk.Step(step)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// flakyBus fails the first failures fetches, as a bus does while Redis
// restarts.
type flakyBus struct {
	bus.Bus
	failures atomic.Int32
}

func (f *flakyBus) Fetch(ctx context.Context, stream, group, consumer string, opts bus.FetchOptions) ([]bus.Message, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, errors.New("connection refused")
	}
	return f.Bus.Fetch(ctx, stream, group, consumer, opts)
}

func TestConsumerBacksOffAndRecovers(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	mb := membus.New(membus.Options{Clock: clk})
	defer func() { _ = mb.Close() }()
	fb := &flakyBus{Bus: mb}
	fb.failures.Store(3)
	g.Expect(mb.Publish(t.Context(), "s", bus.Message{ID: "m1"})).To(Succeed())

	got := make(chan bus.Message, 10)
	c := bus.NewConsumer(fb, "s", "g", "c", func(_ context.Context, msgs []bus.Message) error {
		for _, m := range msgs {
			got <- m
		}
		return nil
	}, bus.ConsumerOptions{Block: time.Second, ClaimMinIdle: -1, Clock: clk})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	stopClock := runClock(clk, time.Second)
	defer stopClock()

	var m bus.Message
	g.Eventually(got).WithTimeout(30 * time.Second).Should(Receive(&m))
	g.Expect(m.ID).To(Equal("m1"))
	g.Expect(fb.failures.Load()).To(BeNumerically("<", 0), "the three failed fetches were waited out")
	g.Eventually(func() ([]bus.PendingEntry, error) { return mb.Pending(t.Context(), "s", "g", 10) }).Should(BeEmpty())
	cancel()
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
}

// TestConsumerRedeliversFailedBatch checks that a batch whose handler failed is
// not acked and comes back through Claim once idle.
func TestConsumerRedeliversFailedBatch(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	mb := membus.New(membus.Options{Clock: clk})
	defer func() { _ = mb.Close() }()
	g.Expect(mb.Publish(t.Context(), "s", bus.Message{ID: "m1"}, bus.Message{ID: "m2"})).To(Succeed())

	var calls atomic.Int32
	got := make(chan []bus.Message, 10)
	c := bus.NewConsumer(mb, "s", "g", "c", func(_ context.Context, msgs []bus.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("store unavailable")
		}
		got <- msgs
		return nil
	}, bus.ConsumerOptions{Block: time.Second, ClaimMinIdle: 10 * time.Second, ClaimInterval: 5 * time.Second, Clock: clk})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	stopClock := runClock(clk, time.Second)
	defer stopClock()

	var msgs []bus.Message
	g.Eventually(got).WithTimeout(30 * time.Second).Should(Receive(&msgs))
	g.Expect(msgs).To(HaveLen(2))
	g.Expect(msgs[0].ID).To(Equal("m1"))
	g.Expect(msgs[0].Deliveries).To(Equal(2), "redelivered through Claim")
	g.Eventually(func() ([]bus.PendingEntry, error) { return mb.Pending(t.Context(), "s", "g", 10) }).Should(BeEmpty())
	cancel()
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
}

func TestConsumerReportsClosedBus(t *testing.T) {
	g := NewWithT(t)
	mb := membus.New(membus.Options{})
	c := bus.NewConsumer(mb, "s", "g", "c", func(context.Context, []bus.Message) error { return nil },
		bus.ConsumerOptions{Block: time.Hour})
	done := make(chan error, 1)
	go func() { done <- c.Start(t.Context()) }()
	g.Expect(mb.Close()).To(Succeed())
	var err error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&err))
	g.Expect(err).To(MatchError(bus.ErrClosed), "a closed bus ends the loop instead of spinning")
}

func TestConsumerEndsWhenIdleSaysSo(t *testing.T) {
	g := NewWithT(t)
	mb := membus.New(membus.Options{})
	defer func() { _ = mb.Close() }()
	g.Expect(mb.Publish(t.Context(), "s", bus.Message{ID: "m1"}, bus.Message{ID: "m2"})).To(Succeed())
	var handled []string
	empties := 0
	c := bus.NewConsumer(mb, "s", "g", "c1", func(_ context.Context, msgs []bus.Message) error {
		for _, m := range msgs {
			handled = append(handled, m.ID)
		}
		return nil
	}, bus.ConsumerOptions{Batch: 1, Block: time.Millisecond, ClaimMinIdle: -1,
		// Two empty fetches in a row end the loop: the messages come first.
		Idle: func() bool { empties++; return empties == 2 }})
	done := make(chan error, 1)
	go func() { done <- c.Start(t.Context()) }()
	g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(BeNil()))
	g.Expect(handled).To(Equal([]string{"m1", "m2"}))
	g.Expect(empties).To(Equal(2))
	pending, err := mb.Pending(t.Context(), "s", "g", 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(BeEmpty())
}

func TestConcurrentConsumerDoesNotWaitForASlowMessage(t *testing.T) {
	g := NewWithT(t)
	mb := membus.New(membus.Options{})
	defer func() { _ = mb.Close() }()
	g.Expect(mb.Publish(t.Context(), "s", bus.Message{ID: "slow"}, bus.Message{ID: "fast1"}, bus.Message{ID: "fast2"}, bus.Message{ID: "bad"})).To(Succeed())
	release := make(chan struct{})
	var mu sync.Mutex
	var handled []string
	c := bus.NewConsumer(mb, "s", "g", "c1", func(_ context.Context, msgs []bus.Message) error {
		g.Expect(msgs).To(HaveLen(1), "one message per handler call")
		m := msgs[0]
		switch m.ID {
		case "slow":
			<-release
		case "bad":
			return errors.New("cannot deliver")
		}
		mu.Lock()
		handled = append(handled, m.ID)
		mu.Unlock()
		return nil
	}, bus.ConsumerOptions{Concurrency: 2, Block: 10 * time.Millisecond, ClaimMinIdle: -1})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	handledIDs := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(handled) }
	// Both fast messages finish while the slow one holds its slot.
	g.Eventually(handledIDs, 5*time.Second).Should(ConsistOf("fast1", "fast2"))
	pendingIDs := func() []string {
		p, err := mb.Pending(t.Context(), "s", "g", 10)
		g.Expect(err).NotTo(HaveOccurred())
		ids := []string{}
		for _, e := range p {
			ids = append(ids, e.Seq)
		}
		return ids
	}
	g.Eventually(pendingIDs, 5*time.Second).Should(HaveLen(2), "the slow one runs, the failed one waits for a claim; both unacked")
	close(release)
	g.Eventually(handledIDs, 5*time.Second).Should(ConsistOf("fast1", "fast2", "slow"))
	g.Eventually(pendingIDs, 5*time.Second).Should(HaveLen(1))
	cancel()
	g.Eventually(done, 5*time.Second).Should(Receive(BeNil()), "Start returns once the handlers in flight are done")
}

// A handler that has what it came for ends the loop: its batch is acked and
// nothing more is fetched (the next message stays for another consumer).
func TestConsumerEndsWhenTheHandlerIsDone(t *testing.T) {
	g := NewWithT(t)
	mb := membus.New(membus.Options{})
	defer func() { _ = mb.Close() }()
	g.Expect(mb.Publish(t.Context(), "s", bus.Message{ID: "skip"}, bus.Message{ID: "mine"}, bus.Message{ID: "other"})).To(Succeed())
	var handled []string
	c := bus.NewConsumer(mb, "s", "g", "c1", func(_ context.Context, msgs []bus.Message) error {
		handled = append(handled, msgs[0].ID)
		if msgs[0].ID == "mine" {
			return fmt.Errorf("claimed %s: %w", msgs[0].ID, bus.ErrDone)
		}
		return nil
	}, bus.ConsumerOptions{Batch: 1, Block: time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- c.Start(t.Context()) }()
	g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(BeNil()))
	g.Expect(handled).To(Equal([]string{"skip", "mine"}))
	pending, err := mb.Pending(t.Context(), "s", "g", 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(BeEmpty(), "the done batch is acked")
	rest, err := mb.Fetch(t.Context(), "s", "g", "c2", bus.FetchOptions{Count: 10, Block: time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rest).To(HaveLen(1))
	g.Expect(rest[0].ID).To(Equal("other"), "nothing was fetched after the handler was done")
}
