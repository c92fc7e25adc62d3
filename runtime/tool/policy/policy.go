// Package policy resolves an agent's tool policy (OpenClaw's tools.profile,
// tools.allow, tools.deny and tools.byProvider) into the effective tool set.
//
// It is shared by the operator, which reports an Agent's effective tools in its
// status, and by the runtime, which filters the tools offered to the LLM, so
// both always agree. Resolution order:
//
//  1. base: the profile's allowlist (unset or "full" = every known tool);
//     a non-empty allow list restricts an unrestricted base to its entries,
//     or is added to a restricting profile's set;
//  2. byProvider: the single entry keyed "provider/model" (preferred) or
//     "provider" narrows the base by its profile, its allow list and its deny
//     list; it can never add tools;
//  3. deny: everything matched by the deny list is removed; deny always wins.
//
// Names and keys are case-insensitive, "*" is a wildcard anywhere in a name and
// "group:<name>" expands to a group of built-in tools. Results are sorted so a
// status computed from them does not flap.
package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// ErrInvalidPolicy is wrapped by every error Resolve returns, so callers can
// tell a broken policy (ReasonInvalidToolPolicy) from other failures with
// errors.Is.
var ErrInvalidPolicy = errors.New("invalid tool policy")

// Spec is a tool policy as written by users (an Agent's spec.tools or the
// namespace defaults).
type Spec struct {
	// Profile is the base allowlist (case-insensitive); empty means
	// unrestricted, like ProfileFull.
	Profile Profile
	// Allow selects tools. nil means "not set" (and lets Merge inherit the
	// defaults); an empty non-nil list means "no allowlist".
	Allow []string
	// Deny removes tools after everything else; it always wins.
	Deny []string
	// ByProvider narrows the policy for one provider ("openai") or one model
	// ("openai/gpt-5.2"); keys are case-insensitive.
	ByProvider map[string]ProviderSpec
}

// ProviderSpec is a byProvider entry. It can only narrow the base policy,
// because a model-specific override must never grant tools the agent's main
// policy does not.
type ProviderSpec struct {
	// Profile, if set and not full, intersects the base with its allowlist.
	Profile Profile
	// Allow, if it names any known tool, intersects the base with its entries.
	Allow []string
	// Deny removes tools.
	Deny []string
}

// Result is the outcome of Resolve.
type Result struct {
	// Tools are the effective tool names, lower-case and sorted.
	Tools []string
	// Warnings explain entries that were ignored or had no effect, in a
	// deterministic order; they do not make the policy invalid.
	Warnings []string
	// ProviderKey is the (lower-cased) byProvider key that applied, "" if none.
	ProviderKey string
}

// Resolve computes the effective tools of policy s for the given provider and
// model (model is the bare model id, e.g. "gpt-5.2"; pass "" for either to skip
// the matching byProvider keys). The whole spec is validated, including
// byProvider entries that do not apply, so a typo surfaces whatever model is in
// use. Resolve is safe for concurrent use and, for catalogs of up to 256 tools
// and a spec without warnings, allocates only the returned Tools slice.
func Resolve(c Catalog, s Spec, provider, model string) (Result, error) {
	d := c.data()
	if err := d.validate(s); err != nil {
		return Result{}, err
	}

	// cur is the set being resolved, tmp holds one compiled list at a time.
	// For usual catalog sizes both live in a stack buffer.
	var buf [8]uint64
	w := d.words
	var cur, tmp bitset
	if 2*w <= len(buf) {
		cur, tmp = buf[:w:w], buf[w:2*w:2*w]
	} else {
		big := make(bitset, 2*w)
		cur, tmp = big[:w:w], big[w:]
	}

	var r Result

	// 1. Base: profile, then allow.
	prof, _ := profileID(s.Profile)
	allowOK := d.compileAllow(tmp, s.Allow, "", &r.Warnings)
	switch {
	case prof != profileNone:
		copy(cur, d.profiles[prof])
		if allowOK {
			cur.or(tmp)
		}
	case allowOK:
		copy(cur, tmp)
	default:
		copy(cur, d.all)
	}

	// 2. byProvider: narrow only.
	if key, ps, ok := findProvider(s.ByProvider, provider, model); ok {
		r.ProviderKey = strings.ToLower(key)
		if p, _ := profileID(ps.Profile); p != profileNone {
			cur.and(d.profiles[p])
		}
		if d.compileAllow(tmp, ps.Allow, r.ProviderKey, &r.Warnings) {
			cur.and(tmp)
		}
		d.compileDeny(tmp, ps.Deny, r.ProviderKey, &r.Warnings)
		cur.andNot(tmp)
	}

	// 3. Deny wins over everything.
	d.compileDeny(tmp, s.Deny, "", &r.Warnings)
	cur.andNot(tmp)

	r.Tools = d.names(cur)
	return r, nil
}

