package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/published"
)

// GatewayPublishReconciler publishes what the gateway needs of each tenant
// namespace into the gateway's own namespace, so that the gateway reads no
// Secret outside it (package published has the format):
//
//   - an index ConfigMap of the tenant's API keys: the SHA-256 of each
//     labelled Secret's token and its rate-limit annotation; and
//   - a copy of every Secret an Agent's channel names (its credentials, which
//     the gateway uses to talk to the chat platform).
//
// It watches the sources and the published objects, so a rotated key or an
// edited or deleted copy is republished within seconds. Its requests name a
// tenant namespace (Name, no Namespace).
type GatewayPublishReconciler struct {
	client.Client
	// APIReader reads Secret values (the cache holds none, and only the hash
	// of API-key tokens) and the copies, which the cache of a namespaced
	// operator does not watch.
	APIReader client.Reader
	// Namespace is the gateway's, where everything is published.
	Namespace string
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
}

// Reconcile publishes the namespace's API-key index and channel credentials.
func (r *GatewayPublishReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.publishKeys(ctx, req.Name); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.publishChannels(ctx, req.Name)
}

// publishKeys writes the tenant's index ConfigMap, or deletes it when the
// tenant has no API key left.
func (r *GatewayPublishReconciler) publishKeys(ctx context.Context, tenant string) error {
	var secrets corev1.SecretList
	if err := r.List(ctx, &secrets, client.InNamespace(tenant), client.MatchingLabels{published.LabelAPIKey: "true"}); err != nil {
		return fmt.Errorf("failed to list the API-key Secrets of namespace %q: %w", tenant, err)
	}
	keys := map[string]published.Key{}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		hash := string(s.Data[published.HashDataKey])
		if hash == "" {
			log.FromContext(ctx).Info("API-key Secret has no token; ignoring it", "secret", client.ObjectKeyFromObject(s), "dataKey", published.TokenKey)
			continue
		}
		k := published.Key{SHA256: hash}
		if v, ok := s.Annotations[published.AnnotationRateLimit]; ok {
			k.RateLimit = &v
		}
		keys[s.Name] = k
	}
	want, err := published.KeyIndex(r.Namespace, tenant, keys)
	if err != nil {
		return err
	}
	cur := &corev1.ConfigMap{}
	err = r.Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err) && len(keys) == 0:
		return nil
	case apierrors.IsNotFound(err):
		return createOnce(ctx, r.Client, want)
	case err != nil:
		return fmt.Errorf("failed to get ConfigMap %q: %w", want.Name, err)
	case len(keys) == 0:
		if err := r.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete ConfigMap %q: %w", want.Name, err)
		}
		return nil
	}
	labels, relabel := withLabels(cur.Labels, want.Labels)
	if !relabel && maps.Equal(cur.Data, want.Data) && len(cur.BinaryData) == 0 {
		return nil
	}
	cur.Labels, cur.Data, cur.BinaryData = labels, want.Data, nil
	if err := r.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to update ConfigMap %q: %w", want.Name, err)
	}
	return nil
}

// publishChannels copies the Secrets the tenant's channels name and deletes
// copies no channel names any more (or whose Secret is gone).
func (r *GatewayPublishReconciler) publishChannels(ctx context.Context, tenant string) error {
	var agents picobotv1alpha1.AgentList
	if err := r.List(ctx, &agents, client.InNamespace(tenant)); err != nil {
		return fmt.Errorf("failed to list the Agents of namespace %q: %w", tenant, err)
	}
	var have corev1.SecretList
	if err := r.APIReader.List(ctx, &have, client.InNamespace(r.Namespace),
		client.MatchingLabels(published.ChannelCredentialsLabels(tenant))); err != nil {
		return fmt.Errorf("failed to list the channel credentials of namespace %q: %w", tenant, err)
	}
	copies := map[string]*corev1.Secret{}
	for i := range have.Items {
		copies[have.Items[i].Name] = &have.Items[i]
	}
	keep := map[string]bool{}
	for _, name := range channelSecretNames(agents.Items) {
		src := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, src)
		if apierrors.IsNotFound(err) {
			continue // the Agent reports the missing Secret; a stale copy goes below
		} else if err != nil {
			return fmt.Errorf("failed to get Secret %s/%s: %w", tenant, name, err)
		}
		want := published.ChannelCredentials(r.Namespace, tenant, src)
		keep[want.Name] = true
		if err := r.writeCopy(ctx, copies[want.Name], want); err != nil {
			return err
		}
	}
	for name, c := range copies {
		if keep[name] {
			continue
		}
		if err := r.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete Secret %q: %w", name, err)
		}
	}
	return nil
}

