package manifest_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/manifest"
)

// The objects below are the YAML forms of validAgent, validCronJob and
// validProfile in api/v1alpha1/validation_test.go, and the cases are those of
// its TestCreateValidation, which records what the real API server answers.
// Passing them here shows the loader applies the same rules with the same
// messages.

const agentHeader = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: agent
spec:
`

// validModel is validAgent's spec.model.
const validModel = `  model:
    provider: openai
    model: gpt-5.2
    apiKeySecretRef: {name: k, key: apiKey}
`

// agent returns validAgent with extra spec fields (indented by two spaces).
func agent(extra string) string { return agentHeader + validModel + extra }

// cronJob returns validCronJob with its spec replaced by spec when given.
func cronJob(spec string) string {
	if spec == "" {
		spec = `  schedule: {cron: "0 0 9 * * *", tz: Asia/Shanghai}
  prompt: Summarise yesterday's alerts
`
	}
	return "apiVersion: agents.picobot.io/v1alpha1\nkind: CronJob\nmetadata:\n  name: cron\nspec:\n" + spec
}

// profile returns validProfile with its spec replaced by spec when given.
func profile(spec string) string {
	if spec == "" {
		spec = "  label: Work account\n"
	}
	return "apiVersion: agents.picobot.io/v1alpha1\nkind: BrowserProfile\nmetadata:\n  name: bp\nspec:\n" + spec
}

const cronPrompt = "  prompt: Summarise yesterday's alerts\n"

func TestCreateValidationMatchesAPIServer(t *testing.T) {
	cases := []struct {
		name   string
		yaml   string
		reject string // substring of the rejection; "" = accepted
	}{
		{"valid agent", agent(""), ""},
		{"valid agent without model (namespace default)", agentHeader + "  instructions: hi\n", ""},
		{"unknown provider", agentHeader + "  model: {provider: gemini, model: gpt-5.2, apiKeySecretRef: {name: k, key: apiKey}}\n",
			`spec.model.provider: Unsupported value: "gemini": supported values: "openai", "anthropic"`},
		{"empty model name", agentHeader + `  model: {provider: openai, model: "", apiKeySecretRef: {name: k, key: apiKey}}` + "\n",
			"spec.model.model: Invalid value: \"\": spec.model.model in body should be at least 1 chars long"},
		{"baseURL not http", agentHeader + "  model: {provider: openai, model: gpt-5.2, baseURL: \"ftp://models.local\"}\n",
			"spec.model.baseURL: Invalid value: \"ftp://models.local\": baseURL must be an http:// or https:// URL"},
		{"baseURL ok", agentHeader + "  model: {provider: openai, model: gpt-5.2, baseURL: \"http://vllm.models.svc:8000/v1\"}\n", ""},
		{"fallback baseURL not http", agentHeader + `  model:
    provider: openai
    model: gpt-5.2
    fallbacks: [{provider: anthropic, model: claude, baseURL: "localhost:80"}]
`, "spec.model.fallbacks[0].baseURL: Invalid value: \"localhost:80\": baseURL must be an http:// or https:// URL"},
		{"too many fallbacks", agentHeader + "  model:\n    provider: openai\n    model: gpt-5.2\n    fallbacks:\n" +
			strings.Repeat("    - {provider: openai, model: m}\n", 9),
			"spec.model.fallbacks: Too many: 9: must have at most 8 items"},
		{"image model and vision", agentHeader + `  model:
    provider: openai
    model: gpt-5.2
    vision: false
    imageModel:
      provider: anthropic
      model: claude-sonnet-4-5
      vision: true
      fallbacks: [{provider: openai, model: gpt-4o}]
`, ""},
		{"image model with an unknown provider", agentHeader + "  model:\n    provider: openai\n    model: gpt-5.2\n    imageModel: {provider: gemini, model: g}\n",
			`spec.model.imageModel.provider: Unsupported value: "gemini"`},
		{"image model baseURL not http", agentHeader + "  model:\n    provider: openai\n    model: gpt-5.2\n    imageModel: {provider: openai, model: gpt-4o, baseURL: \"vllm:8000\"}\n",
			"spec.model.imageModel.baseURL: Invalid value: \"vllm:8000\": baseURL must be an http:// or https:// URL"},
		{"too many image model fallbacks", agentHeader + "  model:\n    provider: openai\n    model: gpt-5.2\n    imageModel:\n      provider: openai\n      model: gpt-4o\n      fallbacks:\n" +
			strings.Repeat("      - {provider: openai, model: m}\n", 9),
			"spec.model.imageModel.fallbacks: Too many: 9: must have at most 8 items"},
		{"vision not a boolean", agentHeader + "  model: {provider: openai, model: gpt-5.2, vision: sometimes}\n", "spec.model.vision"},
		{"context window too small", agentHeader + "  model: {provider: openai, model: gpt-5.2, contextWindow: 10}\n",
			"spec.model.contextWindow: Invalid value: 10: spec.model.contextWindow in body should be greater than or equal to 1024"},
		{"unknown tool profile", agent("  tools: {profile: admin}\n"),
			`spec.tools.profile: Unsupported value: "admin": supported values: "minimal", "coding", "messaging", "full"`},
		{"allowed ports", agent("  tools: {network: {allowedPorts: [5432, 8000]}}\n"), ""},
		{"allowed port beyond 65535", agent("  tools: {network: {allowedPorts: [8000, 70000]}}\n"),
			"spec.tools.network.allowedPorts[1]: Invalid value: 70000: spec.tools.network.allowedPorts[1] in body should be less than or equal to 65535"},
		{"allowed port twice", agent("  tools: {network: {allowedPorts: [8000, 8000]}}\n"),
			"spec.tools.network.allowedPorts[1]: Duplicate value: 8000"},
		{"empty allow entry", agent(`  tools: {allow: [""]}` + "\n"),
			"spec.tools.allow[0]: Invalid value: \"\": spec.tools.allow[0] in body should be at least 1 chars long"},
		{"skill with content and configMapRef", agent(`  skills:
    - name: x
      content: "---\nname: x\n---"
      configMapRef: {name: c, key: SKILL.md}
