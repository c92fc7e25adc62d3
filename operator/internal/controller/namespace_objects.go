package controller

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
)

// TenantConnection gives the data of a tenant namespace's connection Secret
// (PICOBOT_POSTGRES_URL, PICOBOT_REDIS_URL, PICOBOT_S3_*...), which session
// pods read with envFrom. It is declared where the Secret is written so that
// what goes into it (credentials of the tenant's own, tenantcreds in
// production) is chosen in main.
type TenantConnection interface {
	// SecretData provisions what namespace's pods connect with and returns
	// the Secret's data; it is called on every reconcile.
	SecretData(ctx context.Context, namespace string) (map[string][]byte, error)
	// Drop revokes what SecretData provisioned: the namespace has no
	// Agents and no session pods left.
	Drop(ctx context.Context, namespace string) error
}

// SharedConnection gives every namespace the same connection settings: one
// tenant's pods can then reach every tenant's data. Only for development
// and tests that are not about tenancy (the operator's
// --shared-connection).
type SharedConnection map[string]string

// Drop implements TenantConnection: nothing is the namespace's own.
func (c SharedConnection) Drop(context.Context, string) error { return nil }

// SecretData implements TenantConnection.
func (c SharedConnection) SecretData(context.Context, string) (map[string][]byte, error) {
	d := make(map[string][]byte, len(c))
	for k, v := range c {
		d[k] = []byte(v)
	}
	return d, nil
}

// restartWatcher is a TenantConnection whose credentials can vanish under
// it: Redis keeps ACL users in memory, so a restarted server may have lost
// them (tenantcreds.Credentials).
type restartWatcher interface {
	WatchRedisRestarts(ctx context.Context, interval time.Duration, onRestart func())
}

// rotator is a TenantConnection that can move a namespace's credentials to
// new passwords (tenantcreds.Credentials); its SecretData then gives them.
type rotator interface {
	Rotate(ctx context.Context, namespace string) (map[string][]byte, error)
}

// restartCheck is how often the Redis server is checked for a restart: a
// tenant's pods cannot log in from the restart until their user is back.
const restartCheck = 2 * time.Second

// namespaceObjects writes the objects every namespace with Agents needs
// before its first session pod starts: the connection Secret and the session
// pods' NetworkPolicy.
type namespaceObjects struct {
	client client.Client
	// reader reads past the cache: the cache holds Secrets without values.
	reader client.Reader
	conn   TenantConnection
	// watcher, when set, says when conn's credentials may have been lost
	// (the TenantConnection before any wrapper, which would hide it).
	watcher restartWatcher
	// rotator, when set, moves a namespace to new passwords on request
	// (podspec.AnnotationRotateCredentials).
	rotator rotator
	network podspec.Network
	// api is where the API server answers, for the session pods' policy.
	api *apiServerAddrs
	// placement is where a namespace's session pods run their tools.
	placement func(ctx context.Context, ns string) podspec.SandboxPlacement
}

// present reports whether both objects are in the cache, so the Agent
// reconciler creates no pod before them (the namespace reconciler keeps
// their content).
func (n *namespaceObjects) present(ctx context.Context, ns string) (bool, error) {
	for _, obj := range []client.Object{&corev1.Secret{}, &networkingv1.NetworkPolicy{}} {
		name := podspec.ConnectionSecret
		if _, ok := obj.(*networkingv1.NetworkPolicy); ok {
			name = podspec.NetworkPolicyName
		}
		err := n.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("failed to get %T %q: %w", obj, name, err)
		}
	}
	return true, nil
}

// ensure creates the namespace's objects or brings them back to what they
// should be.
func (n *namespaceObjects) ensure(ctx context.Context, ns string) error {
	if err := n.ensureSecret(ctx, ns); err != nil {
		return err
	}
	network := n.network
	api, err := n.api.get(ctx, n.reader)
	if err != nil {
		return err
	}
	network.APIServer = api
	if n.placement != nil && n.placement(ctx, ns) == podspec.SandboxInPod {
		network.SandboxPort = podspec.SandboxPort
	}
	if err := n.ensureNetworkPolicy(ctx, podspec.NetworkPolicy(ns, network)); err != nil {
		return err
	}
	if network.SandboxPort > 0 {
		return n.ensureNetworkPolicy(ctx, podspec.SandboxNetworkPolicy(ns, network))
	}
	return nil
}

