package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete

// SandboxPairReconciler keeps the sandbox pod of every session pod whose
// tools run in one (sandbox placement "pod"): it creates the sandbox pod
// from the session pod, replaces it when it is gone or has ended, writes
// its address into the pair's ConfigMap for the runtime, hands the pair's
// Secret to the session pod, and removes the pair with the session pod.
// Everything of a pair is keyed by the session pod's name
// (podspec.PairName), so a warm pod claimed for a chat keeps its sandbox
// pod: a claim changes labels, not names.
type SandboxPairReconciler struct {
	client.Client
	MaxConcurrentReconciles int
	// SecretGrace is how long a pair's Secret waits for its session pod
	// (made just after it) before it counts as an orphan; a minute when
	// zero.
	SecretGrace time.Duration
}

// SetupWithManager watches session pods with sandbox pods, and the
// sandbox pods and address ConfigMaps they control.
func (r *SandboxPairReconciler) SetupWithManager(mgr ctrl.Manager) error {
	paired := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && podspec.HasSandboxPod(p)
	})
	ownerOf := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[podspec.LabelSessionPod]
		for _, ref := range o.GetOwnerReferences() {
			if ref.Kind == "Pod" && ref.Controller != nil && *ref.Controller {
				name = ref.Name
			}
		}
		if name == "" || o.GetLabels()[podspec.LabelComponent] != podspec.ComponentSandbox {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxpair").
		For(&corev1.Pod{}, builder.WithPredicates(paired)).
		Watches(&corev1.Pod{}, ownerOf).
		Watches(&corev1.ConfigMap{}, ownerOf).
		Watches(&corev1.Secret{}, ownerOf).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// Reconcile brings one session pod's pair to what it should be.
func (r *SandboxPairReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p corev1.Pod
	err := r.Get(ctx, req.NamespacedName, &p)
	if apierrors.IsNotFound(err) {
		// A pair's Secret is made just before its session pod, and owned
		// by the Agent until the pod takes it: one whose pod does not come
		// (the operator died in between) is deleted once it is older than
		// the grace, and not before (the pod may be on its way).
		if wait, err := r.orphanWait(ctx, req); err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
		// The owner references remove the pair too, where a garbage
		// collector runs; this does it at once, and where none runs.
		return ctrl.Result{}, r.removePair(ctx, req.Namespace, req.Name)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get session pod %q: %w", req.Name, err)
	}
	if !podspec.HasSandboxPod(&p) {
		return ctrl.Result{}, nil
	}
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return ctrl.Result{}, r.removePair(ctx, p.Namespace, p.Name)
	}
	if err := r.ownSecret(ctx, &p); err != nil {
		return ctrl.Result{}, err
	}
	sb, err := r.ensureSandboxPod(ctx, &p)
	if err != nil || sb == nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.publishAddress(ctx, &p, sb)
}

// orphanWait is how long the pair of a session pod not found should wait
// before it is removed: the rest of the grace of a Secret not yet handed
// to a pod, zero otherwise.
func (r *SandboxPairReconciler) orphanWait(ctx context.Context, req ctrl.Request) (time.Duration, error) {
	var sec corev1.Secret
	err := r.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: podspec.PairName(req.Name)}, &sec)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("failed to get the sandbox pair Secret of session pod %q: %w", req.Name, err)
	}
	for _, ref := range sec.OwnerReferences {
		if ref.Kind == "Pod" {
			return 0, nil // its pod was there and is gone
		}
	}
	grace := r.SecretGrace
	if grace <= 0 {
		grace = time.Minute
	}
	return time.Until(sec.CreationTimestamp.Add(grace)), nil
}

