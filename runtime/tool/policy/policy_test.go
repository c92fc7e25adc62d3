package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// Expected group contents are spelled out here (not taken from the package) so
// the tests pin the catalog.
var (
	tRuntime    = []string{"exec", "bash", "process", "pty"}
	tFS         = []string{"file_read", "file_write", "file_edit", "file_search", "content_search", "apply_patch"}
	tSessions   = []string{"chat_manager", "delegate", "agent_task", "session_status", "sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "agents_list"}
	tMemory     = []string{"memory_store", "memory_recall", "timeline_recall", "memory_forget", "bot_remember", "bot_recall"}
	tWeb        = []string{"http_request", "web_fetch", "web_search"}
	tUI         = []string{"browser", "browser_profiles", "bot_secret", "canvas"}
	tAutomation = []string{"cron_add", "cron_list", "cron_runs", "cron_update", "cron_remove", "cron_enable", "cron_disable", "routine_maintenance", "bot_task", "bot_agenda", "gateway"}
	tMessaging  = []string{"send_message", "message", "bot_connector"}
	tSkills     = []string{"get_skill"}
	tSystem     = []string{"health", "calculator", "todo", "llm_task", "image", "reload_config", "bot_status"}
	tNodes      = []string{"nodes"}

	tAll        = set(tRuntime, tFS, tSessions, tMemory, tWeb, tUI, tAutomation, tMessaging, tSkills, tSystem, tNodes)
	tCoding     = set(tFS, tRuntime, tSessions, tMemory, []string{"image"})
	tMessaging2 = set(tMessaging, []string{"chat_manager", "session_status", "sessions_list", "sessions_history", "sessions_send"})

	mcpTools = []string{"mcp_github_create_issue", "mcp_github_list_prs"}
)

// set returns the sorted union of lists, the shape Result.Tools has.
func set(lists ...[]string) []string {
	out := []string{}
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// minus returns a without the names in b.
func minus(a []string, b ...string) []string {
	out := []string{}
	for _, n := range a {
		if !slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}

func TestCatalog(t *testing.T) {
	g := NewWithT(t)
	c := DefaultCatalog()

	g.Expect(c.Tools()).To(Equal(tAll))
	g.Expect(c.Tools()).To(HaveLen(55))
	g.Expect(c.Groups()).To(Equal(map[string][]string{
		GroupRuntime:    set(tRuntime),
		GroupFS:         set(tFS),
		GroupSessions:   set(tSessions),
		GroupMemory:     set(tMemory),
		GroupWeb:        set(tWeb),
		GroupUI:         set(tUI),
		GroupAutomation: set(tAutomation),
		GroupMessaging:  set(tMessaging),
		GroupSkills:     set(tSkills),
		GroupSystem:     set(tSystem),
		GroupPicoBot:    tAll,
		GroupOpenClaw:   tAll,
		GroupNodes:      set(tNodes),
	}))

	// The zero Catalog is the default one.
	g.Expect(Catalog{}.Tools()).To(Equal(tAll))

	// Callers own what they get back.
	tools := c.Tools()
	tools[0] = "mutated"
	c.Groups()[GroupFS][0] = "mutated"
	g.Expect(c.Tools()).To(Equal(tAll))
	g.Expect(c.Groups()[GroupFS]).To(Equal(set(tFS)))

	// With normalises, de-duplicates, chains, skips unaddressable names, keeps
	// extras out of groups and leaves the receiver alone.
	ext := c.With(" MCP_GitHub_Create_Issue ", "", "bash", "group:evil").With("mcp_github_list_prs", "mcp_github_create_issue")
	g.Expect(ext.Tools()).To(Equal(set(tAll, mcpTools)))
	g.Expect(ext.Groups()).To(Equal(c.Groups()))
	g.Expect(c.Tools()).To(Equal(tAll))
	g.Expect(Catalog{}.With("x").Tools()).To(Equal(set(tAll, []string{"x"})))
}

func TestResolve(t *testing.T) {
	mcp := DefaultCatalog().With(mcpTools...)
	slack := DefaultCatalog().With("slack")

	cases := []struct {
		name     string
		catalog  Catalog
		spec     Spec
		provider string
		model    string
		want     []string
		warnings []string
		key      string
	}{
		// Profiles.
		{name: "unset policy allows every tool", want: tAll},
		{name: "profile full is unrestricted", spec: Spec{Profile: ProfileFull}, want: tAll},
		{name: "profile minimal", spec: Spec{Profile: ProfileMinimal}, want: []string{"session_status"}},
		{name: "profile coding", spec: Spec{Profile: ProfileCoding}, want: tCoding},
		{name: "profile messaging", spec: Spec{Profile: ProfileMessaging}, want: tMessaging2},
		{name: "profile name is case-insensitive", spec: Spec{Profile: " Coding "}, want: tCoding},

		// Allow.
		{name: "no profile: allow restricts", spec: Spec{Allow: []string{"bash", "file_read"}}, want: []string{"bash", "file_read"}},
		{name: "profile full: allow restricts", spec: Spec{Profile: ProfileFull, Allow: []string{"bash"}}, want: []string{"bash"}},
		{name: "empty non-nil allow does not restrict", spec: Spec{Allow: []string{}}, want: tAll},
		{name: "profile plus allow is additive", catalog: slack, spec: Spec{Profile: ProfileMessaging, Allow: []string{"slack"}}, want: set(tMessaging2, []string{"slack"})},
		{name: "profile plus allow group is additive", spec: Spec{Profile: ProfileMinimal, Allow: []string{"group:web"}}, want: set([]string{"session_status"}, tWeb)},
		{name: "allow star with a profile grants all", catalog: mcp, spec: Spec{Profile: ProfileMinimal, Allow: []string{"*"}}, want: set(tAll, mcpTools)},

		// OpenClaw's and other agents' spellings.
		{name: "OpenClaw's file tool names", spec: Spec{Allow: []string{"read", "Write", "edit"}}, want: []string{"file_edit", "file_read", "file_write"}},
		{name: "group:openclaw is every built-in tool", catalog: mcp, spec: Spec{Allow: []string{"group:openclaw"}}, want: tAll},
		{name: "group:nodes is the nodes tool", spec: Spec{Allow: []string{"group:nodes"}}, want: tNodes},
		{name: "mcp__server__tool names an MCP tool", catalog: mcp, spec: Spec{Allow: []string{"mcp__github__create_issue"}}, want: []string{"mcp_github_create_issue"}},
		{name: "mcp__server__* is a pattern", catalog: mcp, spec: Spec{Profile: ProfileMinimal, Allow: []string{"mcp__github__*"}, Deny: []string{"MCP__GitHub__List_PRs"}},
			want: []string{"mcp_github_create_issue", "session_status"}},

		// Deny.
		{name: "deny wins over allow", spec: Spec{Allow: []string{"group:runtime"}, Deny: []string{"bash"}}, want: []string{"exec", "process", "pty"}},
		{name: "deny wins over profile", spec: Spec{Profile: ProfileCoding, Deny: []string{"group:fs", "exec"}}, want: minus(tCoding, append(tFS, "exec")...)},
		{name: "deny star removes everything", catalog: mcp, spec: Spec{Deny: []string{"*"}}, want: []string{}},
		{name: "deny of an allowed group entry", spec: Spec{Allow: []string{"group:ui", "group:web"}, Deny: []string{"group:ui"}}, want: set(tWeb)},

		// Case-insensitivity and wildcards.
		{name: "names and groups are case-insensitive", spec: Spec{Allow: []string{"BASH", "Group:FS"}, Deny: []string{"File_Write"}}, want: minus(set(tFS, []string{"bash"}), "file_write")},
		{name: "surrounding space is ignored", spec: Spec{Allow: []string{" bash "}}, want: []string{"bash"}},
		{name: "star allows all including extras", catalog: mcp, spec: Spec{Allow: []string{"*"}}, want: set(tAll, mcpTools)},
		{name: "prefix wildcard", spec: Spec{Allow: []string{"memory_*"}}, want: []string{"memory_forget", "memory_recall", "memory_store"}},
		{name: "suffix wildcard", spec: Spec{Allow: []string{"*_recall"}}, want: []string{"bot_recall", "memory_recall", "timeline_recall"}},
		{name: "infix wildcard", spec: Spec{Allow: []string{"cron_*able", "B*H"}}, want: []string{"bash", "cron_disable", "cron_enable"}},
		{name: "several stars", spec: Spec{Allow: []string{"b*_*a*", "bot_*a*"}}, want: []string{"bot_agenda", "bot_recall", "bot_status", "bot_task"}},
		{name: "wildcard deny", spec: Spec{Profile: ProfileCoding, Deny: []string{"file_*", "*_recall"}}, want: minus(tCoding, "file_read", "file_write", "file_edit", "file_search", "memory_recall", "timeline_recall", "bot_recall")},

		// Groups.
		{name: "group:picobot expands to all built-ins", catalog: mcp, spec: Spec{Allow: []string{"group:picobot"}}, want: tAll},
		{name: "group expansion", spec: Spec{Allow: []string{GroupAutomation, GroupSkills, GroupSystem}}, want: set(tAutomation, tSkills, tSystem)},

		// Unknown names.
		{
			name: "allow of only unknown names is ignored",
			spec: Spec{Allow: []string{"foo", "Bar", "foo"}},
			want: tAll,
			warnings: []string{
				`allow list names only unknown tools ["bar" "foo"]; ignored so core tools stay available`,
			},
		},
		{
			name:     "allow of only unknown names keeps the profile",
			spec:     Spec{Profile: ProfileMinimal, Allow: []string{"slack"}},
			want:     []string{"session_status"},
			warnings: []string{`allow list names only unknown tools ["slack"]; ignored so core tools stay available`},
		},
		{
			name:     "allow wildcard matching nothing counts as unknown",
			spec:     Spec{Allow: []string{"nope_*"}},
			want:     tAll,
			warnings: []string{`allow list names only unknown tools ["nope_*"]; ignored so core tools stay available`},
		},
		{
			name:     "unknown name in an otherwise valid allow warns",
			spec:     Spec{Allow: []string{"bash", "bsah"}},
			want:     []string{"bash"},
			warnings: []string{`allow list names unknown tools ["bsah"]; those entries are ignored`},
		},
		{
			name:     "unknown name in deny warns and is harmless",
			spec:     Spec{Deny: []string{"basj", "Zap", "exec"}},
			want:     minus(tAll, "exec"),
			warnings: []string{`deny list names unknown tools ["basj" "zap"]; those entries have no effect`},
		},

		// byProvider.
		{
			name:     "byProvider by provider",
			spec:     Spec{ByProvider: map[string]ProviderSpec{"openai": {Deny: []string{"group:runtime"}}}},
			provider: "openai", model: "gpt-5.2",
			want: minus(tAll, tRuntime...),
			key:  "openai",
		},
		{
			name: "byProvider provider/model wins over provider",
			spec: Spec{ByProvider: map[string]ProviderSpec{
				"openai":         {Profile: ProfileMinimal},
				"openai/gpt-5.2": {Profile: ProfileCoding},
			}},
			provider: "openai", model: "gpt-5.2",
			want: tCoding,
			key:  "openai/gpt-5.2",
		},
		{
			name: "byProvider falls back to provider for another model",
			spec: Spec{ByProvider: map[string]ProviderSpec{
				"openai":         {Profile: ProfileMinimal},
				"openai/gpt-5.2": {Profile: ProfileCoding},
			}},
			provider: "openai", model: "gpt-4o",
			want: []string{"session_status"},
			key:  "openai",
		},
		{
			name:     "byProvider keys are case-insensitive",
			spec:     Spec{ByProvider: map[string]ProviderSpec{"OpenAI/GPT-5.2": {Allow: []string{"bash"}}}},
			provider: "openai", model: "gpt-5.2",
			want: []string{"bash"},
			key:  "openai/gpt-5.2",
		},
		{
			name:     "byProvider model keys may contain slashes",
			spec:     Spec{ByProvider: map[string]ProviderSpec{"openrouter/anthropic/claude": {Allow: []string{"bash"}}}},
			provider: "OpenRouter", model: "anthropic/claude",
			want: []string{"bash"},
			key:  "openrouter/anthropic/claude",
		},
		{
			name:     "byProvider for another provider does not apply",
			spec:     Spec{ByProvider: map[string]ProviderSpec{"anthropic": {Profile: ProfileMinimal}}},
			provider: "openai", model: "gpt-5.2",
			want: tAll,
		},
		{
			name:     "byProvider does not apply without a provider",
			spec:     Spec{ByProvider: map[string]ProviderSpec{"openai": {Profile: ProfileMinimal}}},
			want:     tAll,
			provider: "", model: "gpt-5.2",
		},
		{
			name:     "byProvider profile narrows",
			spec:     Spec{Profile: ProfileCoding, ByProvider: map[string]ProviderSpec{"openai": {Profile: ProfileMessaging}}},
			provider: "openai",
			want:     []string{"chat_manager", "session_status", "sessions_history", "sessions_list", "sessions_send"},
			key:      "openai",
		},
		{
			name:     "byProvider profile full does not narrow",
			spec:     Spec{Profile: ProfileMinimal, ByProvider: map[string]ProviderSpec{"openai": {Profile: ProfileFull}}},
			provider: "openai",
			want:     []string{"session_status"},
			key:      "openai",
		},
		{
			name:     "byProvider allow intersects",
			spec:     Spec{Profile: ProfileCoding, ByProvider: map[string]ProviderSpec{"openai": {Allow: []string{"group:fs", "group:web"}}}},
			provider: "openai",
			want:     set(tFS),
			key:      "openai",
		},
		{
			name:     "byProvider allow cannot add tools",
			spec:     Spec{Profile: ProfileMinimal, ByProvider: map[string]ProviderSpec{"openai": {Allow: []string{"bash", "session_status"}}}},
			provider: "openai",
			want:     []string{"session_status"},
			key:      "openai",
		},
		{
			name:     "byProvider allow of only unknown names is ignored",
			spec:     Spec{Profile: ProfileMinimal, ByProvider: map[string]ProviderSpec{"OpenAI": {Allow: []string{"nope"}}}},
			provider: "openai",
			want:     []string{"session_status"},
			key:      "openai",
			warnings: []string{`byProvider["openai"] allow list names only unknown tools ["nope"]; ignored so core tools stay available`},
		},
		{
			name:     "byProvider deny removes",
			spec:     Spec{ByProvider: map[string]ProviderSpec{"openai": {Deny: []string{"*_recall"}}}},
			provider: "openai",
			want:     minus(tAll, "bot_recall", "memory_recall", "timeline_recall"),
			key:      "openai",
		},
		{
			name:     "deny wins over byProvider allow",
			spec:     Spec{Deny: []string{"bash"}, ByProvider: map[string]ProviderSpec{"openai": {Allow: []string{"bash", "exec"}}}},
			provider: "openai",
			want:     []string{"exec"},
			key:      "openai",
		},
		{
			name: "warnings come in resolution order",
			spec: Spec{
				Allow:      []string{"bash", "zz"},
				Deny:       []string{"yy"},
				ByProvider: map[string]ProviderSpec{"openai": {Allow: []string{"bash", "xx"}, Deny: []string{"ww"}}},
			},
			provider: "openai",
			want:     []string{"bash"},
			key:      "openai",
			warnings: []string{
				`allow list names unknown tools ["zz"]; those entries are ignored`,
				`byProvider["openai"] allow list names unknown tools ["xx"]; those entries are ignored`,
				`byProvider["openai"] deny list names unknown tools ["ww"]; those entries have no effect`,
				`deny list names unknown tools ["yy"]; those entries have no effect`,
			},
		},

		// Extra (MCP) tools.
		{name: "extra tool by exact name", catalog: mcp, spec: Spec{Allow: []string{"MCP_GITHUB_CREATE_ISSUE"}}, want: []string{"mcp_github_create_issue"}},
		{name: "extra tools by wildcard", catalog: mcp, spec: Spec{Allow: []string{"mcp_github_*"}}, want: mcpTools},
		{name: "extra tools are in no group", catalog: mcp, spec: Spec{Allow: []string{"group:picobot"}, Deny: []string{"group:picobot"}}, want: []string{}},
		{name: "unset policy includes extra tools", catalog: mcp, want: set(tAll, mcpTools)},
		{name: "profile plus extra tool", catalog: mcp, spec: Spec{Profile: ProfileCoding, Allow: []string{"mcp_github_list_prs"}}, want: set(tCoding, []string{"mcp_github_list_prs"})},
		{name: "profiles exclude extra tools", catalog: mcp, spec: Spec{Profile: ProfileCoding}, want: tCoding},
		{
			name:     "extra tool is unknown in the default catalog",
			spec:     Spec{Allow: []string{"mcp_github_list_prs"}},
			want:     tAll,
			warnings: []string{`allow list names only unknown tools ["mcp_github_list_prs"]; ignored so core tools stay available`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r, err := Resolve(tc.catalog, tc.spec, tc.provider, tc.model)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Tools).NotTo(BeNil())
			g.Expect(r.Tools).To(Equal(tc.want))
			g.Expect(r.Warnings).To(Equal(tc.warnings))
			g.Expect(r.ProviderKey).To(Equal(tc.key))
		})
	}
}

func TestResolveErrors(t *testing.T) {
	const groups = "group:automation, group:fs, group:memory, group:messaging, group:nodes, group:openclaw, group:picobot, group:runtime, group:sessions, group:skills, group:system, group:ui, group:web"
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{
			name: "unknown profile",
			spec: Spec{Profile: "power"},
			want: `invalid tool policy: unknown profile "power" (valid: minimal, coding, messaging, full)`,
		},
		{
			name: "unknown group in allow",
			spec: Spec{Allow: []string{"bash", "group:nope"}},
			want: `invalid tool policy: unknown group "group:nope" in allow[1] (valid: ` + groups + `)`,
		},
		{
			name: "unknown group in deny",
			spec: Spec{Deny: []string{"Group:Nope"}},
			want: `invalid tool policy: unknown group "Group:Nope" in deny[0] (valid: ` + groups + `)`,
		},
		{
			name: "group names take no wildcard",
			spec: Spec{Allow: []string{"group:*"}},
			want: `invalid tool policy: unknown group "group:*" in allow[0] (valid: ` + groups + `)`,
		},
		{
			name: "empty allow entry",
			spec: Spec{Allow: []string{""}},
			want: `invalid tool policy: empty tool name in allow[0]`,
		},
		{
			name: "blank deny entry",
			spec: Spec{Deny: []string{"bash", "  "}},
			want: `invalid tool policy: empty tool name in deny[1]`,
		},
		{
			name: "unknown profile in byProvider",
			spec: Spec{ByProvider: map[string]ProviderSpec{"openai": {Profile: "power"}}},
			want: `invalid tool policy: unknown profile "power" in byProvider["openai"] (valid: minimal, coding, messaging, full)`,
		},
		{
			name: "unknown group in byProvider allow",
			spec: Spec{ByProvider: map[string]ProviderSpec{"openai": {Allow: []string{"group:nope"}}}},
			want: `invalid tool policy: unknown group "group:nope" in byProvider["openai"].allow[0] (valid: ` + groups + `)`,
		},
		{
			name: "empty entry in byProvider deny",
			spec: Spec{ByProvider: map[string]ProviderSpec{"openai": {Deny: []string{""}}}},
			want: `invalid tool policy: empty tool name in byProvider["openai"].deny[0]`,
		},
		{
			name: "entries that do not apply are validated too",
			spec: Spec{ByProvider: map[string]ProviderSpec{"anthropic": {Profile: "power"}}},
			want: `invalid tool policy: unknown profile "power" in byProvider["anthropic"] (valid: minimal, coding, messaging, full)`,
		},
		{
			name: "the smallest broken byProvider key is reported",
			spec: Spec{ByProvider: map[string]ProviderSpec{
				"b": {Profile: "x"}, "a": {Profile: "y"}, "c": {Profile: "z"}, "d": {}, "e": {Deny: []string{""}},
			}},
			want: `invalid tool policy: unknown profile "y" in byProvider["a"] (valid: minimal, coding, messaging, full)`,
		},
		{
			name: "empty byProvider key",
			spec: Spec{ByProvider: map[string]ProviderSpec{"": {}}},
			want: `invalid tool policy: malformed byProvider key "" (want "provider" or "provider/model")`,
		},
		{
			name: "byProvider key without model",
			spec: Spec{ByProvider: map[string]ProviderSpec{"openai/": {}}},
			want: `invalid tool policy: malformed byProvider key "openai/" (want "provider" or "provider/model")`,
		},
		{
			name: "byProvider key without provider",
			spec: Spec{ByProvider: map[string]ProviderSpec{"/gpt-5.2": {}}},
			want: `invalid tool policy: malformed byProvider key "/gpt-5.2" (want "provider" or "provider/model")`,
		},
		{
			name: "byProvider keys differing only in case collide",
			spec: Spec{ByProvider: map[string]ProviderSpec{"openai": {}, "OpenAI": {}, "OPENAI": {}, "x": {}}},
			want: `invalid tool policy: byProvider keys "OPENAI" and "OpenAI" collide (keys are case-insensitive)`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// Repeat so that map iteration order cannot change the message.
			for range 20 {
				r, err := Resolve(DefaultCatalog(), tc.spec, "openai", "gpt-5.2")
				g.Expect(err).To(MatchError(tc.want))
				g.Expect(errors.Is(err, ErrInvalidPolicy)).To(BeTrue())
				g.Expect(r).To(BeZero())
			}
		})
	}
}

