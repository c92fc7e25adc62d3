package bus_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/bus"
)

func TestDedupRemembersMarkedIDs(t *testing.T) {
	g := NewWithT(t)
	d := bus.NewDedup(10, time.Hour, nil)
	g.Expect(d.Seen("a")).To(BeFalse())
	d.Mark("a", "b")
	g.Expect(d.Seen("a")).To(BeTrue())
	g.Expect(d.Seen("b")).To(BeTrue())
	g.Expect(d.Seen("c")).To(BeFalse())
	d.Mark("a")
	g.Expect(d.Len()).To(Equal(2), "marking twice keeps one entry")
}

func TestDedupEvictsOldestBeyondCapacity(t *testing.T) {
	g := NewWithT(t)
	d := bus.NewDedup(3, 0, nil)
	d.Mark("a", "b", "c")
	d.Mark("a") // refreshed: now the newest
	d.Mark("d")
	g.Expect(d.Len()).To(Equal(3))
	g.Expect(d.Seen("b")).To(BeFalse(), "the oldest mark goes first")
	g.Expect(d.Seen("a")).To(BeTrue())
	g.Expect(d.Seen("c")).To(BeTrue())
	g.Expect(d.Seen("d")).To(BeTrue())
}

func TestDedupForgetsAfterTTL(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	d := bus.NewDedup(100, time.Minute, clk)
	d.Mark("old")
	clk.SetTime(clk.Now().Add(30 * time.Second))
	d.Mark("new")
	g.Expect(d.Seen("old")).To(BeTrue())

	clk.SetTime(clk.Now().Add(30 * time.Second))
	g.Expect(d.Seen("old")).To(BeFalse(), "a minute old")
	g.Expect(d.Seen("new")).To(BeTrue())

	clk.SetTime(clk.Now().Add(time.Hour))
	d.Mark("latest")
	g.Expect(d.Len()).To(Equal(1), "expired marks are dropped when new ones come")
}
