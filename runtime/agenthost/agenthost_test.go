package agenthost_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const tenant = "team"

func TestSecretEnvName(t *testing.T) {
	for _, tc := range []struct{ name, key, want string }{
		{"llm", "apiKey", "PICOBOT_SECRET_LLM_APIKEY"},
		{"my-llm", "api.key", "PICOBOT_SECRET_MY_LLM_API_KEY"},
		{"tg--bot", "webhook_secret", "PICOBOT_SECRET_TG_BOT_WEBHOOK_SECRET"},
		{"a.b", "k9", "PICOBOT_SECRET_A_B_K9"},
	} {
		NewWithT(t).Expect(agenthost.SecretEnvName(tc.name, tc.key)).To(Equal(tc.want), "%s/%s", tc.name, tc.key)
	}
}

func secretEnv(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
}

func keyRef(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// EnvSecrets reads only the variables of the keys the agent references: a
// PICOBOT_SECRET_ variable of another Secret or key never reaches the agent.
func TestEnvSecrets(t *testing.T) {
	a := &picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{
		Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("llm", "apiKey")},
			Fallbacks: []picobotv1alpha1.ModelRef{{Provider: "anthropic", Model: "c", APIKeySecretRef: keyRef("backup", "key")}}},
		Channels: []picobotv1alpha1.Channel{
			{Name: "tg", Type: "telegram", SecretRef: &corev1.LocalObjectReference{Name: "tg"}},
			{Name: "sl", Type: "slack", SecretRef: &corev1.LocalObjectReference{Name: "sl"}}},
		MCPServers: []picobotv1alpha1.MCPServer{{Name: "gh", Transport: "stdio", Command: "gh-mcp", Env: []corev1.EnvVar{secretEnv("gh", "TOKEN")}}},
		Tools:      &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchBrave, APIKeySecretRef: keyRef("search", "apiKey")}},
	}}
	env := map[string]string{
		"PICOBOT_SECRET_SEARCH_APIKEY":    "BSA-env",
		"PICOBOT_SECRET_LLM_APIKEY":       "sk-env",
		"PICOBOT_SECRET_LLM_OTHER":        "not referenced",
		"PICOBOT_SECRET_BACKUP_KEY":       "sk-backup",
		"PICOBOT_SECRET_TG_TOKEN":         "tg-token",
		"PICOBOT_SECRET_SL_BOTTOKEN":      "xoxb",
		"PICOBOT_SECRET_SL_SIGNINGSECRET": "shh",
		"PICOBOT_SECRET_GH_TOKEN":         "ghp",
		"PICOBOT_SECRET_STRANGER_APIKEY":  "someone else's",
	}
	given := map[string]*corev1.Secret{"llm": {Data: map[string][]byte{"apiKey": []byte("sk-given")}}}
	lookup := agenthost.EnvSecrets(given, func(name string) string { return env[name] }, a)
	data := func(name string) map[string][]byte {
		if s := lookup(name); s != nil {
			return s.Data
		}
		return nil
	}
	g := NewWithT(t)
	g.Expect(data("llm")).To(Equal(map[string][]byte{"apiKey": []byte("sk-given")}), "a given Secret comes first")
	g.Expect(data("backup")).To(Equal(map[string][]byte{"key": []byte("sk-backup")}))
	g.Expect(data("tg")).To(Equal(map[string][]byte{"token": []byte("tg-token")}), "only the channel's keys that are set")
	g.Expect(data("sl")).To(Equal(map[string][]byte{"botToken": []byte("xoxb"), "signingSecret": []byte("shh")}))
	g.Expect(data("gh")).To(Equal(map[string][]byte{"TOKEN": []byte("ghp")}))
	g.Expect(data("search")).To(Equal(map[string][]byte{"apiKey": []byte("BSA-env")}), "the web search key, as session pods and picobot serve get it")
	g.Expect(lookup("stranger")).To(BeNil(), "a Secret the agent does not reference")

	// Without a given Secret the model's key comes from the environment too,
	// and only the referenced key of it.
	lookup = agenthost.EnvSecrets(nil, func(name string) string { return env[name] }, a)
	g.Expect(lookup("llm").Data).To(Equal(map[string][]byte{"apiKey": []byte("sk-env")}))
	// Referenced but not set: no Secret, so the model reports it missing.
	lookup = agenthost.EnvSecrets(nil, func(string) string { return "" }, a)
	g.Expect(lookup("llm")).To(BeNil())
}

