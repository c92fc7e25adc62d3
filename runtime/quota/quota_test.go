package quota_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/turn"
	"github.com/picobot/picobot/test/services"
)

var (
	pg       *schedulertest.Postgres
	pgReason string
	// redisURL is a real Redis server's (test/services), for the
	// gateway replicas' shared counts; redisReason why there is none.
	redisURL, redisReason string
	day                   = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
)

func TestMain(m *testing.M) {
	var err error
	pg, err = schedulertest.StartPostgres()
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		pgReason = reason
	}
	url, stopRedis, err := services.Redis()
	if err != nil {
		reason, fatal := services.Unavailable("Redis", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		redisReason = reason
	}
	redisURL = url
	code := m.Run()
	if stopRedis != nil {
		stopRedis()
	}
	if pg != nil {
		pg.Stop()
	}
	os.Exit(code)
}

func model(t testing.TB, s *fakellm.Server, proto, name string) llm.Provider {
	t.Helper()
	base := s.URL()
	if proto == provider.Anthropic {
		base = s.AnthropicURL()
	}
	p, err := provider.New(provider.Config{Provider: proto, Model: name, BaseURL: base, APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openSQLite(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func meter(st store.Store, agent string, b quota.Budget) *quota.Meter {
	return &quota.Meter{Store: st, Tenant: "team", Agent: agent,
		Budget: func(string) quota.Budget { return b }, Clock: clocktesting.NewFakePassiveClock(day), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func ask(p llm.Provider) error {
	_, err := p.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil)
	return err
}

// The recorded usage is the sum of what the model reported, on both
// protocols through the official SDKs, priced by the model that answered
// (a fallback's own price), and per agent.
func TestUsageIsWhatTheModelReported(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	st := openSQLite(t)
	m := meter(st, "helper", quota.Budget{})
	openai := m.Guard(m.Count("openai/gpt-4o-2024-08-06", model(t, s, provider.OpenAI, "gpt-4o-2024-08-06")))
	anthropic := m.Guard(m.Count("anthropic/claude-sonnet-4-5", model(t, s, provider.Anthropic, "claude-sonnet-4-5")))
	s.Script(
		fakellm.Turn{Text: "a", Usage: &fakellm.Usage{InputTokens: 1000, OutputTokens: 100, CachedInputTokens: 400}},
		fakellm.Turn{Text: "b", ToolCalls: []fakellm.Call{{ID: "c1", Name: "calc", Args: `{}`}, {ID: "c2", Name: "calc", Args: `{}`}},
			Usage: &fakellm.Usage{InputTokens: 2000, OutputTokens: 50}},
		fakellm.Turn{Text: "c", Usage: &fakellm.Usage{InputTokens: 10, OutputTokens: 5}},
	)
	g.Expect(ask(openai)).To(Succeed())
	g.Expect(ask(anthropic)).To(Succeed())
	g.Expect(ask(openai)).To(Succeed())

	rows, err := st.ListUsage(store.WithTenant(context.Background(), "team"), store.UsageFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rows).To(HaveLen(1))
	// gpt-4o: 600 fresh input at 2.50, 400 cached at 1.25, 100 output at
	// 10 (USD per million) = 1500+500+1000 µ$, then 10 in and 5 out =
	// 25+50 µ$; claude-sonnet-4-5: 2000 in at 3 and 50 out at 15 =
	// 6000+750 µ$.
	g.Expect(rows[0].UsageCounts).To(Equal(store.UsageCounts{InputTokens: 3010, OutputTokens: 155, CostMicros: 3000 + 75 + 6750,
		ModelCalls: 3, ToolCalls: 2}))
	g.Expect(rows[0].Day).To(Equal(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)))
}

// Once the tenant's budget is spent the next call is refused with
// budget_exhausted before the model is asked, whichever agent asks.
func TestBudgetStopsModelCalls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget quota.Budget
		want   string
	}{
		{"day tokens", quota.Budget{DayTokens: 1000}, "today's model budget of 1000 tokens is spent (1200 used)"},
		{"month tokens", quota.Budget{MonthTokens: 1000}, "this month's model budget of 1000 tokens is spent (1200 used)"},
		// 400 tokens of gpt-4o-mini at 0.15 in: 60 µ$ a call.
		{"day money", quota.Budget{DayCostMicros: 150}, "today's model budget of 0.01 is spent (0.01 used)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			st := openSQLite(t)
			a, b := meter(st, "helper", tc.budget), meter(st, "coder", tc.budget)
			pa := a.Guard(a.Count("openai/gpt-4o-mini", model(t, s, provider.OpenAI, "gpt-4o-mini")))
			pb := b.Guard(b.Count("openai/gpt-4o-mini", model(t, s, provider.OpenAI, "gpt-4o-mini")))
			s.Respond(func(fakellm.Recorded) fakellm.Turn {
				return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 400}}
			})
			g.Expect(ask(pa)).To(Succeed())
			g.Expect(ask(pb)).To(Succeed())
			g.Expect(ask(pa)).To(Succeed(), "800 tokens, 120 µ$: under every cap")
			err := ask(pb)
			var ce *protocol.CodedError
			g.Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
			g.Expect(ce.Code).To(Equal(protocol.CodeBudgetExhausted))
			g.Expect(err).To(MatchError(quota.ErrBudgetExhausted))
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
			g.Expect(s.Requests()).To(HaveLen(3), "the refused call never reached the model")
		})
	}
}