func TestResolveDeterministic(t *testing.T) {
	g := NewWithT(t)
	c := DefaultCatalog().With("mcp_b", "mcp_a", "mcp_c")
	spec := Spec{
		Profile: ProfileCoding,
		Allow:   []string{"mcp_*", "group:web", "nope", "BOT_TASK", "zzz"},
		Deny:    []string{"bash", "file_*", "ghost", "Phantom", "mcp_b"},
		ByProvider: map[string]ProviderSpec{
			"openai":         {Profile: ProfileMinimal},
			"openai/gpt-5.2": {Deny: []string{"exec", "nada", "web_*"}},
			"anthropic":      {Allow: []string{"bash"}},
		},
	}
	want, err := Resolve(c, spec, "openai", "gpt-5.2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(slices.IsSorted(want.Tools)).To(BeTrue())
	g.Expect(want.Warnings).To(HaveLen(3))

	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		s := Merge(Spec{}, spec) // deep copy
		rng.Shuffle(len(s.Allow), func(i, j int) { s.Allow[i], s.Allow[j] = s.Allow[j], s.Allow[i] })
		rng.Shuffle(len(s.Deny), func(i, j int) { s.Deny[i], s.Deny[j] = s.Deny[j], s.Deny[i] })
		ps := s.ByProvider["openai/gpt-5.2"]
		rng.Shuffle(len(ps.Deny), func(i, j int) { ps.Deny[i], ps.Deny[j] = ps.Deny[j], ps.Deny[i] })
		shuffledExtras := []string{"mcp_c", "mcp_a", "mcp_b"}
		rng.Shuffle(len(shuffledExtras), func(i, j int) {
			shuffledExtras[i], shuffledExtras[j] = shuffledExtras[j], shuffledExtras[i]
		})
		got, err := Resolve(DefaultCatalog().With(shuffledExtras...), s, "openai", "gpt-5.2")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(want))
	}
}

