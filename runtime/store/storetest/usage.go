package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testUsage: usage adds up per agent and day, atomically under concurrent
// adds, sums per day and month, stays within its tenant, and only grows.
func testUsage(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)
	may31 := time.Date(2026, 5, 31, 23, 59, 0, 0, time.UTC)
	jun1 := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	jun2 := time.Date(2026, 6, 2, 0, 0, 1, 0, time.FixedZone("east", 3*3600)) // 1 June in UTC
	call := store.UsageCounts{InputTokens: 100, OutputTokens: 10, CostMicros: 250, ModelCalls: 1, ToolCalls: 2}

	// 20 runtimes add at once; every add counts.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 5 {
				g.Expect(st.AddUsage(a, store.UsageDelta{Agent: "helper", Day: jun1, UsageCounts: call})).To(gomega.Succeed())
			}
		})
	}
	wg.Wait()
	g.Expect(st.AddUsage(a, store.UsageDelta{Agent: "helper", Day: jun2, UsageCounts: store.UsageCounts{Turns: 1, Sessions: 1}})).To(gomega.Succeed())
	g.Expect(st.AddUsage(a, store.UsageDelta{Agent: "coder", Day: jun1, UsageCounts: call})).To(gomega.Succeed())
	g.Expect(st.AddUsage(a, store.UsageDelta{Agent: "helper", Day: may31, UsageCounts: call})).To(gomega.Succeed())
	g.Expect(st.AddUsage(b, store.UsageDelta{Agent: "helper", Day: jun1, UsageCounts: call})).To(gomega.Succeed())

	june1 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	times := func(n int64) store.UsageCounts {
		return store.UsageCounts{InputTokens: 100 * n, OutputTokens: 10 * n, CostMicros: 250 * n, ModelCalls: n, ToolCalls: 2 * n}
	}
	helperJun1 := times(100)
	helperJun1.Turns, helperJun1.Sessions = 1, 1
	rows, err := st.ListUsage(a, store.UsageFilter{Agent: "helper", From: june1})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(rows).To(gomega.Equal([]store.UsageDay{{Agent: "helper", Day: june1, UsageCounts: helperJun1}}))
	rows, err = st.ListUsage(a, store.UsageFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(rows).To(gomega.Equal([]store.UsageDay{
		{Agent: "helper", Day: time.Date(2026, 5, 31, 0, 0, 0, 0, time.UTC), UsageCounts: times(1)},
		{Agent: "coder", Day: june1, UsageCounts: times(1)},
		{Agent: "helper", Day: june1, UsageCounts: helperJun1},
	}))
	rows, err = st.ListUsage(a, store.UsageFilter{To: may31})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(rows).To(gomega.HaveLen(1))

	tot, err := st.UsageTotals(a, jun1)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	day := times(101)
	day.Turns, day.Sessions = 1, 1
	g.Expect(tot.Day).To(gomega.Equal(day), "both agents of 1 June")
	g.Expect(tot.Month).To(gomega.Equal(day), "31 May is another month")
	tot, err = st.UsageTotals(a, time.Date(2026, 6, 20, 12, 0, 0, 0, time.UTC))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(tot.Day).To(gomega.Equal(store.UsageCounts{}))
	g.Expect(tot.Month).To(gomega.Equal(day))
	tot, err = st.UsageTotals(b, jun1)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(tot.Day).To(gomega.Equal(times(1)), "tenant B's own only")

	for name, d := range map[string]store.UsageDelta{
		"no agent": {Day: jun1, UsageCounts: call},
		"no day":   {Agent: "helper", UsageCounts: call},
		"negative": {Agent: "helper", Day: jun1, UsageCounts: store.UsageCounts{InputTokens: -1}},
	} {
		g.Expect(st.AddUsage(a, d)).To(gomega.MatchError(store.ErrInvalid), name)
	}
	_, err = st.UsageTotals(t.Context(), jun1)
	g.Expect(err).To(gomega.HaveOccurred(), "no tenant, no usage")
}
