package controller

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

func TestFormatCost(t *testing.T) {
	for micros, want := range map[int64]string{0: "0.00", 3_500_000: "3.50", 12_345: "0.012345", 1_000_000_001: "1000.000001", 120_000: "0.12"} {
		NewWithT(t).Expect(formatCost(micros)).To(Equal(want), "%d", micros)
	}
}

// TestUsageReaderSumsTheStore reads a tenant's and an Agent's usage from a
// real store: today's and this month's (not last month's) tokens and cost,
// the same read serving until Refresh has passed, and the next read due
// after Refresh while there is usage today, else at the next UTC midnight.
func TestUsageReaderSumsTheStore(t *testing.T) {
	g := NewWithT(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	ctx := store.WithTenant(context.Background(), "team-a")
	now := time.Date(2026, 12, 15, 10, 0, 0, 0, time.UTC)
	add := func(agent string, day time.Time, in, out, cost int64) {
		g.Expect(st.AddUsage(ctx, store.UsageDelta{Agent: agent, Day: day,
			UsageCounts: store.UsageCounts{InputTokens: in, OutputTokens: out, CostMicros: cost, ModelCalls: 1}})).To(Succeed())
	}
	add("x", now, 100, 20, 1_234_567)
	add("y", now, 50, 0, 5)
	add("x", time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC), 1000, 0, 1_000_000)
	add("x", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), 9999, 0, 9_000_000)
	g.Expect(st.AddUsage(store.WithTenant(context.Background(), "team-b"), store.UsageDelta{Agent: "x", Day: now,
		UsageCounts: store.UsageCounts{InputTokens: 7}})).To(Succeed())
	clk := clocktesting.NewFakeClock(now)
	u := &UsageReader{Store: st, Clock: clk, Refresh: time.Minute}

	tenant, err := u.tenant(context.Background(), "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tenant).To(Equal(picobotv1alpha1.UsageStatus{Day: "2026-12-15", DayTokens: 170, DayCost: "1.234572", MonthTokens: 1170, MonthCost: "2.234572"}))
	agent, err := u.agent(context.Background(), "team-a", "x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agent).To(Equal(picobotv1alpha1.UsageStatus{Day: "2026-12-15", DayTokens: 120, DayCost: "1.234567", MonthTokens: 1120, MonthCost: "2.234567"}))
	g.Expect(u.next(agent)).To(Equal(time.Minute))

	add("x", now, 1, 0, 0)
	again, err := u.agent(context.Background(), "team-a", "x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.DayTokens).To(Equal(int64(120)), "served from the last read within Refresh")
	clk.Step(time.Minute)
	again, err = u.agent(context.Background(), "team-a", "x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.DayTokens).To(Equal(int64(121)))

	idle, err := u.agent(context.Background(), "team-a", "nobody")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(idle).To(Equal(picobotv1alpha1.UsageStatus{Day: "2026-12-15", DayCost: "0.00", MonthCost: "0.00"}))
	g.Expect(u.next(idle)).To(Equal(13*time.Hour + 59*time.Minute + time.Second))
}
