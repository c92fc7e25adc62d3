package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/test/controlplane"
)

var (
	k8s        client.Client
	skipReason string
)

func TestMain(m *testing.M) {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipReason = reason
		os.Exit(m.Run())
	}
	scheme := runtime.NewScheme()
	if err := picobotv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		panic(err)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
	}
	os.Exit(code)
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

func ptr[T any](v T) *T { return &v }

var seq int

func name(prefix string) string {
	seq++
	return fmt.Sprintf("%s-%d", prefix, seq)
}

func validAgent() *picobotv1alpha1.Agent {
	return &picobotv1alpha1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name("agent")},
		Spec: picobotv1alpha1.AgentSpec{
			Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{
				Provider: picobotv1alpha1.ProviderOpenAI, Model: "gpt-5.2",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "k"}, Key: "apiKey"},
			}},
		},
	}
}

func toolSecret(name string) picobotv1alpha1.ToolSecret {
	return picobotv1alpha1.ToolSecret{Name: name, SecretKeyRef: corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: name}, Domains: []string{"shop.example"}}
}

func validCronJob() *picobotv1alpha1.CronJob {
	return &picobotv1alpha1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name("cron")},
		Spec: picobotv1alpha1.CronJobSpec{
			Schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", TZ: "Asia/Shanghai"},
			Prompt:   "Summarise yesterday's alerts",
		},
	}
}

func validProfile() *picobotv1alpha1.BrowserProfile {
	return &picobotv1alpha1.BrowserProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name("bp")},
		Spec:       picobotv1alpha1.BrowserProfileSpec{Label: "Work account"},
	}
}