// Many runtimes (session pods) of one tenant share the budget through
// PostgreSQL: with 8 turns calling at once, the tenant overspends by at
// most the calls that were already running when it ran out.
func TestBudgetHoldsAcrossRuntimes(t *testing.T) {
	if pg == nil {
		t.Skip("SKIPPED: " + pgReason)
	}
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	dsn := pg.NewDatabase(t)
	const perCall, budget, runtimes = 100, 2000, 8
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: perCall}}
	})
	var wg sync.WaitGroup
	refused := make([]int, runtimes)
	for i := range runtimes {
		m := meter(schedulertest.Open(t, dsn), fmt.Sprintf("agent-%d", i), quota.Budget{DayTokens: budget})
		p := m.Guard(m.Count("openai/gpt-4o", model(t, s, provider.OpenAI, "gpt-4o")))
		wg.Go(func() {
			for range 10 {
				if err := ask(p); err != nil {
					if !errors.Is(err, quota.ErrBudgetExhausted) {
						t.Errorf("runtime %d: %v", i, err)
					}
					refused[i]++
				}
			}
		})
	}
	wg.Wait()
	tot, err := schedulertest.Open(t, dsn).UsageTotals(store.WithTenant(context.Background(), "team"), day)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tot.Day.InputTokens).To(Equal(int64(len(s.Requests())*perCall)), "every call the model answered is counted")
	g.Expect(tot.Day.Tokens()).To(BeNumerically(">=", budget))
	g.Expect(tot.Day.Tokens()).To(BeNumerically("<", budget+runtimes*perCall), "at most one call in flight per runtime past the budget")
	total := 0
	for _, n := range refused {
		total += n
	}
	g.Expect(total).To(Equal(runtimes*10 - len(s.Requests())))
}

// TestSoftLimitNoticeOncePerTenant: 8 runtimes (session pods) of a tenant
// past the soft limit, checking at once and again, send one notice between
// them: the store decides which (ClaimNotice).
func TestSoftLimitNoticeOncePerTenant(t *testing.T) {
	if pg == nil {
		t.Skip("SKIPPED: " + pgReason)
	}
	g := NewWithT(t)
	dsn := pg.NewDatabase(t)
	st := schedulertest.Open(t, dsn)
	tenantCtx := store.WithTenant(context.Background(), "team")
	g.Expect(st.AddUsage(tenantCtx, store.UsageDelta{Agent: "agent-0", Day: day, UsageCounts: store.UsageCounts{InputTokens: 850}})).To(Succeed())
	var notices atomic.Int32
	ctx := turn.WithNotices(tenantCtx, func(text string) {
		g.Expect(text).To(Equal("Model budget: 80% of today's model budget of 1000 tokens is used (850); calls stop when it is spent."))
		notices.Add(1)
	})
	var wg sync.WaitGroup
	for i := range 8 {
		m := meter(schedulertest.Open(t, dsn), fmt.Sprintf("agent-%d", i), quota.Budget{DayTokens: 1000, SoftLimitPercent: 80})
		wg.Go(func() {
			for range 3 {
				g.Expect(m.Check(ctx)).To(Succeed())
			}
		})
	}
	wg.Wait()
	g.Expect(notices.Load()).To(Equal(int32(1)))

	// The next day is another period: warned again, once.
	m := &quota.Meter{Store: st, Tenant: "team", Agent: "agent-0", Budget: func(string) quota.Budget { return quota.Budget{DayTokens: 1000, SoftLimitPercent: 80} },
		Clock: clocktesting.NewFakePassiveClock(day.AddDate(0, 0, 1)), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g.Expect(st.AddUsage(tenantCtx, store.UsageDelta{Agent: "agent-0", Day: day.AddDate(0, 0, 1), UsageCounts: store.UsageCounts{InputTokens: 850}})).To(Succeed())
	g.Expect(m.Check(ctx)).To(Succeed())
	g.Expect(m.Check(ctx)).To(Succeed())
	g.Expect(notices.Load()).To(Equal(int32(2)))
}
