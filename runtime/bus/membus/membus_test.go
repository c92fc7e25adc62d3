package membus_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/bustest"
	"github.com/picobot/picobot/runtime/bus/membus"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	bustest.Run(t, func(*testing.T) bus.Bus { return membus.New(membus.Options{MaxLen: bustest.MaxLen}) })
}

// TestClaimHonoursMinIdle checks idleness on an injected clock, which the
// conformance suite (real time, shared with Redis) cannot pin down exactly.
func TestClaimHonoursMinIdle(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := membus.New(membus.Options{Clock: clk})
	defer func() { _ = b.Close() }()

	g.Expect(b.Publish(ctx, "s", bus.Message{ID: "a"}, bus.Message{ID: "b"})).To(Succeed())
	_, err := b.Fetch(ctx, "s", "g", "dead", bus.FetchOptions{Count: 1})
	g.Expect(err).NotTo(HaveOccurred())
	clk.Step(30 * time.Second)
	_, err = b.Fetch(ctx, "s", "g", "dead", bus.FetchOptions{Count: 1})
	g.Expect(err).NotTo(HaveOccurred())

	pending, err := b.Pending(ctx, "s", "g", 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(HaveLen(2))
	g.Expect(pending[0].Idle).To(Equal(30 * time.Second))
	g.Expect(pending[1].Idle).To(BeZero())

	clk.Step(30*time.Second - time.Nanosecond)
	got, err := b.Claim(ctx, "s", "g", "alive", time.Minute, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty(), "idle for a nanosecond less than minIdle")

	clk.Step(time.Nanosecond)
	got, err = b.Claim(ctx, "s", "g", "alive", time.Minute, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].ID).To(Equal("a"))
	g.Expect(got[0].Deliveries).To(Equal(2))

	got, err = b.Claim(ctx, "s", "g", "other", time.Minute, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty(), "a claim resets the idle time")

	clk.Step(time.Minute)
	got, err = b.Claim(ctx, "s", "g", "other", time.Minute, 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1), "count caps a claim")
	g.Expect(got[0].ID).To(Equal("a"), "oldest first")
	g.Expect(got[0].Deliveries).To(Equal(3))
}

// TestBlockingFetchTimesOut checks that Block is measured on the injected
// clock: the fetch returns empty once the clock passes it.
func TestBlockingFetchTimesOut(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := membus.New(membus.Options{Clock: clk})
	defer func() { _ = b.Close() }()

	done := make(chan error, 1)
	go func() {
		msgs, err := b.Fetch(t.Context(), "s", "g", "c", bus.FetchOptions{Block: time.Minute})
		if err == nil && len(msgs) > 0 {
			err = fmt.Errorf("got %d messages from an empty stream", len(msgs))
		}
		done <- err
	}()
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	g.Consistently(done).ShouldNot(Receive(), "the fake clock has not moved")
	clk.Step(time.Minute)
	g.Eventually(done).Should(Receive(BeNil()))
}

// TestAckedMemoryIsReleased guards the pending index against growing without
// bound under steady traffic.
func TestAckedMemoryIsReleased(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	b := membus.New(membus.Options{MaxLen: 100})
	defer func() { _ = b.Close() }()
	for i := range 100 {
		msgs := make([]bus.Message, 50)
		for j := range msgs {
			msgs[j] = bus.Message{ID: bus.NewID(), Payload: []byte{byte(i)}}
		}
		g.Expect(b.Publish(ctx, "s", msgs...)).To(Succeed())
		got, err := b.Fetch(ctx, "s", "g", "c", bus.FetchOptions{Count: 50})
		g.Expect(err).NotTo(HaveOccurred())
		seqs := make([]string, len(got))
		for k := range got {
			seqs[k] = got[k].Seq
		}
		g.Expect(b.Ack(ctx, "s", "g", seqs...)).To(Succeed())
	}
	g.Expect(b.Len(ctx, "s")).To(BeEquivalentTo(100))
	g.Expect(membus.PendingIndexLen(b, "s", "g")).To(BeNumerically("<", 128))
}
