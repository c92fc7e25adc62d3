package controller

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// RuntimePolicy is the platform's rules for session pods, set by whoever
// installs the operator (its flags; the chart's runtimePolicy values), not
// by Agent authors: an Agent outside them is not run, and says which rule it
// breaks. A nil limit is no limit.
type RuntimePolicy struct {
	// AllowedImages are the images an Agent's spec.runtime.image may name:
	// exact references, or prefixes ending in "*". The operator's runtime
	// image is always allowed.
	AllowedImages []string
	// AllowedRuntimeClasses an Agent may ask for; none when empty.
	AllowedRuntimeClasses []string
	// DefaultResources fill in what an Agent's resources leave out.
	DefaultResources corev1.ResourceRequirements
	// MaxResources caps every request and limit; a resource capped here and
	// given no limit gets the cap as its limit.
	MaxResources corev1.ResourceList
	// MaxWarmPodsPerAgent caps spec.runtime.warmPool.
	MaxWarmPodsPerAgent *int32
	// MaxSessionsPerAgent caps spec.runtime.maxSessions, and is the maximum
	// of Agents that set none.
	MaxSessionsPerAgent *int32
	// MaxWarmPodsPerNamespace caps the sum of the warm pools of a
	// namespace's Agents; the Agents (by name) past it are not run.
	MaxWarmPodsPerNamespace *int32
	// MaxSessionsPerNamespace caps the busy session pods of a namespace: no
	// pod is created for a wake beyond it.
	MaxSessionsPerNamespace *int32
}

// policyResult is what the policy makes of one Agent.
type policyResult struct {
	// violation names the broken rule ("" when none).
	violation string
	// resources are the session pods' resources after defaults and caps.
	resources corev1.ResourceRequirements
	// maxSessions is the Agent's cap after the policy's (nil: none).
	maxSessions *int32
}

// check applies the per-Agent rules to a, whose pods would run defaultImage
// unless it names one.
func (p *RuntimePolicy) check(a *picobotv1alpha1.Agent, defaultImage string) policyResult {
	var rt picobotv1alpha1.RuntimeSpec
	if a.Spec.Runtime != nil {
		rt = *a.Spec.Runtime
	}
	res := policyResult{maxSessions: minLimit(rt.MaxSessions, p.MaxSessionsPerAgent)}
	if rt.Image != "" && rt.Image != defaultImage && !imageAllowed(rt.Image, p.AllowedImages) {
		res.violation = fmt.Sprintf("image %q is not allowed (allowed: %s)", rt.Image, listOrNone(append([]string{defaultImage}, p.AllowedImages...)))
		return res
	}
	if rc := rt.RuntimeClassName; rc != nil && !slices.Contains(p.AllowedRuntimeClasses, *rc) {
		res.violation = fmt.Sprintf("runtimeClassName %q is not allowed (allowed: %s)", *rc, listOrNone(p.AllowedRuntimeClasses))
		return res
	}
	if rt.Resources != nil {
		res.resources = *rt.Resources.DeepCopy()
	}
	if res.violation = p.capResources(&res.resources); res.violation != "" {
		return res
	}
	if m := p.MaxWarmPodsPerAgent; m != nil && rt.WarmPool != nil && *rt.WarmPool > *m {
		res.violation = fmt.Sprintf("warmPool %d exceeds the maximum of %d per Agent", *rt.WarmPool, *m)
		return res
	}
	if m := p.MaxSessionsPerAgent; m != nil && rt.MaxSessions != nil && *rt.MaxSessions > *m {
		res.violation = fmt.Sprintf("maxSessions %d exceeds the maximum of %d per Agent", *rt.MaxSessions, *m)
	}
	return res
}

// capResources fills r from the defaults, checks it against the maxima and
// gives every capped resource a limit; it returns the first excess.
func (p *RuntimePolicy) capResources(r *corev1.ResourceRequirements) string {
	r.Requests = withDefaults(r.Requests, p.DefaultResources.Requests)
	r.Limits = withDefaults(r.Limits, p.DefaultResources.Limits)
	names := make([]string, 0, len(p.MaxResources))
	for name := range p.MaxResources {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		name, limit := corev1.ResourceName(n), p.MaxResources[corev1.ResourceName(n)]
		for _, kind := range []struct {
			what string
			list corev1.ResourceList
		}{{"requests", r.Requests}, {"limits", r.Limits}} {
			if q, ok := kind.list[name]; ok && q.Cmp(limit) > 0 {
				return fmt.Sprintf("resources.%s.%s %s exceeds the maximum %s", kind.what, name, q.String(), limit.String())
			}
		}
		if _, ok := r.Limits[name]; !ok {
			if r.Limits == nil {
				r.Limits = corev1.ResourceList{}
			}
			r.Limits[name] = limit.DeepCopy()
		}
	}
	return ""
}

// namespaceWarmViolation applies MaxWarmPodsPerNamespace to the Agent named
// self among the namespace's Agents: in name order, each Agent within the
// per-Agent rules whose warm pool still fits under the maximum is counted,
// and one whose pool does not fit breaks the rule (and is not counted).
func (p *RuntimePolicy) namespaceWarmViolation(agents []picobotv1alpha1.Agent, self, defaultImage string) string {
	m := p.MaxWarmPodsPerNamespace
	if m == nil {
		return ""
	}
	sort.Slice(agents, func(i, j int) bool { return agents[i].Name < agents[j].Name })
	var sum int32
	for _, a := range agents {
		rt := a.Spec.Runtime
		if rt == nil || rt.WarmPool == nil || *rt.WarmPool == 0 || (a.Name != self && p.check(&a, defaultImage).violation != "") {
			continue
		}
		fits := sum+*rt.WarmPool <= *m
		if a.Name == self {
			if fits {
				return ""
			}
			return fmt.Sprintf("the namespace's Agents up to this one (by name) ask for %d warm pods; the maximum is %d per namespace", sum+*rt.WarmPool, *m)
		}
		if fits {
			sum += *rt.WarmPool
		}
	}
	return ""
}

// imageAllowed reports whether image is one of allowed or starts with one
// ending in "*".
func imageAllowed(image string, allowed []string) bool {
	for _, a := range allowed {
		if p, ok := strings.CutSuffix(a, "*"); (ok && strings.HasPrefix(image, p)) || a == image {
			return true
		}
	}
	return false
}

// withDefaults returns have with the entries of defaults it lacks.
func withDefaults(have, defaults corev1.ResourceList) corev1.ResourceList {
	if len(defaults) == 0 {
		return have
	}
	out := have.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for k, v := range defaults {
		if _, ok := out[k]; !ok {
			out[k] = v.DeepCopy()
		}
	}
	return out
}

// minLimit is the smaller of two optional limits.
func minLimit(a, b *int32) *int32 {
	switch {
	case a == nil:
		return b
	case b == nil || *a <= *b:
		return a
	}
	return b
}

func listOrNone(l []string) string {
	l = slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == "" })
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
