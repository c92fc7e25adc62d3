package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/logctx"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/turn"
)

// Budget caps a tenant's model use per UTC day and per month; a zero field
// is no cap. Costs are in millionths of the price table's currency unit.
type Budget struct {
	DayTokens       int64
	MonthTokens     int64
	DayCostMicros   int64
	MonthCostMicros int64
	// SoftLimitPercent of a cap at which the runtime warns, once per cap
	// and period; 0 never warns.
	SoftLimitPercent int64
}

// IsZero reports a budget without any cap.
func (b Budget) IsZero() bool {
	return b.DayTokens == 0 && b.MonthTokens == 0 && b.DayCostMicros == 0 && b.MonthCostMicros == 0
}

// SoftLimit says which cap t has passed SoftLimitPercent of (and its key,
// naming the cap and its period, for warning once), or "" when none.
func (b Budget) SoftLimit(t store.UsageTotals, now time.Time) (key, why string) {
	if b.SoftLimitPercent <= 0 {
		return "", ""
	}
	over := func(used, limit int64) bool { return limit > 0 && used*100 >= limit*b.SoftLimitPercent }
	day, month := now.UTC().Format(time.DateOnly), now.UTC().Format("2006-01")
	switch {
	case over(t.Day.Tokens(), b.DayTokens):
		return "day-tokens/" + day, fmt.Sprintf("%d%% of today's model budget of %d tokens is used (%d)", b.SoftLimitPercent, b.DayTokens, t.Day.Tokens())
	case over(t.Month.Tokens(), b.MonthTokens):
		return "month-tokens/" + month, fmt.Sprintf("%d%% of this month's model budget of %d tokens is used (%d)", b.SoftLimitPercent, b.MonthTokens, t.Month.Tokens())
	case over(t.Day.CostMicros, b.DayCostMicros):
		return "day-cost/" + day, fmt.Sprintf("%d%% of today's model budget of %s is used (%s)", b.SoftLimitPercent, Money(b.DayCostMicros), Money(t.Day.CostMicros))
	case over(t.Month.CostMicros, b.MonthCostMicros):
		return "month-cost/" + month, fmt.Sprintf("%d%% of this month's model budget of %s is used (%s)", b.SoftLimitPercent, Money(b.MonthCostMicros), Money(t.Month.CostMicros))
	}
	return "", ""
}

// Exceeded says which cap t has reached, or "" when none.
func (b Budget) Exceeded(t store.UsageTotals) string {
	switch {
	case b.DayTokens > 0 && t.Day.Tokens() >= b.DayTokens:
		return fmt.Sprintf("today's model budget of %d tokens is spent (%d used)", b.DayTokens, t.Day.Tokens())
	case b.MonthTokens > 0 && t.Month.Tokens() >= b.MonthTokens:
		return fmt.Sprintf("this month's model budget of %d tokens is spent (%d used)", b.MonthTokens, t.Month.Tokens())
	case b.DayCostMicros > 0 && t.Day.CostMicros >= b.DayCostMicros:
		return fmt.Sprintf("today's model budget of %s is spent (%s used)", Money(b.DayCostMicros), Money(t.Day.CostMicros))
	case b.MonthCostMicros > 0 && t.Month.CostMicros >= b.MonthCostMicros:
		return fmt.Sprintf("this month's model budget of %s is spent (%s used)", Money(b.MonthCostMicros), Money(t.Month.CostMicros))
	}
	return ""
}

// Money formats millionths of the currency unit with two decimals, rounded
// up ("12.35").
func Money(micros int64) string {
	cents := (micros + 9_999) / 10_000
	return fmt.Sprintf("%d.%02d", cents/100, cents%100)
}

// ErrBudgetExhausted is the error (a protocol.CodedError with code
// budget_exhausted) of a model call refused for the tenant's budget.
var ErrBudgetExhausted = errors.New("model budget exhausted")

// Meter accounts an agent's model calls in the store and, with a budget,
// refuses calls once the tenant has spent it. Every runtime of the tenant
// (session pods, embedded mode) adds to the same rows, so the budget holds
// across them: a call is checked against what all of them have recorded,
// so concurrent calls may overspend by at most the calls already running
// when the budget ran out (one per concurrent turn).
type Meter struct {
	Store store.Store
	// Tenant scopes the store calls of a call whose context names no
	// tenant; one that does (store.WithTenant: the session runtime's turns,
	// of whichever tenant an embedded runtime serves) is that tenant's.
	Tenant string
	Agent  string
	// Prices returns the tenant's price table now (it may change while the
	// runtime runs); nil is DefaultPrices for every tenant.
	Prices func(tenant string) Prices
	// Budget returns the tenant's budget now (it may change while the
	// runtime runs); nil or a zero budget is no cap.
	Budget func(tenant string) Budget
	Clock  clock.PassiveClock
	Log    *slog.Logger

	unpriced     sync.Map // model name -> struct{}: warned once
	soft         sync.Map // SoftLimit key -> struct{}: warned once
	defaultsOnce sync.Once
	defaults     Prices
}