type fixture struct {
	llm   *fakellm.Server
	store *sqlite.Store
	dir   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "picobot.db"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	return &fixture{llm: llm, store: st, dir: dir}
}

func (f *fixture) host(secrets ...*corev1.Secret) *agenthost.Host {
	return &agenthost.Host{Mode: agenthost.ModeEmbedded, Tenant: tenant, Store: f.store, StateDir: f.dir, Holder: "test",
		Log: slog.New(slog.DiscardHandler),
		Secrets: func(name string) *corev1.Secret {
			for _, s := range secrets {
				if s.Name == name {
					return s
				}
			}
			return nil
		}}
}

func secret(name, key, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{key: []byte(value)}}
}

func agentWith(name string, spec picobotv1alpha1.AgentSpec) *picobotv1alpha1.Agent {
	return &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant}, Spec: spec}
}

func build(t *testing.T, h *agenthost.Host, a *picobotv1alpha1.Agent) *agenthost.Built {
	t.Helper()
	b, err := h.Build(context.Background(), a)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(b.Close)
	return b
}

// modelOf is the agent's effective model as clients see it: provider,
// model, source.
func modelOf(b *agenthost.Built) [3]string {
	if b.Info.Model == nil {
		return [3]string{}
	}
	return [3]string{b.Info.Model.Provider, b.Info.Model.Model, b.Info.Model.Source}
}

func say(b *agenthost.Built, chat, text string) (session.Reply, error) {
	return b.Manager.Handle(store.WithTenant(context.Background(), tenant), session.Inbound{Channel: "web", ChatID: chat, Text: text})
}

func TestBuildAnAgentWithItsModel(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	b := build(t, f.host(secret("llm", "apiKey", "sk-test")), agentWith("helper", picobotv1alpha1.AgentSpec{
		Instructions: "You are the team's helper.",
		Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "test-model", BaseURL: f.llm.URL(),
			APIKeySecretRef: keyRef("llm", "apiKey")}, ContextWindow: new(int32(64000))},
		Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:fs", "calculator"}, Deny: []string{"file_write"}}},
	}))

	g.Expect(b.Name).To(Equal("helper"))
	g.Expect(b.Info.Name).To(Equal("helper"))
	g.Expect(b.Info.Ready).To(BeTrue())
	g.Expect(b.Info.Reason).To(Equal(picobotv1alpha1.ReasonResolvedFromSpec))
	g.Expect(b.Info.Message).To(Equal("Using openai/test-model from spec.model"))
	g.Expect(modelOf(b)).To(Equal([3]string{"openai", "test-model", string(picobotv1alpha1.ModelSourceSpec)}))
	g.Expect(b.Info.Tools).To(ConsistOf("apply_patch", "calculator", "content_search", "file_edit", "file_read", "file_search"),
		"the allow list, less the deny list")
	g.Expect(b.Loop.Compressor.Window).To(Equal(64000), "the model's context window bounds the history")
	g.Expect(b.Session.Agent).To(Equal("helper"))

	f.llm.Script(fakellm.Turn{Text: "Hello from the model."})
	reply, err := say(b, "alice", "Hi!")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("Hello from the model."))
	reqs := f.llm.Requests()
	g.Expect(reqs).To(HaveLen(1))
	g.Expect(reqs[0].Model).To(Equal("test-model"))
	g.Expect(reqs[0].Header.Get("Authorization")).To(Equal("Bearer sk-test"), "the key from the agent's Secret")
	g.Expect(reqs[0].System).To(ContainSubstring("You are the team's helper."))
	g.Expect(reqs[0].Tools).To(ConsistOf(b.Info.Tools), "the model is offered exactly the agent's tools")
}

