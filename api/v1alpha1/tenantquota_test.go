package v1alpha1_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

func validQuota() *picobotv1alpha1.TenantQuota {
	return &picobotv1alpha1.TenantQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: picobotv1alpha1.TenantQuotaName},
		Spec: picobotv1alpha1.TenantQuotaSpec{
			Budget: &picobotv1alpha1.ModelBudget{DayTokens: ptr(int64(100_000)), MonthCost: ptr("12.50")},
		},
	}
}

// TestTenantQuotaValidation checks TenantQuota's rules against the real API
// server (dry-run creates: every case is named default in one namespace),
// with the message a user sees.
func TestTenantQuotaValidation(t *testing.T) {
	needAPIServer(t)
	cases := []struct {
		name   string
		edit   func(q *picobotv1alpha1.TenantQuota)
		reject string // substring of the rejection; "" = accepted
	}{
		{"valid", func(*picobotv1alpha1.TenantQuota) {}, ""},
		{"empty spec", func(q *picobotv1alpha1.TenantQuota) { q.Spec = picobotv1alpha1.TenantQuotaSpec{} }, ""},
		{"another name", func(q *picobotv1alpha1.TenantQuota) { q.Name = "team-a" },
			"a TenantQuota must be named default: a namespace has one quota"},
		{"costs with decimals", func(q *picobotv1alpha1.TenantQuota) {
			q.Spec.Budget.DayCost, q.Spec.Budget.MonthCost = ptr("0.000001"), ptr("300")
		}, ""},
		{"cost with a comma", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.DayCost = ptr("12,50") },
			`spec.budget.dayCost: Invalid value: "12,50": dayCost must be a positive decimal such as 12.50 (at most 6 decimals)`},
		{"cost with 7 decimals", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.MonthCost = ptr("1.0000001") },
			"monthCost must be a positive decimal such as 300 or 12.50 (at most 6 decimals)"},
		{"zero cost", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.DayCost = ptr("0.00") },
			"dayCost must be a positive decimal"},
		{"negative cost", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.DayCost = ptr("-5") },
			"dayCost must be a positive decimal"},
		{"cost with a currency", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.DayCost = ptr("$5") },
			"dayCost must be a positive decimal"},
		{"zero tokens", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.DayTokens = ptr(int64(0)) },
			"spec.budget.dayTokens: Invalid value: 0: spec.budget.dayTokens in body should be greater than or equal to 1"},
		{"soft limit 0", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.SoftLimitPercent = ptr(int32(0)) },
			"spec.budget.softLimitPercent in body should be greater than or equal to 1"},
		{"soft limit 101", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.SoftLimitPercent = ptr(int32(101)) },
			"spec.budget.softLimitPercent in body should be less than or equal to 100"},
		{"soft limit 100", func(q *picobotv1alpha1.TenantQuota) { q.Spec.Budget.SoftLimitPercent = ptr(int32(100)) }, ""},
		{"negative cap", func(q *picobotv1alpha1.TenantQuota) { q.Spec.MaxSessionPods = ptr(int32(-1)) },
			"spec.maxSessionPods in body should be greater than or equal to 0"},
		{"zero caps", func(q *picobotv1alpha1.TenantQuota) {
			z := ptr(int32(0))
			q.Spec.MaxConcurrentSessions, q.Spec.MaxSessionPods, q.Spec.MaxWarmPods, q.Spec.MaxBrowserPods, q.Spec.MaxCronJobs, q.Spec.MessagesPerMinute = z, z, z, z, z, z
		}, ""},
		{"prices ConfigMap not a name", func(q *picobotv1alpha1.TenantQuota) { q.Spec.PricesConfigMap = ptr("Model_Prices") },
			`spec.pricesConfigMap: Invalid value: "Model_Prices": spec.pricesConfigMap in body should match`},
		{"prices ConfigMap", func(q *picobotv1alpha1.TenantQuota) { q.Spec.PricesConfigMap = ptr("model-prices") }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			q := validQuota()
			tc.edit(q)
			err := k8s.Create(context.Background(), q, client.DryRunAll)
			if tc.reject == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(tc.reject))
		})
	}
}

// TestTenantQuotaDefaults: the soft limit defaults to 80%.
func TestTenantQuotaDefaults(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	q := validQuota()
	g.Expect(k8s.Create(context.Background(), q, client.DryRunAll)).To(Succeed())
	g.Expect(q.Spec.Budget.SoftLimitPercent).To(Equal(ptr(int32(80))))
}
