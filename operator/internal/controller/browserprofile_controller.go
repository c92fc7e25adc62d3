package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// browserProfileFinalizer holds a profile stored in S3 until its archive
// is deleted.
const browserProfileFinalizer = "agents.picobot.io/browser-profile-data"

// defaultIdleTimeout applies when a profile has no spec.idleTimeout (the
// API server defaults it to the same).
const defaultIdleTimeout = time.Hour

// BrowserProfileReconciler keeps BrowserProfiles. Its status says whether the
// profile can be opened, which browser pod serves it and when a session last
// used it. With browser pods configured it also runs the profile's pod while
// a session holds the profile's Lease (see package wire), deletes the pod
// after spec.idleTimeout without renewal (the pod saves the profile on its
// way out), and deletes the stored archive when the profile is deleted.
type BrowserProfileReconciler struct {
	client.Client
	// Recorder records condition transitions as events (nil: none).
	Recorder recorder.EventRecorder
	// Clock decides idleness; the real clock by default.
	Clock clock.PassiveClock
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// Pods, when set, runs browser pods; nil publishes status only.
	Pods *BrowserPods

	keeper *browserKeeper
}

// +kubebuilder:rbac:groups=agents.picobot.io,resources=browserprofiles,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=agents.picobot.io,resources=browserprofiles/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.picobot.io,resources=browserprofiles/finalizers,verbs=update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;update;delete

// profileScope is one reconcile of a profile.
type profileScope struct {
	bp  *picobotv1alpha1.BrowserProfile
	now time.Time
	// owners are the agents that may use the profile, by name.
	owners []*picobotv1alpha1.Agent
	// lease is the sessions' request for the profile's browser, if any.
	lease   *coordinationv1.Lease
	view    profileView
	requeue time.Duration
}