func TestBuildWithoutAUsableModel(t *testing.T) {
	missingKey := &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("llm", "apiKey")}}
	cases := []struct {
		name    string
		model   *picobotv1alpha1.ModelSpec
		hint    bool
		reason  string
		message string
	}{
		{name: "its Secret is missing", model: missingKey, reason: picobotv1alpha1.ReasonSecretNotFound,
			message: `No usable model: spec.model: Secret "llm" (API key of openai/m) not found`},
		{name: "its Secret is missing, with the host's hint", model: missingKey, hint: true, reason: picobotv1alpha1.ReasonSecretNotFound,
			message: `No usable model: spec.model: Secret "llm" (API key of openai/m) not found. Set PICOBOT_SECRET_LLM_APIKEY`},
		{name: "none configured (no hint: no key to name)", hint: true, reason: picobotv1alpha1.ReasonNoModelConfigured,
			message: `spec.model is not set and the namespace has no ConfigMap "picobot-defaults" with a default model`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			h := f.host()
			if tc.hint {
				h.SecretHint = func(sel corev1.SecretKeySelector) string { return "Set " + agenthost.SecretEnvName(sel.Name, sel.Key) }
			}
			b := build(t, h, agentWith("keyless", picobotv1alpha1.AgentSpec{Model: tc.model}))
			g.Expect(b.Info.Ready).To(BeFalse())
			g.Expect(b.Info.Model).To(BeNil())
			g.Expect(b.Info.Reason).To(Equal(tc.reason))
			g.Expect(b.Info.Message).To(Equal(tc.message))
			g.Expect(b.Loop.Compressor.Window).To(Equal(128000))

			// The agent still loads; a turn tells the user why it cannot answer.
			_, err := say(b, "alice", "Hi!")
			var coded *protocol.CodedError
			g.Expect(errors.As(err, &coded)).To(BeTrue(), "%v", err)
			g.Expect(coded.Code).To(Equal(protocol.CodeNoModel))
			g.Expect(coded.Error()).To(Equal("agent keyless has no usable model: " + tc.message))
			g.Expect(f.llm.Requests()).To(BeEmpty())
		})
	}
}

func TestBuildWithTheNamespaceDefault(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	h := f.host(secret("shared-llm", "token", "sk-shared"))
	h.Defaults = &corev1.ConfigMap{Data: map[string]string{"provider": "openai", "model": "house-model", "baseURL": f.llm.URL(),
		"apiKeySecret": "shared-llm", "apiKeySecretKey": "token", "contextWindow": "32000"}}
	b := build(t, h, agentWith("plain", picobotv1alpha1.AgentSpec{}))
	g.Expect(b.Info.Ready).To(BeTrue(), b.Info.Message)
	g.Expect(modelOf(b)).To(Equal([3]string{"openai", "house-model", string(picobotv1alpha1.ModelSourceNamespaceDefault)}))
	g.Expect(b.Loop.Compressor.Window).To(Equal(32000))

	f.llm.Script(fakellm.Turn{Text: "From the house model."})
	reply, err := say(b, "alice", "Hi!")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("From the house model."))
	g.Expect(f.llm.Requests()[0].Model).To(Equal("house-model"))

	t.Run("its key reaches the model", func(t *testing.T) {
		// The effective model (a status field) names no Secret: the key
		// comes from the resolution's reference.
		NewWithT(t).Expect(f.llm.Requests()[0].Header.Get("Authorization")).To(Equal("Bearer sk-shared"))
	})
}

