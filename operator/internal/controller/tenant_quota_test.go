package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/cluster/wake"
	rtscheduler "github.com/picobot/picobot/runtime/scheduler"
)

// tenantQuota is a namespace's TenantQuota with the given caps.
func tenantQuota(ns string, spec picobotv1alpha1.TenantQuotaSpec) *picobotv1alpha1.TenantQuota {
	return &picobotv1alpha1.TenantQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName}, Spec: spec}
}

// namespacePods lists the live pods of a component (session, browser) in ns.
func namespacePods(g Gomega, ns, component string) []corev1.Pod {
	var l corev1.PodList
	g.Expect(k8s.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: component})).To(Succeed())
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// quotaCondition returns the object's WithinQuota condition (nil: none).
func quotaConditionOf(conds []metav1.Condition) *metav1.Condition {
	return meta.FindStatusCondition(conds, picobotv1alpha1.ConditionWithinQuota)
}

// expectEventReason waits for an event of the object with the type and
// reason, and returns its note.
func expectEventReason(t *testing.T, ns, kind, name, typ, reason string) string {
	t.Helper()
	var note string
	NewWithT(t).Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(k8s.List(context.Background(), evs, client.InNamespace(ns))).To(Succeed())
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name {
				if e.Type == typ && e.Reason == reason {
					note = e.Note
					return
				}
				seen = append(seen, e.Type+"/"+e.Reason)
			}
		}
		g.Expect(seen).To(ContainElement(typ + "/" + reason))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return note
}

// TestTenantPodCaps runs the operator with session pods over two tenants on
// a real API server: tenant A's TenantQuota caps its session pods at 3 and
// its warm pods at 2, tenant B has none. A's two Agents, asking for warm
// pools of 2 each, get 2 warm pods between them, and the one held back
// says so (WithinQuota False, WarmPodLimit, with an Event); four chats
// waking A's first Agent get one more pod (3 in all, never more) and the
// Agent reports SessionPodLimit (the condition the gateway reads to tell
// the waiting chat), while B's Agent gets its warm pool and a pod for each
// of its four chats. The quota's status counts the pods. Raising the caps
// creates the held pods and clears the condition, with a Normal Event.
func TestTenantPodCaps(t *testing.T) {
	a, b := newRuntimeNamespace(t), newRuntimeNamespace(t)
	rc := startRuntimeManagerWith(t, []string{a, b}, nil, QuotaDefaults{})
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, tenantQuota(a, picobotv1alpha1.TenantQuotaSpec{MaxSessionPods: ptr[int32](3), MaxWarmPods: ptr[int32](2)}))).To(Succeed())
	for _, ns := range []string{a, b} {
		g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	}
	a1 := runtimeAgent(a, "a1", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](2)})
	a2 := runtimeAgent(a, "a2", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](2)})
	b1 := runtimeAgent(b, "b1", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](2)})
	for _, ag := range []*picobotv1alpha1.Agent{a1, a2, b1} {
		g.Expect(k8s.Create(ctx, ag)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(namespacePods(g, a, podspec.ComponentSession)).To(HaveLen(2))
		g.Expect(namespacePods(g, b, podspec.ComponentSession)).To(HaveLen(2))
		held := 0
		for _, name := range []string{"a1", "a2"} {
			ag := &picobotv1alpha1.Agent{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: name}, ag)).To(Succeed())
			c := quotaConditionOf(ag.Status.Conditions)
			g.Expect(c).NotTo(BeNil())
			if c.Status == metav1.ConditionFalse {
				g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonWarmPodLimit))
				g.Expect(c.Message).To(ContainSubstring("by the tenant's maxWarmPods of 2"))
				held++
			}
			// The Agent's running sessions are not its quota's business.
			g.Expect(meta.IsStatusConditionTrue(ag.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())
		}
		g.Expect(held).To(BeNumerically(">=", 1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	bAgent := &picobotv1alpha1.Agent{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b1), bAgent)).To(Succeed())
	g.Expect(quotaConditionOf(bAgent.Status.Conditions)).To(BeNil(), "no cap applies to tenant B")

	for _, ag := range []*picobotv1alpha1.Agent{a1, b1} {
		for i := range 4 {
			g.Expect(wake.Publish(ctx, rc.Bus, wake.Wake{Tenant: ag.Namespace, Agent: ag.Name, Channel: "web", ChatKey: fmt.Sprintf("chat%d", i)})).To(Succeed())
		}
	}
	g.Eventually(func(g Gomega) {
		ag := &picobotv1alpha1.Agent{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(a1), ag)).To(Succeed())
		c := quotaConditionOf(ag.Status.Conditions)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonSessionPodLimit), c.Message)
		g.Expect(c.Message).To(ContainSubstring("the tenant's maxSessionPods is 3 and 3 run in the namespace"))
		g.Expect(namespacePods(g, a, podspec.ComponentSession)).To(HaveLen(3))
		// B: its pool's 2 warm pods claim 2 chats, 2 more pods for the
		// rest and 2 to refill the pool.
		g.Expect(namespacePods(g, b, podspec.ComponentSession)).To(HaveLen(6))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(namespacePods(g, a, podspec.ComponentSession)).To(HaveLen(3))
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	note := expectEventReason(t, a, "Agent", "a1", corev1.EventTypeWarning, picobotv1alpha1.ReasonSessionPodLimit)
	g.Expect(note).To(HavePrefix("WithinQuota: "))
	g.Eventually(func(g Gomega) {
		q := &picobotv1alpha1.TenantQuota{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: picobotv1alpha1.TenantQuotaName}, q)).To(Succeed())
		g.Expect(q.Status.SessionPods).To(HaveValue(BeEquivalentTo(3)))
		g.Expect(q.Status.WarmPods).To(HaveValue(BeEquivalentTo(3)), "no pod serves a chat yet (no kubelet): all count as warm")
		g.Expect(q.Status.BrowserPods).To(HaveValue(BeEquivalentTo(0)))
		g.Expect(q.Status.CronJobs).To(HaveValue(BeEquivalentTo(0)))
		g.Expect(q.Status.Usage).To(BeNil(), "this operator reads no store")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Room comes back: the held pods are created and the condition clears.
	g.Eventually(func() error {
		q := &picobotv1alpha1.TenantQuota{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: picobotv1alpha1.TenantQuotaName}, q); err != nil {
			return err
		}
		q.Spec.MaxSessionPods, q.Spec.MaxWarmPods = ptr[int32](20), ptr[int32](20)
		return k8s.Update(ctx, q)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		for _, name := range []string{"a1", "a2"} {
			ag := &picobotv1alpha1.Agent{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: name}, ag)).To(Succeed())
			c := quotaConditionOf(ag.Status.Conditions)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		}
		// a1: 2 warm + 4 chats; a2: 2 warm.
		g.Expect(namespacePods(g, a, podspec.ComponentSession)).To(HaveLen(8))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	expectEventReason(t, a, "Agent", "a1", corev1.EventTypeNormal, picobotv1alpha1.ReasonWithinQuota)
}