// TestCreateValidation checks every CEL rule, enum and pattern against the real
// API server, including the message a user sees.
func TestCreateValidation(t *testing.T) {
	needAPIServer(t)
	cases := []struct {
		name   string
		obj    func() client.Object
		reject string // substring of the rejection; "" = accepted
	}{
		{"valid agent", func() client.Object { return validAgent() }, ""},
		{"valid agent without model (namespace default)", func() client.Object {
			a := validAgent()
			a.Spec.Model = nil
			return a
		}, ""},
		{"unknown provider", func() client.Object {
			a := validAgent()
			a.Spec.Model.Provider = "gemini"
			return a
		}, `spec.model.provider: Unsupported value: "gemini": supported values: "openai", "anthropic"`},
		{"empty model name", func() client.Object {
			a := validAgent()
			a.Spec.Model.Model = ""
			return a
		}, "spec.model.model: Invalid value: \"\": spec.model.model in body should be at least 1 chars long"},
		{"baseURL not http", func() client.Object {
			a := validAgent()
			a.Spec.Model.BaseURL = "ftp://models.local"
			return a
		}, "spec.model.baseURL: Invalid value: \"ftp://models.local\": baseURL must be an http:// or https:// URL"},
		{"llm_task allowed model without a provider", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{LLMTask: &picobotv1alpha1.LLMTaskSpec{AllowedModels: []string{"gpt-5.2"}}}
			return a
		}, "spec.tools.llmTask.allowedModels[0]: Invalid value: \"gpt-5.2\": spec.tools.llmTask.allowedModels[0] in body should match '^[a-z0-9-]+/.+$'"},
		{"llm_task allowed models ok", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{LLMTask: &picobotv1alpha1.LLMTaskSpec{AllowedModels: []string{"openai/gpt-5.2", "anthropic/claude-sonnet-4-5"}}}
			return a
		}, ""},
		{"baseURL ok", func() client.Object {
			a := validAgent()
			a.Spec.Model.BaseURL = "http://vllm.models.svc:8000/v1"
			return a
		}, ""},
		{"image model and vision", func() client.Object {
			a := validAgent()
			yes, no := true, false
			a.Spec.Model.Vision = &no
			a.Spec.Model.ImageModel = &picobotv1alpha1.ImageModelSpec{
				ModelRef:  picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "claude-sonnet-4-5", Vision: &yes},
				Fallbacks: []picobotv1alpha1.ModelRef{{Provider: "openai", Model: "gpt-4o"}}}
			return a
		}, ""},
		{"image model with an unknown provider", func() client.Object {
			a := validAgent()
			a.Spec.Model.ImageModel = &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "gemini", Model: "g"}}
			return a
		}, `spec.model.imageModel.provider: Unsupported value: "gemini"`},
		{"image model baseURL not http", func() client.Object {
			a := validAgent()
			a.Spec.Model.ImageModel = &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt-4o", BaseURL: "vllm:8000"}}
			return a
		}, "spec.model.imageModel.baseURL: Invalid value: \"vllm:8000\": baseURL must be an http:// or https:// URL"},
		{"too many image model fallbacks", func() client.Object {
			a := validAgent()
			a.Spec.Model.ImageModel = &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt-4o"}}
			for range 9 {
				a.Spec.Model.ImageModel.Fallbacks = append(a.Spec.Model.ImageModel.Fallbacks, picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt-4o"})
			}
			return a
		}, "spec.model.imageModel.fallbacks: Too many: 9: must have at most 8 items"},
		{"fallback baseURL not http", func() client.Object {
			a := validAgent()
			a.Spec.Model.Fallbacks = []picobotv1alpha1.ModelRef{{Provider: "anthropic", Model: "claude", BaseURL: "localhost:80"}}
			return a
		}, "spec.model.fallbacks[0].baseURL: Invalid value: \"localhost:80\": baseURL must be an http:// or https:// URL"},
		{"too many fallbacks", func() client.Object {
			a := validAgent()
			for range 9 {
				a.Spec.Model.Fallbacks = append(a.Spec.Model.Fallbacks, picobotv1alpha1.ModelRef{Provider: "openai", Model: "m"})
			}
			return a
		}, "spec.model.fallbacks: Too many: 9: must have at most 8 items"},
		{"context window too small", func() client.Object {
			a := validAgent()
			a.Spec.Model.ContextWindow = ptr(int32(10))
			return a
		}, "spec.model.contextWindow: Invalid value: 10: spec.model.contextWindow in body should be greater than or equal to 1024"},
		{"root role", func() client.Object {
			a := validAgent()
			a.Spec.Role = ptr(picobotv1alpha1.AgentRoleRoot)
			return a
		}, ""},
		{"unknown role", func() client.Object {
			a := validAgent()
			a.Spec.Role = ptr(picobotv1alpha1.AgentRole("boss"))
			return a
		}, `spec.role: Unsupported value: "boss": supported values: "root", "named"`},
		{"unknown tool profile", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "admin"}}
			return a
		}, `spec.tools.profile: Unsupported value: "admin": supported values: "minimal", "coding", "messaging", "full"`},
		{"empty allow entry", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{""}}}
			return a
		}, "spec.tools.allow[0]: Invalid value: \"\": spec.tools.allow[0] in body should be at least 1 chars long"},
		{"saved secrets with the browser", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{toolSecret("shop-password")}}
			return a
		}, ""},
		{"saved secrets with the browser disabled", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{toolSecret("shop-password")}}
			a.Spec.Browser = &picobotv1alpha1.BrowserSpec{Enabled: ptr(false)}
			return a
		}, "spec.tools.secrets needs the browser (bot_secret types them into web pages); remove them or spec.browser.enabled: false"},
		{"saved secret named twice", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{toolSecret("pin"), toolSecret("pin")}}
			return a
		}, `spec.tools.secrets[1]: Duplicate value: {"name":"pin"}`},
		{"saved secret of an unknown type", func() client.Object {
			a := validAgent()
			sec := toolSecret("pin")
			sec.Type = "pgp"
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{sec}}
			return a
		}, `spec.tools.secrets[0].type: Unsupported value: "pgp"`},
		{"saved secret without its sites", func() client.Object {
			a := validAgent()
			sec := toolSecret("pin")
			sec.Domains = nil
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{sec}}
			return a
		}, `spec.tools.secrets[0].domains: Required value`},
		{"saved secret for a URL instead of a host", func() client.Object {
			a := validAgent()
			sec := toolSecret("pin")
			sec.Domains = []string{"https://shop.example/login"}
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{sec}}
			return a
		}, `spec.tools.secrets[0].domains[0]: Invalid value: "https://shop.example/login"`},
		{"skill with content and configMapRef", func() client.Object {
			a := validAgent()
			a.Spec.Skills = []picobotv1alpha1.SkillSource{{Name: "x", Content: "---\nname: x\n---", ConfigMapRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "SKILL.md"}}}
			return a
		}, "spec.skills[0]: Invalid value: a skill needs exactly one of content or configMapRef"},
		{"skill with neither", func() client.Object {
			a := validAgent()
			a.Spec.Skills = []picobotv1alpha1.SkillSource{{Name: "x"}}
			return a
		}, "a skill needs exactly one of content or configMapRef"},
		{"skill name not a DNS label", func() client.Object {
			a := validAgent()
			a.Spec.Skills = []picobotv1alpha1.SkillSource{{Name: "Bad Name", Content: "x"}}
			return a
		}, "spec.skills[0].name: Invalid value: \"Bad Name\": spec.skills[0].name in body should match"},
		{"stdio MCP server without command", func() client.Object {
			a := validAgent()
			a.Spec.MCPServers = []picobotv1alpha1.MCPServer{{Name: "fs", Transport: "stdio"}}
			return a
		}, "spec.mcpServers[0]: Invalid value: stdio servers need command (and no url); sse and streamable-http servers need url (and no command)"},
		{"http MCP server with command", func() client.Object {
			a := validAgent()
			a.Spec.MCPServers = []picobotv1alpha1.MCPServer{{Name: "gh", Transport: "streamable-http", URL: "https://mcp.example.com", Command: "npx"}}
			return a
		}, "stdio servers need command (and no url)"},
		{"MCP url not http", func() client.Object {
			a := validAgent()
			a.Spec.MCPServers = []picobotv1alpha1.MCPServer{{Name: "gh", Transport: "sse", URL: "ws://x"}}
			return a
		}, "spec.mcpServers[0].url: Invalid value: \"ws://x\": url must be an http:// or https:// URL"},
		{"MCP unknown transport", func() client.Object {
			a := validAgent()
			a.Spec.MCPServers = []picobotv1alpha1.MCPServer{{Name: "gh", Transport: "grpc", URL: "https://x"}}
			return a
		}, `spec.mcpServers[0].transport: Unsupported value: "grpc": supported values: "stdio", "sse", "streamable-http"`},
		{"valid MCP servers", func() client.Object {
			a := validAgent()
			a.Spec.MCPServers = []picobotv1alpha1.MCPServer{
				{Name: "fs", Transport: "stdio", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/workspace"},
					Tools: []picobotv1alpha1.MCPToolSetting{{Name: "read_file", ReadOnly: ptr(true)}}},
				{Name: "gh", Transport: "streamable-http", URL: "https://mcp.example.com/mcp"},
			}
			return a
		}, ""},
		{"browser allowedDomains with a persistent profile", func() client.Object {
			a := validAgent()
			a.Spec.Browser = &picobotv1alpha1.BrowserSpec{AllowedDomains: []string{"example.com"}, ProfileRef: &corev1.LocalObjectReference{Name: "work"}}
			return a
		}, "spec.browser: Invalid value: a browser restricted to allowedDomains cannot use a persistent profile (profileRef)"},
		{"browser domain pattern", func() client.Object {
			a := validAgent()
			a.Spec.Browser = &picobotv1alpha1.BrowserSpec{AllowedDomains: []string{"https://example.com"}}
			return a
		}, "spec.browser.allowedDomains[0]: Invalid value: \"https://example.com\": spec.browser.allowedDomains[0] in body should match"},
		{"telegram channel without secret", func() client.Object {
			a := validAgent()
			a.Spec.Channels = []picobotv1alpha1.Channel{{Type: "telegram"}}
			return a
		}, "spec.channels[0]: Invalid value: telegram, feishu, slack and webhook channels need secretRef with their credentials"},
		{"web channel without secret", func() client.Object {
			a := validAgent()
			a.Spec.Channels = []picobotv1alpha1.Channel{{Type: "web"}}
			return a
		}, ""},
		{"warm pool over limit", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{WarmPool: ptr(int32(101))}
			return a
		}, "spec.runtime.warmPool: Invalid value: 101: spec.runtime.warmPool in body should be less than or equal to 100"},
		{"sensitive category unknown", func() client.Object {
			a := validAgent()
			a.Spec.Memory = &picobotv1alpha1.MemorySpec{AllowSensitive: []picobotv1alpha1.SensitiveCategory{"politics"}}
			return a
		}, `spec.memory.allowSensitive[0]: Unsupported value: "politics": supported values: "health", "finance", "legal", "family"`},

		{"valid cron job", func() client.Object { return validCronJob() }, ""},
		{"valid every job", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule = picobotv1alpha1.Schedule{Every: ptr(int64(3600000))}
			return c
		}, ""},
		{"schedule with none", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule = picobotv1alpha1.Schedule{}
			return c
		}, "spec.schedule: Invalid value: schedule needs exactly one of at, every or cron"},
		{"schedule with two", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule = picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", At: ptr(int64(1))}
			return c
		}, "schedule needs exactly one of at, every or cron"},
		{"tz without cron", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule = picobotv1alpha1.Schedule{Every: ptr(int64(60000)), TZ: "UTC"}
			return c
		}, "spec.schedule: Invalid value: tz applies only to a cron schedule"},
		{"cron with 5 fields", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule.Cron = "0 9 * * *"
			return c
		}, `spec.schedule.cron: Invalid value: "0 9 * * *": cron must have exactly 6 fields: second minute hour day-of-month month day-of-week (e.g. "0 0 9 * * *")`},
		{"cron with 7 fields", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule.Cron = "0 0 9 * * * 2026"
			return c
		}, "cron must have exactly 6 fields"},
		{"every below one minute", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule = picobotv1alpha1.Schedule{Every: ptr(int64(1000))}
			return c
		}, "spec.schedule.every: Invalid value: 1000: every must be at least 60000 ms (one minute)"},
		{"tz with spaces", func() client.Object {
			c := validCronJob()
			c.Spec.Schedule.TZ = "Asia Shanghai"
			return c
		}, "spec.schedule.tz: Invalid value: \"Asia Shanghai\": spec.schedule.tz in body should match"},
		{"empty prompt", func() client.Object {
			c := validCronJob()
			c.Spec.Prompt = ""
			return c
		}, "spec.prompt: Invalid value: \"\": spec.prompt in body should be at least 1 chars long"},
		{"unknown delivery policy", func() client.Object {
			c := validCronJob()
			c.Spec.DeliveryPolicy = "sometimes"
			return c
		}, `spec.deliveryPolicy: Unsupported value: "sometimes": supported values: "always", "on_alert", "never"`},
		{"catchUpWindow without catch_up", func() client.Object {
			c := validCronJob()
			c.Spec.CatchUpWindow = picobotv1alpha1.NewDuration(time.Hour)
			return c
		}, "spec: Invalid value: catchUpWindow applies only with missedRunPolicy catch_up"},
		{"catchUpWindow with catch_up", func() client.Object {
			c := validCronJob()
			c.Spec.MissedRunPolicy = picobotv1alpha1.MissedCatchUp
			c.Spec.CatchUpWindow = picobotv1alpha1.NewDuration(time.Hour)
			return c
		}, ""},

		{"valid browser profile", func() client.Object { return validProfile() }, ""},
		{"idleTimeout forever", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "forever"}}
			return a
		}, `spec.runtime.idleTimeout: Invalid value: "forever": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`},
		{"idleTimeout zero", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "0s"}}
			return a
		}, `spec.runtime.idleTimeout: Invalid value: "0s": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`},
		{"idleTimeout two days", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "48h"}}
			return a
		}, `spec.runtime.idleTimeout: Invalid value: "48h": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`},
		{"idleTimeout negative", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "-5m"}}
			return a
		}, `spec.runtime.idleTimeout: Invalid value: "-5m": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`},
		{"idleTimeout hours and minutes", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{IdleTimeout: picobotv1alpha1.NewDuration(90 * time.Minute)}
			return a
		}, ""},
		{"idleTimeout too long a string", func() client.Object {
			a := validAgent()
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h"}}
			return a
		}, `spec.runtime.idleTimeout: Too long: may not be more than 32 bytes`},
		{"mcp timeout over an hour", func() client.Object {
			a := validAgent()
			a.Spec.MCPServers = []picobotv1alpha1.MCPServer{{Name: "fs", Transport: "stdio", Command: "npx", Timeout: picobotv1alpha1.NewDuration(2 * time.Hour)}}
			return a
		}, `spec.mcpServers[0].timeout: Invalid value: "2h0m0s": timeout must be a duration such as 30s or 2m, from 1s to 1h`},
		{"catchUpWindow forever", func() client.Object {
			c := validCronJob()
			c.Spec.MissedRunPolicy = "catch_up"
			c.Spec.CatchUpWindow = &picobotv1alpha1.Duration{Invalid: "forever"}
			return c
		}, `spec.catchUpWindow: Invalid value: "forever": catchUpWindow must be a duration such as 1h or 168h, from 1s to 8760h`},
		{"browser idleTimeout forever", func() client.Object {
			p := validProfile()
			p.Spec.IdleTimeout = &picobotv1alpha1.Duration{Invalid: "forever"}
			return p
		}, `spec.idleTimeout: Invalid value: "forever": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`},
		{"allowed paths", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{FS: &picobotv1alpha1.FSToolsSpec{AllowedPaths: []picobotv1alpha1.AllowedPath{
				{Path: "/srv/docs"}, {Path: "/srv/out", Access: picobotv1alpha1.FSReadWrite}}}}
			return a
		}, ""},
		{"allowed ports", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: []int32{1, 5432, 65535}}}
			return a
		}, ""},
		{"allowed port 0", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: []int32{8000, 0}}}
			return a
		}, `spec.tools.network.allowedPorts[1]: Invalid value: 0: spec.tools.network.allowedPorts[1] in body should be greater than or equal to 1`},
		{"allowed port beyond 65535", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: []int32{65536}}}
			return a
		}, `spec.tools.network.allowedPorts[0]: Invalid value: 65536: spec.tools.network.allowedPorts[0] in body should be less than or equal to 65535`},
		{"allowed port twice", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: []int32{8000, 8000}}}
			return a
		}, `spec.tools.network.allowedPorts[1]: Duplicate value: 8000`},
		{"too many allowed ports", func() client.Object {
			a := validAgent()
			ports := make([]int32, 65)
			for i := range ports {
				ports[i] = int32(1000 + i)
			}
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Network: &picobotv1alpha1.NetworkToolsSpec{AllowedPorts: ports}}
			return a
		}, `spec.tools.network.allowedPorts: Too many: 65: must have at most 64 items`},
		{"allowed path relative", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{FS: &picobotv1alpha1.FSToolsSpec{AllowedPaths: []picobotv1alpha1.AllowedPath{{Path: "srv/docs"}}}}
			return a
		}, `spec.tools.fs.allowedPaths[0].path: Invalid value: "srv/docs": path must be absolute (start with /)`},
		{"allowed path with dot-dot", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{FS: &picobotv1alpha1.FSToolsSpec{AllowedPaths: []picobotv1alpha1.AllowedPath{{Path: "/srv/../etc"}}}}
			return a
		}, `spec.tools.fs.allowedPaths[0].path: Invalid value: "/srv/../etc": path must not contain . or .. segments`},
		{"allowed path root", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{FS: &picobotv1alpha1.FSToolsSpec{AllowedPaths: []picobotv1alpha1.AllowedPath{{Path: "//"}}}}
			return a
		}, `spec.tools.fs.allowedPaths[0].path: Invalid value: "//": path must not be / (the whole file system)`},
		{"allowed path unknown access", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{FS: &picobotv1alpha1.FSToolsSpec{AllowedPaths: []picobotv1alpha1.AllowedPath{{Path: "/srv", Access: "Execute"}}}}
			return a
		}, `spec.tools.fs.allowedPaths[0].access: Unsupported value: "Execute": supported values: "ReadOnly", "ReadWrite"`},
		{"exec approvals", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Exec: &picobotv1alpha1.ExecToolsSpec{Security: picobotv1alpha1.ExecSecurityAllowlist,
				Ask: picobotv1alpha1.ExecAskOnMiss, Allowlist: []string{"git *", "ls"}, ApprovalTimeout: picobotv1alpha1.NewDuration(time.Minute)}}
			return a
		}, ""},
		{"exec unknown security", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Exec: &picobotv1alpha1.ExecToolsSpec{Security: "sandbox"}}
			return a
		}, `spec.tools.exec.security: Unsupported value: "sandbox": supported values: "deny", "allowlist", "full"`},
		{"exec unknown ask", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Exec: &picobotv1alpha1.ExecToolsSpec{Ask: "sometimes"}}
			return a
		}, `spec.tools.exec.ask: Unsupported value: "sometimes": supported values: "off", "on-miss", "always"`},
		{"exec allowlist without security allowlist", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Exec: &picobotv1alpha1.ExecToolsSpec{Ask: picobotv1alpha1.ExecAskOnMiss, Allowlist: []string{"git *"}}}
			return a
		}, "spec.tools.exec: Invalid value: allowlist is used only with security: allowlist"},
		{"exec approval timeout too long", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Exec: &picobotv1alpha1.ExecToolsSpec{ApprovalTimeout: picobotv1alpha1.NewDuration(2 * time.Hour)}}
			return a
		}, `spec.tools.exec.approvalTimeout: Invalid value: "2h0m0s": approvalTimeout must be a duration such as 30s or 2m, from 1s to 1h`},
		{"message crossChat with a chat channel", func() client.Object {
			a := validAgent()
			a.Spec.Channels = []picobotv1alpha1.Channel{{Type: "telegram", SecretRef: &corev1.LocalObjectReference{Name: "tg"}}}
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Message: &picobotv1alpha1.MessageToolSpec{CrossChat: ptr(true)}}
			return a
		}, ""},
		{"message crossChat off without a chat channel", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Message: &picobotv1alpha1.MessageToolSpec{CrossChat: ptr(false)}}
			return a
		}, ""},
		{"message crossChat without a chat channel", func() client.Object {
			a := validAgent()
			a.Spec.Channels = []picobotv1alpha1.Channel{{Type: "web"}}
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Message: &picobotv1alpha1.MessageToolSpec{CrossChat: ptr(true)}}
			return a
		}, "spec: Invalid value: tools.message.crossChat needs a telegram, feishu, slack or webhook channel in channels"},
		{"web search on brave", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchBrave,
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "search"}, Key: "apiKey"}, Count: ptr(int32(10))}}
			return a
		}, ""},
		{"web search on searxng", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG,
				BaseURL: "http://searxng.search.svc:8080/", Count: ptr(int32(1))}}
			return a
		}, ""},
		{"web search unknown provider", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: "google"}}
			return a
		}, `spec.tools.webSearch.provider: Unsupported value: "google": supported values: "brave", "searxng"`},
		{"web search brave without key", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchBrave}}
			return a
		}, "spec.tools.webSearch: Invalid value: apiKeySecretRef is required with provider brave"},
		{"web search brave with baseURL", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchBrave, BaseURL: "https://proxy.example.com",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "search"}, Key: "apiKey"}}}
			return a
		}, "spec.tools.webSearch: Invalid value: baseURL is used only with provider searxng"},
		{"web search searxng without baseURL", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG}}
			return a
		}, "spec.tools.webSearch: Invalid value: baseURL is required with provider searxng"},
		{"web search searxng with a key", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "http://searxng:8080",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "search"}, Key: "apiKey"}}}
			return a
		}, "spec.tools.webSearch: Invalid value: apiKeySecretRef is used only with provider brave"},
		{"web search baseURL not http", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "searxng:8080"}}
			return a
		}, `spec.tools.webSearch.baseURL: Invalid value: "searxng:8080": baseURL must be an http:// or https:// URL without query or fragment`},
		{"web search baseURL with a query", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "http://searxng/?format=json"}}
			return a
		}, `baseURL must be an http:// or https:// URL without query or fragment`},
		{"web search count 0", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "http://searxng", Count: ptr(int32(0))}}
			return a
		}, "spec.tools.webSearch.count: Invalid value: 0: spec.tools.webSearch.count in body should be greater than or equal to 1"},
		{"web search count 11", func() client.Object {
			a := validAgent()
			a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "http://searxng", Count: ptr(int32(11))}}
			return a
		}, "spec.tools.webSearch.count: Invalid value: 11: spec.tools.webSearch.count in body should be less than or equal to 10"},
		{"profile without label", func() client.Object {
			p := validProfile()
			p.Spec.Label = ""
			return p
		}, ""},
		{"label of 80 characters", func() client.Object {
			p := validProfile()
			p.Spec.Label = strings.Repeat("界", 80)
			return p
		}, ""},
		{"label of 81 characters", func() client.Object {
			p := validProfile()
			p.Spec.Label = strings.Repeat("a", 81)
			return p
		}, "spec.label: Too long: may not be more than 80"},
		{"blank label", func() client.Object {
			p := validProfile()
			p.Spec.Label = "   "
			return p
		}, "spec.label: Invalid value: \"   \": label must be 1-80 characters and not blank"},
		{"pvc size on s3 storage", func() client.Object {
			p := validProfile()
			q := resource.MustParse("1Gi")
			p.Spec.Persistence = &picobotv1alpha1.Persistence{Storage: "s3", Size: &q}
			return p
		}, "spec.persistence: Invalid value: size and storageClassName apply only to storage pvc"},
		{"unknown storage", func() client.Object {
			p := validProfile()
			p.Spec.Persistence = &picobotv1alpha1.Persistence{Storage: "nfs"}
			return p
		}, `spec.persistence.storage: Unsupported value: "nfs": supported values: "s3", "pvc"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := k8s.Create(context.Background(), tc.obj())
			if tc.reject == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(tc.reject))
		})
	}
}

func TestDefaults(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()

	a := validAgent()
	a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{}
	a.Spec.Memory = &picobotv1alpha1.MemorySpec{}
	g.Expect(k8s.Create(ctx, a)).To(Succeed())
	g.Expect(*a.Spec.Model.ContextWindow).To(Equal(int32(128000)))
	g.Expect(a.Spec.Runtime.IdleTimeout.Duration).To(Equal(10 * time.Minute))
	g.Expect(*a.Spec.Runtime.WarmPool).To(Equal(int32(0)))
	g.Expect(*a.Spec.Memory.TimelineRetentionDays).To(Equal(int32(90)))
	g.Expect(*a.Spec.Memory.Enabled).To(BeTrue())

	e := validAgent()
	e.Spec.Tools = &picobotv1alpha1.ToolsSpec{Exec: &picobotv1alpha1.ExecToolsSpec{}}
	g.Expect(k8s.Create(ctx, e)).To(Succeed())
	g.Expect(e.Spec.Tools.Exec.Security).To(Equal(picobotv1alpha1.ExecSecurityFull))
	g.Expect(e.Spec.Tools.Exec.Ask).To(Equal(picobotv1alpha1.ExecAskOff))

	c := validCronJob()
	g.Expect(k8s.Create(ctx, c)).To(Succeed())
	g.Expect(c.Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryAlways))
	g.Expect(c.Spec.MissedRunPolicy).To(Equal(picobotv1alpha1.MissedRunOnce))

	p := validProfile()
	p.Spec.Persistence = &picobotv1alpha1.Persistence{}
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	g.Expect(p.Spec.IdleTimeout.Duration).To(Equal(time.Hour))
	g.Expect(p.Spec.Persistence.Storage).To(Equal(picobotv1alpha1.StorageS3))
}

// TestPersistenceImmutable checks the transition rules of BrowserProfile.
func TestPersistenceImmutable(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		create *picobotv1alpha1.Persistence
		update *picobotv1alpha1.Persistence
		reject string
	}{
		{"change storage", &picobotv1alpha1.Persistence{Storage: "s3"}, &picobotv1alpha1.Persistence{Storage: "pvc"},
			"spec.persistence: Invalid value: persistence is immutable; create a new BrowserProfile instead"},
		{"add after creation", nil, &picobotv1alpha1.Persistence{Storage: "pvc"}, "persistence is immutable"},
		{"remove after creation", &picobotv1alpha1.Persistence{Storage: "pvc"}, nil, "persistence is immutable"},
		{"unchanged", &picobotv1alpha1.Persistence{Storage: "pvc"}, &picobotv1alpha1.Persistence{Storage: "pvc"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := validProfile()
			p.Spec.Persistence = tc.create
			g.Expect(k8s.Create(ctx, p)).To(Succeed())
			p.Spec.Persistence = tc.update
			p.Spec.Label = "renamed"
			err := k8s.Update(ctx, p)
			if tc.reject == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.reject)))
		})
	}
}
