package quota_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/store"
)

func TestParseMoney(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]int64{"12.50": 12_500_000, "300": 300_000_000, "0.000001": 1, "1.1": 1_100_000, "999999999999.999999": 999_999_999_999_999_999} {
		got, err := quota.ParseMoney(in)
		g.Expect(err).NotTo(HaveOccurred(), in)
		g.Expect(got).To(Equal(want), in)
	}
	for _, bad := range []string{"", "1.", ".5", "-1", "1e3", "1.0000001", "12,50", "$5", "1234567890123"} {
		_, err := quota.ParseMoney(bad)
		g.Expect(err).To(MatchError(ContainSubstring("is not an amount such as 12.50")), bad)
	}
}

func TestBudgetOf(t *testing.T) {
	g := NewWithT(t)
	b, err := quota.BudgetOf(nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.IsZero()).To(BeTrue())
	q := &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "default"},
		Spec: picobotv1alpha1.TenantQuotaSpec{Budget: &picobotv1alpha1.ModelBudget{MonthTokens: new(int64(5000)), DayCost: new("0.25")}}}
	b, err = quota.BudgetOf(q)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(Equal(quota.Budget{MonthTokens: 5000, DayCostMicros: 250_000, SoftLimitPercent: quota.DefaultSoftLimitPercent}))
	q.Spec.Budget.MonthCost = new("lots")
	_, err = quota.BudgetOf(q)
	g.Expect(err).To(MatchError(`failed to read spec.budget.monthCost of TenantQuota team/default: "lots" is not an amount such as 12.50 (at most 12 digits and 6 decimals)`))
	g.Expect(quota.Budget{SoftLimitPercent: 80}.IsZero()).To(BeTrue(), "a soft limit without caps is no budget")
}

// The soft limit warns once per cap and period, at the call that finds the
// tenant past the percentage, and again on the next day.
func TestSoftLimitWarnsOnce(t *testing.T) {
	g := NewWithT(t)
	st := openSQLite(t)
	var logs bytes.Buffer
	clk := clocktesting.NewFakePassiveClock(day)
	m := &quota.Meter{Store: st, Tenant: "team", Agent: "helper", Clock: clk, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Budget: func(string) quota.Budget {
			return quota.Budget{DayTokens: 1000, MonthTokens: 100_000, SoftLimitPercent: 75}
		}}
	ctx := context.Background()
	warnings := func() int { return strings.Count(logs.String(), "Model budget soft limit reached") }
	add := func(tokens int64) { m.Add(ctx, store.UsageCounts{InputTokens: tokens, ModelCalls: 1}) }

	add(740)
	g.Expect(m.Check(ctx)).To(Succeed())
	g.Expect(warnings()).To(Equal(0), "74% is under the soft limit")
	add(10)
	for range 3 {
		g.Expect(m.Check(ctx)).To(Succeed())
	}
	g.Expect(warnings()).To(Equal(1))
	g.Expect(logs.String()).To(ContainSubstring(`limit="75% of today's model budget of 1000 tokens is used (750)"`))
	g.Expect(logs.String()).To(ContainSubstring("tenant=team"))

	clk.SetTime(day.Add(24 * time.Hour))
	add(800)
	g.Expect(m.Check(ctx)).To(Succeed())
	g.Expect(warnings()).To(Equal(2), "a new day warns again")
	// A tenant named by the call's context is checked and warned apart.
	g.Expect(m.Check(store.WithTenant(ctx, "other"))).To(Succeed())
	g.Expect(warnings()).To(Equal(2), "tenant other used nothing")
}
