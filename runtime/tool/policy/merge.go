package policy

import (
	"maps"
	"slices"
	"strings"
)

// Merge layers an agent's own policy over the defaults (e.g. the namespace or
// global tools config), the way per-agent overrides work in OpenClaw:
//   - Profile: the agent's, when set; otherwise the defaults'.
//   - Allow: the agent's, when non-nil (an empty list clears an inherited
//     allowlist); otherwise the defaults'.
//   - Deny: the union of both (defaults first, case-insensitive duplicates
//     dropped), because a default deny is a guard an agent must not lift.
//   - ByProvider: merged by lower-cased key, an agent entry replacing the
//     default entry with the same key as a whole. If one side has keys that
//     differ only in case, the lexically greatest spelling wins.
//
// The result shares no slices or maps with its inputs, so callers may merge
// objects straight from an informer cache. Merge does not validate; Resolve does.
func Merge(defaults, agent Spec) Spec {
	out := Spec{
		Profile: defaults.Profile,
		Allow:   slices.Clone(defaults.Allow),
		Deny:    unionNames(defaults.Deny, agent.Deny),
	}
	if strings.TrimSpace(string(agent.Profile)) != "" {
		out.Profile = agent.Profile
	}
	if agent.Allow != nil {
		out.Allow = slices.Clone(agent.Allow)
	}
	if len(defaults.ByProvider)+len(agent.ByProvider) > 0 {
		out.ByProvider = make(map[string]ProviderSpec, len(defaults.ByProvider)+len(agent.ByProvider))
		for _, m := range []map[string]ProviderSpec{defaults.ByProvider, agent.ByProvider} {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				ps := m[k]
				out.ByProvider[strings.ToLower(k)] = ProviderSpec{
					Profile: ps.Profile,
					Allow:   slices.Clone(ps.Allow),
					Deny:    slices.Clone(ps.Deny),
				}
			}
		}
	}
	return out
}

// unionNames concatenates lists, dropping entries equal (after trimming,
// case-insensitively) to an earlier one. Lists are short, so a quadratic scan
// beats building a set.
func unionNames(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
	next:
		for _, e := range l {
			for _, o := range out {
				if strings.EqualFold(strings.TrimSpace(o), strings.TrimSpace(e)) {
					continue next
				}
			}
			out = append(out, e)
		}
	}
	return out
}