// ensureSecret compares the connection Secret read from the API server (the
// cache has no values) with what the TenantConnection gives, after a
// rotation when the Secret asks for one. A Secret whose type differs or
// that was made immutable cannot be updated: it is replaced.
func (n *namespaceObjects) ensureSecret(ctx context.Context, ns string) error {
	want := podspec.Connection(ns, nil)
	got := &corev1.Secret{}
	err := n.reader.Get(ctx, client.ObjectKeyFromObject(want), got)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get Secret %q: %w", want.Name, err)
	}
	found := err == nil
	request := rotationRequest(got)
	if found && request != "" && n.rotator != nil {
		if _, err := n.rotator.Rotate(ctx, ns); err != nil {
			return fmt.Errorf("failed to rotate the credentials of namespace %q: %w", ns, err)
		}
	}
	if want.Data, err = n.conn.SecretData(ctx, ns); err != nil {
		return fmt.Errorf("failed to get the connection settings of namespace %q: %w", ns, err)
	}
	switch {
	case !found:
		return createOnce(ctx, n.client, want)
	case (got.Type != "" && got.Type != corev1.SecretTypeOpaque) || (got.Immutable != nil && *got.Immutable):
		if err := n.client.Delete(ctx, got, client.Preconditions{UID: &got.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to replace Secret %q: %w", want.Name, err)
		}
		return createOnce(ctx, n.client, want)
	}
	labels, relabel := withLabels(got.Labels, want.Labels)
	same := maps.EqualFunc(got.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) }) && len(got.StringData) == 0
	if !relabel && same && request == "" {
		return n.replaceStalePods(ctx, got)
	}
	got.Labels, got.Data, got.StringData = labels, want.Data, nil
	if request != "" {
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations[podspec.AnnotationCredentialsRotated] = request
		got.Annotations[podspec.AnnotationCredentialsRotatedAt] = time.Now().UTC().Format(time.RFC3339)
	}
	if err := n.client.Update(ctx, got); err != nil {
		return fmt.Errorf("failed to update Secret %q: %w", want.Name, err)
	}
	return n.replaceStalePods(ctx, got)
}

// rotationRequest is the rotation s asks for and the operator has not
// acted on yet ("" when none).
func rotationRequest(s *corev1.Secret) string {
	req := s.Annotations[podspec.AnnotationRotateCredentials]
	if req == "" || req == s.Annotations[podspec.AnnotationCredentialsRotated] {
		return ""
	}
	return req
}

// rotatedAt is when the operator last rotated the credentials in s; false
// when it never did (or the annotation is not one it wrote).
func rotatedAt(s *corev1.Secret) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, s.Annotations[podspec.AnnotationCredentialsRotatedAt])
	return at, err == nil
}

// replaceStalePods deletes the session pods created before the last
// rotation the Secret records, at most once per second of it: they read
// the old passwords at their start and can open no new connection. Their
// chats move to pods started with the new Secret (a deleted pod drains).
// A pod created in the rotation's second may have either Secret, so it
// goes too; this runs on every reconcile, so an operator that died between
// the rotation and here still gets the pods replaced.
func (n *namespaceObjects) replaceStalePods(ctx context.Context, s *corev1.Secret) error {
	at, ok := rotatedAt(s)
	if !ok {
		return nil
	}
	var pods corev1.PodList
	err := n.client.List(ctx, &pods, client.InNamespace(s.Namespace),
		client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentSession})
	if err != nil {
		return fmt.Errorf("failed to list the session pods of namespace %q: %w", s.Namespace, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.CreationTimestamp.After(at) {
			continue
		}
		if err := n.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to replace session pod %q after a credential rotation: %w", p.Name, err)
		}
	}
	return nil
}

