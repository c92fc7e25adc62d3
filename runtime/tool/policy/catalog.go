package policy

import (
	"math/bits"
	"slices"
	"strings"
)

// Group names of PicoBot's built-in tools. They are exported so the operator,
// the runtime and docs/tests spell them the same way as policies do.
const (
	// GroupRuntime holds the tools that run commands on the agent's host.
	GroupRuntime = "group:runtime"
	// GroupFS holds the workspace file tools.
	GroupFS = "group:fs"
	// GroupSessions holds the tools that talk to other sessions and agents.
	GroupSessions = "group:sessions"
	// GroupMemory holds the long-term memory tools.
	GroupMemory = "group:memory"
	// GroupWeb holds the outbound HTTP tools.
	GroupWeb = "group:web"
	// GroupUI holds the browser automation tools.
	GroupUI = "group:ui"
	// GroupAutomation holds the scheduling and routine tools.
	GroupAutomation = "group:automation"
	// GroupMessaging holds the tools that send messages to channels.
	GroupMessaging = "group:messaging"
	// GroupSkills holds the skill loading tools.
	GroupSkills = "group:skills"
	// GroupSystem holds the housekeeping and utility tools.
	GroupSystem = "group:system"
	// GroupPicoBot holds every built-in tool (but no caller-supplied extras such
	// as MCP tools), so a policy can say "all of ours, none of theirs".
	GroupPicoBot = "group:picobot"
	// GroupOpenClaw is OpenClaw's name of GroupPicoBot, so that a policy
	// copied from OpenClaw resolves to the same tools.
	GroupOpenClaw = "group:openclaw"
	// GroupNodes holds the paired-device tool (nodes; `picobot node`).
	GroupNodes = "group:nodes"
)

// groupPrefix marks a policy entry as a group reference rather than a tool name.
const groupPrefix = "group:"

// builtinGroups is the single source of truth for the built-in tool catalog;
// GroupPicoBot is derived from it. It lists only tools that exist and that a
// policy controls: what it resolves to is what the model receives (Agent
// status and /api/v1/agents show it), so a tool joins it together with its
// implementation. complete_scheduled_run is not in it: every scheduled run
// gets it and no chat does, whatever the policy; nor is emit_signal, which
// every background delegate run gets and nothing else does.
var builtinGroups = []struct {
	name  string
	tools []string
}{
	{GroupRuntime, []string{"exec", "bash", "process", "pty"}},
	{GroupFS, []string{"file_read", "file_write", "file_edit", "file_search", "content_search", "apply_patch"}},
	{GroupSessions, []string{"chat_manager", "delegate", "agent_task", "session_status", "sessions_list", "sessions_history", "sessions_send",
		"sessions_spawn", "agents_list"}},
	{GroupMemory, []string{"memory_store", "memory_recall", "timeline_recall", "memory_forget", "bot_remember", "bot_recall"}},
	{GroupWeb, []string{"http_request", "web_fetch", "web_search"}},
	{GroupUI, []string{"browser", "browser_profiles", "bot_secret", "canvas"}},
	{GroupAutomation, []string{"cron_add", "cron_list", "cron_runs", "cron_update", "cron_remove", "cron_enable", "cron_disable", "routine_maintenance", "bot_task", "bot_agenda",
		"gateway"}},
	{GroupMessaging, []string{"send_message", "message", "bot_connector"}},
	{GroupSkills, []string{"get_skill"}},
	{GroupSystem, []string{"health", "calculator", "todo", "llm_task", "image", "reload_config", "bot_status"}},
	{GroupNodes, []string{"nodes"}},
}

// Profile names a base allowlist (tools.profile) that is applied before the
// allow and deny lists.
type Profile string

// The profiles of OpenClaw's tool policy.
const (
	// ProfileMinimal allows only session_status, for agents that should merely chat.
	ProfileMinimal Profile = "minimal"
	// ProfileCoding allows the file, runtime, session and memory groups
	// and image.
	ProfileCoding Profile = "coding"
	// ProfileMessaging allows the messaging group plus chat_manager and the
	// session tools OpenClaw's messaging profile names (sessions_list,
	// sessions_history, sessions_send, session_status).
	ProfileMessaging Profile = "messaging"
	// ProfileFull places no restriction; it behaves exactly like an unset profile.
	ProfileFull Profile = "full"
)

// Indexes of the restricting profiles in catalogData.profiles; profileNone
// means "no restriction" (unset or full).
const (
	profileNone = iota - 1
	profileMinimal
	profileCoding
	profileMessaging
	numRestrictedProfiles
)

// validProfiles is the list shown in errors, in documentation order.
const validProfiles = "minimal, coding, messaging, full"

// profileID maps a profile (case-insensitive, surrounding space ignored) to its
// index; ok is false for an unknown name. It does not allocate.
func profileID(p Profile) (id int, ok bool) {
	s := strings.TrimSpace(string(p))
	switch {
	case s == "", strings.EqualFold(s, string(ProfileFull)):
		return profileNone, true
	case strings.EqualFold(s, string(ProfileMinimal)):
		return profileMinimal, true
	case strings.EqualFold(s, string(ProfileCoding)):
		return profileCoding, true
	case strings.EqualFold(s, string(ProfileMessaging)):
		return profileMessaging, true
	}
	return profileNone, false
}

// Catalog is the set of tool names a policy is resolved against: PicoBot's
// built-ins plus caller-supplied extras (e.g. MCP tools). It is immutable and
// cheap to copy, so one value can be shared by every reconcile. The zero value
// is the default catalog, so a forgotten initialisation cannot silently resolve
// every agent to "no tools".
type Catalog struct {
	d *catalogData
}

