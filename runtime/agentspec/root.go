package agentspec

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// LegacyRootName is the name that made an Agent the root agent before
// spec.role: it still does when no Agent says role root and there are
// several.
const LegacyRootName = "root"

// ErrNoRootAgent is returned (wrapped) by RootAgent when the rule finds none.
var ErrNoRootAgent = errors.New("no root agent")

// IsRoot says whether an Agent declares itself its namespace's root agent.
func IsRoot(a *picobotv1alpha1.Agent) bool {
	return a.Spec.Role != nil && *a.Spec.Role == picobotv1alpha1.AgentRoleRoot
}

// RootAgent returns the name of the root agent among the Agents of one
// namespace (or manifests folder), by the documented rule: the Agent with
// spec.role root; else the only Agent; else the Agent named "root". Several
// Agents claiming root, or several Agents none of which is root, are errors
// saying how to fix them.
func RootAgent(agents []picobotv1alpha1.Agent) (string, error) {
	var roots, names []string
	for i := range agents {
		names = append(names, agents[i].Name)
		if IsRoot(&agents[i]) {
			roots = append(roots, agents[i].Name)
		}
	}
	slices.Sort(roots)
	slices.Sort(names)
	switch {
	case len(roots) == 1:
		return roots[0], nil
	case len(roots) > 1:
		return "", fmt.Errorf("%w: several Agents say spec.role: root (%s); keep it on one", ErrNoRootAgent, strings.Join(roots, ", "))
	case len(names) == 1:
		return names[0], nil
	case slices.Contains(names, LegacyRootName):
		return LegacyRootName, nil
	case len(names) == 0:
		return "", fmt.Errorf("%w: there is no Agent", ErrNoRootAgent)
	}
	return "", fmt.Errorf("%w among the Agents %s: set spec.role: root on the one that should run jobs naming no agent",
		ErrNoRootAgent, strings.Join(names, ", "))
}
