// Package embedded runs PicoBot in one process (`picobot serve`): the agents
// of a manifests folder, sessions as goroutines on SQLite, the in-process bus
// and a local artifact folder, behind the same gateway protocol as cluster
// mode.
package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/mcp"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/builtin"
	"github.com/picobot/picobot/runtime/tool/llmtask"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// Channel is the channel name of gateway clients.
const Channel = "web"

const (
	consumerGroup = "runtime"
	workerIdle    = time.Minute
)

// Options configure a Runtime.
type Options struct {
	// Dir holds the Agent/CronJob/BrowserProfile manifests (and Secrets or a
	// picobot-defaults ConfigMap).
	Dir string
	// StateDir holds picobot.db, artifacts and session workspaces
	// (Dir/.picobot when empty).
	StateDir string
	// Tenant scopes all state; the manifests' namespace in cluster terms.
	Tenant string
	// Env looks up environment variables (os.Getenv when nil): a secretKeyRef
	// {name: N, key: K} with no Secret manifest in Dir is read from
	// PICOBOT_SECRET_<N>_<K> (upper-case, other characters as '_').
	Env func(string) string
	Log *slog.Logger
}

// Runtime is a running embedded PicoBot. It implements gateway.Backend.
type Runtime struct {
	opts      Options
	store     store.Store
	bus       bus.Bus
	blobs     *localblob.Store
	artifacts artifact.Store
	agents    map[string]*agentRuntime
	log       *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	waiters map[string]*waiter // bus message id -> the gateway call waiting for it
	workers map[string]*worker // agent/chat -> its session goroutine
}

type waiter struct {
	sink func(agent.Event)
	done chan result
}

type result struct {
	out gateway.Outcome
	err error
}

type agentRuntime struct {
	name    string
	info    gateway.AgentInfo
	manager *session.Manager
	tools   *builtin.Set
	mcp     *mcp.Manager
	stream  string
}

// inbound is the bus payload of a client message.
type inbound struct {
	Agent, ChatID, ClientID, Text string
}