// Allowed reports whether tool (case-insensitive) is in the resolved set; the
// runtime uses it to filter tool calls against the same result it advertised.
func Allowed(r Result, tool string) bool {
	_, found := slices.BinarySearch(r.Tools, strings.ToLower(strings.TrimSpace(tool)))
	return found
}

// compileAllow fills dst with the tools matched by an allow list and reports
// whether the list is effective. A list that matches no known tool or group is
// ignored (with a warning) so a typo cannot strip an agent of its core tools.
// providerKey is the applied byProvider key ("" for the top-level list).
func (d *catalogData) compileAllow(dst bitset, list []string, providerKey string, warnings *[]string) bool {
	clear(dst)
	if len(list) == 0 {
		return false
	}
	matched, unknown := d.compile(dst, list)
	switch {
	case !matched:
		*warnings = append(*warnings, fmt.Sprintf("%sallow list names only unknown tools %q; ignored so core tools stay available", warnPrefix(providerKey), d.unknown(list)))
	case unknown > 0:
		*warnings = append(*warnings, fmt.Sprintf("%sallow list names unknown tools %q; those entries are ignored", warnPrefix(providerKey), d.unknown(list)))
	}
	return matched
}

// compileDeny fills dst with the tools matched by a deny list; unknown entries
// are harmless but reported, since they usually are typos that deny nothing.
func (d *catalogData) compileDeny(dst bitset, list []string, providerKey string, warnings *[]string) {
	clear(dst)
	if _, unknown := d.compile(dst, list); unknown > 0 {
		*warnings = append(*warnings, fmt.Sprintf("%sdeny list names unknown tools %q; those entries have no effect", warnPrefix(providerKey), d.unknown(list)))
	}
}

// warnPrefix scopes a warning to a byProvider entry; it is only built when a
// warning is due, keeping the common path allocation-free.
func warnPrefix(providerKey string) string {
	if providerKey == "" {
		return ""
	}
	return fmt.Sprintf("byProvider[%q] ", providerKey)
}

// compile ORs into dst every tool matched by the (validated) list and reports
// whether any entry matched and how many entries matched nothing.
func (d *catalogData) compile(dst bitset, list []string) (matched bool, unknown int) {
	for _, e := range list {
		if d.match(dst, e) {
			matched = true
		} else {
			unknown++
		}
	}
	return matched, unknown
}

// match ORs into dst the tools matched by one validated entry and reports
// whether it matched any.
func (d *catalogData) match(dst bitset, entry string) bool {
	e := strings.TrimSpace(entry)
	if isGroup(e) {
		g, _ := d.group(e)
		dst.or(g)
		return g.count() > 0
	}
	e = strings.ToLower(e) // allocates only for upper-case input
	if _, ok := d.index[e]; !ok {
		e = tool.Canonical(e) // an alias (OpenClaw's names, mcp__server__tool)
	}
	star := strings.IndexByte(e, '*')
	switch {
	case e == "*":
		dst.or(d.all)
		return len(d.tools) > 0
	case star < 0:
		i, ok := d.index[e]
		if ok {
			dst.set(i)
		}
		return ok
	}
	// Only tools starting with the literal before the first star can match;
	// tools are sorted, so they form one run found by binary search.
	prefix, tail := e[:star], e[star+1:]
	hit := false
	for i, _ := slices.BinarySearch(d.tools, prefix); i < len(d.tools) && strings.HasPrefix(d.tools[i], prefix); i++ {
		if globTail(tail, d.tools[i][star:]) {
			dst.set(i)
			hit = true
		}
	}
	return hit
}