// The chain starts at the model in use and falls back along the later ones
// that have their key, skipping those without.
func TestBuildChainsTheFallbacks(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	second := fakellm.New()
	t.Cleanup(second.Close)
	b := build(t, f.host(secret("a", "apiKey", "sk-a"), secret("b", "apiKey", "sk-b")), agentWith("resilient", picobotv1alpha1.AgentSpec{
		Model: &picobotv1alpha1.ModelSpec{
			ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "primary", BaseURL: f.llm.URL(), APIKeySecretRef: keyRef("gone", "apiKey")},
			Fallbacks: []picobotv1alpha1.ModelRef{
				{Provider: "openai", Model: "first", BaseURL: f.llm.URL(), APIKeySecretRef: keyRef("a", "apiKey")},
				{Provider: "openai", Model: "keyless", BaseURL: f.llm.URL(), APIKeySecretRef: keyRef("gone", "apiKey")},
				{Provider: "openai", Model: "second", BaseURL: second.URL(), APIKeySecretRef: keyRef("b", "apiKey")}}}}))
	g.Expect(b.Info.Ready).To(BeTrue())
	g.Expect(modelOf(b)).To(Equal([3]string{"openai", "first", string(picobotv1alpha1.ModelSourceFallback)}))

	// The first fallback refuses the key; the second answers.
	f.llm.Script(fakellm.Turn{Status: http.StatusUnauthorized, ErrorBody: "invalid api key"})
	second.Script(fakellm.Turn{Text: "The second fallback answers."})
	reply, err := say(b, "alice", "Hi!")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("The second fallback answers."))
	first := f.llm.Requests()
	g.Expect(first).To(HaveLen(1), "neither the primary (no key) nor the keyless fallback is called")
	g.Expect(first[0].Model).To(Equal("first"))
	g.Expect(first[0].Header.Get("Authorization")).To(Equal("Bearer sk-a"))
	g.Expect(second.Requests()).To(HaveLen(1))
	g.Expect(second.Requests()[0].Header.Get("Authorization")).To(Equal("Bearer sk-b"))
}

// Each dialog works in a folder of its own under the host's state folder.
func TestWorkspaces(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	b := build(t, f.host(), agentWith("helper", picobotv1alpha1.AgentSpec{}))
	ws := b.Session.Workspace(session.ID{Channel: "web", ChatID: "alice", DialogID: "d_1"})
	g.Expect(ws).To(Equal(filepath.Join(f.dir, "workspaces", "helper", session.WorkspaceName(session.ID{Channel: "web", ChatID: "alice", DialogID: "d_1"}))))
	g.Expect(filepath.Base(ws)).To(HavePrefix("web_alice_d_1-"))
	fi, err := os.Stat(ws)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.IsDir()).To(BeTrue())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o700)))
	g.Expect(b.Session.Workspace(session.ID{Channel: "web", ChatID: "bob", DialogID: "d_1"})).NotTo(Equal(ws))
	g.Expect(b.Session.Workspace(session.ID{Channel: "web", ChatID: "alice", DialogID: "d_2"})).NotTo(Equal(ws))
}

// inventory is an MCP server over streamable HTTP that wants a bearer token.
func inventory(t *testing.T) string {
	t.Helper()
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "inventory", Version: "1.0.0"}, nil)
	type lookupIn struct {
		SKU string `json:"sku"`
	}
	mcpsdk.AddTool(srv, &mcpsdk.Tool{Name: "lookup", Description: "Looks up the stock of a SKU."},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, in lookupIn) (*mcpsdk.CallToolResult, any, error) {
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "12 in stock of " + in.SKU}}}, nil, nil
		})
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer inv-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return hs.URL
}

