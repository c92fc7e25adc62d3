package quotasource_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/quotasource"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/test/controlplane"
)

var (
	kube       client.Client
	restConfig *rest.Config
	skipReason string
)

func TestMain(m *testing.M) {
	env, k, skip, err := controlplane.Connect()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kube, skipReason = k, skip
	if env != nil {
		restConfig = env.Config
	}
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}
	os.Exit(code)
}

// TestGatewayLimits: the gateway reads each tenant's caps from its
// namespace's TenantQuota on the API server: none without a quota, the
// quota's caps once created, a change only after Every (one GET per tenant
// per Every), and no caps again once the quota is deleted.
func TestGatewayLimits(t *testing.T) {
	if skipReason != "" {
		t.Skip("SKIPPED LOUDLY: " + skipReason)
	}
	g := NewWithT(t)
	ctx := context.Background()
	a, b := "limits-a", "limits-b"
	for _, ns := range []string{a, b} {
		g.Expect(kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	src := &quotasource.Limits{Kube: kube, Clock: clk, Log: slog.New(slog.DiscardHandler)}
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.NoLimits), "no quota: no caps")

	five, sixty := int32(5), int32(60)
	q := &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: picobotv1alpha1.TenantQuotaName},
		Spec: picobotv1alpha1.TenantQuotaSpec{MaxConcurrentSessions: &five, MessagesPerMinute: &sixty}}
	g.Expect(kube.Create(ctx, q)).To(Succeed())
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.NoLimits), "read 0 s ago: not read again")
	g.Expect(src.Limits(ctx, b)).To(Equal(quota.NoLimits), "another tenant has its own")
	clk.Step(quotasource.DefaultEvery)
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.Limits{MaxSessions: 5, MessagesPerMinute: 60}))

	// A read that fails keeps the caps read last (here a client that
	// does not know the TenantQuota kind; an unreachable API server alike).
	good := src.Kube
	bad, err := client.New(restConfig, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	seven := int32(7)
	q.Spec.MaxConcurrentSessions = &seven
	g.Expect(kube.Update(ctx, q)).To(Succeed())
	src.Kube = bad
	clk.Step(quotasource.DefaultEvery)
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.Limits{MaxSessions: 5, MessagesPerMinute: 60}), "kept through a failed read")
	src.Kube = good
	clk.Step(quotasource.DefaultEvery)
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.Limits{MaxSessions: 7, MessagesPerMinute: 60}), "read again")

	g.Expect(kube.Delete(ctx, q)).To(Succeed())
	clk.Step(quotasource.DefaultEvery - time.Second)
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.Limits{MaxSessions: 7, MessagesPerMinute: 60}), "within Every")
	clk.Step(time.Second)
	g.Expect(src.Limits(ctx, a)).To(Equal(quota.NoLimits), "deleted: no caps")
}

// TestDefaultsFillTheTenantQuota: with the platform's default quota, a
// tenant without a TenantQuota gets the default caps and budget, and one
// with a TenantQuota keeps its own fields (a 0 included) and gets the
// defaults for the rest; the gateway's caps and a session pod's budget
// alike, read from the real API server.
func TestDefaultsFillTheTenantQuota(t *testing.T) {
	if skipReason != "" {
		t.Skip("SKIPPED LOUDLY: " + skipReason)
	}
	g := NewWithT(t)
	ctx := context.Background()
	own, bare := "defaults-own", "defaults-bare"
	for _, ns := range []string{own, bare} {
		g.Expect(kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	defaults, err := quota.ParseDefaults(`{"maxConcurrentSessions":20,"messagesPerMinute":600,"maxCronJobs":40,"budget":{"dayTokens":2000000,"monthCost":"300"}}`)
	g.Expect(err).NotTo(HaveOccurred())
	zero, ten := int32(0), int64(10)
	g.Expect(kube.Create(ctx, &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: picobotv1alpha1.TenantQuotaName},
		Spec: picobotv1alpha1.TenantQuotaSpec{MessagesPerMinute: &zero, MaxCronJobs: &zero, Budget: &picobotv1alpha1.ModelBudget{DayTokens: &ten}}})).To(Succeed())
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	log := slog.New(slog.DiscardHandler)

	limits := &quotasource.Limits{Kube: kube, Clock: clk, Log: log, Defaults: defaults}
	g.Expect(limits.Limits(ctx, bare)).To(Equal(quota.Limits{MaxSessions: 20, MessagesPerMinute: 600}))
	g.Expect(limits.Limits(ctx, own)).To(Equal(quota.Limits{MaxSessions: 20, MessagesPerMinute: 0}))

	for ns, want := range map[string]struct {
		budget quota.Budget
		crons  int32
	}{
		bare: {quota.Budget{DayTokens: 2000000, MonthCostMicros: 300_000_000, SoftLimitPercent: quota.DefaultSoftLimitPercent}, 40},
		own:  {quota.Budget{DayTokens: 10, MonthCostMicros: 300_000_000, SoftLimitPercent: quota.DefaultSoftLimitPercent}, 0},
	} {
		src := &quotasource.Source{Kube: kube, Namespace: ns, Clock: clk, Log: log, Defaults: defaults}
		g.Expect(src.Budget(ns)).To(Equal(want.budget), ns)
		crons, capped := src.MaxCronJobs(ctx, ns)
		g.Expect(capped).To(BeTrue(), ns)
		g.Expect(crons).To(Equal(want.crons), ns)
	}
	withoutDefaults := &quotasource.Source{Kube: kube, Namespace: bare, Clock: clk, Log: log}
	g.Expect(withoutDefaults.Budget(bare)).To(Equal(quota.Budget{}), "no defaults, no quota: no budget")
	_, capped := withoutDefaults.MaxCronJobs(ctx, bare)
	g.Expect(capped).To(BeFalse(), "no defaults, no quota: no CronJob cap")
}