// unknown lists, sorted and de-duplicated, the normalised entries of list that
// match nothing. It only runs when a warning is due.
func (d *catalogData) unknown(list []string) []string {
	scratch := d.newSet()
	var out []string
	for _, e := range list {
		if !d.match(scratch, e) {
			out = append(out, strings.ToLower(strings.TrimSpace(e)))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// isGroup reports whether an entry is a group reference, in any case.
func isGroup(e string) bool {
	return len(e) >= len(groupPrefix) && strings.EqualFold(e[:len(groupPrefix)], groupPrefix)
}

// globMatch reports whether name matches pattern, where '*' matches any run of
// bytes and every other byte matches itself. path.Match is deliberately not
// used: it gives '?', '[' and '\' special meaning (and errors on some of
// them), while tool policies only know '*' and tool names may contain any
// byte. The literal before the first star is matched as a prefix, the one after
// the last star as a suffix and the ones in between leftmost-first, which is
// correct for '*'-only patterns, linear and allocation-free.
func globMatch(pattern, name string) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == name
	}
	return strings.HasPrefix(name, pattern[:star]) && globTail(pattern[star+1:], name[star:])
}

// globTail matches what follows the first star of a pattern against the rest
// of a name: the literal after the last star as a suffix, the literals between
// stars leftmost-first.
func globTail(pattern, name string) bool {
	last := strings.LastIndexByte(pattern, '*')
	suffix := pattern[last+1:]
	if !strings.HasSuffix(name, suffix) {
		return false
	}
	name = name[:len(name)-len(suffix)]

	for mid := pattern[:max(last, 0)]; mid != ""; {
		seg := mid
		if i := strings.IndexByte(mid, '*'); i >= 0 {
			seg, mid = mid[:i], mid[i+1:]
		} else {
			mid = ""
		}
		if seg == "" {
			continue
		}
		i := strings.Index(name, seg)
		if i < 0 {
			return false
		}
		name = name[i+len(seg):]
	}
	return true
}

// findProvider picks the byProvider entry for provider/model: a
// "provider/model" key wins over a "provider" key. Keys are unique
// case-insensitively (validate ensures it), so the result does not depend on
// map iteration order.
func findProvider(m map[string]ProviderSpec, provider, model string) (key string, ps ProviderSpec, ok bool) {
	if provider == "" || len(m) == 0 {
		return "", ProviderSpec{}, false
	}
	for k, v := range m {
		if model != "" {
			if i := strings.IndexByte(k, '/'); i > 0 && strings.EqualFold(k[:i], provider) && strings.EqualFold(k[i+1:], model) {
				return k, v, true
			}
		}
		if strings.EqualFold(k, provider) {
			key, ps, ok = k, v, true
		}
	}
	return key, ps, ok
}

// validate rejects specs that cannot mean anything: unknown profiles, unknown
// groups, empty entries and malformed or colliding byProvider keys. When
// several byProvider entries are broken, the one with the smallest key is
// reported so the error message is stable.
func (d *catalogData) validate(s Spec) error {
	if _, ok := profileID(s.Profile); !ok {
		return fmt.Errorf("%w: unknown profile %q (valid: %s)", ErrInvalidPolicy, s.Profile, validProfiles)
	}
	if err := d.validateList(s.Allow, "", "allow"); err != nil {
		return err
	}
	if err := d.validateList(s.Deny, "", "deny"); err != nil {
		return err
	}
	if len(s.ByProvider) == 0 {
		return nil
	}

	var ca, cb string
	for a := range s.ByProvider {
		for b := range s.ByProvider {
			if a < b && strings.EqualFold(a, b) && (ca == "" || a < ca || (a == ca && b < cb)) {
				ca, cb = a, b
			}
		}
	}
	if ca != "" {
		return fmt.Errorf("%w: byProvider keys %q and %q collide (keys are case-insensitive)", ErrInvalidPolicy, ca, cb)
	}

	var errKey string
	var err error
	for k, ps := range s.ByProvider {
		if err != nil && k >= errKey {
			continue
		}
		if e := d.validateProvider(k, ps); e != nil {
			errKey, err = k, e
		}
	}
	return err
}

func (d *catalogData) validateProvider(key string, ps ProviderSpec) error {
	provider, model, hasModel := strings.Cut(key, "/")
	if strings.TrimSpace(provider) == "" || (hasModel && strings.TrimSpace(model) == "") {
		return fmt.Errorf("%w: malformed byProvider key %q (want \"provider\" or \"provider/model\")", ErrInvalidPolicy, key)
	}
	if _, ok := profileID(ps.Profile); !ok {
		return fmt.Errorf("%w: unknown profile %q in byProvider[%q] (valid: %s)", ErrInvalidPolicy, ps.Profile, key, validProfiles)
	}
	if err := d.validateList(ps.Allow, key, "allow"); err != nil {
		return err
	}
	return d.validateList(ps.Deny, key, "deny")
}

func (d *catalogData) validateList(list []string, key, field string) error {
	for i, e := range list {
		e = strings.TrimSpace(e)
		if e == "" {
			return fmt.Errorf("%w: empty tool name in %s", ErrInvalidPolicy, location(key, field, i))
		}
		if isGroup(e) {
			if _, ok := d.group(e); !ok {
				return fmt.Errorf("%w: unknown group %q in %s (valid: %s)", ErrInvalidPolicy, e, location(key, field, i), strings.Join(d.groups, ", "))
			}
		}
	}
	return nil
}

// location names a list entry for error messages, e.g. byProvider["openai"].deny[1].
func location(key, field string, i int) string {
	if key == "" {
		return fmt.Sprintf("%s[%d]", field, i)
	}
	return fmt.Sprintf("byProvider[%q].%s[%d]", key, field, i)
}
