package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/store"
)

// UsageStore is what the operator reads of the store's usage accounting
// (runtime/store's usage methods; the tenant is the one in ctx).
type UsageStore interface {
	UsageTotals(ctx context.Context, day time.Time) (store.UsageTotals, error)
	ListUsage(ctx context.Context, f store.UsageFilter) ([]store.UsageDay, error)
}

// DefaultUsageRefresh is how long a usage read serves status before the
// store is asked again.
const DefaultUsageRefresh = time.Minute

// UsageReader reads tenants' and Agents' model usage for status, each at
// most once per Refresh: Agents are reconciled every few seconds while
// their pods run, and their usage need not be fresher than a minute.
type UsageReader struct {
	Store   UsageStore
	Clock   clock.PassiveClock
	Refresh time.Duration

	mu   sync.Mutex
	read map[string]usageRead
}

type usageRead struct {
	at     time.Time
	status picobotv1alpha1.UsageStatus
}

// tenant returns the tenant's usage today and this month.
func (u *UsageReader) tenant(ctx context.Context, ns string) (picobotv1alpha1.UsageStatus, error) {
	return u.cached(ns, func(day time.Time) (picobotv1alpha1.UsageStatus, error) {
		t, err := u.Store.UsageTotals(store.WithTenant(ctx, ns), day)
		if err != nil {
			return picobotv1alpha1.UsageStatus{}, fmt.Errorf("failed to read the usage of tenant %q: %w", ns, err)
		}
		return usageStatus(day, t), nil
	})
}

// agent returns the Agent's usage today and this month.
func (u *UsageReader) agent(ctx context.Context, ns, name string) (picobotv1alpha1.UsageStatus, error) {
	return u.cached(ns+"/"+name, func(day time.Time) (picobotv1alpha1.UsageStatus, error) {
		rows, err := u.Store.ListUsage(store.WithTenant(ctx, ns), store.UsageFilter{Agent: name, From: day.AddDate(0, 0, 1-day.Day()), To: day})
		if err != nil {
			return picobotv1alpha1.UsageStatus{}, fmt.Errorf("failed to read the usage of Agent %s/%s: %w", ns, name, err)
		}
		var t store.UsageTotals
		for _, r := range rows {
			t.Month.Add(r.UsageCounts)
			if r.Day.Equal(day) {
				t.Day.Add(r.UsageCounts)
			}
		}
		return usageStatus(day, t), nil
	})
}

// cached returns key's last read while it is fresh (and of today), else
// reads it again.
func (u *UsageReader) cached(key string, read func(day time.Time) (picobotv1alpha1.UsageStatus, error)) (picobotv1alpha1.UsageStatus, error) {
	now := u.Clock.Now()
	day := store.UsageDayOf(now)
	u.mu.Lock()
	r, ok := u.read[key]
	u.mu.Unlock()
	if ok && now.Sub(r.at) < u.Refresh && r.status.Day == day.Format(time.DateOnly) {
		return r.status, nil
	}
	st, err := read(day)
	if err != nil {
		return st, err
	}
	u.mu.Lock()
	if u.read == nil {
		u.read = map[string]usageRead{}
	}
	u.read[key] = usageRead{at: now, status: st}
	u.mu.Unlock()
	return st, nil
}

// next is when a status showing st should be read again: after Refresh
// while there is usage today (the tenant is active), else at the next UTC
// midnight, when today's figures restart (a turn before then comes from a
// pod, whose Agent is resynced while it runs).
func (u *UsageReader) next(st picobotv1alpha1.UsageStatus) time.Duration {
	now := u.Clock.Now()
	if st.DayTokens > 0 || (st.DayCost != "" && st.DayCost != formatCost(0)) {
		return u.Refresh
	}
	return store.UsageDayOf(now).AddDate(0, 0, 1).Sub(now) + time.Second
}

func usageStatus(day time.Time, t store.UsageTotals) picobotv1alpha1.UsageStatus {
	return picobotv1alpha1.UsageStatus{Day: day.Format(time.DateOnly),
		DayTokens: t.Day.InputTokens + t.Day.OutputTokens, DayCost: formatCost(t.Day.CostMicros),
		MonthTokens: t.Month.InputTokens + t.Month.OutputTokens, MonthCost: formatCost(t.Month.CostMicros)}
}

// formatCost writes millionths of the currency unit as a decimal with at
// least two and at most six decimals, exactly ("0.012345", "3.50").
func formatCost(micros int64) string {
	s := fmt.Sprintf("%d.%06d", micros/1_000_000, micros%1_000_000)
	for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
		s = s[:len(s)-1]
	}
	return s
}

// usagePhase reads the Agent's usage into the scope when a store is
// configured.
func (r *AgentReconciler) usagePhase(ctx context.Context, s *agentScope) error {
	if r.Usage == nil {
		return nil
	}
	st, err := r.Usage.agent(ctx, s.agent.Namespace, s.agent.Name)
	if err != nil {
		return err
	}
	s.usage, s.usageRequeue = &st, r.Usage.next(st)
	return nil
}