`), "spec.skills[0]: Invalid value: a skill needs exactly one of content or configMapRef"},
		{"skill with neither", agent("  skills: [{name: x}]\n"), "a skill needs exactly one of content or configMapRef"},
		{"skill name not a DNS label", agent(`  skills: [{name: "Bad Name", content: x}]` + "\n"),
			"spec.skills[0].name: Invalid value: \"Bad Name\": spec.skills[0].name in body should match"},
		{"stdio MCP server without command", agent("  mcpServers: [{name: fs, transport: stdio}]\n"),
			"spec.mcpServers[0]: Invalid value: stdio servers need command (and no url); sse and streamable-http servers need url (and no command)"},
		{"http MCP server with command", agent(`  mcpServers: [{name: gh, transport: streamable-http, url: "https://mcp.example.com", command: npx}]` + "\n"),
			"stdio servers need command (and no url)"},
		{"MCP url not http", agent(`  mcpServers: [{name: gh, transport: sse, url: "ws://x"}]` + "\n"),
			"spec.mcpServers[0].url: Invalid value: \"ws://x\": url must be an http:// or https:// URL"},
		{"MCP unknown transport", agent(`  mcpServers: [{name: gh, transport: grpc, url: "https://x"}]` + "\n"),
			`spec.mcpServers[0].transport: Unsupported value: "grpc": supported values: "stdio", "sse", "streamable-http"`},
		{"valid MCP servers", agent(`  mcpServers:
    - name: fs
      transport: stdio
      command: npx
      args: ["-y", "@modelcontextprotocol/server-filesystem", "/workspace"]
      tools: [{name: read_file, readOnly: true}]
    - {name: gh, transport: streamable-http, url: "https://mcp.example.com/mcp"}