// prices is the tenant's price table; DefaultPrices is built once per Meter.
func (m *Meter) prices(tenant string) Prices {
	if m.Prices != nil {
		if p := m.Prices(tenant); p != nil {
			return p
		}
	}
	m.defaultsOnce.Do(func() { m.defaults = DefaultPrices() })
	return m.defaults
}

// tenant is the tenant of a call: ctx's, else m.Tenant.
func (m *Meter) tenant(ctx context.Context) string {
	if t, err := store.TenantFrom(ctx); err == nil && t != "" {
		return t
	}
	return m.Tenant
}

func (m *Meter) ctx(ctx context.Context, tenant string) context.Context {
	return store.WithTenant(context.WithoutCancel(ctx), tenant)
}

// Guard wraps the agent's provider (its whole fallback chain): each call
// first checks the budget.
func (m *Meter) Guard(p llm.Provider) llm.Provider { return guard{m: m, p: p} }

// Count wraps one model of the chain, named "provider/model": each call
// that answers is added to the agent's usage at that model's price.
func (m *Meter) Count(name string, p llm.Provider) llm.Provider {
	return counter{m: m, name: name, p: p}
}

// Check returns a budget_exhausted error when the tenant's budget is spent.
func (m *Meter) Check(ctx context.Context) error {
	if m.Budget == nil {
		return nil
	}
	tenant := m.tenant(ctx)
	b := m.Budget(tenant)
	if b.IsZero() {
		return nil
	}
	t, err := m.Store.UsageTotals(m.ctx(ctx, tenant), m.Clock.Now())
	if err != nil {
		return fmt.Errorf("failed to check the model budget: %w", err)
	}
	if why := b.Exceeded(t); why != "" {
		return &protocol.CodedError{Code: protocol.CodeBudgetExhausted,
			Err: fmt.Errorf("%w: %s; the platform team sets the budget", ErrBudgetExhausted, why)}
	}
	if key, why := b.SoftLimit(t, m.Clock.Now()); key != "" {
		if _, warned := m.soft.LoadOrStore(tenant+"/"+key, struct{}{}); !warned {
			logctx.From(ctx, m.Log).Warn("Model budget soft limit reached", "tenant", tenant, "agent", m.Agent, "limit", why)
			turn.Notify(ctx, "Model budget: "+why+"; calls stop when it is spent.")
		}
	}
	return nil
}

// Add records usage of the agent now.
func (m *Meter) Add(ctx context.Context, c store.UsageCounts) {
	if err := m.Store.AddUsage(m.ctx(ctx, m.tenant(ctx)), store.UsageDelta{Agent: m.Agent, Day: m.Clock.Now(), UsageCounts: c}); err != nil {
		logctx.From(ctx, m.Log).Warn("Failed to record usage", "agent", m.Agent, "err", err)
	}
}

type guard struct {
	m *Meter
	p llm.Provider
}

func (g guard) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	if err := g.m.Check(ctx); err != nil {
		return nil, err
	}
	return g.p.Complete(ctx, req, onDelta)
}

type counter struct {
	m    *Meter
	name string
	p    llm.Provider
}

func (c counter) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	resp, err := c.p.Complete(ctx, req, onDelta)
	if err != nil {
		return resp, err
	}
	price, ok := c.m.prices(c.m.tenant(ctx)).Lookup(c.name)
	if !ok {
		if _, warned := c.m.unpriced.LoadOrStore(c.name, struct{}{}); !warned {
			c.m.Log.Warn("No price for this model: its calls count tokens but no cost; add it to the price table", "model", c.name)
		}
	}
	c.m.Add(ctx, store.UsageCounts{InputTokens: int64(resp.Usage.InputTokens), OutputTokens: int64(resp.Usage.OutputTokens),
		CostMicros: price.Cost(resp.Usage), ModelCalls: 1, ToolCalls: int64(len(resp.Message.ToolCalls))})
	return resp, nil
}
