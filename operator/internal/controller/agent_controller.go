package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// AgentReconciler resolves an Agent's model, tool set and references and
// publishes them in status. It never changes spec.
type AgentReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
	// Catalog is the set of built-in tools the policy resolves over.
	Catalog policy.Catalog
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// Runtime, when set, makes the reconciler keep session pods.
	Runtime *RuntimeConfig
	// Quota are the default caps of tenants (TenantQuota fields unset).
	Quota QuotaDefaults
	// Usage, when set, is read for status.usage (at most once per
	// UsageRefresh per Agent).
	Usage *UsageReader
	// podLocks serialise the capped pod creations of a namespace.
	podLocks namespaceLocks
	// expected are session pods created and not yet in the cache.
	expected podExpectations
	// wakes enqueues agents whose wakes no pod has claimed (wakeNotices,
	// delegateTargets).
	wakes chan event.TypedGenericEvent[*picobotv1alpha1.Agent]
}

// The operator never patches an Agent: it holds patch on agents to grant it
// to root agents' session pods (podspec.Role, the gateway tool), since RBAC
// lets a Role grant only what its creator holds.
// +kubebuilder:rbac:groups=agents.picobot.io,resources=agents,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=agents.picobot.io,resources=agents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile computes the Agent's status from its spec and the objects it
// references, and writes it only when it changed.
func (r *AgentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	agent := &picobotv1alpha1.Agent{}
	if err := r.Get(ctx, req.NamespacedName, agent); err != nil {
		if apierrors.IsNotFound(err) && r.Runtime != nil {
			// Its pool's series go with it.
			r.Runtime.Metrics.PoolGone(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := agent.DeepCopy()
	s := &agentScope{agent: agent}
	for _, phase := range []func(context.Context, *agentScope) error{
		r.resolveModelPhase,
		r.resolveToolsPhase,
		r.resolveReferencesPhase,
		r.runtimePhase,
	} {
		if err := phase(ctx, s); err != nil {
			// A failed read says nothing about the Agent: keep the old status and
			// retry with backoff.
			return ctrl.Result{}, err
		}
	}
	if err := r.usagePhase(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	changed := applyAgentStatus(s)
	if err := patchStatusIfChanged(ctx, r.Client, agent, before, before.Status, agent.Status); err != nil {
		return ctrl.Result{}, err
	}
	recordTransitions(r.Recorder, agent, changed, picobotv1alpha1.ConditionReady, picobotv1alpha1.ConditionStalled, picobotv1alpha1.ConditionReconciling)
	var requeue time.Duration
	if s.runtime != nil && s.runtime.requeue > 0 {
		r.delegateTargets(ctx, agent)
		requeue = s.runtime.requeue
	}
	if s.usageRequeue > 0 && (requeue == 0 || s.usageRequeue < requeue) {
		requeue = s.usageRequeue
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// namespaceAgents maps an object to every Agent of its namespace.
func namespaceAgents(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		var list picobotv1alpha1.AgentList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Failed to list Agents", "namespace", o.GetNamespace())
			return nil
		}
		reqs := make([]ctrl.Request, 0, len(list.Items))
		for _, a := range list.Items {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
		}
		return reqs
	}
}

// SetupWithManager watches Agents and every kind of object an Agent references,
// mapping changes back through field indexes.
func (r *AgentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	c := mgr.GetClient()
	// A Secret can matter through the namespace default, which only the ConfigMap
	// names: then the agents without spec.model are enqueued too.
	secretMap := func(ctx context.Context, o client.Object) []ctrl.Request {
		reqs := requestsByIndex(c, &picobotv1alpha1.AgentList{}, indexAgentSecrets)(ctx, o)
		dflt := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: picobotv1alpha1.NamespaceDefaultsConfigMap}, dflt); err == nil && dflt.Data["apiKeySecret"] == o.GetName() {
			reqs = append(reqs, requestsByIndex(c, &picobotv1alpha1.AgentList{}, indexAgentConfigMaps)(ctx, dflt)...)
		}
		return reqs
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Runtime != nil {
		wakes := make(chan event.TypedGenericEvent[*picobotv1alpha1.Agent], 1024)
		r.wakes = wakes
		if err := mgr.Add(wakeNotices(r.Runtime.Bus, wakes)); err != nil {
			return err
		}
		// The agent's identity objects are set back when deleted or edited.
		b = b.Owns(&corev1.Pod{}).
			Owns(&corev1.ServiceAccount{}).
			Owns(&rbacv1.Role{}).
			Owns(&rbacv1.RoleBinding{}).
			WatchesRawSource(source.Channel(wakes, &handler.TypedEnqueueRequestForObject[*picobotv1alpha1.Agent]{})).
			// A changed TenantQuota resizes the pools of its tenant's Agents.
			Watches(&picobotv1alpha1.TenantQuota{}, handler.EnqueueRequestsFromMapFunc(namespaceAgents(c)))
	}
	if err := b.
		For(&picobotv1alpha1.Agent{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(secretMap), builder.WithPredicates(keysChanged{})).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(requestsByIndex(c, &picobotv1alpha1.AgentList{}, indexAgentConfigMaps)), builder.WithPredicates(keysChanged{})).
		Watches(&picobotv1alpha1.BrowserProfile{}, handler.EnqueueRequestsFromMapFunc(requestsByIndex(c, &picobotv1alpha1.AgentList{}, indexAgentBrowserProfiles)), builder.WithPredicates(createOrDelete{})).
		Watches(&picobotv1alpha1.Agent{}, handler.EnqueueRequestsFromMapFunc(requestsByIndex(c, &picobotv1alpha1.AgentList{}, indexAgentDelegates)), builder.WithPredicates(createOrDelete{})).
		Watches(&picobotv1alpha1.Agent{}, handler.EnqueueRequestsFromMapFunc(rootAgentRequests(c)), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("agent").
		Complete(r); err != nil {
		return fmt.Errorf("failed to set up agent controller: %w", err)
	}
	return nil
}
