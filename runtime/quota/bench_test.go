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

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
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
				b.Run(c.name, func(b *testing.B) { timed(b, c.op) })
			}
		})
	}
}

// BenchmarkMeteredCall is one model call to a fake model that answers at
// once, bare and through the meter (budget check and usage upsert) on
// SQLite and PostgreSQL: what the meter adds to a model call.
func BenchmarkMeteredCall(b *testing.B) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 10}}
	})
	bare := func(b *testing.B) llm.Provider {
		p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "gpt-4o", BaseURL: s.URL(), APIKey: "k"})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	budget := quota.Budget{DayTokens: 1 << 50}
	b.Run("bare", func(b *testing.B) {
		p := bare(b)
		timed(b, func() error { return ask(p) })
	})
	b.Run("sqlite", func(b *testing.B) {
		m := meter(openSQLite(b), "helper", budget)
		p := m.Guard(m.Count("openai/gpt-4o", bare(b)))
		timed(b, func() error { return ask(p) })
	})
	b.Run("postgres", func(b *testing.B) {
		if pg == nil {
			b.Skip("SKIPPED: " + pgReason)
		}
		m := meter(schedulertest.Open(b, pg.NewDatabase(b)), "helper", budget)
		p := m.Guard(m.Count("openai/gpt-4o", bare(b)))
		timed(b, func() error { return ask(p) })
	})
}

// timed runs op b.N times and reports its latency's p50 and p99.
func timed(b *testing.B, op func() error) {
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-µs")
}