// Open loads the manifests and starts the runtime.
func Open(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Tenant == "" {
		opts.Tenant = manifest.DefaultNamespace
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(opts.Dir, ".picobot")
	}
	if opts.Env == nil {
		opts.Env = os.Getenv
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	set, err := manifest.Load(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("failed to load manifests from %s: %w", opts.Dir, err)
	}
	if len(set.Agents) == 0 {
		return nil, fmt.Errorf("no Agent manifest in %s: add one (see config/samples/agents_v1alpha1_agent.yaml)", opts.Dir)
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create state folder %s: %w", opts.StateDir, err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(opts.StateDir, sqlite.FileName))
	if err != nil {
		return nil, err
	}
	blobs, err := localblob.Open(filepath.Join(opts.StateDir, "artifacts"), localblob.Options{})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Runtime{opts: opts, store: st, bus: membus.New(membus.Options{}), agents: map[string]*agentRuntime{},
		log: opts.Log, ctx: store.WithTenant(rctx, opts.Tenant), cancel: cancel, blobs: blobs,
		artifacts: artifact.Store{Blobs: blobs, State: st},
		waiters:   map[string]*waiter{}, workers: map[string]*worker{}}
	secrets, defaults := otherObjects(set)
	// One process per state folder: a holder stable across restarts lets a
	// restarted (even crashed) process take its sessions back at once.
	host, _ := os.Hostname()
	abs, _ := filepath.Abs(opts.StateDir)
	holder := "embedded:" + host + ":" + abs
	for i := range set.Agents {
		a := &set.Agents[i]
		ar, err := r.buildAgent(a, secrets, defaults, holder)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.agents[a.Name] = ar
		r.wg.Go(func() { r.dispatch(ar) })
	}
	return r, nil
}

// otherObjects picks the Secrets and the picobot-defaults ConfigMap out of the
// manifests folder.
func otherObjects(set *manifest.Set) (map[string]*corev1.Secret, *corev1.ConfigMap) {
	secrets := map[string]*corev1.Secret{}
	var defaults *corev1.ConfigMap
	for _, u := range set.Other {
		switch u.GetKind() {
		case "Secret":
			s := &corev1.Secret{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s) == nil {
				for k, v := range s.StringData {
					if s.Data == nil {
						s.Data = map[string][]byte{}
					}
					s.Data[k] = []byte(v)
				}
				secrets[s.Name] = s
			}
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm) == nil && cm.Name == picobotv1alpha1.NamespaceDefaultsConfigMap {
				defaults = cm
			}
		}
	}
	return secrets, defaults
}

var envUnsafe = regexp.MustCompile(`[^A-Z0-9]+`)

// SecretEnvName is the environment variable embedded mode reads a secretKeyRef
// from when the folder has no Secret of that name.
func SecretEnvName(name, key string) string {
	return "PICOBOT_SECRET_" + envUnsafe.ReplaceAllString(strings.ToUpper(name), "_") + "_" + envUnsafe.ReplaceAllString(strings.ToUpper(key), "_")
}

// secretValue returns the value of a secretKeyRef from the folder or the
// environment.
func (r *Runtime) secretValue(secrets map[string]*corev1.Secret, sel *corev1.SecretKeySelector) string {
	if s := secrets[sel.Name]; s != nil {
		return string(s.Data[sel.Key])
	}
	return r.opts.Env(SecretEnvName(sel.Name, sel.Key))
}

func (r *Runtime) buildAgent(a *picobotv1alpha1.Agent, secrets map[string]*corev1.Secret, defaults *corev1.ConfigMap, holder string) (*agentRuntime, error) {
	// The same model rules as the operator; Secrets come from the folder or
	// the environment.
	lookup := func(name string) *corev1.Secret {
		if s := secrets[name]; s != nil {
			return s
		}
		s := &corev1.Secret{Data: map[string][]byte{}}
		prefix := SecretEnvName(name, "")
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, prefix) && v != "" {
				s.Data[keyFromEnv(a, name, k)] = []byte(v)
			}
		}
		if len(s.Data) == 0 {
			return nil
		}
		return s
	}
	res := agentspec.ResolveModel(a.Spec.Model, defaults, lookup)
	if res.Effective == nil && a.Spec.Model != nil && a.Spec.Model.APIKeySecretRef != nil {
		// Say how embedded mode takes the key, not only which Secret is missing.
		sel := a.Spec.Model.APIKeySecretRef
		res.Message += fmt.Sprintf(". Provide the key as a Secret manifest %q in %s or as the environment variable %s, then restart",
			sel.Name, r.opts.Dir, SecretEnvName(sel.Name, sel.Key))
	}
	info := gateway.AgentInfo{Name: a.Name, Ready: res.Effective != nil, Reason: res.Reason, Message: res.Message}

	var prov llm.Provider = noModel{agent: a.Name, reason: res.Message}
	providerName, modelName := "", ""
	if e := res.Effective; e != nil {
		info.Model = &gateway.ModelInfo{Provider: string(e.Provider), Model: e.Model, Source: string(e.Source)}
		providerName, modelName = string(e.Provider), e.Model
		p, err := r.chain(a, e, secrets)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", a.Name, err)
		}
		prov = p
	}
	// MCP servers connect now; one failing shows in /mcp and health, the
	// others still serve. Their tools join the policy catalog, so allow/deny
	// and wildcards apply to them like to built-ins.
	var mcps *mcp.Manager
	var mcpTools []tool.Tool
	if len(a.Spec.MCPServers) > 0 {
		wd := filepath.Join(r.opts.StateDir, "mcp", a.Name)
		if err := os.MkdirAll(wd, 0o700); err != nil {
			return nil, fmt.Errorf("agent %s: %w", a.Name, err)
		}
		mcps = mcp.NewManager(a.Spec.MCPServers, mcp.WithWorkDir(wd), mcp.WithLogger(r.log),
			mcp.WithSecretResolver(func(sel corev1.SecretKeySelector) (string, error) {
				if v := r.secretValue(secrets, &sel); v != "" {
					return v, nil
				}
				return "", fmt.Errorf("no Secret %q with key %q in %s and no %s", sel.Name, sel.Key, r.opts.Dir, SecretEnvName(sel.Name, sel.Key))
			}),
			mcp.WithHeadersResolver(func(name string) (map[string]string, error) {
				s := secrets[name]
				if s == nil {
					return nil, fmt.Errorf("no Secret %q in %s", name, r.opts.Dir)
				}
				h := map[string]string{}
				for k, v := range s.Data {
					h[k] = string(v)
				}
				return h, nil
			}))
		if err := mcps.Connect(r.ctx); err != nil {
			return nil, fmt.Errorf("agent %s: failed to connect MCP servers: %w", a.Name, err)
		}
		mcpTools = mcps.Tools()
	}
	catalog := policy.DefaultCatalog()
	for _, t := range mcpTools {
		catalog = catalog.With(t.Name())
	}
	pol, err := policy.Resolve(catalog, agentspec.ToolPolicy(a), providerName, modelName)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", a.Name, err)
	}
	tools, err := builtin.New(builtin.Config{LLMTask: &llmtask.Config{DefaultProvider: providerName, DefaultModel: modelName,
		Resolve: func(string, string) (llm.Provider, error) { return prov, nil }}})
	if err != nil {
		return nil, err
	}
	reg := tools.For(pol)
	for _, t := range mcpTools {
		if policy.Allowed(pol, t.Name()) {
			if err := reg.Register(t); err != nil {
				return nil, fmt.Errorf("agent %s: %w", a.Name, err)
			}
		}
	}
	info.Tools = reg.Names()
	window := agentspec.DefaultContextWindow
	if res.Effective != nil && res.Effective.ContextWindow > 0 {
		window = int(res.Effective.ContextWindow)
	}
	comp := &agent.Compressor{Window: window, Summarizer: prov}
	loop := &agent.Loop{Provider: prov, Tools: reg, Compressor: comp}
	ws := filepath.Join(r.opts.StateDir, "workspaces")
	mgr := session.NewManager(session.Config{Store: r.store, Loop: loop, Agent: a.Name, System: a.Spec.Instructions,
		Compressor: comp, Holder: holder, Timeline: session.StoreTimeline{Store: r.store},
		Artifacts: r.artifacts, ArtifactURL: func(a store.Artifact) string { return "/api/v1/artifacts/" + a.ID },
		MCPStatus: mcpStatus(mcps),
		Workspace: func(id session.ID) string {
			dir := filepath.Join(ws, a.Name, envUnsafe.ReplaceAllString(strings.ToUpper(id.String()), "_"))
			_ = os.MkdirAll(dir, 0o700)
			return dir
		}})
	return &agentRuntime{name: a.Name, info: info, manager: mgr, tools: tools, mcp: mcps, stream: bus.Key(r.opts.Tenant, a.Name, "in")}, nil
}