func TestAllowed(t *testing.T) {
	g := NewWithT(t)
	r, err := Resolve(DefaultCatalog().With(mcpTools...), Spec{Profile: ProfileMinimal, Allow: []string{"bash", "mcp_*"}}, "", "")
	g.Expect(err).NotTo(HaveOccurred())
	for tool, want := range map[string]bool{
		"bash":                    true,
		"BASH":                    true,
		" Session_Status ":        true,
		"mcp_github_create_issue": true,
		"exec":                    false,
		"":                        false,
		"group:runtime":           false,
	} {
		g.Expect(Allowed(r, tool)).To(Equal(want), tool)
	}
	g.Expect(Allowed(Result{}, "bash")).To(BeFalse())
}

func TestMerge(t *testing.T) {
	defaults := Spec{
		Profile: ProfileCoding,
		Allow:   []string{"group:web"},
		Deny:    []string{"exec", "Bash"},
		ByProvider: map[string]ProviderSpec{
			"OpenAI":    {Profile: ProfileMinimal, Deny: []string{"a"}},
			"anthropic": {Deny: []string{"b"}},
		},
	}
	cases := []struct {
		name     string
		defaults Spec
		agent    Spec
		want     Spec
	}{
		{name: "both empty", want: Spec{}},
		{
			name:     "agent inherits everything",
			defaults: defaults,
			want: Spec{
				Profile: ProfileCoding,
				Allow:   []string{"group:web"},
				Deny:    []string{"exec", "Bash"},
				ByProvider: map[string]ProviderSpec{
					"openai":    {Profile: ProfileMinimal, Deny: []string{"a"}},
					"anthropic": {Deny: []string{"b"}},
				},
			},
		},
		{
			name:     "agent overrides profile and allow, unions deny, wins byProvider keys",
			defaults: defaults,
			agent: Spec{
				Profile: ProfileMessaging,
				Allow:   []string{"bash"},
				Deny:    []string{" bash", "pty"},
				ByProvider: map[string]ProviderSpec{
					"openai":         {Allow: []string{"bash"}},
					"OpenAI/GPT-5.2": {Profile: ProfileFull},
				},
			},
			want: Spec{
				Profile: ProfileMessaging,
				Allow:   []string{"bash"},
				Deny:    []string{"exec", "Bash", "pty"},
				ByProvider: map[string]ProviderSpec{
					"openai":         {Allow: []string{"bash"}},
					"openai/gpt-5.2": {Profile: ProfileFull},
					"anthropic":      {Deny: []string{"b"}},
				},
			},
		},
		{
			name:     "blank agent profile inherits",
			defaults: Spec{Profile: ProfileMinimal},
			agent:    Spec{Profile: "  "},
			want:     Spec{Profile: ProfileMinimal},
		},
		{
			name:     "empty non-nil agent allow clears the inherited allowlist",
			defaults: Spec{Allow: []string{"bash"}},
			agent:    Spec{Allow: []string{}},
			want:     Spec{Allow: []string{}},
		},
		{
			name:     "nil agent allow inherits",
			defaults: Spec{Allow: []string{"bash"}},
			agent:    Spec{Deny: []string{"exec"}},
			want:     Spec{Allow: []string{"bash"}, Deny: []string{"exec"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Merge(tc.defaults, tc.agent)).To(Equal(tc.want))
		})
	}

	t.Run("merged spec resolves like the override rules say", func(t *testing.T) {
		g := NewWithT(t)
		r, err := Resolve(DefaultCatalog(), Merge(
			Spec{Profile: ProfileCoding, Deny: []string{"exec"}},
			Spec{Allow: []string{"group:web"}, Deny: []string{"bash"}},
		), "", "")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Tools).To(Equal(minus(set(tCoding, tWeb), "exec", "bash")))
	})

	t.Run("result shares nothing with its inputs", func(t *testing.T) {
		g := NewWithT(t)
		d := Spec{Allow: []string{"a"}, Deny: []string{"b"}, ByProvider: map[string]ProviderSpec{"p": {Allow: []string{"c"}, Deny: []string{"d"}}}}
		m := Merge(d, Spec{})
		m.Allow[0], m.Deny[0] = "x", "x"
		m.ByProvider["p"].Allow[0], m.ByProvider["p"].Deny[0] = "x", "x"
		m.ByProvider["q"] = ProviderSpec{}
		g.Expect(d).To(Equal(Spec{Allow: []string{"a"}, Deny: []string{"b"}, ByProvider: map[string]ProviderSpec{"p": {Allow: []string{"c"}, Deny: []string{"d"}}}}))
	})
}

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "bash", true},
		{"bash", "bash", true},
		{"bash", "bas", false},
		{"bas", "bash", false},
		{"b*", "bash", true},
		{"*h", "bash", true},
		{"b*h", "bash", true},
		{"b*h", "bah", true},
		{"b*h", "bas", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"**", "x", true},
		{"*a*", "banana", true},
		{"*_recall", "memory_recall", true},
		{"*_recall", "memory_recall_x", false},
		{"file_[rw]*", "file_read", false}, // '[' is literal, unlike path.Match
		{"file_?ead", "file_read", false},  // '?' is literal, unlike path.Match
		{"a?", "a?", true},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"ab*ba", "aba", false},
		{"*ab*ab*", "xabyab", true},
		{"*ab*ab*", "xaab", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s~%s", tc.pattern, tc.name), func(t *testing.T) {
			NewWithT(t).Expect(globMatch(tc.pattern, tc.name)).To(Equal(tc.want))
		})
	}
}

