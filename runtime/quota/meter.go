package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	_, why := b.exceeded(t)
	return why
}

// exceeded names the cap t has reached ("day-tokens", ...) and says why.
func (b Budget) exceeded(t store.UsageTotals) (limit, why string) {
	switch {
	case b.DayTokens > 0 && t.Day.Tokens() >= b.DayTokens:
		return "day-tokens", fmt.Sprintf("today's model budget of %d tokens is spent (%d used)", b.DayTokens, t.Day.Tokens())
	case b.MonthTokens > 0 && t.Month.Tokens() >= b.MonthTokens:
		return "month-tokens", fmt.Sprintf("this month's model budget of %d tokens is spent (%d used)", b.MonthTokens, t.Month.Tokens())
	case b.DayCostMicros > 0 && t.Day.CostMicros >= b.DayCostMicros:
		return "day-cost", fmt.Sprintf("today's model budget of %s is spent (%s used)", Money(b.DayCostMicros), Money(t.Day.CostMicros))
	case b.MonthCostMicros > 0 && t.Month.CostMicros >= b.MonthCostMicros:
		return "month-cost", fmt.Sprintf("this month's model budget of %s is spent (%s used)", Money(b.MonthCostMicros), Money(t.Month.CostMicros))
	}
	return "", ""
}

// PeriodEnd is when the period of a cap ("day-tokens", "month-cost", ...)
// that includes now ends: the next UTC midnight for a day's cap, the first
// of the next month (UTC) for a month's.
func PeriodEnd(limit string, now time.Time) time.Time {
	y, m, d := now.UTC().Date()
	if strings.HasPrefix(limit, "month") {
		return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// ExhaustedError is a model call refused for the tenant's budget (inside a
// protocol.CodedError budget_exhausted): Limit names the cap spent and Until
// is when its period ends, so a chat platform's chat is told once per cap
// and period (ChatNotice).
type ExhaustedError struct {
	Limit string
	Until time.Time
	Why   string
}

func (e *ExhaustedError) Error() string {
	return ErrBudgetExhausted.Error() + ": " + e.Why + "; the platform team sets the budget"
}

// Is makes errors.Is(err, ErrBudgetExhausted) hold.
func (e *ExhaustedError) Is(target error) bool { return target == ErrBudgetExhausted }

// Money formats millionths of the currency unit with two decimals, rounded
// up ("12.35").
func Money(micros int64) string {
	cents := (micros + 9_999) / 10_000
	return fmt.Sprintf("%d.%02d", cents/100, cents%100)
}

// ErrBudgetExhausted is the error (a protocol.CodedError with code
// budget_exhausted) of a model call refused for the tenant's budget.
var ErrBudgetExhausted = errors.New("model budget exhausted")

// CostRecorder sees the cost of each model call of an agent, named
// "provider/model", in millionths of the currency unit (metrics.Metrics).
type CostRecorder interface {
	ModelCost(tenant, agent, name string, micros int64)
}

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
	// Costs, when set, sees the cost of every call priced (the
	// picobot_model_cost_total metric).
	Costs CostRecorder

	unpriced     sync.Map // model name -> struct{}: warned once
	soft         sync.Map // SoftLimit key -> struct{}: claimed once (ClaimNotice decides who warns)
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
	now := m.Clock.Now()
	if limit, why := b.exceeded(t); why != "" {
		return &protocol.CodedError{Code: protocol.CodeBudgetExhausted,
			Err: &ExhaustedError{Limit: limit, Until: PeriodEnd(limit, now), Why: why}}
	}
	if key, why := b.SoftLimit(t, now); key != "" {
		if _, seen := m.soft.LoadOrStore(tenant+"/"+key, struct{}{}); !seen && m.claimSoft(ctx, tenant, key, now) {
			logctx.From(ctx, m.Log).Warn("Model budget soft limit reached", "tenant", tenant, "agent", m.Agent, "limit", why)
			turn.Notify(ctx, "Model budget: "+why+"; calls stop when it is spent.")
		}
	}
	return nil
}

// claimSoft claims the tenant's soft-limit notice key ("day-tokens/2026-06-01")
// in the store, so that of all the tenant's runtimes one warns; the store
// unreachable, this runtime warns (twice beats never).
func (m *Meter) claimSoft(ctx context.Context, tenant, key string, now time.Time) bool {
	limit, _, _ := strings.Cut(key, "/")
	first, err := m.Store.ClaimNotice(m.ctx(ctx, tenant), "soft-limit/"+limit, now, PeriodEnd(limit, now))
	if err != nil {
		m.Log.Warn("Failed to claim the soft limit notice; warning anyway", "tenant", tenant, "err", err)
		return true
	}
	return first
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
	tenant := c.m.tenant(ctx)
	price, ok := c.m.prices(tenant).Lookup(c.name)
	if !ok {
		if _, warned := c.m.unpriced.LoadOrStore(c.name, struct{}{}); !warned {
			c.m.Log.Warn("No price for this model: its calls count tokens but no cost; add it to the price table", "model", c.name)
		}
	}
	cost := price.Cost(resp.Usage)
	c.m.Add(ctx, store.UsageCounts{InputTokens: int64(resp.Usage.InputTokens), OutputTokens: int64(resp.Usage.OutputTokens),
		CostMicros: cost, ModelCalls: 1, ToolCalls: int64(len(resp.Message.ToolCalls))})
	if c.m.Costs != nil {
		c.m.Costs.ModelCost(tenant, c.m.Agent, c.name, cost)
	}
	return resp, nil
}