// MCP tools join the policy catalog: allow, deny and wildcards apply to them
// as to built-ins; their headers come from the agent's Secrets.
func TestMCPToolsFollowThePolicy(t *testing.T) {
	url := inventory(t)
	servers := []picobotv1alpha1.MCPServer{{Name: "inv", Transport: "streamable-http", URL: url,
		HeadersSecretRef: &corev1.LocalObjectReference{Name: "inv-headers"}}}
	headers := secret("inv-headers", "Authorization", "Bearer inv-token")

	t.Run("allowed, and called", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(t)
		b := build(t, f.host(headers), agentWith("stock", picobotv1alpha1.AgentSpec{MCPServers: servers,
			Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", BaseURL: f.llm.URL()}},
			Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"mcp_inv_*"}}}}))
		g.Expect(b.Info.Tools).To(Equal([]string{"mcp_inv_lookup"}))
		g.Expect(b.Session.MCPStatus()).To(ContainSubstring("inv (streamable-http): connected, 1 tool"))

		f.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "mcp_inv_lookup", Args: `{"sku":"A-1"}`}}}, fakellm.Turn{Text: "12 left."})
		reply, err := say(b, "alice", "How many A-1?")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(reply.Text).To(Equal("12 left."))
		reqs := f.llm.Requests()
		g.Expect(reqs).To(HaveLen(2))
		var results []fakellm.ToolResult
		for _, m := range reqs[1].Messages {
			results = append(results, m.ToolResults...)
		}
		g.Expect(results).To(HaveLen(1))
		g.Expect(results[0].CallID).To(Equal("c1"))
		g.Expect(results[0].IsError).To(BeFalse())
		g.Expect(results[0].Content).To(ContainSubstring("12 in stock of A-1"))
	})
	t.Run("denied by a wildcard", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(t)
		b := build(t, f.host(headers), agentWith("stock", picobotv1alpha1.AgentSpec{MCPServers: servers,
			Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"calculator", "mcp_inv_lookup"}, Deny: []string{"mcp_*"}}}}))
		g.Expect(b.Info.Tools).To(Equal([]string{"calculator"}))
		g.Expect(b.Session.MCPStatus()).To(ContainSubstring("inv (streamable-http): connected, 1 tool"), "the server still connects")
	})
	t.Run("its headers Secret missing", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(t)
		b := build(t, f.host(), agentWith("stock", picobotv1alpha1.AgentSpec{MCPServers: servers}))
		g.Expect(b.Info.Tools).NotTo(ContainElement("mcp_inv_lookup"))
		g.Expect(b.Session.MCPStatus()).To(ContainSubstring(`inv (streamable-http): failed: failed to read headers secret "inv-headers": no Secret "inv-headers"`))
	})
}

// An MCP server's env Secret that is missing fails that server alone, and
// the host's hint says how to provide it.
func TestMCPEnvSecretMissing(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	h := f.host()
	h.SecretHint = func(sel corev1.SecretKeySelector) string { return "set " + agenthost.SecretEnvName(sel.Name, sel.Key) }
	b := build(t, h, agentWith("gh", picobotv1alpha1.AgentSpec{MCPServers: []picobotv1alpha1.MCPServer{{Name: "gh", Transport: "stdio",
		Command: "true", Env: []corev1.EnvVar{{Name: "GH_TOKEN", ValueFrom: secretEnv("gh-creds", "token").ValueFrom}}}}}))
	g.Expect(b.Session.MCPStatus()).To(ContainSubstring(
		`gh (stdio): failed: failed to read key "token" of secret "gh-creds" for env GH_TOKEN: no Secret "gh-creds" with key "token"; set PICOBOT_SECRET_GH_CREDS_TOKEN`))
	g.Expect(filepath.Join(f.dir, "workspaces", "gh", ".mcp")).To(BeADirectory(), "MCP servers work in a folder of the agent's")
}