// TestGlobMatchAgainstRegexp cross-checks the '*'-only matcher against an
// equivalent regular expression on random patterns over a tiny alphabet, where
// overlaps and repeated segments are frequent.
func TestGlobMatchAgainstRegexp(t *testing.T) {
	g := NewWithT(t)
	rng := rand.New(rand.NewPCG(3, 4))
	word := func(alphabet string, n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 20000 {
		pattern, name := word("ab*?[", 7), word("ab?[", 8)
		parts := strings.Split(pattern, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		want := regexp.MustCompile("^(?s:" + strings.Join(parts, ".*") + ")$").MatchString(name)
		g.Expect(globMatch(pattern, name)).To(Equal(want), "pattern %q name %q", pattern, name)
	}
}

// benchSetup returns a realistic merged agent policy.
func benchSetup() (Catalog, Spec) {
	extra := make([]string, 20)
	for i := range extra {
		extra[i] = fmt.Sprintf("mcp_server%d_tool%d", i%4, i)
	}
	c := DefaultCatalog().With(extra...)
	s := Spec{
		Profile: ProfileCoding,
		Allow:   []string{"group:web", "mcp_server1_*", "cron_list", "get_skill"},
		Deny:    []string{"pty", "*_forget", "mcp_server1_tool5"},
		ByProvider: map[string]ProviderSpec{
			"openai":         {Deny: []string{"group:runtime"}},
			"openai/gpt-5.2": {Profile: ProfileFull, Allow: []string{"group:fs", "group:memory", "group:web", "mcp_*"}, Deny: []string{"apply_patch"}},
			"anthropic":      {Profile: ProfileCoding},
		},
	}
	return c, s
}

func TestResolveAllocations(t *testing.T) {
	g := NewWithT(t)
	c, s := benchSetup()
	r, err := Resolve(c, s, "openai", "gpt-5.2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Warnings).To(BeEmpty())
	g.Expect(r.ProviderKey).To(Equal("openai/gpt-5.2"))
	g.Expect(r.Tools).To(ContainElements("file_read", "memory_store", "web_fetch", "mcp_server1_tool1"))
	g.Expect(r.Tools).NotTo(ContainElements("pty", "memory_forget", "mcp_server1_tool5", "apply_patch", "bash", "session_status"))
	// Only the returned Tools slice may be allocated.
	g.Expect(testing.AllocsPerRun(100, func() { _, _ = Resolve(c, s, "openai", "gpt-5.2") })).To(BeNumerically("<=", 1))
}

func BenchmarkResolve(b *testing.B) {
	c, s := benchSetup()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve(c, s, "openai", "gpt-5.2"); err != nil {
			b.Fatal(err)
		}
	}
}
