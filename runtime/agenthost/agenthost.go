// Package agenthost assembles a runnable agent — model chain, tools, MCP
// servers, features such as memory, skills and schedules, and its session
// manager — from an Agent resource and the services of the process hosting it.
// Embedded mode (`picobot serve`) and a cluster session pod use the same code,
// so an agent behaves the same in both.
package agenthost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/mcp"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/scheduler/localrun"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/agentconfig"
	"github.com/picobot/picobot/runtime/tool/builtin"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tool/imagetool"
	"github.com/picobot/picobot/runtime/tool/llmtask"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/runtime/tool/sessions"
	"github.com/picobot/picobot/runtime/tool/shell"
	"github.com/picobot/picobot/runtime/tool/todo"
	"github.com/picobot/picobot/runtime/tracing"
)

// Mode says where an agent runs.
type Mode = feature.Mode

// Modes.
const (
	ModeEmbedded = feature.ModeEmbedded
	ModeCluster  = feature.ModeCluster
)

// Host is what the hosting process provides to every agent it runs.
type Host struct {
	Mode   Mode
	Tenant string
	Store  store.Store
	// Artifacts stores files agents and sessions produce.
	Artifacts artifact.Store
	// ArtifactURL is where clients fetch an artifact.
	ArtifactURL func(store.Artifact) string
	// StateDir is a local folder for session workspaces and MCP working
	// folders (an emptyDir in a pod).
	StateDir string
	// Holder identifies this process in session leases.
	Holder string
	// LeaseTTL of session leases (session.DefaultLeaseTTL when zero); cluster
	// mode sets it to the chat lease's TTL so both expire together.
	LeaseTTL time.Duration
	// Secrets returns a Secret by name (values included), nil when missing.
	Secrets func(name string) *corev1.Secret
	// SecretHint, when set, explains how to provide a missing Secret key; it
	// is appended to "no usable model" messages.
	SecretHint func(sel corev1.SecretKeySelector) string
	// Defaults is the namespace's picobot-defaults ConfigMap, nil when none.
	Defaults *corev1.ConfigMap
	// Kube is the cluster client in cluster mode, nil in embedded mode.
	Kube client.Client
	// Delegates runs the tasks agents delegate to their sub-agents; nil
	// answers delegate calls with DelegatesUnavailable.
	Delegates delegate.Runner
	// DelegatesUnavailable says why delegation does not work without
	// Delegates.
	DelegatesUnavailable string
	// Background runs background delegations; nil answers mode background
	// with an error saying it is not available here.
	Background delegate.Background
	// ActiveRuns registers the delegated runs in progress in this process
	// (shared by delegate, agent_task and Background), so agent_task can
	// stop them.
	ActiveRuns *delegate.ActiveRuns
	// Exchanges runs sessions_send's agent-to-agent exchanges; nil answers
	// sessions_send with ExchangesUnavailable.
	Exchanges            sessions.Exchanger
	ExchangesUnavailable string
	// Features add tools and prompt sections to every agent, in order.
	Features []Feature
	// Health answers the /health slash command (the same report as the
	// health tool, GET /api/v1/health and `picobot health`); without it
	// /health says no health service runs here.
	Health *health.Service
	// WarmSandboxes, when set, start the shell tools' programs from a warm
	// sandbox of their session's workspace (embedded mode, package warm).
	WarmSandboxes shell.WarmSandboxes
	// ConfigSource returns where an agent's configuration is stored when
	// the agent is its namespace's root agent, nil for any other: the root
	// agent alone gets reload_config and gateway over it. Nil gives them
	// to no agent.
	ConfigSource func(a *picobotv1alpha1.Agent) agentconfig.Source
	// Prices returns a tenant's price table of the agents' model calls for
	// usage accounting (every call is added to the tenant's usage in
	// Store, package quota) now; quota.DefaultPrices when nil.
	Prices func(tenant string) quota.Prices
	// Budget returns a tenant's model budget now; nil is no budget.
	Budget func(tenant string) quota.Budget
	// MaxCronJobs returns a tenant's CronJob cap now (feature.Host's).
	MaxCronJobs func(ctx context.Context, tenant string) (limit int32, ok bool)
	// Clock times gateway's restart delay and dates usage (the real clock
	// when nil).
	Clock clock.WithDelayedExecution
	// Metrics records the agents' model and tool calls; nil records
	// nothing.
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// meter accounts agent's model calls, nil without a store.
func (h *Host) meter(agent string) *quota.Meter {
	if h.Store == nil {
		return nil
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if h.Clock != nil {
		clk = h.Clock
	}
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	m := &quota.Meter{Store: h.Store, Tenant: h.Tenant, Agent: agent, Prices: h.Prices, Budget: h.Budget, Clock: clk, Log: log}
	if h.Metrics != nil {
		m.Costs = h.Metrics
	}
	return m
}

// Feature adds capabilities to an agent (runtime/feature).
type Feature = feature.Feature

// Built is an assembled agent.
type Built struct {
	Name    string
	Info    protocol.AgentInfo
	Manager *session.Manager
	Tools   *builtin.Set
	MCP     *mcp.Manager
	// Loop is the agent's loop; Session is the Config of Manager, so a
	// caller can derive a manager with other tools (e.g. scheduled runs).
	Loop    *agent.Loop
	Session session.Config
	// noClientTools: the agent declines client tools
	// (spec.tools.clientTools: false).
	noClientTools bool
	// Endpoint is the model endpoint the agent calls first, key included
	// (nil when it has no usable model: Info.Message says why); the health
	// check probes it.
	Endpoint *provider.Config
	// warm are the host's warm sandboxes (nil without them).
	warm    shell.WarmSandboxes
	health  []func(context.Context) []health.Check
	closers []func()
}

// RunTarget is the agent as its scheduled runs (runtime/scheduler/localrun)
// need it.
func (b *Built) RunTarget() localrun.Agent {
	return localrun.Agent{Name: b.Name, Loop: b.Loop, Session: b.Session}
}

// Health returns the checks of the agent's features.
func (b *Built) Health(ctx context.Context) []health.Check {
	var out []health.Check
	for _, h := range b.health {
		out = append(out, h(ctx)...)
	}
	return out
}

// ModelCheck is the health check of the agent's model: none configured,
// configured but unreachable (probe asks the endpoint), or answering.
func (b *Built) ModelCheck(ctx context.Context, probe *modelcheck.Prober) health.Check {
	return probe.Check(ctx, "agent "+b.Name, b.Endpoint, b.Info.Message)
}

// FeatureChecks are the health checks of what the agent's configuration
// enables: its features (the browser, skills, channels) and MCP servers.
func (b *Built) FeatureChecks(ctx context.Context) []health.Check {
	checks := b.Health(ctx)
	if b.MCP == nil {
		return checks
	}
	for _, s := range b.MCP.Status() {
		c := health.Check{Name: "MCP server " + s.Name, OK: s.Connected, Message: fmt.Sprintf("%s, %d tools", s.Transport, len(s.Tools))}
		if !s.Connected {
			c.Message = s.Error
			c.Fix = "check spec.mcpServers[" + s.Name + "] of the agent; /mcp shows the detail"
		}
		checks = append(checks, c)
	}
	return checks
}

// Close stops the agent's tools, MCP servers and features.
func (b *Built) Close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
}

var envUnsafe = regexp.MustCompile(`[^A-Z0-9]+`)

// SecretEnvName is the environment variable a secretKeyRef is read from when
// no Secret of that name is given (embedded mode; session pods get their
// Agent's Secrets this way too, never in arguments).
func SecretEnvName(name, key string) string {
	return "PICOBOT_SECRET_" + envUnsafe.ReplaceAllString(strings.ToUpper(name), "_") + "_" + envUnsafe.ReplaceAllString(strings.ToUpper(key), "_")
}

// EnvSecrets returns a Secrets lookup that serves the given Secrets first and
// otherwise assembles a Secret from the PICOBOT_SECRET_<NAME>_<KEY> variables
// (read with env) of the keys the agent references.
func EnvSecrets(given map[string]*corev1.Secret, env func(string) string, a *picobotv1alpha1.Agent) func(string) *corev1.Secret {
	return func(name string) *corev1.Secret {
		if s := given[name]; s != nil {
			return s
		}
		s := &corev1.Secret{Data: map[string][]byte{}}
		for _, sel := range referencedKeys(a) {
			if sel.Name == name {
				if v := env(SecretEnvName(sel.Name, sel.Key)); v != "" {
					s.Data[sel.Key] = []byte(v)
				}
			}
		}
		if len(s.Data) == 0 {
			return nil
		}
		return s
	}
}

// providerKeyEnv is the variable each provider's own SDKs and CLIs read
// the API key from.
var providerKeyEnv = map[picobotv1alpha1.ModelProvider]string{
	picobotv1alpha1.ProviderOpenAI:    "OPENAI_API_KEY",
	picobotv1alpha1.ProviderAnthropic: "ANTHROPIC_API_KEY",
}

// ProviderKeyEnv returns the variable the provider's own tools read the API
// key from ("" for none).
func ProviderKeyEnv(p picobotv1alpha1.ModelProvider) string { return providerKeyEnv[p] }

// ModelKeyProvider returns the provider of the agent's model (or fallback)
// whose key sel is, if it is one.
func ModelKeyProvider(a *picobotv1alpha1.Agent, sel corev1.SecretKeySelector) (picobotv1alpha1.ModelProvider, bool) {
	if m := a.Spec.Model; m != nil {
		for _, ref := range agentspec.ModelRefs(m) {
			if k := ref.APIKeySecretRef; k != nil && k.Name == sel.Name && k.Key == sel.Key {
				return ref.Provider, true
			}
		}
	}
	return "", false
}

// KeyHint says how to give an embedded-mode agent the Secret key sel: the
// provider's own variable first for a model key, then a Secret manifest in
// dir or the PICOBOT_SECRET_ variable.
func KeyHint(a *picobotv1alpha1.Agent, sel corev1.SecretKeySelector, dir string) string {
	other := fmt.Sprintf("a Secret manifest %q in %s or the environment variable %s", sel.Name, dir, SecretEnvName(sel.Name, sel.Key))
	if p, ok := ModelKeyProvider(a, sel); ok && providerKeyEnv[p] != "" {
		return fmt.Sprintf("Set %s in the environment of picobot serve (make run also takes ANTHROPIC_API_KEY, and OPENAI_BASE_URL for any OpenAI-compatible server), or provide %s, then restart",
			providerKeyEnv[p], other)
	}
	return "Provide the key as " + other + ", then restart"
}

// WithProviderKeys wraps a Secrets lookup for embedded mode: a model key
// that no Secret and no PICOBOT_SECRET_ variable provides is read from the
// provider's own variable (OPENAI_API_KEY, ANTHROPIC_API_KEY), as anyone
// who has run an OpenAI or Anthropic tool on a laptop expects. The server
// seals those variables like every other (sandbox.SealEnvironment), and tool
// programs never see them.
func WithProviderKeys(secrets func(string) *corev1.Secret, env func(string) string, a *picobotv1alpha1.Agent) func(string) *corev1.Secret {
	return func(name string) *corev1.Secret {
		s := secrets(name)
		for _, sel := range referencedKeys(a) {
			if sel.Name != name || (s != nil && len(s.Data[sel.Key]) > 0) {
				continue
			}
			p, ok := ModelKeyProvider(a, sel)
			if !ok || providerKeyEnv[p] == "" {
				continue
			}
			if v := env(providerKeyEnv[p]); v != "" {
				if s == nil {
					s = &corev1.Secret{}
				} else {
					s = s.DeepCopy()
				}
				if s.Data == nil {
					s.Data = map[string][]byte{}
				}
				s.Data[sel.Key] = []byte(v)
			}
		}
		return s
	}
}

// channelKeys are the Secret keys each channel type reads (see the Channel
// type's secretRef).
var channelKeys = map[picobotv1alpha1.ChannelType][]string{
	"telegram": {"token", "webhookSecret"},
	"feishu":   {"appID", "appSecret", "verificationToken", "encryptKey"},
	"slack":    {"botToken", "signingSecret"},
	"webhook":  {"signingSecret", "url"},
}

// referencedKeys lists the secretKeyRefs of an agent's models, channels, MCP
// servers and web search backend.
func referencedKeys(a *picobotv1alpha1.Agent) []corev1.SecretKeySelector {
	var out []corev1.SecretKeySelector
	if m := a.Spec.Model; m != nil {
		for _, ref := range agentspec.ModelRefs(m) {
			if ref.APIKeySecretRef != nil {
				out = append(out, *ref.APIKeySecretRef)
			}
		}
	}
	for _, c := range a.Spec.Channels {
		if c.SecretRef == nil {
			continue
		}
		for _, k := range channelKeys[c.Type] {
			out = append(out, corev1.SecretKeySelector{LocalObjectReference: *c.SecretRef, Key: k})
		}
	}
	for _, s := range a.Spec.MCPServers {
		for _, e := range s.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, *e.ValueFrom.SecretKeyRef)
			}
		}
	}
	if t := a.Spec.Tools; t != nil && t.WebSearch != nil && t.WebSearch.APIKeySecretRef != nil {
		out = append(out, *t.WebSearch.APIKeySecretRef)
	}
	if t := a.Spec.Tools; t != nil {
		for _, s := range t.Secrets {
			out = append(out, s.SecretKeyRef)
		}
	}
	return out
}