// TestDelegateWithoutSubAgentRuns: a host that runs no sub-agents (one
// given no Delegates runner) still gives delegate to an Agent with delegate edges, and a call is
// answered with the host's reason, recorded nowhere.
func TestDelegateWithoutSubAgentRuns(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	h := f.host()
	h.Mode = agenthost.ModeCluster
	h.DelegatesUnavailable = "this host runs no sub-agents"
	a := agentWith("lead", picobotv1alpha1.AgentSpec{
		Model:     &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", BaseURL: f.llm.URL()}},
		Delegates: []picobotv1alpha1.Delegate{{Name: "helper", AgentRef: corev1.LocalObjectReference{Name: "helper"}}},
		Tools:     &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "minimal"}}})
	b := build(t, h, a)
	g.Expect(b.Info.Tools).To(Equal([]string{"agent_task", "delegate", "session_status"}))
	f.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "delegate", Args: `{"target":"helper","task":"x"}`}}},
		fakellm.Turn{Text: "I will do it myself."})
	_, err := say(b, "c1", "delegate it")
	g.Expect(err).NotTo(HaveOccurred())
	reqs := f.llm.Requests()
	g.Expect(reqs).To(HaveLen(2))
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	g.Expect(last.Content + fmt.Sprint(last.ToolResults)).To(ContainSubstring("error: delegation is not available here: this host runs no sub-agents"))
	runs, err := f.store.ListAgentRuns(store.WithTenant(context.Background(), tenant), store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(BeEmpty())
}

// TestLLMTaskUsesTheAgentsEndpoints: llm_task's provider override goes to
// the endpoint and key of the agent's model of that provider (here its
// Anthropic fallback) with the model asked for; a provider the agent has no
// endpoint for, and a model outside spec.tools.llmTask.allowedModels, are
// refused as tool errors the model reads.
func TestLLMTaskUsesTheAgentsEndpoints(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	b := build(t, f.host(secret("llm", "apiKey", "sk-main"), secret("backup", "key", "sk-backup")), agentWith("helper", picobotv1alpha1.AgentSpec{
		Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "main-model", BaseURL: f.llm.URL(),
			APIKeySecretRef: keyRef("llm", "apiKey")},
			Fallbacks: []picobotv1alpha1.ModelRef{{Provider: "anthropic", Model: "backup-model", BaseURL: f.llm.AnthropicURL(),
				APIKeySecretRef: keyRef("backup", "key")}}},
		Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"llm_task"}},
			LLMTask: &picobotv1alpha1.LLMTaskSpec{AllowedModels: []string{"anthropic/claude-task", "google/gemini-x", "openai/main-model"}}},
	}))
	call := func(provider, model string) fakellm.Turn {
		args := fmt.Sprintf(`{"prompt":"Classify.","provider":%q,"model":%q}`, provider, model)
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "llm_task", Args: args}}}
	}
	f.llm.Script(call("anthropic", "claude-task"), fakellm.Turn{Text: `{"label":"ok"}`}, fakellm.Turn{Text: "done"})
	_, err := say(b, "c1", "go")
	g.Expect(err).NotTo(HaveOccurred())
	reqs := f.llm.Requests()
	g.Expect(reqs).To(HaveLen(3))
	task := reqs[1]
	g.Expect(task.Protocol).To(Equal(fakellm.ProtocolAnthropic))
	g.Expect(task.Model).To(Equal("claude-task"))
	g.Expect(task.Header.Get("X-Api-Key")).To(Equal("sk-backup"))
	g.Expect(task.Tools).To(BeEmpty())
	g.Expect(lastToolResult(reqs[2])).To(MatchJSON(`{"label":"ok"}`))

	for _, tc := range []struct{ provider, model, want string }{
		{"google", "gemini-x", `this agent has no endpoint for provider "google" (its models use anthropic, openai)`},
		{"openai", "gpt-other", `model "openai/gpt-other" is not allowed for llm_task; allowed: anthropic/claude-task, google/gemini-x, openai/main-model`},
	} {
		before := len(f.llm.Requests())
		f.llm.Script(call(tc.provider, tc.model), fakellm.Turn{Text: "done"})
		_, err := say(b, "c1", "again")
		g.Expect(err).NotTo(HaveOccurred())
		reqs := f.llm.Requests()
		g.Expect(reqs).To(HaveLen(before+2), "no model call for a refused llm_task")
		g.Expect(lastToolResult(reqs[len(reqs)-1])).To(ContainSubstring(tc.want))
	}
}

// lastToolResult is the content of the last tool message of a request.
func lastToolResult(r fakellm.Recorded) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "tool" {
			return r.Messages[i].Content
		}
	}
	return ""
}
