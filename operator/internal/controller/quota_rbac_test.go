package controller

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/cluster/quotasource"
	"github.com/picobot/picobot/runtime/quota"
)

// TestSessionPodReadsTenantQuota: with the real credentials of a session
// pod (its ServiceAccount's token, the Role the operator made) against the
// real API server, the pod reads its namespace's TenantQuota and price
// ConfigMap, sees a change after its re-read interval, and the API server
// refuses it any write of the quota and any other namespace's quota.
func TestSessionPodReadsTenantQuota(t *testing.T) {
	ns := newRuntimeNamespace(t)
	other := newRuntimeNamespace(t)
	startRuntimeManager(t, ns, nil)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "helper", "openai"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var r rbacv1.Role
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.ServiceAccountName("helper")}, &r)).To(Succeed())
		g.Expect(r.Rules).To(ContainElement(HaveField("Resources", []string{"tenantquotas"})))
	}).Should(Succeed())
	pod := podClient(t, ns, "helper")
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	src := &quotasource.Source{Kube: pod, Namespace: ns, Every: time.Minute, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	// No quota yet: no budget, the built-in prices.
	g.Expect(src.Refresh(ctx)).To(Succeed())
	g.Expect(src.Budget(ns).IsZero()).To(BeTrue())
	g.Expect(src.Prices(ns)).To(BeNil())

	g.Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "model-prices"},
		Data: map[string]string{quota.PricesKey: "vllm/qwen3: 0.5 1\n"}})).To(Succeed())
	tq := &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName},
		Spec: picobotv1alpha1.TenantQuotaSpec{Budget: &picobotv1alpha1.ModelBudget{DayTokens: ptr[int64](1000), MonthCost: ptr("12.50")},
			PricesConfigMap: ptr("model-prices")}}
	g.Expect(k8s.Create(ctx, tq)).To(Succeed())
	g.Expect(k8s.Create(ctx, &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: picobotv1alpha1.TenantQuotaName},
		Spec: picobotv1alpha1.TenantQuotaSpec{Budget: &picobotv1alpha1.ModelBudget{DayTokens: ptr[int64](1)}}})).To(Succeed())

	// Within the interval the pod keeps what it read; after it, the new
	// quota and its prices are in force.
	g.Expect(src.Budget(ns).IsZero()).To(BeTrue())
	clk.SetTime(clk.Now().Add(time.Minute))
	g.Expect(src.Budget(ns)).To(Equal(quota.Budget{DayTokens: 1000, MonthCostMicros: 12_500_000, SoftLimitPercent: 80}))
	p, ok := src.Prices(ns).Lookup("vllm/qwen3")
	g.Expect(ok).To(BeTrue())
	g.Expect(p).To(Equal(quota.Price{Input: 500_000, Output: 1_000_000}))
	_, ok = src.Prices(ns).Lookup("openai/gpt-4o")
	g.Expect(ok).To(BeTrue(), "the ConfigMap adds to the built-in prices")

	// The API server refuses the pod any write of its quota...
	mine := &picobotv1alpha1.TenantQuota{}
	g.Expect(pod.Get(ctx, client.ObjectKeyFromObject(tq), mine)).To(Succeed())
	before := mine.DeepCopy()
	mine.Spec.Budget.DayTokens = ptr[int64](1_000_000)
	err := pod.Patch(ctx, mine, client.MergeFrom(before))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	err = pod.Update(ctx, mine)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	err = pod.Delete(ctx, mine)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	err = pod.Create(ctx, &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "default"}})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	// ...and any read of another namespace's (or a list of its own).
	err = pod.Get(ctx, client.ObjectKey{Namespace: other, Name: picobotv1alpha1.TenantQuotaName}, &picobotv1alpha1.TenantQuota{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	err = pod.List(ctx, &picobotv1alpha1.TenantQuotaList{}, client.InNamespace(ns))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)

	// A price table that does not parse: the budget applies, the prices
	// read before stay, and Refresh says why.
	var cm corev1.ConfigMap
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "model-prices"}, &cm)).To(Succeed())
	cm.Data[quota.PricesKey] = "vllm/qwen3: free\n"
	g.Expect(k8s.Update(ctx, &cm)).To(Succeed())
	var cur picobotv1alpha1.TenantQuota
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(tq), &cur)).To(Succeed())
	cur.Spec.Budget.DayTokens = ptr[int64](2000)
	g.Expect(k8s.Update(ctx, &cur)).To(Succeed())
	g.Expect(src.Refresh(ctx)).To(MatchError(ContainSubstring(`failed to read the price table of ConfigMap "model-prices": line 1 (vllm/qwen3)`)))
	g.Expect(src.Budget(ns).DayTokens).To(Equal(int64(2000)))
	p, _ = src.Prices(ns).Lookup("vllm/qwen3")
	g.Expect(p.Input).To(Equal(int64(500_000)))
}
