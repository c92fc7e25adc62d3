package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
)

// TenantQuotaReconciler publishes in a TenantQuota's status what its tenant
// uses: session, warm and browser pods and CronJobs (from the cache), and,
// when the operator reads the store, its model usage today and this month.
type TenantQuotaReconciler struct {
	client.Client
	// Usage, when set, is read for status.usage.
	Usage                   *UsageReader
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=agents.picobot.io,resources=tenantquotas/status,verbs=get;update;patch

// Reconcile counts the tenant's pods and CronJobs and writes them, with its
// usage, into the quota's status when they changed.
func (r *TenantQuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	q := &picobotv1alpha1.TenantQuota{}
	if err := r.Get(ctx, req.NamespacedName, q); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := q.DeepCopy()
	ns := q.Namespace
	sessions, err := countSessionPods(ctx, r.Client, ns, "")
	if err != nil {
		return ctrl.Result{}, err
	}
	browsers, err := countBrowserPods(ctx, r.Client, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	var cronJobs picobotv1alpha1.CronJobList
	if err := r.List(ctx, &cronJobs, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the CronJobs of namespace %q: %w", ns, err)
	}
	var counted int32
	for i := range cronJobs.Items {
		if countsTowardCronJobs(&cronJobs.Items[i]) {
			counted++
		}
	}
	st := &q.Status
	st.ObservedGeneration = q.Generation
	st.SessionPods, st.WarmPods, st.BrowserPods, st.CronJobs = &sessions.live, &sessions.warm, &browsers, &counted
	var res ctrl.Result
	if r.Usage != nil {
		u, err := r.Usage.tenant(ctx, ns)
		if err != nil {
			return ctrl.Result{}, err
		}
		st.Usage, res.RequeueAfter = &u, r.Usage.next(u)
	}
	return res, patchStatusIfChanged(ctx, r.Client, q, before, before.Status, q.Status)
}

// SetupWithManager watches TenantQuotas and, mapped to their namespace's
// quota, PicoBot's pods and CronJobs.
func (r *TenantQuotaReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	toQuota := func(_ context.Context, o client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: picobotv1alpha1.TenantQuotaName}}}
	}
	picobotPod := predicate.NewPredicateFuncs(func(o client.Object) bool {
		c := o.GetLabels()[podspec.LabelComponent]
		return o.GetLabels()[podspec.LabelName] == "picobot" && (c == podspec.ComponentSession || c == podspec.ComponentBrowser)
	})
	err := ctrl.NewControllerManagedBy(mgr).
		For(&picobotv1alpha1.TenantQuota{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(toQuota), builder.WithPredicates(picobotPod)).
		Watches(&picobotv1alpha1.CronJob{}, handler.EnqueueRequestsFromMapFunc(toQuota), builder.WithPredicates(createOrDelete{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("tenantquota").
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up tenantquota controller: %w", err)
	}
	return nil
}
