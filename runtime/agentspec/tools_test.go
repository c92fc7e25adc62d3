package agentspec_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// seer is a model that accepts images, so the image tool is not denied.
var seer = &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt-4o"}}

func TestToolPolicy(t *testing.T) {
	delegates := []picobotv1alpha1.Delegate{{Name: "ops", AgentRef: corev1.LocalObjectReference{Name: "ops"}}}
	cases := []struct {
		name string
		spec picobotv1alpha1.AgentSpec
		want policy.Spec
	}{
		{name: "no tools settings: no delegate without delegates, no web_search without a backend",
			want: policy.Spec{Deny: []string{"web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway", "delegate", "agent_task", "agents_list", "sessions_spawn"}}},
		{name: "delegates keep delegate", spec: picobotv1alpha1.AgentSpec{Delegates: delegates}, want: policy.Spec{Deny: []string{"web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "a web search backend keeps web_search",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Tools: &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "http://searxng:8080"}}},
			want: policy.Spec{Deny: []string{"bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "profile, allow and deny carried over, the deny extended",
			spec: picobotv1alpha1.AgentSpec{Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{
				Profile: "coding", Allow: []string{"group:fs", "web_fetch"}, Deny: []string{"bash"}}}},
			want: policy.Spec{Profile: policy.ProfileCoding, Allow: []string{"group:fs", "web_fetch"}, Deny: []string{"bash", "web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway", "delegate", "agent_task", "agents_list", "sessions_spawn"}}},
		{name: "by provider",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Tools: &picobotv1alpha1.ToolsSpec{ByProvider: map[string]picobotv1alpha1.ToolPolicy{
				"anthropic":   {Profile: "minimal"},
				"openai/gpt*": {Allow: []string{"group:web"}, Deny: []string{"http_request"}}}}},
			want: policy.Spec{ByProvider: map[string]policy.ProviderSpec{
				"anthropic":   {Profile: policy.ProfileMinimal},
				"openai/gpt*": {Allow: []string{"group:web"}, Deny: []string{"http_request"}}},
				Deny: []string{"web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "delegates get delegate past a profile",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "minimal"}}},
			want: policy.Spec{Profile: policy.ProfileMinimal, Allow: []string{"delegate", "agent_task"}, Deny: []string{"web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "delegates get delegate past an allowlist, a deny still wins",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{
				Allow: []string{"calculator"}, Deny: []string{"delegate"}}}},
			want: policy.Spec{Allow: []string{"calculator", "delegate", "agent_task"}, Deny: []string{"delegate", "web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "the root agent keeps the config tools",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Role: ptr(picobotv1alpha1.AgentRoleRoot)},
			want: policy.Spec{Deny: []string{"web_search", "bot_secret", "bot_connector", "message"}}},
		{name: "browser disabled denies the ui group",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Browser: &picobotv1alpha1.BrowserSpec{Enabled: ptr(false)}},
			want: policy.Spec{Deny: []string{policy.GroupUI, "web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "browser enabled denies nothing of it",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Browser: &picobotv1alpha1.BrowserSpec{Enabled: ptr(true)}},
			want: policy.Spec{Deny: []string{"web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "memory disabled denies the memory group",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Memory: &picobotv1alpha1.MemorySpec{Enabled: ptr(false)}},
			want: policy.Spec{Deny: []string{policy.GroupMemory, "web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway"}}},
		{name: "saved secrets keep bot_secret, channels bot_connector",
			spec: picobotv1alpha1.AgentSpec{Delegates: delegates, Channels: []picobotv1alpha1.Channel{{Type: "web"}},
				Tools: &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{{Name: "pin"}}}},
			want: policy.Spec{Deny: []string{"web_search", "message", "reload_config", "gateway"}}},
		{name: "everything off, after the agent's own denies",
			spec: picobotv1alpha1.AgentSpec{Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Deny: []string{"exec"}}},
				Browser: &picobotv1alpha1.BrowserSpec{Enabled: ptr(false)}, Memory: &picobotv1alpha1.MemorySpec{Enabled: ptr(false)}},
			want: policy.Spec{Deny: []string{"exec", policy.GroupUI, policy.GroupMemory, "web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway", "delegate", "agent_task", "agents_list", "sessions_spawn"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a := &picobotv1alpha1.Agent{Spec: tc.spec}
			a.Spec.Model = seer // image has its own test (TestImageModelRefs)
			g.Expect(agentspec.ToolPolicy(a)).To(Equal(tc.want))
		})
	}
}

// The denies the features add go to a copy: the Agent (shared, e.g. from an
// informer cache) keeps its own list, even when that list has room to grow.
func TestToolPolicyLeavesTheAgentAlone(t *testing.T) {
	g := NewWithT(t)
	deny := make([]string, 1, 8)
	deny[0] = "bash"
	a := &picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{
		Tools:   &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Deny: deny}},
		Browser: &picobotv1alpha1.BrowserSpec{Enabled: ptr(false)}, Model: seer}}
	first := agentspec.ToolPolicy(a)
	second := agentspec.ToolPolicy(a)
	g.Expect(first.Deny).To(Equal([]string{"bash", policy.GroupUI, "web_search", "bot_secret", "bot_connector", "message", "reload_config", "gateway", "delegate", "agent_task", "agents_list", "sessions_spawn"}))
	g.Expect(second.Deny).To(Equal(first.Deny))
	g.Expect(a.Spec.Tools.Deny).To(Equal([]string{"bash"}))
	g.Expect(deny[:3]).To(Equal([]string{"bash", "", ""}), "nothing written past the Agent's list")
}

// What the model is offered follows: the shared policy resolves the spec
// without the tools of disabled features.
func TestToolPolicyResolves(t *testing.T) {
	g := NewWithT(t)
	a := &picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{
		Browser: &picobotv1alpha1.BrowserSpec{Enabled: ptr(false)}, Memory: &picobotv1alpha1.MemorySpec{Enabled: ptr(false)}}}
	r, err := policy.Resolve(policy.DefaultCatalog(), agentspec.ToolPolicy(a), "openai", "gpt")
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"browser", "browser_profiles", "memory_store", "memory_recall", "delegate", "web_search"} {
		g.Expect(policy.Allowed(r, name)).To(BeFalse(), name)
	}
	for _, name := range []string{"file_read", "bash", "web_fetch", "send_message"} {
		g.Expect(policy.Allowed(r, name)).To(BeTrue(), name)
	}
}

func TestAllowedPorts(t *testing.T) {
	cases := []struct {
		name  string
		tools *picobotv1alpha1.ToolsSpec
		want  []uint16
	}{
		{name: "no tools settings", want: nil},
		{name: "no network settings", tools: &picobotv1alpha1.ToolsSpec{}, want: nil},
		{name: "ports carried over", tools: &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: []int32{1, 5432, 65535}}},
			want: []uint16{1, 5432, 65535}},
		// An object that skipped the schema: 65536+22 must not become 22.
		{name: "out of range left out", tools: &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: []int32{0, -1, 65536 + 22, 8000}}},
			want: []uint16{8000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{Tools: tc.tools}}
			NewWithT(t).Expect(agentspec.AllowedPorts(a)).To(Equal(tc.want))
		})
	}
}