// TestDefaultPodCapsApplyWithoutTenantQuota: the operator's default caps
// (the chart's quotaDefaults) hold a tenant without a TenantQuota.
func TestDefaultPodCapsApplyWithoutTenantQuota(t *testing.T) {
	ns := newRuntimeNamespace(t)
	startRuntimeManagerWith(t, []string{ns}, nil, QuotaDefaults{MaxWarmPods: ptr[int32](1)})
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	ag := runtimeAgent(ns, "helper", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](3)})
	g.Expect(k8s.Create(ctx, ag)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &picobotv1alpha1.Agent{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ag), cur)).To(Succeed())
		c := quotaConditionOf(cur.Status.Conditions)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonWarmPodLimit))
		g.Expect(c.Message).To(Equal("Warm pool held 2 pod(s) below spec.runtime.warmPool by the tenant's maxWarmPods of 1"))
		g.Expect(namespacePods(g, ns, podspec.ComponentSession)).To(HaveLen(1))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(namespacePods(g, ns, podspec.ComponentSession)).To(HaveLen(1))
	}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// TestCronJobCap: with maxCronJobs 2, the third CronJob (in creation order)
// is not scheduled — WithinQuota False (CronJobLimit), Ready False, no next
// run, a Warning Event — while the operator's own routine-maintenance job
// does not count; deleting the first lets the third in. The quota's status
// counts the CronJobs.
func TestCronJobCap(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, tenantQuota(ns, picobotv1alpha1.TenantQuotaSpec{MaxCronJobs: ptr[int32](2)}))).To(Succeed())
	maintenance := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rtscheduler.MaintenanceJobName,
		Labels: map[string]string{picobotv1alpha1.LabelAgentMade: "true"}}, Spec: rtscheduler.MaintenanceSpec("")}
	g.Expect(k8s.Create(ctx, maintenance)).To(Succeed())
	every := int64(time.Hour / time.Millisecond)
	cron := func(name string) *picobotv1alpha1.CronJob {
		return &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Every: &every}, Prompt: "check"}}
	}
	for _, name := range []string{"c1", "c2", "c3"} {
		g.Expect(k8s.Create(ctx, cron(name))).To(Succeed())
	}
	get := func(g Gomega, name string) *picobotv1alpha1.CronJob {
		cj := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cj)).To(Succeed())
		return cj
	}
	g.Eventually(func(g Gomega) {
		for _, name := range []string{"c1", "c2"} {
			cj := get(g, name)
			g.Expect(quotaConditionOf(cj.Status.Conditions)).To(HaveField("Status", metav1.ConditionTrue))
			g.Expect(cj.Status.NextRunTime).NotTo(BeNil())
		}
		c3 := get(g, "c3")
		c := quotaConditionOf(c3.Status.Conditions)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonCronJobLimit))
		g.Expect(c.Message).To(HavePrefix("Not scheduled: the tenant's maxCronJobs is 2"))
		g.Expect(c3.Status.NextRunTime).To(BeNil())
		ready := meta.FindStatusCondition(c3.Status.Conditions, picobotv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(picobotv1alpha1.ReasonCronJobLimit))
		g.Expect(quotaConditionOf(get(g, rtscheduler.MaintenanceJobName).Status.Conditions)).To(BeNil(), "the maintenance job does not count")
		q := &picobotv1alpha1.TenantQuota{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName}, q)).To(Succeed())
		g.Expect(q.Status.CronJobs).To(HaveValue(BeEquivalentTo(3)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	expectEventReason(t, ns, "CronJob", "c3", corev1.EventTypeWarning, picobotv1alpha1.ReasonCronJobLimit)

	g.Expect(k8s.Delete(ctx, cron("c1"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		c3 := get(g, "c3")
		g.Expect(quotaConditionOf(c3.Status.Conditions)).To(HaveField("Status", metav1.ConditionTrue))
		g.Expect(c3.Status.NextRunTime).NotTo(BeNil())
		g.Expect(meta.IsStatusConditionTrue(c3.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())
		q := &picobotv1alpha1.TenantQuota{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName}, q)).To(Succeed())
		g.Expect(q.Status.CronJobs).To(HaveValue(BeEquivalentTo(2)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	expectEventReason(t, ns, "CronJob", "c3", corev1.EventTypeNormal, picobotv1alpha1.ReasonWithinQuota)
}