func mcpStatus(m *mcp.Manager) func() string {
	if m == nil {
		return nil
	}
	return m.StatusText
}

// keyFromEnv recovers the Secret key an environment variable stands for, by
// matching the keys the Agent references.
func keyFromEnv(a *picobotv1alpha1.Agent, secretName, envName string) string {
	if m := a.Spec.Model; m != nil {
		for _, ref := range append([]picobotv1alpha1.ModelRef{m.ModelRef}, m.Fallbacks...) {
			if s := ref.APIKeySecretRef; s != nil && s.Name == secretName && SecretEnvName(s.Name, s.Key) == envName {
				return s.Key
			}
		}
	}
	return envName
}

// chain builds the effective model and the fallbacks after it, each with retry.
func (r *Runtime) chain(a *picobotv1alpha1.Agent, e *picobotv1alpha1.EffectiveModel, secrets map[string]*corev1.Secret) (llm.Provider, error) {
	refs := []picobotv1alpha1.ModelRef{{Provider: e.Provider, Model: e.Model, BaseURL: e.BaseURL}}
	if m := a.Spec.Model; m != nil {
		all := append([]picobotv1alpha1.ModelRef{m.ModelRef}, m.Fallbacks...)
		start := 0
		if e.FallbackIndex != nil {
			start = int(*e.FallbackIndex) + 1
		}
		refs = all[start:]
	}
	var named []provider.Named
	for _, ref := range refs {
		key := ""
		if ref.APIKeySecretRef != nil {
			key = r.secretValue(secrets, ref.APIKeySecretRef)
			if key == "" {
				continue // unusable fallback
			}
		}
		p, err := provider.New(provider.Config{Provider: string(ref.Provider), Model: ref.Model, BaseURL: ref.BaseURL, APIKey: key})
		if err != nil {
			return nil, err
		}
		named = append(named, provider.Named{Name: string(ref.Provider) + "/" + ref.Model, Provider: provider.Retry(p, provider.RetryPolicy{})})
	}
	if len(named) == 0 {
		return nil, errors.New("no usable model")
	}
	if len(named) == 1 {
		return named[0].Provider, nil
	}
	return provider.Fallback(named...), nil
}

