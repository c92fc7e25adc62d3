package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// ephemeralPrefix starts the names of ephemeral browsers (wire.DialogName);
// no profile's browser name does, so a Lease cannot pass itself off as a
// profile's.
const ephemeralPrefix = "browser-eph-"

// BrowserLeaseReconciler runs ephemeral browsers: a session asks for its
// dialog's browser with a Lease (wire.DialogName), gets a browser pod owned
// by that Lease for as long as it renews it, and the pod, its Secret and
// policy go with the Lease once the session deletes it or lets it idle out.
type BrowserLeaseReconciler struct {
	client.Client
	Clock                   clock.PassiveClock
	MaxConcurrentReconciles int

	keeper *browserKeeper
}

// isEphemeralLease selects the Leases of ephemeral browsers.
func isEphemeralLease(o client.Object) bool {
	return isBrowserLease(o) && strings.HasPrefix(o.GetName(), ephemeralPrefix) && o.GetAnnotations()[wire.AnnotationProfile] == ""
}

// Reconcile runs or removes the browser of one ephemeral Lease.
func (r *BrowserLeaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	lease := &coordinationv1.Lease{}
	if err := r.Get(ctx, req.NamespacedName, lease); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// The session is done with the browser: remove what is left.
		_, err := r.keeper.remove(ctx, req.Namespace, req.Name)
		return ctrl.Result{}, err
	}
	if !isEphemeralLease(lease) || lease.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	name := lease.Labels[picobotv1alpha1.LabelAgent]
	agent := &picobotv1alpha1.Agent{}
	err := r.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: name}, agent)
	if apierrors.IsNotFound(err) && name != "" {
		// The cache may not have an Agent created a moment before its
		// session asked for a browser: ending the Lease then would leave
		// the session waiting for a pod nobody creates. Ask the API server.
		err = r.keeper.cfg.APIReader.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: name}, agent)
	}
	if apierrors.IsNotFound(err) || name == "" {
		return ctrl.Result{}, r.end(ctx, lease, "its agent is gone")
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to read agent %s: %w", name, err)
	}
	idle := r.keeper.cfg.EphemeralIdle
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 && time.Duration(*d)*time.Second < idle {
		idle = time.Duration(*d) * time.Second
	}
	renewed := leaseRenewed(lease)
	if !r.Clock.Now().Before(renewed.Add(idle)) {
		return ctrl.Result{}, r.end(ctx, lease, "idle")
	}
	in := podspec.BrowserInput{Name: lease.Name, Namespace: lease.Namespace, Agents: []string{name},
		Owner: metav1.OwnerReference{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease", Name: lease.Name, UID: lease.UID,
			Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
	w := browserWant{in: in, wanted: true, renewed: renewed, until: renewed.Add(idle), notify: []string{name}, holder: leaseHolder(lease)}
	if b := agent.Spec.Browser; b != nil {
		in.Domains = b.AllowedDomains
		if b.Enabled != nil && !*b.Enabled {
			w.blocked = &browserProblem{picobotv1alpha1.ReasonInvalidReference, fmt.Sprintf("agent %s has its browser disabled (spec.browser.enabled: false)", name)}
		}
	}
	if rt := agent.Spec.Runtime; rt != nil {
		in.RuntimeClassName = rt.RuntimeClassName
	}
	w.in = in
	if r.keeper.cfg.Image == "" {
		w.blocked = &browserProblem{picobotv1alpha1.ReasonBrowserPodsDisabled, "this operator runs no browser pods: start it with --browser-image"}
	}
	st, err := r.keeper.sync(ctx, w)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: st.requeue}, nil
}

// end deletes an ephemeral browser and its Lease.
func (r *BrowserLeaseReconciler) end(ctx context.Context, lease *coordinationv1.Lease, why string) error {
	if _, err := r.keeper.remove(ctx, lease.Namespace, lease.Name); err != nil {
		return err
	}
	if err := r.Delete(ctx, lease, client.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion}); err != nil {
		if apierrors.IsConflict(err) {
			return nil // renewed meanwhile: the update brings us back
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete browser Lease %s: %w", lease.Name, err)
		}
	}
	log.FromContext(ctx).Info("Closed an ephemeral browser", "browser", lease.Name, "reason", why)
	return nil
}

// SetupWithManager watches ephemeral browser Leases, their pods, and the
// Agents whose browser settings they follow.
func (r *BrowserLeaseReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	c := mgr.GetClient()
	agentToLeases := func(ctx context.Context, o client.Object) []reconcile.Request {
		var list coordinationv1.LeaseList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{
			podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentBrowser, picobotv1alpha1.LabelAgent: podspec.LabelValue(o.GetName())}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Failed to list the agent's browser Leases", "agent", o.GetName())
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if isEphemeralLease(&list.Items[i]) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	}
	err := ctrl.NewControllerManagedBy(mgr).
		For(&coordinationv1.Lease{}, builder.WithPredicates(predicate.NewPredicateFuncs(isEphemeralLease))).
		Owns(&corev1.Pod{}).
		Watches(&picobotv1alpha1.Agent{}, handler.EnqueueRequestsFromMapFunc(agentToLeases), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("browserlease").
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up browserlease controller: %w", err)
	}
	return nil
}