// Reconcile publishes the profile's status and, with browser pods, keeps
// its pod.
func (r *BrowserProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	bp := &picobotv1alpha1.BrowserProfile{}
	if err := r.Get(ctx, req.NamespacedName, bp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &profileScope{bp: bp, now: r.Clock.Now(), view: profileView{storage: profileStorage(bp), storageOK: true, domains: len(bp.Spec.AllowedDomains)}}
	if r.keeper != nil {
		if bp.DeletionTimestamp != nil {
			return ctrl.Result{}, r.finalize(ctx, bp)
		}
		if err := r.ensureFinalizer(ctx, bp); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := bp.DeepCopy()
	if r.keeper != nil {
		for _, phase := range []func(context.Context, *profileScope) error{r.observePhase, r.browserPhase} {
			if err := phase(ctx, s); err != nil {
				// A failed read or write says nothing about the profile: keep
				// the old status and retry with backoff.
				return ctrl.Result{}, err
			}
		}
	}
	changed := applyProfileStatus(s)
	if err := patchStatusIfChanged(ctx, r.Client, bp, before, before.Status, bp.Status); err != nil {
		return ctrl.Result{}, err
	}
	// Ready is a profile's only condition besides SpecValid and the kstatus
	// pair, which repeat its cause.
	skip := []string{picobotv1alpha1.ConditionStalled, picobotv1alpha1.ConditionReconciling}
	if meta.FindStatusCondition(bp.Status.Conditions, picobotv1alpha1.ConditionSpecValid) != nil {
		skip = append(skip, picobotv1alpha1.ConditionReady)
	}
	recordTransitions(r.Recorder, bp, changed, skip...)
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}

// applyProfileStatus writes what the reconcile observed into status and
// returns the conditions that changed.
func applyProfileStatus(s *profileScope) []metav1.Condition {
	st := &s.bp.Status
	st.ObservedGeneration = s.bp.Generation
	st.ActivePod = s.view.pod
	if s.lease != nil {
		if used := leaseRenewed(s.lease); st.LastUsed == nil || used.After(st.LastUsed.Time) {
			st.LastUsed = &metav1.Time{Time: used.Truncate(time.Second)}
		}
	}
	if c, ok := specCondition(&st.Conditions, s.bp.InvalidFields()); ok {
		return setConditions(&st.Conditions, s.bp.Generation, withSummary(&st.Conditions, []metav1.Condition{c})...)
	}
	ready := browserProfileCondition(s.view)
	return setConditions(&st.Conditions, s.bp.Generation, append([]metav1.Condition{ready}, progressConditions(&st.Conditions, []metav1.Condition{ready})...)...)
}

// ensureFinalizer holds an S3 profile until its archive is deleted.
func (r *BrowserProfileReconciler) ensureFinalizer(ctx context.Context, bp *picobotv1alpha1.BrowserProfile) error {
	if profileStorage(bp) != picobotv1alpha1.StorageS3 || r.keeper.cfg.Storage == nil || controllerutil.ContainsFinalizer(bp, browserProfileFinalizer) {
		return nil
	}
	patch := client.MergeFrom(bp.DeepCopy())
	controllerutil.AddFinalizer(bp, browserProfileFinalizer)
	if err := r.Patch(ctx, bp, patch); err != nil {
		return fmt.Errorf("failed to add the finalizer of BrowserProfile %s: %w", bp.Name, err)
	}
	return nil
}

// finalize ends the profile's browser (waiting for its pod to be gone, so
// it cannot save again), deletes the archive and lets the profile go. A
// pvc profile's claim is owned by the profile and goes with it.
func (r *BrowserProfileReconciler) finalize(ctx context.Context, bp *picobotv1alpha1.BrowserProfile) error {
	if !controllerutil.ContainsFinalizer(bp, browserProfileFinalizer) {
		return nil
	}
	gone, err := r.keeper.remove(ctx, bp.Namespace, wire.ProfileName(bp.Name))
	if err != nil || !gone {
		return err // the pod's deletion brings us back
	}
	if st := r.keeper.cfg.Storage; st != nil {
		key, err := profileArchiveKey(bp.Namespace, bp.Name)
		if err != nil {
			return err
		}
		if err := st.Delete(ctx, key); err != nil {
			return err
		}
	}
	patch := client.MergeFrom(bp.DeepCopy())
	controllerutil.RemoveFinalizer(bp, browserProfileFinalizer)
	if err := r.Patch(ctx, bp, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to remove the finalizer of BrowserProfile %s: %w", bp.Name, err)
	}
	return nil
}

// observePhase finds the agents that may use the profile and the sessions'
// Lease.
func (r *BrowserProfileReconciler) observePhase(ctx context.Context, s *profileScope) error {
	owners, err := r.profileOwners(ctx, s.bp)
	if err != nil {
		return err
	}
	s.owners = owners
	lease := &coordinationv1.Lease{}
	err = r.Get(ctx, client.ObjectKey{Namespace: s.bp.Namespace, Name: wire.ProfileName(s.bp.Name)}, lease)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("failed to read the browser Lease of BrowserProfile %s: %w", s.bp.Name, err)
	case lease.Annotations[wire.AnnotationProfile] == s.bp.Name && lease.DeletionTimestamp == nil:
		s.lease = lease
	}
	if s.view.storage == picobotv1alpha1.StorageS3 && r.keeper.cfg.Storage == nil {
		s.view.storageOK = false
	}
	return nil
}

// profileOwners are the agents that may use a profile: the agent that made
// it (label agents.picobot.io/agent) and those naming it in
// spec.browser.profileRef, unless their browser is disabled or restricted
// to allowedDomains (which rules out persistent identities).
func (r *BrowserProfileReconciler) profileOwners(ctx context.Context, bp *picobotv1alpha1.BrowserProfile) ([]*picobotv1alpha1.Agent, error) {
	var list picobotv1alpha1.AgentList
	if err := r.List(ctx, &list, client.InNamespace(bp.Namespace), client.MatchingFields{indexAgentBrowserProfiles: bp.Name}); err != nil {
		return nil, fmt.Errorf("failed to list the agents of BrowserProfile %s: %w", bp.Name, err)
	}
	var out []*picobotv1alpha1.Agent
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	if name := bp.Labels[picobotv1alpha1.LabelAgent]; name != "" && !slices.ContainsFunc(out, func(a *picobotv1alpha1.Agent) bool { return a.Name == name }) {
		a := &picobotv1alpha1.Agent{}
		switch err := r.Get(ctx, client.ObjectKey{Namespace: bp.Namespace, Name: name}, a); {
		case err == nil:
			out = append(out, a)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("failed to read agent %s: %w", name, err)
		}
	}
	out = slices.DeleteFunc(out, func(a *picobotv1alpha1.Agent) bool {
		b := a.Spec.Browser
		return b != nil && ((b.Enabled != nil && !*b.Enabled) || len(b.AllowedDomains) > 0)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// browserPhase runs or reaps the profile's browser pod.
func (r *BrowserProfileReconciler) browserPhase(ctx context.Context, s *profileScope) error {
	bp := s.bp
	persistence := bp.Spec.Persistence
	if persistence == nil {
		persistence = &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StorageS3}
	}
	names := make([]string, 0, len(s.owners))
	for _, a := range s.owners {
		names = append(names, a.Name)
	}
	in := podspec.BrowserInput{Name: wire.ProfileName(bp.Name), Namespace: bp.Namespace, Agents: names,
		Domains: bp.Spec.AllowedDomains, Persistence: persistence,
		Owner: metav1.OwnerReference{APIVersion: picobotv1alpha1.GroupVersion.String(), Kind: "BrowserProfile", Name: bp.Name, UID: bp.UID,
			Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
	if len(s.owners) > 0 && s.owners[0].Spec.Runtime != nil {
		in.RuntimeClassName = s.owners[0].Spec.Runtime.RuntimeClassName
	}
	w := browserWant{in: in, notify: names}
	var err error
	if w.archive, err = profileArchiveKey(bp.Namespace, bp.Name); err != nil {
		return err
	}
	if l := s.lease; l != nil {
		idle := defaultIdleTimeout
		if bp.Spec.IdleTimeout != nil && bp.Spec.IdleTimeout.Duration > 0 {
			idle = bp.Spec.IdleTimeout.Duration
		}
		w.renewed = leaseRenewed(l)
		w.holder = leaseHolder(l)
		w.until = w.renewed.Add(idle)
		w.wanted = s.now.Before(w.until)
		requester := l.Labels[picobotv1alpha1.LabelAgent]
		w.noStart = !slices.Contains(names, requester)
		if w.noStart && requester != "" {
			w.notify = append(slices.Clone(names), requester)
		}
		if w.wanted && w.noStart && len(names) > 0 {
			// Only the owners get the token; tell the one that asked why
			// not. It cannot start the browser, nor stop one an owner uses.
			// (A profile no agent may use says so below, to the requester
			// too: two messages would race for what the session reads.)
			msg := fmt.Sprintf("agent %s may not use browser profile %s: only the agent labelled on it (%s) and agents naming it in spec.browser.profileRef may, and not with spec.browser.allowedDomains",
				requester, bp.Name, picobotv1alpha1.LabelAgent)
			if err := r.keeper.publish(ctx, bp.Namespace, []string{requester}, map[string]string{wire.ErrorKey(in.Name): wire.FormatError(w.renewed, msg)}); err != nil {
				return err
			}
		}
		switch {
		case !w.wanted:
		case len(names) == 0:
			w.blocked = &browserProblem{picobotv1alpha1.ReasonInvalidReference, fmt.Sprintf("no agent may use browser profile %s: label it %s=<agent> or name it in an agent's spec.browser.profileRef", bp.Name, picobotv1alpha1.LabelAgent)}
		case r.keeper.cfg.Image == "":
			w.blocked = &browserProblem{picobotv1alpha1.ReasonBrowserPodsDisabled, "this operator runs no browser pods: start it with --browser-image"}
		case !s.view.storageOK:
			w.blocked = &browserProblem{picobotv1alpha1.ReasonStorageNotConfigured, fmt.Sprintf("browser profile %s is stored in s3, but the operator has no S3 bucket configured (PICOBOT_S3_BUCKET)", bp.Name)}
		}
	}
	st, err := r.keeper.sync(ctx, w)
	if err != nil {
		return err
	}
	s.view.ready, s.view.problem = st.ready, st.problem
	if st.pod != nil {
		s.view.pod = st.pod.Name
	}
	s.view.wanted = w.wanted && (!w.noStart || st.pod != nil || w.blocked != nil)
	if w.wanted {
		s.requeue = st.requeue
	}
	return nil
}

// profileChanged passes profile updates that matter: spec (generation),
// labels (the owning agent) and deletion.
type profileChanged struct{ predicate.Funcs }

func (profileChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
		(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
}

// isBrowserLease selects the Leases sessions ask for browsers with.
func isBrowserLease(o client.Object) bool {
	l := o.GetLabels()
	return l[podspec.LabelName] == "picobot" && l[podspec.LabelComponent] == podspec.ComponentBrowser
}

// SetupWithManager watches BrowserProfiles and, with browser pods, their
// Leases, pods and the Agents that may use them.
func (r *BrowserProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("browserprofile")
	if r.Pods == nil {
		b = b.For(&picobotv1alpha1.BrowserProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	} else {
		if r.keeper == nil {
			r.keeper = newBrowserKeeper(r.Client, *r.Pods, r.Clock)
		}
		c := mgr.GetClient()
		leaseToProfile := func(_ context.Context, o client.Object) []reconcile.Request {
			if p := o.GetAnnotations()[wire.AnnotationProfile]; p != "" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: p}}}
			}
			return nil
		}
		agentToProfiles := func(ctx context.Context, o client.Object) []reconcile.Request {
			var reqs []reconcile.Request
			if a, ok := o.(*picobotv1alpha1.Agent); ok {
				for _, n := range agentBrowserProfileNames(a) {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: a.Namespace, Name: n}})
				}
			}
			var list picobotv1alpha1.BrowserProfileList
			if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{picobotv1alpha1.LabelAgent: o.GetName()}); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Failed to list the agent's browser profiles", "agent", o.GetName())
			}
			for _, bp := range list.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&bp)})
			}
			return reqs
		}
		b = b.For(&picobotv1alpha1.BrowserProfile{}, builder.WithPredicates(profileChanged{})).
			Owns(&corev1.Pod{}).
			Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(leaseToProfile),
				builder.WithPredicates(predicate.NewPredicateFuncs(isBrowserLease))).
			Watches(&picobotv1alpha1.Agent{}, handler.EnqueueRequestsFromMapFunc(agentToProfiles),
				builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("failed to set up browserprofile controller: %w", err)
	}
	return nil
}

// setupBrowsers registers the BrowserProfile reconciler and, with browser
// pods configured, the reconciler of ephemeral browsers. Both share one
// keeper of browser pods.
func setupBrowsers(mgr ctrl.Manager, cfg Config, pods *BrowserPods) error {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	bpr := &BrowserProfileReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("picobot-operator"), Clock: cfg.Clock,
		MaxConcurrentReconciles: cfg.Concurrency, Pods: pods}
	if pods != nil {
		bpr.keeper = newBrowserKeeper(mgr.GetClient(), *pods, cfg.Clock)
	}
	if err := bpr.SetupWithManager(mgr); err != nil {
		return err
	}
	if pods == nil {
		return nil
	}
	return (&BrowserLeaseReconciler{Client: mgr.GetClient(), Clock: cfg.Clock, MaxConcurrentReconciles: cfg.Concurrency,
		keeper: bpr.keeper}).SetupWithManager(mgr)
}
