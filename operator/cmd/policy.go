package main

import (
	"flag"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/picobot/picobot/operator/internal/controller"
)

// policyOptions are the flags of the platform's runtime policy (the chart's
// runtimePolicy values). A negative maximum is no maximum.
type policyOptions struct {
	allowedImages, allowedRuntimeClasses   string
	defaultRequests, defaultLimits, maxRes string
	maxWarmPerAgent, maxSessionsPerAgent   int
	maxWarmPerNamespace, maxSessionsPerNS  int
}

func (p *policyOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.allowedImages, "allowed-images", "", "Comma-separated images Agents may name in spec.runtime.image (a trailing * matches a prefix); the runtime image is always allowed.")
	fs.StringVar(&p.allowedRuntimeClasses, "allowed-runtime-classes", "", "Comma-separated RuntimeClasses Agents may name; none when empty.")
	fs.StringVar(&p.defaultRequests, "default-requests", "", "Resource requests of session pods whose Agent sets none, e.g. cpu=100m,memory=256Mi.")
	fs.StringVar(&p.defaultLimits, "default-limits", "", "Resource limits of session pods whose Agent sets none, e.g. memory=1Gi.")
	fs.StringVar(&p.maxRes, "max-resources", "", "Maximum of every request and limit of a session pod, e.g. cpu=2,memory=4Gi; also the limit of pods that set none.")
	fs.IntVar(&p.maxWarmPerAgent, "max-warm-pods-per-agent", 5, "Largest spec.runtime.warmPool an Agent may ask for (negative: no maximum).")
	fs.IntVar(&p.maxSessionsPerAgent, "max-sessions-per-agent", 100, "Largest spec.runtime.maxSessions, and the maximum of Agents that set none (negative: no maximum).")
	fs.IntVar(&p.maxWarmPerNamespace, "max-warm-pods-per-namespace", 20, "Largest sum of the warm pools of a namespace's Agents (negative: no maximum).")
	fs.IntVar(&p.maxSessionsPerNS, "max-sessions-per-namespace", 500, "Most busy session pods of a namespace (negative: no maximum).")
}

// policy parses the flags into the runtime policy.
func (p *policyOptions) policy() (controller.RuntimePolicy, error) {
	var pol controller.RuntimePolicy
	var err error
	pol.AllowedImages = splitList(p.allowedImages)
	pol.AllowedRuntimeClasses = splitList(p.allowedRuntimeClasses)
	if pol.DefaultResources.Requests, err = parseResources("--default-requests", p.defaultRequests); err != nil {
		return pol, err
	}
	if pol.DefaultResources.Limits, err = parseResources("--default-limits", p.defaultLimits); err != nil {
		return pol, err
	}
	if pol.MaxResources, err = parseResources("--max-resources", p.maxRes); err != nil {
		return pol, err
	}
	pol.MaxWarmPodsPerAgent = limit(p.maxWarmPerAgent)
	pol.MaxSessionsPerAgent = limit(p.maxSessionsPerAgent)
	pol.MaxWarmPodsPerNamespace = limit(p.maxWarmPerNamespace)
	pol.MaxSessionsPerNamespace = limit(p.maxSessionsPerNS)
	return pol, nil
}

// parseResources reads "cpu=100m,memory=256Mi".
func parseResources(flagName, s string) (corev1.ResourceList, error) {
	items := splitList(s)
	if len(items) == 0 {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for _, item := range items {
		name, value, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("failed to parse %s %q: %q is not name=quantity", flagName, s, item)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s %q: %s: %w", flagName, s, name, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

func limit(n int) *int32 {
	if n < 0 {
		return nil
	}
	v := int32(min(n, 1<<30))
	return &v
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