// noModel answers every call of an agent without a usable model with the
// reason, which the gateway shows to the user.
type noModel struct{ agent, reason string }

func (n noModel) Complete(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return nil, &gateway.CodedError{Code: gateway.CodeNoModel, Err: fmt.Errorf("agent %s has no usable model: %s", n.agent, n.reason)}
}

// Close stops the runtime: running turns are cancelled and recorded.
func (r *Runtime) Close() {
	r.cancel()
	r.wg.Wait()
	for _, a := range r.agents {
		a.tools.Close()
		if a.mcp != nil {
			_ = a.mcp.Close()
		}
		if err := a.manager.ReleaseAll(store.WithTenant(context.Background(), r.opts.Tenant)); err != nil {
			r.log.Error("Failed to release session leases", "agent", a.name, "err", err)
		}
	}
	_ = r.bus.Close()
	_ = r.blobs.Close()
	_ = r.store.Close()
}

// Agents implements gateway.Backend.
func (r *Runtime) Agents() []gateway.AgentInfo {
	out := make([]gateway.AgentInfo, 0, len(r.agents))
	for _, a := range r.agents {
		out = append(out, a.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r *Runtime) agent(name string) (*agentRuntime, error) {
	a := r.agents[name]
	if a == nil {
		return nil, &gateway.CodedError{Code: gateway.CodeUnknownAgent, Err: fmt.Errorf("no agent %q", name)}
	}
	return a, nil
}

func chatOf(agentName, chatID string) string { return agentName + "/" + chatID }

// Handle implements gateway.Backend: the message goes through the in-process
// bus to the chat's session goroutine; /stop bypasses the queue.
func (r *Runtime) Handle(ctx context.Context, s gateway.Send) (gateway.Outcome, error) {
	a, err := r.agent(s.Agent)
	if err != nil {
		return gateway.Outcome{}, err
	}
	if cmd, ok := session.ParseCommand(s.Text); ok && cmd.Name == "stop" {
		stopped := r.Stop(s.Agent, s.ChatID)
		text := "Nothing is running."
		if stopped {
			text = "Stopped."
		}
		return gateway.Outcome{Command: "stop", Text: text}, nil
	}
	id := chatOf(s.Agent, s.ChatID) + "/" + s.ID
	w := &waiter{sink: s.Sink, done: make(chan result, 1)}
	r.mu.Lock()
	if _, busy := r.waiters[id]; busy {
		r.mu.Unlock()
		return gateway.Outcome{}, &gateway.CodedError{Code: gateway.CodeBusy, Err: fmt.Errorf("message %q is already being processed", s.ID)}
	}
	r.waiters[id] = w
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}()
	payload, _ := json.Marshal(inbound{Agent: s.Agent, ChatID: s.ChatID, ClientID: s.ID, Text: s.Text})
	if err := r.bus.Publish(ctx, a.stream, bus.Message{ID: id, Payload: payload}); err != nil {
		return gateway.Outcome{}, fmt.Errorf("failed to queue message: %w", err)
	}
	select {
	case res := <-w.done:
		return res.out, res.err
	case <-ctx.Done():
		return gateway.Outcome{}, ctx.Err()
	}
}

// Stop implements gateway.Backend: it cancels the chat's running turn and
// drops its queued messages.
func (r *Runtime) Stop(agentName, chatID string) bool {
	a := r.agents[agentName]
	if a == nil {
		return false
	}
	r.mu.Lock()
	w := r.workers[chatOf(agentName, chatID)]
	r.mu.Unlock()
	if w != nil {
		for _, m := range w.dropQueued() {
			if err := r.bus.Ack(r.ctx, a.stream, consumerGroup, m.Seq); err != nil {
				r.log.Error("Failed to acknowledge dropped message", "id", m.ID, "err", err)
			}
			r.answer(m.ID, result{out: gateway.Outcome{Command: "stop", Text: "Dropped by /stop before it ran."}})
		}
	}
	id, err := a.manager.Resolve(r.ctx, Channel, chatOf(agentName, chatID))
	if err != nil {
		return false
	}
	return a.manager.Stop(id.String())
}

// Sessions implements gateway.Backend.
func (r *Runtime) Sessions(ctx context.Context, agentName, chatID string) (string, []store.Session, error) {
	a, err := r.agent(agentName)
	if err != nil {
		return "", nil, err
	}
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	cur, err := r.store.CurrentDialog(ctx, Channel, chatOf(agentName, chatID))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", nil, err
	}
	list, err := a.manager.List(ctx, Channel, chatOf(agentName, chatID))
	return cur, list, err
}

