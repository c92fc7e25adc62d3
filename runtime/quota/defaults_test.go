package quota_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/quota"
)

// TestParseDefaults: the chart's default quota is read strictly; what a
// TenantQuota would be refused for is refused here too, naming the field.
func TestParseDefaults(t *testing.T) {
	g := NewWithT(t)
	d, err := quota.ParseDefaults("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(BeNil())
	d, err = quota.ParseDefaults(`{"maxConcurrentSessions":20,"messagesPerMinute":600,"budget":{"dayTokens":2000000,"dayCost":"12.50","softLimitPercent":90}}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.MaxConcurrentSessions).To(HaveValue(BeEquivalentTo(20)))
	g.Expect(d.Budget.DayCost).To(HaveValue(Equal("12.50")))
	for in, want := range map[string]string{
		`{"maxConcurentSessions":20}`:         `unknown field "maxConcurentSessions"`,
		`{"messagesPerMinute":-1}`:            "messagesPerMinute is -1, not a cap",
		`{"budget":{"dayTokens":0}}`:          "budget.dayTokens is 0, not a budget",
		`{"budget":{"softLimitPercent":120}}`: "budget.softLimitPercent is 120, not a percentage",
		`{"budget":{"monthCost":"12,50"}}`:    "spec.budget.monthCost",
		`{"budget":{"dayTokens":"a lot"}}`:    "failed to read the default quota",
		`[]`:                                  "failed to read the default quota",
	} {
		_, err := quota.ParseDefaults(in)
		g.Expect(err).To(MatchError(ContainSubstring(want)), in)
	}
}

// TestWithDefaults: a tenant's TenantQuota wins field by field (budget
// fields one by one); a namespace without one gets the defaults whole; the
// quota read from the API server is not changed.
func TestWithDefaults(t *testing.T) {
	g := NewWithT(t)
	d, err := quota.ParseDefaults(`{"maxConcurrentSessions":20,"messagesPerMinute":600,"maxSessionPods":50,"budget":{"dayTokens":2000000,"monthCost":"300"}}`)
	g.Expect(err).NotTo(HaveOccurred())

	none := quota.WithDefaults(nil, d)
	g.Expect(quota.LimitsOf(none)).To(Equal(quota.Limits{MaxSessions: 20, MessagesPerMinute: 600}))
	b, err := quota.BudgetOf(none)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(Equal(quota.Budget{DayTokens: 2000000, MonthCostMicros: 300_000_000, SoftLimitPercent: quota.DefaultSoftLimitPercent}))

	q := &picobotv1alpha1.TenantQuota{Spec: picobotv1alpha1.TenantQuotaSpec{
		MessagesPerMinute: ptr.To[int32](0),
		Budget:            &picobotv1alpha1.ModelBudget{DayTokens: ptr.To[int64](10), SoftLimitPercent: ptr.To[int32](50)},
	}}
	merged := quota.WithDefaults(q, d)
	g.Expect(quota.LimitsOf(merged)).To(Equal(quota.Limits{MaxSessions: 20, MessagesPerMinute: 0}), "the tenant's 0 is its own, not a gap")
	b, err = quota.BudgetOf(merged)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(Equal(quota.Budget{DayTokens: 10, MonthCostMicros: 300_000_000, SoftLimitPercent: 50}))
	g.Expect(merged.Spec.MaxSessionPods).To(HaveValue(BeEquivalentTo(50)))
	g.Expect(q.Spec.MaxConcurrentSessions).To(BeNil(), "the quota read is left as it was")
	g.Expect(q.Spec.Budget.MonthCost).To(BeNil())

	g.Expect(quota.WithDefaults(q, nil)).To(BeIdenticalTo(q), "no defaults: the quota as it is")
	g.Expect(quota.LimitsOf(quota.WithDefaults(nil, nil))).To(Equal(quota.NoLimits))
}
