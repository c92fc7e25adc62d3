package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// agentScope carries one reconcile of an Agent through its phases.
type agentScope struct {
	agent    *picobotv1alpha1.Agent
	model    agentspec.ModelResolution
	tools    policy.Result
	toolsErr error
	missing  []string
	invalid  []string
	// defaults is the namespace's picobot-defaults ConfigMap, if any.
	defaults *corev1.ConfigMap
	// secretKeys are the keys session pods get in their environment.
	secretKeys []corev1.SecretKeySelector
	runtime    *runtimeResult
	// policy is what the runtime policy makes of the agent.
	policy policyResult
	// caps are the tenant's caps; quota is the WithinQuota condition (nil:
	// no cap on session pods applies).
	caps  tenantCaps
	quota *metav1.Condition
	// usage is the Agent's usage for status (nil: not read); usageRequeue
	// is when to read it again.
	usage        *picobotv1alpha1.UsageStatus
	usageRequeue time.Duration
}

// lookupSecrets reads Secrets of ns from the cache, remembering each answer for
// the rest of the reconcile. Only NotFound means "missing"; other errors abort
// the reconcile so it retries with backoff.
func (r *AgentReconciler) lookupSecrets(ctx context.Context, ns string, errp *error) agentspec.SecretLookup {
	seen := map[string]*corev1.Secret{}
	return func(name string) *corev1.Secret {
		if s, ok := seen[name]; ok {
			return s
		}
		s := &corev1.Secret{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
			if !apierrors.IsNotFound(err) && *errp == nil {
				*errp = fmt.Errorf("failed to get Secret %q: %w", name, err)
			}
			s = nil
		}
		seen[name] = s
		return s
	}
}

// resolveModelPhase chooses the effective model (spec, fallback, namespace default).
func (r *AgentReconciler) resolveModelPhase(ctx context.Context, s *agentScope) error {
	var readErr error
	var defaults *corev1.ConfigMap
	if s.agent.Spec.Model == nil {
		cm := &corev1.ConfigMap{}
		err := r.Get(ctx, types.NamespacedName{Namespace: s.agent.Namespace, Name: picobotv1alpha1.NamespaceDefaultsConfigMap}, cm)
		switch {
		case err == nil:
			defaults = cm
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("failed to get ConfigMap %q: %w", picobotv1alpha1.NamespaceDefaultsConfigMap, err)
		}
	}
	s.model = agentspec.ResolveModel(s.agent.Spec.Model, defaults, r.lookupSecrets(ctx, s.agent.Namespace, &readErr))
	s.defaults = defaults
	s.secretKeys = secretKeysOf(s.agent, defaults)
	return readErr
}

// resolveToolsPhase computes the effective tool set for the effective model.
func (r *AgentReconciler) resolveToolsPhase(_ context.Context, s *agentScope) error {
	var provider, model string
	if e := s.model.Effective; e != nil {
		provider, model = string(e.Provider), e.Model
	}
	s.tools, s.toolsErr = policy.Resolve(r.Catalog, agentspec.ToolPolicy(s.agent), provider, model)
	return nil
}

