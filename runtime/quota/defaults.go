package quota

import (
	"bytes"
	"encoding/json"
	"fmt"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// DefaultsEnv names the platform's default quota in the environment of the
// gateway, the operator and (passed on by the operator) session pods: the
// chart's quotaDefaults as a TenantQuota spec in JSON. A tenant's
// TenantQuota wins field by field; a namespace without one gets the
// defaults whole.
const DefaultsEnv = "PICOBOT_QUOTA_DEFAULTS"

// ParseDefaults reads a default quota (a TenantQuota spec as JSON, as
// DefaultsEnv holds it); "" is none (nil). Unknown fields and values a
// TenantQuota would be refused for are errors, so a mistyped default fails
// the process at start instead of silently capping nothing.
func ParseDefaults(s string) (*picobotv1alpha1.TenantQuotaSpec, error) {
	if s == "" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var d picobotv1alpha1.TenantQuotaSpec
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("failed to read the default quota %s: %w", DefaultsEnv, err)
	}
	for name, v := range map[string]*int32{"maxConcurrentSessions": d.MaxConcurrentSessions, "messagesPerMinute": d.MessagesPerMinute,
		"maxSessionPods": d.MaxSessionPods, "maxWarmPods": d.MaxWarmPods, "maxBrowserPods": d.MaxBrowserPods, "maxCronJobs": d.MaxCronJobs} {
		if v != nil && *v < 0 {
			return nil, fmt.Errorf("the default quota %s: %s is %d, not a cap (at least 0; leave it out for none)", DefaultsEnv, name, *v)
		}
	}
	if b := d.Budget; b != nil {
		for name, v := range map[string]*int64{"budget.dayTokens": b.DayTokens, "budget.monthTokens": b.MonthTokens} {
			if v != nil && *v < 1 {
				return nil, fmt.Errorf("the default quota %s: %s is %d, not a budget (at least 1)", DefaultsEnv, name, *v)
			}
		}
		if p := b.SoftLimitPercent; p != nil && (*p < 1 || *p > 100) {
			return nil, fmt.Errorf("the default quota %s: budget.softLimitPercent is %d, not a percentage (1-100)", DefaultsEnv, *p)
		}
		if _, err := BudgetOf(&picobotv1alpha1.TenantQuota{Spec: d}); err != nil {
			return nil, fmt.Errorf("the default quota %s: %w", DefaultsEnv, err)
		}
	}
	return &d, nil
}

// WithDefaults is q (nil: the namespace has none) with every field it
// leaves unset taken from d, the budget's fields one by one. Neither is
// changed; a nil d returns q.
func WithDefaults(q *picobotv1alpha1.TenantQuota, d *picobotv1alpha1.TenantQuotaSpec) *picobotv1alpha1.TenantQuota {
	if d == nil {
		return q
	}
	out := &picobotv1alpha1.TenantQuota{}
	if q != nil {
		out = q.DeepCopy()
	}
	s := &out.Spec
	for _, f := range []struct{ dst, def **int32 }{
		{&s.MaxConcurrentSessions, &d.MaxConcurrentSessions}, {&s.MessagesPerMinute, &d.MessagesPerMinute},
		{&s.MaxSessionPods, &d.MaxSessionPods}, {&s.MaxWarmPods, &d.MaxWarmPods},
		{&s.MaxBrowserPods, &d.MaxBrowserPods}, {&s.MaxCronJobs, &d.MaxCronJobs},
	} {
		if *f.dst == nil && *f.def != nil {
			v := **f.def
			*f.dst = &v
		}
	}
	if d.Budget != nil {
		if s.Budget == nil {
			s.Budget = &picobotv1alpha1.ModelBudget{}
		}
		b, db := s.Budget, d.Budget.DeepCopy()
		if b.DayTokens == nil {
			b.DayTokens = db.DayTokens
		}
		if b.MonthTokens == nil {
			b.MonthTokens = db.MonthTokens
		}
		if b.DayCost == nil {
			b.DayCost = db.DayCost
		}
		if b.MonthCost == nil {
			b.MonthCost = db.MonthCost
		}
		if b.SoftLimitPercent == nil {
			b.SoftLimitPercent = db.SoftLimitPercent
		}
	}
	return out
}