// catalogData is precomputed once per catalog so that Resolve only does bit
// operations and map lookups.
type catalogData struct {
	tools    []string       // sorted, lower-case, unique
	index    map[string]int // tool name -> position in tools
	extra    []string       // normalised extras, kept so With can chain
	words    int            // len of every bitset of this catalog
	all      bitset
	groups   []string // sorted group names, with the "group:" prefix
	groupSet []bitset // parallel to groups
	profiles [numRestrictedProfiles]bitset
}

var defaultData = newCatalogData(nil)

// DefaultCatalog returns the catalog of PicoBot's built-in tools.
func DefaultCatalog() Catalog { return Catalog{d: defaultData} }

// data returns the precomputed data, treating the zero Catalog as the default.
func (c Catalog) data() *catalogData {
	if c.d == nil {
		return defaultData
	}
	return c.d
}

// With returns a catalog that additionally knows the given tool names, e.g. the
// MCP tools of an agent, so that "*" and exact names can select them. Names are
// trimmed and lower-cased; empty names and names starting with "group:" (which
// no policy entry could address) are skipped. Extras never join a group. The
// receiver is not modified.
func (c Catalog) With(extra ...string) Catalog {
	d := c.data()
	names := slices.Clone(d.extra)
	for _, e := range extra {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" || strings.HasPrefix(e, groupPrefix) {
			continue
		}
		names = append(names, e)
	}
	return Catalog{d: newCatalogData(names)}
}

// Tools returns every known tool name, sorted and lower-case; callers own the
// returned slice.
func (c Catalog) Tools() []string { return slices.Clone(c.data().tools) }

// Groups returns every group (keyed by its full "group:<name>" spelling) with
// its sorted tools, so the operator and docs can show what a group expands to.
// Callers own the returned map.
func (c Catalog) Groups() map[string][]string {
	d := c.data()
	out := make(map[string][]string, len(d.groups))
	for i, g := range d.groups {
		out[g] = d.names(d.groupSet[i])
	}
	return out
}

func newCatalogData(extra []string) *catalogData {
	var names []string
	for _, g := range builtinGroups {
		names = append(names, g.tools...)
	}
	names = append(names, extra...)
	slices.Sort(names)
	names = slices.Compact(names)
	slices.Sort(extra)
	extra = slices.Compact(extra)

	d := &catalogData{
		tools: slices.Clip(names),
		index: make(map[string]int, len(names)),
		extra: slices.Clip(extra),
		words: (len(names) + 63) / 64,
	}
	for i, n := range names {
		d.index[n] = i
	}
	d.all = d.newSet()
	for i := range names {
		d.all.set(i)
	}

	picobot := d.newSet()
	byName := make(map[string]bitset, len(builtinGroups)+1)
	for _, g := range builtinGroups {
		s := d.newSet()
		for _, t := range g.tools {
			s.set(d.index[t])
		}
		picobot.or(s)
		byName[g.name] = s
	}
	byName[GroupPicoBot] = picobot
	byName[GroupOpenClaw] = picobot
	for name := range byName {
		d.groups = append(d.groups, name)
	}
	slices.Sort(d.groups)
	for _, name := range d.groups {
		d.groupSet = append(d.groupSet, byName[name])
	}

	d.profiles[profileMinimal] = d.setOf("session_status")
	coding := d.newSet()
	for _, g := range []string{GroupFS, GroupRuntime, GroupSessions, GroupMemory} {
		coding.or(byName[g])
	}
	coding.set(d.index["image"]) // OpenClaw's coding profile names it
	d.profiles[profileCoding] = coding
	messaging := d.setOf("chat_manager", "session_status", "sessions_list", "sessions_history", "sessions_send")
	messaging.or(byName[GroupMessaging])
	d.profiles[profileMessaging] = messaging
	return d
}

func (d *catalogData) newSet() bitset { return make(bitset, d.words) }

func (d *catalogData) setOf(names ...string) bitset {
	s := d.newSet()
	for _, n := range names {
		s.set(d.index[n])
	}
	return s
}

// group returns the tools of the group named by entry (which starts with
// "group:", in any case); ok is false for an unknown group. Groups are few, so
// a linear case-insensitive scan avoids lower-casing (allocating) the entry.
func (d *catalogData) group(entry string) (set bitset, ok bool) {
	for i, g := range d.groups {
		if strings.EqualFold(g, entry) {
			return d.groupSet[i], true
		}
	}
	return nil, false
}

// names lists the tools in s in catalog (sorted) order.
func (d *catalogData) names(s bitset) []string {
	out := make([]string, 0, s.count())
	for w, word := range s {
		for word != 0 {
			out = append(out, d.tools[w*64+bits.TrailingZeros64(word)])
			word &= word - 1
		}
	}
	return out
}

// bitset is a set of catalog positions. Tool sets are tiny (tens of tools), so
// a couple of machine words replace maps and keep Resolve allocation-free.
type bitset []uint64

func (b bitset) set(i int) { b[i>>6] |= 1 << (uint(i) & 63) }

func (b bitset) or(o bitset) {
	for i := range b {
		b[i] |= o[i]
	}
}

func (b bitset) and(o bitset) {
	for i := range b {
		b[i] &= o[i]
	}
}

func (b bitset) andNot(o bitset) {
	for i := range b {
		b[i] &^= o[i]
	}
}

func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}
