package quota_test

import (
	"slices"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
)

// BenchmarkMeteredCall is one model call to a fake model that answers at
// once, bare and through the meter (budget check and usage row) on SQLite
// and PostgreSQL: the added latency per model call, p50/p99.
func BenchmarkMeteredCall(b *testing.B) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 10}}
	})
	run := func(b *testing.B, p llm.Provider) {
		var d []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := ask(p); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), "us-p50")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "us-p99")
	}
	bare := func(b *testing.B) llm.Provider {
		p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "gpt-4o", BaseURL: s.URL(), APIKey: "k"})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	budget := quota.Budget{DayTokens: 1 << 50}
	b.Run("bare", func(b *testing.B) { run(b, bare(b)) })
	b.Run("sqlite", func(b *testing.B) {
		m := meter(openSQLite(b), "helper", budget)
		run(b, m.Guard(m.Count("openai/gpt-4o", bare(b))))
	})
	b.Run("postgres", func(b *testing.B) {
		if pg == nil {
			b.Skip("SKIPPED: " + pgReason)
		}
		m := meter(schedulertest.Open(b, pg.NewDatabase(b)), "helper", budget)
		run(b, m.Guard(m.Count("openai/gpt-4o", bare(b))))
	})
}
