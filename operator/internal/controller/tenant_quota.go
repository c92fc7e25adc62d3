package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	rtscheduler "github.com/picobot/picobot/runtime/scheduler"
)

// QuotaDefaults are the caps of a tenant whose TenantQuota leaves them
// unset, or that has none: the operator's flags (the chart's
// quotaDefaults). A nil cap is no cap.
type QuotaDefaults struct {
	MaxSessionPods *int32
	MaxWarmPods    *int32
	MaxBrowserPods *int32
	MaxCronJobs    *int32
}

// tenantCaps are the caps the operator enforces for one tenant: its
// TenantQuota's, each unset one filled from the defaults.
type tenantCaps struct {
	sessionPods, warmPods, browserPods, cronJobs *int32
}

// pods reports whether a cap on session pods applies.
func (c tenantCaps) pods() bool { return c.sessionPods != nil || c.warmPods != nil }

// capsOf merges the tenant's TenantQuota (nil: none) over d.
func (d QuotaDefaults) capsOf(q *picobotv1alpha1.TenantQuota) tenantCaps {
	c := tenantCaps{sessionPods: d.MaxSessionPods, warmPods: d.MaxWarmPods, browserPods: d.MaxBrowserPods, cronJobs: d.MaxCronJobs}
	if q == nil {
		return c
	}
	s := q.Spec
	for _, f := range []struct {
		dst **int32
		v   *int32
	}{
		{&c.sessionPods, s.MaxSessionPods}, {&c.warmPods, s.MaxWarmPods}, {&c.browserPods, s.MaxBrowserPods}, {&c.cronJobs, s.MaxCronJobs},
	} {
		if f.v != nil {
			*f.dst = f.v
		}
	}
	return c
}

// tenantCapsOf reads the namespace's TenantQuota from r and merges it over d.
func tenantCapsOf(ctx context.Context, r client.Reader, d QuotaDefaults, ns string) (tenantCaps, error) {
	q := &picobotv1alpha1.TenantQuota{}
	err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName}, q)
	switch {
	case apierrors.IsNotFound(err):
		return d.capsOf(nil), nil
	case err != nil:
		return tenantCaps{}, fmt.Errorf("failed to get the TenantQuota of namespace %q: %w", ns, err)
	}
	return d.capsOf(q), nil
}

// sessionPodCount is what a namespace's session pods add up to: live
// (neither finished nor terminating) and, of those, warm (serving no chat:
// idle or starting, by the absence of podspec.LabelSession).
type sessionPodCount struct{ live, warm int32 }

// countSessionPods counts the live and warm session pods of ns through r
// (the cache, or the API server when exactness matters); agent, when not
// empty, leaves that Agent's pods out.
func countSessionPods(ctx context.Context, r client.Reader, ns, agent string) (sessionPodCount, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentSession}); err != nil {
		return sessionPodCount{}, fmt.Errorf("failed to list the session pods of namespace %q: %w", ns, err)
	}
	var n sessionPodCount
	for i := range pods.Items {
		p := &pods.Items[i]
		if (agent != "" && p.Labels[picobotv1alpha1.LabelAgent] == podspec.LabelValue(agent)) || !poolPodOf(p).live() {
			continue
		}
		n.live++
		if p.Labels[podspec.LabelSession] == "" {
			n.warm++
		}
	}
	return n, nil
}

// countBrowserPods counts the live browser pods of ns through r.
func countBrowserPods(ctx context.Context, r client.Reader, ns string) (int32, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentBrowser}); err != nil {
		return 0, fmt.Errorf("failed to list the browser pods of namespace %q: %w", ns, err)
	}
	var n int32
	for i := range pods.Items {
		if poolPodOf(&pods.Items[i]).live() {
			n++
		}
	}
	return n, nil
}

// countsTowardCronJobs reports whether a CronJob counts toward maxCronJobs:
// every one but the operator's own routine-maintenance job.
func countsTowardCronJobs(cj *picobotv1alpha1.CronJob) bool {
	return cj.Name != rtscheduler.MaintenanceJobName || cj.Labels[picobotv1alpha1.LabelAgentMade] != "true"
}

// cronJobsOverCap returns the names of the CronJobs of list past limit, in
// creation order (then name): the first limit ones that count are within
// the cap, the later ones are not scheduled. Deleting an earlier one lets
// the next one in.
func cronJobsOverCap(list []picobotv1alpha1.CronJob, limit int32) map[string]bool {
	counted := make([]*picobotv1alpha1.CronJob, 0, len(list))
	for i := range list {
		if countsTowardCronJobs(&list[i]) && list[i].DeletionTimestamp == nil {
			counted = append(counted, &list[i])
		}
	}
	sortByCreation(counted)
	over := map[string]bool{}
	for i, cj := range counted {
		if int32(i) >= limit {
			over[cj.Name] = true
		}
	}
	return over
}

// sortByCreation sorts objects oldest first, then by name.
func sortByCreation[T client.Object](objs []T) {
	less := func(a, b T) bool {
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		return a.GetName() < b.GetName()
	}
	for i := 1; i < len(objs); i++ {
		for j := i; j > 0 && less(objs[j], objs[j-1]); j-- {
			objs[j], objs[j-1] = objs[j-1], objs[j]
		}
	}
}

// withinQuota is the WithinQuota condition: True when reason is empty.
func withinQuota(reason, msg string) metav1.Condition {
	if reason == "" {
		return condition(picobotv1alpha1.ConditionWithinQuota, true, picobotv1alpha1.ReasonWithinQuota, "Within the tenant's quota")
	}
	return condition(picobotv1alpha1.ConditionWithinQuota, false, reason, msg)
}

// setQuotaCondition sets c in list (a nil c removes the condition: no cap
// applies) and returns it when it changed in a way worth an Event.
func setQuotaCondition(list *[]metav1.Condition, generation int64, c *metav1.Condition) []metav1.Condition {
	if c == nil {
		meta.RemoveStatusCondition(list, picobotv1alpha1.ConditionWithinQuota)
		return nil
	}
	return setConditions(list, generation, *c)
}

// namespaceLocks serialises, per namespace, the count-then-create of pods
// under a cap: two Agents (or browsers) of one tenant reconciled at once
// would otherwise both see the last free place.
type namespaceLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// lock locks ns and returns its unlock.
func (l *namespaceLocks) lock(ns string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[ns]
	if !ok {
		m = &sync.Mutex{}
		l.locks[ns] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}