`), ""},
		{"browser allowedDomains with a persistent profile", agent("  browser: {allowedDomains: [example.com], profileRef: {name: work}}\n"),
			"spec.browser: Invalid value: a browser restricted to allowedDomains cannot use a persistent profile (profileRef)"},
		{"browser domain pattern", agent(`  browser: {allowedDomains: ["https://example.com"]}` + "\n"),
			"spec.browser.allowedDomains[0]: Invalid value: \"https://example.com\": spec.browser.allowedDomains[0] in body should match"},
		{"telegram channel without secret", agent("  channels: [{type: telegram}]\n"),
			"spec.channels[0]: Invalid value: telegram, feishu, slack and webhook channels need secretRef with their credentials"},
		{"web channel without secret", agent("  channels: [{type: web}]\n"), ""},
		{"warm pool over limit", agent("  runtime: {warmPool: 101}\n"),
			"spec.runtime.warmPool: Invalid value: 101: spec.runtime.warmPool in body should be less than or equal to 100"},
		{"sensitive category unknown", agent("  memory: {allowSensitive: [politics]}\n"),
			`spec.memory.allowSensitive[0]: Unsupported value: "politics": supported values: "health", "finance", "legal", "family"`},

		{"valid cron job", cronJob(""), ""},
		{"valid every job", cronJob("  schedule: {every: 3600000}\n" + cronPrompt), ""},
		{"schedule with none", cronJob("  schedule: {}\n" + cronPrompt),
			"spec.schedule: Invalid value: schedule needs exactly one of at, every or cron"},
		{"schedule with two", cronJob(`  schedule: {cron: "0 0 9 * * *", at: 1}` + "\n" + cronPrompt),
			"schedule needs exactly one of at, every or cron"},
		{"tz without cron", cronJob("  schedule: {every: 60000, tz: UTC}\n" + cronPrompt),
			"spec.schedule: Invalid value: tz applies only to a cron schedule"},
		{"cron with 5 fields", cronJob(`  schedule: {cron: "0 9 * * *", tz: Asia/Shanghai}` + "\n" + cronPrompt),
			`spec.schedule.cron: Invalid value: "0 9 * * *": cron must have exactly 6 fields: second minute hour day-of-month month day-of-week (e.g. "0 0 9 * * *")`},
		{"cron with 7 fields", cronJob(`  schedule: {cron: "0 0 9 * * * 2026", tz: Asia/Shanghai}` + "\n" + cronPrompt),
			"cron must have exactly 6 fields"},
		{"every below one minute", cronJob("  schedule: {every: 1000}\n" + cronPrompt),
			"spec.schedule.every: Invalid value: 1000: every must be at least 60000 ms (one minute)"},
		{"tz with spaces", cronJob(`  schedule: {cron: "0 0 9 * * *", tz: "Asia Shanghai"}` + "\n" + cronPrompt),
			"spec.schedule.tz: Invalid value: \"Asia Shanghai\": spec.schedule.tz in body should match"},
		{"empty prompt", cronJob(`  schedule: {cron: "0 0 9 * * *", tz: Asia/Shanghai}` + "\n" + `  prompt: ""` + "\n"),
			"spec.prompt: Invalid value: \"\": spec.prompt in body should be at least 1 chars long"},
		{"unknown delivery policy", cronJob(`  schedule: {cron: "0 0 9 * * *", tz: Asia/Shanghai}` + "\n" + cronPrompt + "  deliveryPolicy: sometimes\n"),
			`spec.deliveryPolicy: Unsupported value: "sometimes": supported values: "always", "on_alert", "never"`},
		{"catchUpWindow without catch_up", cronJob(`  schedule: {cron: "0 0 9 * * *", tz: Asia/Shanghai}` + "\n" + cronPrompt + "  catchUpWindow: 1h0m0s\n"),
			"spec: Invalid value: catchUpWindow applies only with missedRunPolicy catch_up"},
		{"catchUpWindow with catch_up", cronJob(`  schedule: {cron: "0 0 9 * * *", tz: Asia/Shanghai}` + "\n" + cronPrompt + "  missedRunPolicy: catch_up\n  catchUpWindow: 1h0m0s\n"), ""},

		{"valid browser profile", profile(""), ""},
		{"profile without label", profile("  {}\n"), ""},
		{"label of 80 characters", profile("  label: " + strings.Repeat("界", 80) + "\n"), ""},
		{"label of 81 characters", profile("  label: " + strings.Repeat("a", 81) + "\n"), "spec.label: Too long: may not be more than 80"},
		{"blank label", profile(`  label: "   "` + "\n"), "spec.label: Invalid value: \"   \": label must be 1-80 characters and not blank"},
		{"pvc size on s3 storage", profile("  label: Work account\n  persistence: {storage: s3, size: 1Gi}\n"),
			"spec.persistence: Invalid value: size and storageClassName apply only to storage pvc"},
		{"unknown storage", profile("  label: Work account\n  persistence: {storage: nfs}\n"),
			`spec.persistence.storage: Unsupported value: "nfs": supported values: "s3", "pvc"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			set, err := manifest.LoadBytes("case.yaml", []byte(tc.yaml))
			if tc.reject == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(len(set.Agents) + len(set.CronJobs) + len(set.BrowserProfiles)).To(Equal(1))
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.reject)))
			g.Expect(set).To(BeNil())
		})
	}
}

// TestDefaultsMatchAPIServer mirrors TestDefaults in api/v1alpha1.
func TestDefaultsMatchAPIServer(t *testing.T) {
	g := NewWithT(t)
	set, err := manifest.LoadBytes("defaults.yaml", []byte(
		agent("  runtime: {}\n  memory: {}\n")+"---\n"+cronJob("")+"---\n"+profile("  label: Work account\n  persistence: {}\n")))
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(set.Agents).To(HaveLen(1))
	a := set.Agents[0]
	g.Expect(*a.Spec.Model.ContextWindow).To(Equal(int32(128000)))
	g.Expect(a.Spec.Runtime.IdleTimeout.Duration).To(Equal(10 * time.Minute))
	g.Expect(*a.Spec.Runtime.WarmPool).To(Equal(int32(0)))
	g.Expect(*a.Spec.Memory.TimelineRetentionDays).To(Equal(int32(90)))
	g.Expect(*a.Spec.Memory.Enabled).To(BeTrue())

	g.Expect(set.CronJobs).To(HaveLen(1))
	g.Expect(set.CronJobs[0].Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryAlways))
	g.Expect(set.CronJobs[0].Spec.MissedRunPolicy).To(Equal(picobotv1alpha1.MissedRunOnce))

	g.Expect(set.BrowserProfiles).To(HaveLen(1))
	p := set.BrowserProfiles[0]
	g.Expect(p.Spec.IdleTimeout.Duration).To(Equal(time.Hour))
	g.Expect(p.Spec.Persistence.Storage).To(Equal(picobotv1alpha1.StorageS3))
}