// Messages implements gateway.Backend.
func (r *Runtime) Messages(ctx context.Context, sessionID string, last int) ([]store.Message, error) {
	if _, err := session.ParseID(sessionID); err != nil {
		return nil, &gateway.CodedError{Code: gateway.CodeBadRequest, Err: err}
	}
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	if _, err := r.store.GetSession(ctx, sessionID); err != nil {
		return nil, err
	}
	return r.store.LoadMessages(ctx, sessionID, store.LoadOptions{Last: last})
}

// Artifact implements gateway.Backend.
func (r *Runtime) Artifact(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error) {
	return r.artifacts.Open(store.WithTenant(ctx, r.opts.Tenant), id)
}

// Health implements gateway.Backend.
func (r *Runtime) Health(ctx context.Context) []gateway.Check {
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	checks := []gateway.Check{}
	_, err := r.store.ListSessions(ctx, store.SessionFilter{Limit: 1})
	checks = append(checks, check("state database", err == nil, errText(err, "SQLite at "+filepath.Join(r.opts.StateDir, sqlite.FileName)),
		"check that "+r.opts.StateDir+" is writable"))
	for _, a := range r.Agents() {
		msg := a.Message
		fix := ""
		if !a.Ready {
			fix = "give the agent a model: set spec.model with an apiKeySecretRef, and provide the key as a Secret manifest in " +
				r.opts.Dir + " or as the environment variable PICOBOT_SECRET_<SECRET>_<KEY>"
		}
		checks = append(checks, check("agent "+a.Name+" model", a.Ready, msg, fix))
		if m := r.agents[a.Name].mcp; m != nil {
			for _, s := range m.Status() {
				msg := fmt.Sprintf("%s, %d tools", s.Transport, len(s.Tools))
				if !s.Connected {
					msg = s.Error
				}
				checks = append(checks, check("agent "+a.Name+" MCP server "+s.Name, s.Connected, msg,
					"check spec.mcpServers["+s.Name+"] of the agent; /mcp shows the detail"))
			}
		}
	}
	return checks
}

func check(name string, ok bool, msg, fix string) gateway.Check {
	c := gateway.Check{Name: name, OK: ok, Message: msg}
	if !ok {
		c.Fix = fix
	}
	return c
}

func errText(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