// ownSecret hands the pair's Secret (made with the pod, owned by the
// Agent) to the session pod. A patch, not an update: the cache holds no
// Secret values.
func (r *SandboxPairReconciler) ownSecret(ctx context.Context, p *corev1.Pod) error {
	var sec corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: podspec.PairName(p.Name)}, &sec); err != nil {
		return fmt.Errorf("failed to get the sandbox pair Secret of session pod %q: %w", p.Name, err)
	}
	refs := sec.OwnerReferences
	if len(refs) == 1 && refs[0].UID == p.UID {
		return nil
	}
	patch := client.MergeFrom(sec.DeepCopy())
	podspec.SetPairOwner(&sec, p)
	if err := r.Patch(ctx, &sec, patch); err != nil {
		return fmt.Errorf("failed to hand Secret %q to session pod %q: %w", sec.Name, p.Name, err)
	}
	return nil
}

// ensureSandboxPod creates the sandbox pod when it is missing and deletes
// one that ended (its replacement follows on its deletion's event). It
// returns the running one, or nil while there is none yet.
func (r *SandboxPairReconciler) ensureSandboxPod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	want := podspec.SandboxPod(p)
	var sb corev1.Pod
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &sb)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("failed to create sandbox pod %q: %w", want.Name, err)
		}
		log.FromContext(ctx).Info("Created a sandbox pod", "pod", want.Name, "sessionPod", p.Name)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get sandbox pod %q: %w", want.Name, err)
	case sb.DeletionTimestamp != nil:
		return nil, nil
	case !metaOwnedBy(&sb, p):
		// A sandbox pod of an earlier session pod of the same name.
		return nil, r.deletePod(ctx, &sb)
	case sb.Status.Phase == corev1.PodSucceeded || sb.Status.Phase == corev1.PodFailed:
		log.FromContext(ctx).Info("Replacing an ended sandbox pod", "pod", sb.Name, "phase", sb.Status.Phase)
		return nil, r.deletePod(ctx, &sb)
	case sb.Status.Phase != corev1.PodRunning || sb.Status.PodIP == "":
		return nil, nil
	}
	return &sb, nil
}

func metaOwnedBy(o client.Object, p *corev1.Pod) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == p.UID {
			return true
		}
	}
	return false
}

func (r *SandboxPairReconciler) deletePod(ctx context.Context, sb *corev1.Pod) error {
	err := r.Delete(ctx, sb, client.Preconditions{UID: &sb.UID}, client.GracePeriodSeconds(0))
	if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("failed to delete sandbox pod %q: %w", sb.Name, err)
	}
	return nil
}

// publishAddress writes the running sandbox pod's address into the pair's
// ConfigMap, where the runtime looks it up.
func (r *SandboxPairReconciler) publishAddress(ctx context.Context, p, sb *corev1.Pod) error {
	want := podspec.PairAddress(p, net.JoinHostPort(sb.Status.PodIP, strconv.Itoa(int(podspec.SandboxPort))))
	var cur corev1.ConfigMap
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, want); err != nil {
			return fmt.Errorf("failed to publish the address of sandbox pod %q: %w", sb.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("failed to get ConfigMap %q: %w", want.Name, err)
	case cur.Data[paircred.KeyAddress] == want.Data[paircred.KeyAddress] && metaOwnedBy(&cur, p):
		return nil
	}
	cur.Data, cur.OwnerReferences = want.Data, want.OwnerReferences
	if err := r.Update(ctx, &cur); err != nil {
		return fmt.Errorf("failed to publish the address of sandbox pod %q: %w", sb.Name, err)
	}
	return nil
}

// removePair deletes the sandbox pod, Secret and address ConfigMap of
// session pod name.
func (r *SandboxPairReconciler) removePair(ctx context.Context, ns, name string) error {
	key := client.ObjectKey{Namespace: ns, Name: podspec.PairName(name)}
	var errs []error
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Secret{}, &corev1.ConfigMap{}} {
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		opts := []client.DeleteOption{}
		if _, ok := obj.(*corev1.Pod); ok {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		if err := client.IgnoreNotFound(r.Delete(ctx, obj, opts...)); err != nil {
			errs = append(errs, fmt.Errorf("failed to delete %T %q: %w", obj, key.Name, err))
		}
	}
	return errors.Join(errs...)
}
