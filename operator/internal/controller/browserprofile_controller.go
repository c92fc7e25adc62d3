package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// BrowserProfileReconciler reports whether a BrowserProfile is usable. The API
// server's CEL rules already reject invalid specs; browser pods are added by the
// browser work.
type BrowserProfileReconciler struct {
	client.Client
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=agents.picobot.io,resources=browserprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.picobot.io,resources=browserprofiles/status,verbs=get;update;patch

// Reconcile publishes Ready for the profile's current generation.
func (r *BrowserProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bp := &picobotv1alpha1.BrowserProfile{}
	if err := r.Get(ctx, req.NamespacedName, bp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := bp.DeepCopy()
	bp.Status.ObservedGeneration = bp.Generation
	setConditions(&bp.Status.Conditions, bp.Generation, browserProfileReady(bp))
	if err := patchStatusIfChanged(ctx, r.Client, bp, before, before.Status, bp.Status); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// browserProfileReady is the Ready condition of a profile: storage is known and
// the profile can be opened.
func browserProfileReady(bp *picobotv1alpha1.BrowserProfile) metav1.Condition {
	storage := picobotv1alpha1.StorageS3
	if p := bp.Spec.Persistence; p != nil && p.Storage != "" {
		storage = p.Storage
	}
	msg := fmt.Sprintf("Profile stored in %s; no browser running", storage)
	if n := len(bp.Spec.AllowedDomains); n > 0 {
		msg += fmt.Sprintf("; restricted to %d domains", n)
	}
	return condition(picobotv1alpha1.ConditionReady, true, picobotv1alpha1.ReasonReady, msg)
}

// SetupWithManager watches BrowserProfiles.
func (r *BrowserProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	err := ctrl.NewControllerManagedBy(mgr).
		For(&picobotv1alpha1.BrowserProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("browserprofile").
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up browserprofile controller: %w", err)
	}
	return nil
}