func (h *Host) secretValue(sel *corev1.SecretKeySelector) string {
	if h.Secrets == nil {
		return ""
	}
	if s := h.Secrets(sel.Name); s != nil {
		return string(s.Data[sel.Key])
	}
	return ""
}

// ModelEndpoint is the endpoint of a resolved model, its key read through
// secrets; nil when res names no usable model.
func ModelEndpoint(res agentspec.ModelResolution, secrets func(string) *corev1.Secret) *provider.Config {
	if res.Effective == nil || res.Ref == nil {
		return nil
	}
	ep := &provider.Config{Provider: string(res.Ref.Provider), Model: res.Ref.Model, BaseURL: res.Ref.BaseURL}
	if sel := res.Ref.APIKeySecretRef; sel != nil {
		if s := secrets(sel.Name); s != nil {
			ep.APIKey = string(s.Data[sel.Key])
		}
	}
	return ep
}

// Build assembles one agent.
func (h *Host) Build(ctx context.Context, a *picobotv1alpha1.Agent) (*Built, error) {
	if h.Log == nil {
		h.Log = slog.Default()
	}
	secrets := h.Secrets
	if secrets == nil {
		secrets = func(string) *corev1.Secret { return nil }
	}
	res := agentspec.ResolveModel(a.Spec.Model, h.Defaults, secrets)
	if res.Effective == nil && a.Spec.Model != nil && a.Spec.Model.APIKeySecretRef != nil && h.SecretHint != nil {
		res.Message += ". " + h.SecretHint(*a.Spec.Model.APIKeySecretRef)
	}
	info := protocol.AgentInfo{Name: a.Name, Ready: res.Effective != nil, Reason: res.Reason, Message: res.Message}
	b := &Built{Name: a.Name, warm: h.WarmSandboxes, noClientTools: a.Spec.Tools != nil && a.Spec.Tools.ClientTools != nil && !*a.Spec.Tools.ClientTools}
	fail := func(err error) (*Built, error) {
		b.Close()
		return nil, fmt.Errorf("agent %s: %w", a.Name, err)
	}

	var prov llm.Provider = noModel{agent: a.Name, reason: res.Message}
	providerName, modelName := "", ""
	if e := res.Effective; e != nil {
		info.Model = &protocol.ModelInfo{Provider: string(e.Provider), Model: e.Model, Source: string(e.Source)}
		b.Endpoint = ModelEndpoint(res, secrets)
		providerName, modelName = string(e.Provider), e.Model
		p, err := h.chain(a, e, res.Ref)
		if err != nil {
			return fail(err)
		}
		prov = p
	}

	mcpTools, err := h.connectMCP(ctx, a, b, secrets)
	if err != nil {
		return fail(err)
	}
	catalog := policy.DefaultCatalog()
	for _, t := range mcpTools {
		catalog = catalog.With(t.Name())
	}
	var cfgSource agentconfig.Source
	if h.ConfigSource != nil {
		cfgSource = h.ConfigSource(a)
	}
	pol, err := policy.Resolve(catalog, agentspec.ToolPolicyAs(a, cfgSource != nil), providerName, modelName)
	if err != nil {
		return fail(err)
	}
	var plans todo.Store
	if h.Store != nil {
		plans = todo.Persistent(h.Store)
	}
	tools, err := builtinTools(a, pol, h.llmTask(a, prov, providerName, modelName), plans, h.WarmSandboxes, h.webSearch(a))
	if err != nil {
		return fail(err)
	}
	b.Tools = tools
	b.closers = append(b.closers, tools.Close)
	reg := tools.For(pol)
	register := func(ts []tool.Tool) error {
		for _, t := range ts {
			if policy.Allowed(pol, t.Name()) {
				if err := reg.Register(t); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := register(mcpTools); err != nil {
		return fail(err)
	}
	if err := register(h.sessionTools(a, providerName, modelName, plans)); err != nil {
		return fail(err)
	}
	if cfgSource != nil {
		restart := a.Spec.Tools != nil && a.Spec.Tools.Gateway != nil && a.Spec.Tools.Gateway.Restart != nil && *a.Spec.Tools.Gateway.Restart
		if err := register(agentconfig.New(agentconfig.Config{Source: cfgSource, Restart: restart, Clock: h.Clock, Log: h.Log})); err != nil {
			return fail(err)
		}
	}
	imageTool, err := h.imageTool(a, tools)
	if err != nil {
		return fail(err)
	}
	if err := register(imageTool); err != nil {
		return fail(err)
	}

	view := &feature.Agent{Spec: a, Provider: prov, ProviderName: providerName, ModelName: modelName, Policy: pol,
		Model: res.Effective, ModelReason: res.Reason, ModelMessage: res.Message, Endpoint: b.Endpoint,
		Host: &feature.Host{Mode: h.Mode, Tenant: h.Tenant, Store: h.Store, StateDir: h.StateDir, Kube: h.Kube, Log: h.Log, Secrets: h.Secrets,
			MaxCronJobs: h.MaxCronJobs}}
	prompts, err := b.addFeatures(ctx, h.Features, view, register)
	if err != nil {
		return fail(err)
	}
	info.Tools = reg.Names()
	b.Info = info

	b.Loop, b.Session = h.session(a, res.Effective, prov, reg, prompts, b.MCP)
	if res.Ref != nil {
		b.Loop.Images.Accept = agentspec.AcceptsImages(*res.Ref)
	}
	b.Manager = session.NewManager(b.Session)
	return b, nil
}

// sessionTools are the tools over the host's sessions and sub-agents:
// session_status, sessions_list, sessions_history and sessions_send, and
// along the Agent's spec.delegates edges delegate, agent_task, agents_list
// and sessions_spawn (the policy denies those to an Agent without any).
func (h *Host) sessionTools(a *picobotv1alpha1.Agent, providerName, modelName string, plans todo.Store) []tool.Tool {
	model := ""
	if modelName != "" {
		model = providerName + "/" + modelName
	}
	edges := delegate.Config{Agent: a.Name, Edges: a.Spec.Delegates, Runner: h.Delegates, Unavailable: h.DelegatesUnavailable, Runs: h.Store,
		Background: h.Background, Active: h.ActiveRuns, Plans: plans}
	// A host whose background runs run elsewhere (cluster mode) stops
	// them there too.
	stopper, _ := h.Background.(delegate.RunStopper)
	return []tool.Tool{
		sessions.NewStatus(h.Store, model),
		sessions.NewList(h.Store, time.Now),
		sessions.NewHistory(h.Store),
		sessions.NewSend(sessions.SendConfig{Agent: a.Name, Edges: a.Spec.Delegates, Store: h.Store, Exchanges: h.Exchanges,
			Unavailable: h.ExchangesUnavailable}),
		delegate.New(edges),
		delegate.NewTask(delegate.TaskConfig{Store: h.Store, Active: h.ActiveRuns, Stopper: stopper}),
		delegate.NewAgentsList(edges),
		delegate.NewSpawn(edges),
	}
}

// imageTool returns the image tool on the agent's image model (and its
// fallbacks), or on those of its models that accept images; none when no
// model of the agent can see images, so the tool is not declared to a model
// that could not use it (the policy denies it then, and the operator's
// status says so too). When none of those models has its key, the tool
// says so when called.
func (h *Host) imageTool(a *picobotv1alpha1.Agent, tools *builtin.Set) ([]tool.Tool, error) {
	refs := agentspec.ImageModelRefs(a.Spec.Model)
	if len(refs) == 0 {
		return nil, nil
	}
	var usable []picobotv1alpha1.ModelRef
	var problems []string
	for _, ref := range refs {
		if ref.APIKeySecretRef == nil || h.secretValue(ref.APIKeySecretRef) != "" {
			usable = append(usable, ref)
			continue
		}
		problems = append(problems, fmt.Sprintf("%s/%s has no API key (Secret %q, key %q)", ref.Provider, ref.Model, ref.APIKeySecretRef.Name, ref.APIKeySecretRef.Key))
	}
	var p llm.Provider = noModel{agent: a.Name, reason: "no usable image model: " + strings.Join(problems, "; ")}
	if len(usable) > 0 {
		var err error
		if p, err = h.models(a.Name, usable); err != nil {
			return nil, fmt.Errorf("failed to build the image model: %w", err)
		}
	}
	// Workspace images are read with the agent's own file_read (built
	// whatever the policy says of it), which in cluster mode runs in the
	// sandbox container with the Agent's allowedPaths.
	fileRead, _ := tools.Registry.Get("file_read")
	return []tool.Tool{imagetool.New(imagetool.Config{Provider: p, Model: string(refs[0].Provider) + "/" + refs[0].Model, FileRead: fileRead})}, nil
}

// builtinTools returns the built-in tools, their llm_task on the agent's own
// model endpoints (llmTask), todo's plans in plans (in memory when nil) and
// the file and shell tools confined to what the Agent's
// spec.tools.fs.allowedPaths opens, the shell tools under its exec approval
// policy (spec.tools.exec) with the TCP ports of spec.tools.network, exec in
// the foreground when process is denied, and from a warm sandbox of their
// session's workspace when the host keeps them.
func builtinTools(a *picobotv1alpha1.Agent, pol policy.Result, llmTask llmtask.Config, plans todo.Store, warm shell.WarmSandboxes,
	search *builtin.WebSearchConfig) (*builtin.Set, error) {
	var fsSpec *picobotv1alpha1.FSToolsSpec
	if a.Spec.Tools != nil {
		fsSpec = a.Spec.Tools.FS
	}
	fsOpts, shellOpts := builtin.AllowedPaths(fsSpec)
	execPolicy := agentspec.ExecPolicy(a)
	if err := execPolicy.Validate(); err != nil {
		return nil, fmt.Errorf("invalid spec.tools.exec: %w", err)
	}
	shellOpts = append(shellOpts, shell.WithApprovals(execPolicy), shell.WithPorts(agentspec.AllowedPorts(a)...))
	if !policy.Allowed(pol, "process") {
		shellOpts = append(shellOpts, shell.ExecForeground())
	}
	if warm != nil {
		shellOpts = append(shellOpts, shell.WithWarmSandboxes(warm))
	}
	var domains []string
	if a.Spec.Browser != nil {
		domains = a.Spec.Browser.AllowedDomains // the canvas opens what the browser may
	}
	return builtin.New(builtin.Config{LLMTask: &llmTask, TodoStore: plans, FS: fsOpts, Shell: shellOpts, WebSearch: search, CanvasDomains: domains})
}

// llmTask configures llm_task on the agent's own model endpoints: its
// effective model (prov, with its fallbacks) by default; another model of
// the same provider on that provider's endpoint; another provider on the
// endpoint and key of the first of the agent's models (spec.model and its
// fallbacks) with that provider. A provider the agent has no endpoint for
// is refused: the model never chooses where a request goes.
func (h *Host) llmTask(a *picobotv1alpha1.Agent, prov llm.Provider, providerName, modelName string) llmtask.Config {
	var refs []picobotv1alpha1.ModelRef
	if m := a.Spec.Model; m != nil {
		refs = append([]picobotv1alpha1.ModelRef{m.ModelRef}, m.Fallbacks...)
	}
	cfg := llmtask.Config{DefaultProvider: providerName, DefaultModel: modelName}
	if t := a.Spec.Tools; t != nil && t.LLMTask != nil {
		cfg.AllowedModels = t.LLMTask.AllowedModels
	}
	cfg.Resolve = func(provName, model string) (llm.Provider, error) {
		if provName == providerName && model == modelName {
			return prov, nil
		}
		known := []string{providerName}
		for _, ref := range refs {
			if string(ref.Provider) != provName {
				known = append(known, string(ref.Provider))
				continue
			}
			key := ""
			if ref.APIKeySecretRef != nil {
				if key = h.secretValue(ref.APIKeySecretRef); key == "" {
					continue // its key is missing: as unusable as for the chain
				}
			}
			p, err := provider.New(provider.Config{Provider: provName, Model: model, BaseURL: ref.BaseURL, APIKey: key})
			if err != nil {
				return nil, err
			}
			p = tracing.Model(provName+"/"+model, false, h.Metrics.Model(h.Tenant, a.Name, provName+"/"+model, false, provider.Retry(p, provider.RetryPolicy{})))
			if m := h.meter(a.Name); m != nil {
				p = m.Guard(m.Count(provName+"/"+model, p))
			}
			return p, nil
		}
		if provName == providerName {
			// The effective model came from the namespace default: its
			// endpoint serves the other model.
			return prov, nil
		}
		slices.Sort(known)
		return nil, fmt.Errorf("this agent has no endpoint for provider %q (its models use %s)", provName, strings.Join(slices.Compact(known), ", "))
	}
	return cfg
}

// webSearch is web_search's backend from the Agent's spec.tools.webSearch
// (nil without one), with the key read like the model's: from the Secret
// in cluster mode (the operator passes it to the pod), from a Secret
// manifest or PICOBOT_SECRET_ variable in embedded mode.
func (h *Host) webSearch(a *picobotv1alpha1.Agent) *builtin.WebSearchConfig {
	if a.Spec.Tools == nil || a.Spec.Tools.WebSearch == nil {
		return nil
	}
	c := &builtin.WebSearchConfig{Spec: *a.Spec.Tools.WebSearch}
	if sel := c.Spec.APIKeySecretRef; sel != nil {
		c.APIKey = h.secretValue(sel)
		if c.APIKey == "" {
			c.MissingKey = fmt.Sprintf("No Brave Search key: Secret %q has no key %q.", sel.Name, sel.Key)
			if h.SecretHint != nil {
				c.MissingKey += " " + h.SecretHint(*sel) + "."
			}
		}
	}
	return c
}

// connectMCP connects the agent's MCP servers and returns their tools. One
// failing shows in /mcp and health, the others still serve. Their tools join
// the policy catalog, so allow/deny and wildcards apply to them like to
// built-ins.
func (h *Host) connectMCP(ctx context.Context, a *picobotv1alpha1.Agent, b *Built, secrets func(string) *corev1.Secret) ([]tool.Tool, error) {
	if len(a.Spec.MCPServers) == 0 {
		return nil, nil
	}
	// Beside the agent's session workspaces (no session's name starts with
	// a dot), where a cluster-mode sandbox container may run them.
	wd := filepath.Join(h.StateDir, "workspaces", a.Name, ".mcp")
	if err := os.MkdirAll(wd, 0o700); err != nil {
		return nil, err
	}
	b.MCP = mcp.NewManager(a.Spec.MCPServers, mcp.WithWorkDir(wd), mcp.WithLogger(h.Log), mcp.WithAllowedPorts(agentspec.AllowedPorts(a)...),
		mcp.WithSecretResolver(func(sel corev1.SecretKeySelector) (string, error) {
			if v := h.secretValue(&sel); v != "" {
				return v, nil
			}
			msg := fmt.Sprintf("no Secret %q with key %q", sel.Name, sel.Key)
			if h.SecretHint != nil {
				msg += "; " + h.SecretHint(sel)
			}
			return "", errors.New(msg)
		}),
		mcp.WithHeadersResolver(func(name string) (map[string]string, error) {
			s := secrets(name)
			if s == nil {
				return nil, fmt.Errorf("no Secret %q", name)
			}
			hd := map[string]string{}
			for k, v := range s.Data {
				hd[k] = string(v)
			}
			return hd, nil
		}))
	mgr := b.MCP
	b.closers = append(b.closers, func() { _ = mgr.Close() })
	if err := b.MCP.Connect(ctx); err != nil {
		return nil, fmt.Errorf("failed to connect MCP servers: %w", err)
	}
	return b.MCP.Tools(), nil
}

// addFeatures builds the host's features for the agent, registers the tools
// its policy allows and keeps their closers and health checks; it returns
// their prompt sections.
func (b *Built) addFeatures(ctx context.Context, features []Feature, view *feature.Agent, register func([]tool.Tool) error) ([]func(context.Context, session.PromptInput) string, error) {
	var prompts []func(context.Context, session.PromptInput) string
	for _, f := range features {
		parts, err := f.Build(ctx, view)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if parts.Close != nil {
			b.closers = append(b.closers, parts.Close)
		}
		if err := register(parts.Tools); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if parts.Prompt != nil {
			prompts = append(prompts, parts.Prompt)
		}
		if parts.Health != nil {
			b.health = append(b.health, parts.Health)
		}
	}
	return prompts, nil
}

// session returns the agent's loop and the Config of its session manager.
func (h *Host) session(a *picobotv1alpha1.Agent, e *picobotv1alpha1.EffectiveModel, prov llm.Provider, reg *tool.Registry,
	prompts []func(context.Context, session.PromptInput) string, m *mcp.Manager) (*agent.Loop, session.Config) {
	window := agentspec.DefaultContextWindow
	if e != nil && e.ContextWindow > 0 {
		window = int(e.ContextWindow)
	}
	comp := &agent.Compressor{Window: window, Summarizer: prov}
	loop := &agent.Loop{Provider: prov, Tools: reg, Compressor: comp}
	if t := h.Metrics.Tools(h.Tenant, a.Name); t != nil {
		loop.Observer = t
	}
	if h.Store != nil {
		// Every tool call goes to the tenant's audit log.
		var clk clock.PassiveClock
		if h.Clock != nil {
			clk = h.Clock
		}
		loop.Auditor = &audit.Recorder{Store: h.Store, Tenant: h.Tenant, Clock: clk, Log: h.Log}
	}
	ws := filepath.Join(h.StateDir, "workspaces")
	var signals session.SignalSource
	if len(a.Spec.Delegates) > 0 {
		// Only an orchestrating agent starts background runs; the others'
		// turns need not ask for signals.
		signals = delegate.SignalInbox{Store: h.Store}
	}
	return loop, session.Config{Signals: signals, Store: h.Store, Loop: loop, Agent: a.Name, System: a.Spec.Instructions,
		Prompt: joinPrompts(prompts), Compressor: comp, Holder: h.Holder, LeaseTTL: h.LeaseTTL, Timeline: session.StoreTimeline{Store: h.Store},
		Artifacts: h.Artifacts, ArtifactURL: h.ArtifactURL, MCPStatus: mcpStatus(m), Health: healthText(h.Health),
		Leased: h.leasedGauge(a.Name),
		Workspace: func(id session.ID) string {
			dir := filepath.Join(ws, a.Name, session.WorkspaceName(id))
			_ = os.MkdirAll(dir, 0o700)
			return dir
		}}
}

// leasedGauge counts the agent's session leases in cluster mode, where a
// session pod gives its sessions' leases up when its chat goes idle. An
// embedded runtime keeps them until it stops (one process: a lease lapses
// unrenewed between turns and is taken again on the next), so a count of
// them would only grow: nil there.
func (h *Host) leasedGauge(agent string) session.Gauge {
	if h.Mode != ModeCluster || h.Metrics == nil {
		return nil
	}
	return h.Metrics.SessionsLeased(h.Tenant, agent)
}

func joinPrompts(ps []func(context.Context, session.PromptInput) string) func(context.Context, session.PromptInput) string {
	if len(ps) == 0 {
		return nil
	}
	return func(ctx context.Context, in session.PromptInput) string {
		var parts []string
		for _, p := range ps {
			if s := p(ctx, in); s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\n\n")
	}
}

func healthText(s *health.Service) func(context.Context) string {
	if s == nil {
		return nil
	}
	return func(ctx context.Context) string { return s.Report(ctx).Text() }
}

func mcpStatus(m *mcp.Manager) func() string {
	if m == nil {
		return nil
	}
	return m.StatusText
}

// chain builds the effective model and the fallbacks after it, each with retry.
func (h *Host) chain(a *picobotv1alpha1.Agent, e *picobotv1alpha1.EffectiveModel, chosen *picobotv1alpha1.ModelRef) (llm.Provider, error) {
	// The namespace default's reference carries its API key; the effective
	// model (a status field) names no Secret.
	refs := []picobotv1alpha1.ModelRef{{Provider: e.Provider, Model: e.Model, BaseURL: e.BaseURL}}
	if chosen != nil {
		refs = []picobotv1alpha1.ModelRef{*chosen}
	}
	if m := a.Spec.Model; m != nil {
		all := append([]picobotv1alpha1.ModelRef{m.ModelRef}, m.Fallbacks...)
		start := 0
		if e.FallbackIndex != nil {
			start = int(*e.FallbackIndex) + 1
		}
		refs = all[start:]
	}
	return h.models(a.Name, refs)
}

// models builds a chain of models, each with retry; a model without a key
// is skipped. A model that does not accept images, after one that does,
// gets the images of its requests as notes instead: the loop sent them for
// the first. Every call is accounted (and checked against the tenant's
// budget first) for agent.
func (h *Host) models(agent string, refs []picobotv1alpha1.ModelRef) (llm.Provider, error) {
	m := h.meter(agent)
	var named []provider.Named
	images := len(refs) > 0 && agentspec.AcceptsImages(refs[0])
	for _, ref := range refs {
		key := ""
		if ref.APIKeySecretRef != nil {
			key = h.secretValue(ref.APIKeySecretRef)
			if key == "" {
				continue // unusable fallback
			}
		}
		fallback := len(named) > 0
		p, err := provider.New(provider.Config{Provider: string(ref.Provider), Model: ref.Model, BaseURL: ref.BaseURL, APIKey: key})
		if err != nil {
			return nil, err
		}
		p = provider.Retry(p, provider.RetryPolicy{})
		if images && !agentspec.AcceptsImages(ref) {
			p = provider.TextOnly(p)
		}
		name := string(ref.Provider) + "/" + ref.Model
		p = tracing.Model(name, fallback, h.Metrics.Model(h.Tenant, agent, name, fallback, p))
		if m != nil {
			p = m.Count(name, p)
		}
		named = append(named, provider.Named{Name: name, Provider: p})
	}
	if len(named) == 0 {
		return nil, errors.New("no usable model")
	}
	out := provider.Fallback(named...)
	if len(named) == 1 {
		out = named[0].Provider
	}
	if m != nil {
		out = m.Guard(out)
	}
	return out, nil
}

// noModel answers every call of an agent without a usable model with the
// reason, which the gateway shows to the user.
type noModel struct{ agent, reason string }

func (n noModel) Complete(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return nil, &protocol.CodedError{Code: protocol.CodeNoModel, Err: fmt.Errorf("agent %s has no usable model: %s", n.agent, n.reason)}
}