// ensureNetworkPolicy keeps a NetworkPolicy of the namespace's pods (the
// session pods', and the sandbox pods' with sandbox placement "pod"). The
// cache holds only policies labelled as the operator's: one whose label a
// tenant took off is read from the API server when creating it finds it
// there.
func (n *namespaceObjects) ensureNetworkPolicy(ctx context.Context, want *networkingv1.NetworkPolicy) error {
	cur := &networkingv1.NetworkPolicy{}
	err := n.client.Get(ctx, client.ObjectKeyFromObject(want), cur)
	if apierrors.IsNotFound(err) {
		if err = n.client.Create(ctx, want.DeepCopy()); err == nil {
			return nil
		} else if apierrors.IsAlreadyExists(err) {
			err = n.reader.Get(ctx, client.ObjectKeyFromObject(want), cur)
		}
	}
	if err != nil {
		return fmt.Errorf("failed to get NetworkPolicy %q: %w", want.Name, err)
	}
	labels, relabel := withLabels(cur.Labels, want.Labels)
	if !relabel && equality.Semantic.DeepEqual(cur.Spec, want.Spec) {
		return nil
	}
	cur.Labels, cur.Spec = labels, want.Spec
	if err := n.client.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to update NetworkPolicy %q: %w", want.Name, err)
	}
	return nil
}

// release revokes the credentials of a namespace without Agents once no
// session pod of it runs (the deletion of the last one brings the
// namespace back here): the connection Secret goes, then what the
// TenantConnection provisioned.
func (n *namespaceObjects) release(ctx context.Context, ns string) error {
	var pods corev1.PodList
	err := n.client.List(ctx, &pods, client.InNamespace(ns),
		client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentSession})
	if err != nil {
		return fmt.Errorf("failed to list the session pods of namespace %q: %w", ns, err)
	}
	for i := range pods.Items {
		if p := pods.Items[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			return nil
		}
	}
	secret := &corev1.Secret{}
	err = n.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.ConnectionSecret}, secret)
	switch {
	case err == nil:
		if err := n.client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete Secret %q of namespace %q: %w", podspec.ConnectionSecret, ns, err)
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("failed to get Secret %q of namespace %q: %w", podspec.ConnectionSecret, ns, err)
	}
	if err := n.conn.Drop(ctx, ns); err != nil {
		return fmt.Errorf("failed to revoke the credentials of namespace %q: %w", ns, err)
	}
	return nil
}

// createOnce creates obj; one that already exists is left for the event its
// creation sent, which brings the caller back.
func createOnce(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create %T %q: %w", obj, obj.GetName(), err)
	}
	return nil
}

// withLabels returns have with every label of want set, and whether any
// was missing or different.
func withLabels(have, want map[string]string) (map[string]string, bool) {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	changed := false
	for k, v := range want {
		if out[k] != v {
			out[k], changed = v, true
		}
	}
	return out, changed
}

// NamespaceObjectsReconciler keeps the connection Secret and the session
// pods' NetworkPolicy of every namespace with Agents: it watches them, so a
// deleted one is created again and an edited one is set back within seconds
// of the change. Its requests name a namespace (Name, no Namespace).
type NamespaceObjectsReconciler struct {
	client.Client
	objects *namespaceObjects
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
}

// NewNamespaceObjectsReconciler builds the reconciler of rc's namespace
// objects, writing through c (rc.APIReader reads Secret values uncached).
func NewNamespaceObjectsReconciler(c client.Client, rc *RuntimeConfig) *NamespaceObjectsReconciler {
	return &NamespaceObjectsReconciler{Client: c, objects: rc.namespaceObjects(c)}
}