// resolveReferencesPhase checks that every object the spec names exists.
func (r *AgentReconciler) resolveReferencesPhase(ctx context.Context, s *agentScope) error {
	a := s.agent
	check := func(obj client.Object, kind, name string) error {
		err := r.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: name}, obj)
		switch {
		case apierrors.IsNotFound(err):
			s.missing = append(s.missing, fmt.Sprintf("%s %q", kind, name))
		case err != nil:
			return fmt.Errorf("failed to get %s %q: %w", kind, name, err)
		}
		return nil
	}
	for _, d := range a.Spec.Delegates {
		if d.AgentRef.Name == a.Name {
			s.invalid = append(s.invalid, fmt.Sprintf("delegate %q refers to the Agent itself", d.Name))
			continue
		}
		if err := check(&picobotv1alpha1.Agent{}, "Agent", d.AgentRef.Name); err != nil {
			return err
		}
	}
	if err := r.checkRoot(ctx, s); err != nil {
		return err
	}
	for _, name := range agentBrowserProfileNames(a) {
		if err := check(&picobotv1alpha1.BrowserProfile{}, "BrowserProfile", name); err != nil {
			return err
		}
	}
	for _, sk := range a.Spec.Skills {
		if sk.ConfigMapRef != nil {
			if err := check(&corev1.ConfigMap{}, "ConfigMap", sk.ConfigMapRef.Name); err != nil {
				return err
			}
		}
	}
	// Model API key Secrets are judged by ModelResolved (a missing primary key
	// with a usable fallback is not an error); the rest are plain references.
	for _, name := range sortedUnique(agentCredentialSecretNames(a)) {
		if err := check(&corev1.Secret{}, "Secret", name); err != nil {
			return err
		}
	}
	s.missing = sortedUnique(s.missing)
	s.invalid = sortedUnique(s.invalid)
	return nil
}

// checkRoot reports a root Agent that shares the role with others: the
// namespace's root agent (agentspec.RootAgent) is then undefined, which the
// API server cannot see from one object.
func (r *AgentReconciler) checkRoot(ctx context.Context, s *agentScope) error {
	a := s.agent
	if !agentspec.IsRoot(a) {
		return nil
	}
	var l picobotv1alpha1.AgentList
	if err := r.List(ctx, &l, client.InNamespace(a.Namespace), client.MatchingFields{indexAgentRole: string(picobotv1alpha1.AgentRoleRoot)}); err != nil {
		return fmt.Errorf("failed to list the root Agents of namespace %q: %w", a.Namespace, err)
	}
	var others []string
	for _, o := range l.Items {
		if o.Name != a.Name {
			others = append(others, o.Name)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		s.invalid = append(s.invalid, fmt.Sprintf("spec.role is root, but so is it on %s: a namespace has one root Agent", strings.Join(others, ", ")))
	}
	return nil
}

// applyAgentStatus writes the phases' results into the Agent's status and returns
// the conditions whose status or reason changed (for events).
func applyAgentStatus(s *agentScope) []metav1.Condition {
	a := s.agent
	conds := []metav1.Condition{
		modelCondition(s.model),
		toolsCondition(s.toolsErr, s.tools.Warnings, len(s.tools.Tools)),
		referencesCondition(s.missing, s.invalid),
	}
	if c, ok := specCondition(&a.Status.Conditions, a.InvalidFields()); ok {
		conds = append([]metav1.Condition{c}, conds...)
	}
	var progressing []metav1.Condition
	if s.runtime != nil {
		conds = append(conds, s.runtime.cond)
		a.Status.ActiveSessions = &s.runtime.active
		a.Status.WarmPods = &s.runtime.warm
		if p := s.runtime.progress; p != nil {
			progressing = append(progressing, *p)
		}
	}
	conds = withSummary(&a.Status.Conditions, conds, progressing...)
	// WithinQuota stays out of Ready: the Agent's running sessions go on
	// while a cap holds new pods back.
	quotaChanged := setQuotaCondition(&a.Status.Conditions, a.Generation, s.quota)
	if s.usage != nil {
		a.Status.Usage = s.usage
	}
	a.Status.ObservedGeneration = a.Generation
	a.Status.EffectiveModel = s.model.Effective
	// No session pods exist before the session-pod work; publish the known zero
	// so `kubectl get` shows it rather than a blank.
	if a.Status.ActiveSessions == nil {
		a.Status.ActiveSessions = new(int32)
	}
	if a.Status.WarmPods == nil {
		a.Status.WarmPods = new(int32)
	}
	if s.toolsErr == nil {
		a.Status.EffectiveTools = s.tools.Tools
	} else {
		a.Status.EffectiveTools = nil
	}
	return append(setConditions(&a.Status.Conditions, a.Generation, conds...), quotaChanged...)
}
