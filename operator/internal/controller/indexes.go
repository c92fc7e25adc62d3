package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
)

// Field indexes let a change to a Secret, ConfigMap, BrowserProfile or Agent
// enqueue exactly the objects that reference it, instead of every object in the
// namespace.
const (
	indexAgentSecrets         = "picobot.spec.secretNames"
	indexAgentConfigMaps      = "picobot.spec.configMapNames"
	indexAgentBrowserProfiles = "picobot.spec.browserProfileNames"
	indexAgentDelegates       = "picobot.spec.delegateNames"
	indexCronJobAgent         = "picobot.spec.agentRef"
	// indexAgentRole holds "root" for the Agents that say spec.role: root,
	// so a change to any Agent re-checks exactly the namespace's roots.
	indexAgentRole = "picobot.spec.role"
)

// agentSecretNames lists every Secret an Agent reads. Agents without spec.model
// depend on the namespace default, whose Secret is only known from the
// ConfigMap: they are found through indexAgentConfigMaps instead.
func agentSecretNames(a *picobotv1alpha1.Agent) []string {
	var names []string
	if m := a.Spec.Model; m != nil {
		for _, r := range agentspec.ModelRefs(m) {
			if r.APIKeySecretRef != nil {
				names = append(names, r.APIKeySecretRef.Name)
			}
		}
	}
	return append(names, agentCredentialSecretNames(a)...)
}

// agentCredentialSecretNames lists the Secrets an Agent needs besides model API
// keys: channel credentials, MCP server headers, the web search key and the
// saved credentials bot_secret types (spec.tools.secrets).
func agentCredentialSecretNames(a *picobotv1alpha1.Agent) []string {
	var names []string
	for _, c := range a.Spec.Channels {
		if c.SecretRef != nil {
			names = append(names, c.SecretRef.Name)
		}
	}
	for _, s := range a.Spec.MCPServers {
		if s.HeadersSecretRef != nil {
			names = append(names, s.HeadersSecretRef.Name)
		}
	}
	if t := a.Spec.Tools; t != nil && t.WebSearch != nil && t.WebSearch.APIKeySecretRef != nil {
		names = append(names, t.WebSearch.APIKeySecretRef.Name)
	}
	if t := a.Spec.Tools; t != nil {
		for _, s := range t.Secrets {
			names = append(names, s.SecretKeyRef.Name)
		}
	}
	return names
}

func agentConfigMapNames(a *picobotv1alpha1.Agent) []string {
	var names []string
	if a.Spec.Model == nil {
		names = append(names, picobotv1alpha1.NamespaceDefaultsConfigMap)
	}
	for _, s := range a.Spec.Skills {
		if s.ConfigMapRef != nil {
			names = append(names, s.ConfigMapRef.Name)
		}
	}
	return names
}

func agentBrowserProfileNames(a *picobotv1alpha1.Agent) []string {
	if b := a.Spec.Browser; b != nil && b.ProfileRef != nil {
		return []string{b.ProfileRef.Name}
	}
	return nil
}

func agentDelegateNames(a *picobotv1alpha1.Agent) []string {
	names := make([]string, 0, len(a.Spec.Delegates))
	for _, d := range a.Spec.Delegates {
		names = append(names, d.AgentRef.Name)
	}
	return names
}

func agentRole(a *picobotv1alpha1.Agent) []string {
	if agentspec.IsRoot(a) {
		return []string{string(picobotv1alpha1.AgentRoleRoot)}
	}
	return nil
}

// rootAgentRequests enqueues the namespace's root Agents when any Agent
// changes: at most one may say spec.role: root.
func rootAgentRequests(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var l picobotv1alpha1.AgentList
		if err := c.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexAgentRole: string(picobotv1alpha1.AgentRoleRoot)}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Failed to list root agents", "namespace", o.GetNamespace())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(l.Items))
		for _, a := range l.Items {
			if a.Name != o.GetName() {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: a.Namespace, Name: a.Name}})
			}
		}
		return reqs
	}
}

// SetupIndexes registers the field indexes the reconcilers' watches use.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	fi := mgr.GetFieldIndexer()
	agentIndexes := map[string]func(*picobotv1alpha1.Agent) []string{
		indexAgentSecrets:         agentSecretNames,
		indexAgentConfigMaps:      agentConfigMapNames,
		indexAgentBrowserProfiles: agentBrowserProfileNames,
		indexAgentDelegates:       agentDelegateNames,
		indexAgentRole:            agentRole,
	}
	for field, fn := range agentIndexes {
		if err := fi.IndexField(ctx, &picobotv1alpha1.Agent{}, field, func(o client.Object) []string {
			return fn(o.(*picobotv1alpha1.Agent))
		}); err != nil {
			return fmt.Errorf("failed to index agents by %q: %w", field, err)
		}
	}
	if err := fi.IndexField(ctx, &picobotv1alpha1.CronJob{}, indexCronJobAgent, func(o client.Object) []string {
		if ref := o.(*picobotv1alpha1.CronJob).Spec.AgentRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("failed to index cronjobs by %q: %w", indexCronJobAgent, err)
	}
	return nil
}

// requestsByIndex returns a map function that enqueues the objects of list
// whose field index holds the changed object's name, in its namespace.
func requestsByIndex(c client.Reader, list client.ObjectList, field string, extra ...func(client.Object) []string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		keys := []string{o.GetName()}
		for _, fn := range extra {
			keys = append(keys, fn(o)...)
		}
		seen := map[types.NamespacedName]struct{}{}
		var reqs []reconcile.Request
		for _, key := range keys {
			l := list.DeepCopyObject().(client.ObjectList)
			if err := c.List(ctx, l, client.InNamespace(o.GetNamespace()), client.MatchingFields{field: key}); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Failed to list referencing objects", "field", field, "key", key)
				continue
			}
			for _, n := range namesOf(l) {
				nn := types.NamespacedName{Namespace: o.GetNamespace(), Name: n}
				if _, ok := seen[nn]; !ok {
					seen[nn] = struct{}{}
					reqs = append(reqs, reconcile.Request{NamespacedName: nn})
				}
			}
		}
		return reqs
	}
}

func namesOf(l client.ObjectList) []string {
	switch l := l.(type) {
	case *picobotv1alpha1.AgentList:
		out := make([]string, len(l.Items))
		for i := range l.Items {
			out[i] = l.Items[i].Name
		}
		return out
	case *picobotv1alpha1.CronJobList:
		out := make([]string, len(l.Items))
		for i := range l.Items {
			out[i] = l.Items[i].Name
		}
		return out
	}
	return nil
}

// secretKeyPresent reports whether the cached Secret has key. The cache holds
// Secrets with their values blanked (see StripSecretValues), so only key names
// are ever in the operator's memory.
func secretKeyPresent(s *corev1.Secret, key string) bool {
	_, ok := s.Data[key]
	return ok
}