// Reconcile writes the namespace's objects while it has Agents. Once it has
// none and its last session pod is gone (deleting the namespace gets there
// too), the namespace's credentials are revoked and its connection Secret
// deleted; the NetworkPolicy, which grants nothing, stays. A new Agent
// provisions them again.
func (r *NamespaceObjectsReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var agents picobotv1alpha1.AgentList
	if err := r.List(ctx, &agents, client.InNamespace(req.Name), client.Limit(1)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the Agents of namespace %q: %w", req.Name, err)
	}
	if len(agents.Items) == 0 {
		return ctrl.Result{}, r.objects.release(ctx, req.Name)
	}
	return ctrl.Result{}, r.objects.ensure(ctx, req.Name)
}

// reprovision enqueues every namespace with Agents when the Redis server
// restarted, so that its tenant user is created again.
func (r *NamespaceObjectsReconciler) reprovision(w restartWatcher, out chan<- event.GenericEvent) manager.RunnableFunc {
	return func(ctx context.Context) error {
		w.WatchRedisRestarts(ctx, restartCheck, func() {
			log.FromContext(ctx).Info("Redis restarted; provisioning the tenants' users again")
			r.enqueueAll(ctx, out, "after a Redis restart")
		})
		return nil
	}
}

// followAPIServer enqueues every namespace with Agents when the API server's
// addresses change, so their session pods' NetworkPolicy lets new pods
// reach it.
func (r *NamespaceObjectsReconciler) followAPIServer(out chan<- event.GenericEvent) manager.RunnableFunc {
	return func(ctx context.Context) error {
		first, err := r.objects.api.get(ctx, r.objects.reader)
		if err != nil {
			log.FromContext(ctx).Error(err, "Failed to read the API server's addresses; reading them again later")
		}
		watchAPIServer(ctx, r.objects.reader, first, func(now podspec.APIServer) {
			r.objects.api.set(now)
			log.FromContext(ctx).Info("The API server's addresses changed; updating the session pods' NetworkPolicies", "cidrs", now.CIDRs, "ports", now.Ports)
			r.enqueueAll(ctx, out, "after the API server's addresses changed")
		})
		return nil
	}
}

// enqueueAll sends every namespace with Agents to the reconciler once.
func (r *NamespaceObjectsReconciler) enqueueAll(ctx context.Context, out chan<- event.GenericEvent, why string) {
	var agents picobotv1alpha1.AgentList
	if err := r.List(ctx, &agents); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list Agents; their namespaces wait for their next event", "why", why)
		return
	}
	seen := map[string]bool{}
	for i := range agents.Items {
		ns := agents.Items[i].Namespace
		if seen[ns] {
			continue
		}
		seen[ns] = true
		select {
		case out <- event.GenericEvent{Object: &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns}}}:
		case <-ctx.Done():
			return
		}
	}
}

// SetupWithManager watches Agents (a namespace's first one brings its
// objects, its last one takes its credentials), the objects themselves, by
// name, and the deletion of session pods (the last one of a namespace
// without Agents lets its credentials go).
func (r *NamespaceObjectsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetNamespace()}}}
	})
	named := func(name string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if w := r.objects.watcher; w != nil {
		again := make(chan event.GenericEvent, 1024)
		if err := mgr.Add(r.reprovision(w, again)); err != nil {
			return fmt.Errorf("failed to watch for lost tenant credentials: %w", err)
		}
		b = b.WatchesRawSource(source.Channel(again, toNamespace))
	}
	moved := make(chan event.GenericEvent, 1024)
	if err := mgr.Add(r.followAPIServer(moved)); err != nil {
		return fmt.Errorf("failed to follow the API server's addresses: %w", err)
	}
	b = b.WatchesRawSource(source.Channel(moved, toNamespace))
	err := b.
		Named("namespace-objects").
		Watches(&picobotv1alpha1.Agent{}, toNamespace, builder.WithPredicates(createOrDelete{})).
		Watches(&corev1.Secret{}, toNamespace, builder.WithPredicates(named(podspec.ConnectionSecret))).
		Watches(&networkingv1.NetworkPolicy{}, toNamespace, builder.WithPredicates(named(podspec.NetworkPolicyName))).
		Watches(&corev1.Pod{}, toNamespace, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false }})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up namespace-objects controller: %w", err)
	}
	return nil
}
