package quota_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
)

// BenchmarkMeterCheck is the cost a budget adds before every model call:
// one read of the tenant's day and month totals (Meter.Check), on SQLite
// and PostgreSQL, with a month of usage rows of 10 agents in the table;
// "none" is a tenant without a budget (no store read). Record is the
// accounting after every call (Meter.Add, an atomic upsert).
func BenchmarkMeterCheck(b *testing.B) {
	stores := map[string]func(b *testing.B) store.Store{
		"sqlite": func(b *testing.B) store.Store { return openSQLite(b) },
		"postgres": func(b *testing.B) store.Store {
			if pg == nil {
				b.Skip("SKIPPED: " + pgReason)
			}
			return schedulertest.Open(b, pg.NewDatabase(b))
		},
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			st := stores[backend](b)
			ctx := context.Background()
			clk := clocktesting.NewFakePassiveClock(day)
			discard := slog.New(slog.NewTextHandler(io.Discard, nil))
			for a := range 10 {
				for d := range 6 { // Dec 1-6: this month's rows
					m := &quota.Meter{Store: st, Tenant: "team", Agent: fmt.Sprintf("agent-%d", a), Log: discard,
						Clock: clocktesting.NewFakePassiveClock(day.AddDate(0, 0, -d))}
					m.Add(ctx, store.UsageCounts{InputTokens: 100, OutputTokens: 10, CostMicros: 50, ModelCalls: 1})
				}
			}
			budget := quota.Budget{DayTokens: 1 << 40, MonthCostMicros: 1 << 40, SoftLimitPercent: 80}
			metered := &quota.Meter{Store: st, Tenant: "team", Agent: "agent-0", Clock: clk, Log: discard,
				Budget: func(string) quota.Budget { return budget }}
			free := &quota.Meter{Store: st, Tenant: "team", Agent: "agent-0", Clock: clk, Log: discard}
			for _, c := range []struct {
				name string
				op   func() error
			}{
				{"check", func() error { return metered.Check(ctx) }},
				{"none", func() error { return free.Check(ctx) }},
				{"record", func() error {
					metered.Add(ctx, store.UsageCounts{InputTokens: 1, ModelCalls: 1})
					return nil
				}},
			} {
				b.Run(c.name, func(b *testing.B) {
					var lat []time.Duration
					for b.Loop() {
						start := time.Now()
						if err := c.op(); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(start))
					}
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-µs")
				})
			}
		})
	}
}