// writeCopy creates want, or sets cur (nil: none found by label) back to
// it. A copy whose labels someone took off is found by name.
func (r *GatewayPublishReconciler) writeCopy(ctx context.Context, cur, want *corev1.Secret) error {
	if cur == nil {
		err := r.Create(ctx, want.DeepCopy())
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("failed to create Secret %q: %w", want.Name, err)
			}
			return nil
		}
		cur = &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), cur); err != nil {
			return fmt.Errorf("failed to get Secret %q: %w", want.Name, err)
		}
	}
	if (cur.Immutable != nil && *cur.Immutable) || cur.Type != want.Type {
		if err := r.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to replace Secret %q: %w", want.Name, err)
		}
		return createOnce(ctx, r.Client, want)
	}
	labels, relabel := withLabels(cur.Labels, want.Labels)
	annotations, reannotate := withLabels(cur.Annotations, want.Annotations)
	same := maps.EqualFunc(cur.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) })
	if same && !relabel && !reannotate && len(cur.StringData) == 0 {
		return nil
	}
	cur.Labels, cur.Annotations, cur.Data, cur.StringData = labels, annotations, want.Data, nil
	if err := r.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to update Secret %q: %w", want.Name, err)
	}
	return nil
}

// channelSecretNames lists, once each, the Secrets the Agents' channels name.
func channelSecretNames(agents []picobotv1alpha1.Agent) []string {
	set := map[string]bool{}
	for i := range agents {
		for _, c := range agents[i].Spec.Channels {
			if c.SecretRef != nil {
				set[c.SecretRef.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// SetupWithManager watches API-key Secrets, Secrets some Agent's channel
// names, Agents (their channels), and the published objects.
func (r *GatewayPublishReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return tenantRequest(o.GetNamespace())
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("gateway-publish").
		Watches(&picobotv1alpha1.Agent{}, toNamespace, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretTenants)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.publishedTenant)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up gateway-publish controller: %w", err)
	}
	return nil
}

// secretTenants maps a Secret to the tenant whose published objects it
// changes: an API-key Secret's or a channel Secret's namespace, or the tenant
// a published copy belongs to. (For an update, the old object is mapped too,
// so a Secret that loses its label is seen.)
func (r *GatewayPublishReconciler) secretTenants(ctx context.Context, o client.Object) []reconcile.Request {
	if req := r.publishedTenant(ctx, o); req != nil {
		return req
	}
	if o.GetLabels()[published.LabelAPIKey] == "true" {
		return tenantRequest(o.GetNamespace())
	}
	var agents picobotv1alpha1.AgentList
	if err := r.List(ctx, &agents, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexAgentSecrets: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Failed to find the Agents naming a Secret", "secret", client.ObjectKeyFromObject(o))
		return nil
	}
	if slices.Contains(channelSecretNames(agents.Items), o.GetName()) {
		return tenantRequest(o.GetNamespace())
	}
	return nil
}

// publishedTenant maps an object published in the gateway's namespace to
// its tenant.
func (r *GatewayPublishReconciler) publishedTenant(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.Namespace {
		return nil
	}
	l := o.GetLabels()
	if l[published.LabelKeyIndex] != "true" && l[published.LabelChannelCredentials] != "true" {
		return nil
	}
	return tenantRequest(l[published.LabelTenant])
}

func tenantRequest(ns string) []reconcile.Request {
	if ns == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: ns}}}
}
