package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

func cronJob(ns, name string, s picobotv1alpha1.Schedule) *picobotv1alpha1.CronJob {
	return &picobotv1alpha1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       picobotv1alpha1.CronJobSpec{Schedule: s, Prompt: "Check the disk usage of the build server and alert above 90%"},
	}
}

func waitCronJob(t *testing.T, ns, name string, check func(g Gomega, c *picobotv1alpha1.CronJob)) *picobotv1alpha1.CronJob {
	t.Helper()
	c := &picobotv1alpha1.CronJob{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
		check(g, c)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return c
}

func TestCronJobStatus(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t)
	inAnHour := time.Now().Add(time.Hour).Truncate(time.Second)

	cases := []struct {
		name     string
		schedule picobotv1alpha1.Schedule
		suspend  bool
		ready    metav1.ConditionStatus
		reason   string
		message  string                        // of ScheduleValid when there is no next run
		next     func(now time.Time) time.Time // nil: no next run
	}{
		{name: "cron-tz", schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", TZ: "Asia/Shanghai"},
			ready: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonScheduled,
			next: func(now time.Time) time.Time {
				// 09:00 in Shanghai (UTC+8, no DST) is 01:00 UTC.
				n := time.Date(now.Year(), now.Month(), now.Day(), 1, 0, 0, 0, time.UTC)
				if !n.After(now) {
					n = n.AddDate(0, 0, 1)
				}
				return n
			}},
		{name: "at-future", schedule: picobotv1alpha1.Schedule{At: ptr(inAnHour.UnixMilli())},
			ready: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonScheduled,
			next: func(time.Time) time.Time { return inAnHour }},
		{name: "at-past", schedule: picobotv1alpha1.Schedule{At: ptr(int64(1700000000000))},
			ready: metav1.ConditionFalse, reason: picobotv1alpha1.ReasonAtInPast,
			message: "at 2023-11-14T22:13:20Z is in the past; a one-shot schedule must lie in the future"},
		{name: "bad-tz", schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", TZ: "Mars/Olympus"},
			ready: metav1.ConditionFalse, reason: picobotv1alpha1.ReasonInvalidSchedule, message: `unknown time zone "Mars/Olympus"`},
		{name: "bad-hour", schedule: picobotv1alpha1.Schedule{Cron: "0 0 25 * * *"},
			ready: metav1.ConditionFalse, reason: picobotv1alpha1.ReasonInvalidSchedule, message: `invalid cron "0 0 25 * * *"`},
		{name: "never", schedule: picobotv1alpha1.Schedule{Cron: "0 0 0 31 2 *"},
			ready: metav1.ConditionFalse, reason: picobotv1alpha1.ReasonInvalidSchedule, message: `cron "0 0 0 31 2 *" never fires`},
		{name: "suspended", schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"}, suspend: true,
			ready: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonSuspended, message: "Suspended; no runs until spec.suspend is false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cj := cronJob(ns, tc.name, tc.schedule)
			if tc.suspend {
				cj.Spec.Suspend = ptr(true)
			}
			g.Expect(k8s.Create(ctx, cj)).To(Succeed())
			got := waitCronJob(t, ns, tc.name, func(g Gomega, c *picobotv1alpha1.CronJob) {
				sc := meta.FindStatusCondition(c.Status.Conditions, picobotv1alpha1.ConditionScheduleValid)
				g.Expect(sc).NotTo(BeNil())
				g.Expect(sc.Reason).To(Equal(tc.reason), sc.Message)
			})
			ready := meta.FindStatusCondition(got.Status.Conditions, picobotv1alpha1.ConditionReady)
			g.Expect(ready.Status).To(Equal(tc.ready))
			sc := meta.FindStatusCondition(got.Status.Conditions, picobotv1alpha1.ConditionScheduleValid)
			stalled := meta.FindStatusCondition(got.Status.Conditions, picobotv1alpha1.ConditionStalled)
			if tc.ready == metav1.ConditionTrue {
				g.Expect(stalled).To(BeNil())
			} else {
				// Only a spec change helps: Stalled, and a Warning event with
				// the reason, as Agents have.
				g.Expect(stalled).NotTo(BeNil())
				g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(stalled.Reason).To(Equal(tc.reason))
				g.Expect(stalled.Message).To(Equal("ScheduleValid: " + sc.Message))
				expectEvent(t, ns, "CronJob", tc.name, corev1.EventTypeWarning, tc.reason, "ScheduleValid: "+sc.Message)
			}
			if tc.next == nil {
				g.Expect(sc.Message).To(ContainSubstring(tc.message))
				g.Expect(got.Status.NextRunTime).To(BeNil())
				return
			}
			next := tc.next(time.Now().UTC()).UTC()
			g.Expect(sc.Message).To(Equal("Next run at " + next.Format(time.RFC3339)))
			g.Expect(got.Status.NextRunTime).NotTo(BeNil())
			g.Expect(got.Status.NextRunTime.Time.UTC()).To(Equal(next))
		})
	}
}

// TestCronJobEveryRollsForward drives the reconciler with an injected clock
// against the real API server: it requeues at the next tick, and past the tick
// publishes the following one.
func TestCronJobEveryRollsForward(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, cronJob(ns, "minutely", picobotv1alpha1.Schedule{Every: ptr(int64(60000))}))).To(Succeed())
	first := waitCronJob(t, ns, "minutely", func(g Gomega, c *picobotv1alpha1.CronJob) {
		g.Expect(c.Status.NextRunTime).NotTo(BeNil())
	})
	created := first.CreationTimestamp.Time
	next := first.Status.NextRunTime.Time
	g.Expect(next.Sub(created)%time.Minute).To(BeZero(), "on the grid anchored at creation")

	clk := clocktesting.NewFakePassiveClock(next.Add(-10 * time.Second))
	r := &CronJobReconciler{Client: k8s, Clock: clk}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(first)}
	res, err := r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(10 * time.Second))

	clk.SetTime(next.Add(time.Second))
	res, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(59 * time.Second))
	got := &picobotv1alpha1.CronJob{}
	g.Expect(k8s.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.NextRunTime.Time).To(Equal(next.Add(time.Minute)))
}

func TestCronJobAgentRef(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cj := cronJob(ns, "report", picobotv1alpha1.Schedule{Cron: "0 30 8 * * MON-FRI"})
	cj.Spec.AgentRef = &corev1.LocalObjectReference{Name: "reporter"}
	g.Expect(k8s.Create(ctx, cj)).To(Succeed())
	waitCronJob(t, ns, "report", func(g Gomega, c *picobotv1alpha1.CronJob) {
		r := meta.FindStatusCondition(c.Status.Conditions, picobotv1alpha1.ConditionReady)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Reason).To(Equal(picobotv1alpha1.ReasonReferenceNotFound))
		g.Expect(r.Message).To(ContainSubstring(`Agent "reporter"`))
	})
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "reporter", "k"))).To(Succeed())
	waitCronJob(t, ns, "report", func(g Gomega, c *picobotv1alpha1.CronJob) {
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())
	})
}

func TestBrowserProfileReady(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	bp := &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec: picobotv1alpha1.BrowserProfileSpec{Label: "Shopping", AllowedDomains: []string{"shop.example.com", "*.cdn.example.com"}}}
	g.Expect(k8s.Create(ctx, bp)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &picobotv1alpha1.BrowserProfile{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(bp), got)).To(Succeed())
		r := meta.FindStatusCondition(got.Status.Conditions, picobotv1alpha1.ConditionReady)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(r.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(r.Message).To(Equal("Profile stored in s3; no browser running; restricted to 2 domains"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}
