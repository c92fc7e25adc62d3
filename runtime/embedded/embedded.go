// Package embedded runs PicoBot in one process (`picobot serve`): the agents
// of a manifests folder, sessions as goroutines on SQLite, the in-process bus
// and a local artifact folder, behind the same gateway protocol as cluster
// mode.
//
// A Runtime implements gateway.Backend. Each request acts for the tenant in
// its context (store.WithTenant, set by the gateway from the API key), which
// must be one the runtime serves (Options.Tenant and Options.Tenants): the
// tenants share the agents and the SQLite file, and have their own sessions,
// artifacts, inbound streams and workspace folders.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
	"github.com/picobot/picobot/runtime/dialog"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/warm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// Channel is the channel name of WebSocket and REST clients of the gateway
// (OpenAI-compatible clients use gateway.ChannelOpenAI).
const Channel = gateway.ChannelWeb

// chatIdle is how long a chat's goroutine waits for its next message before
// it ends (sessions scale to zero; the next message starts a new one, which
// restores from the store).
const chatIdle = time.Minute

// Options configure a Runtime.
type Options struct {
	// Dir holds the Agent/CronJob/BrowserProfile manifests (and Secrets or a
	// picobot-defaults ConfigMap).
	Dir string
	// StateDir holds picobot.db, artifacts and session workspaces
	// (Dir/.picobot when empty).
	StateDir string
	// Tenant scopes all state; the manifests' namespace in cluster terms.
	// Requests name their tenant in ctx (store.WithTenant); this one is the
	// tenant of gateway.New and of in-process callers.
	Tenant string
	// Tenants are further tenants served besides Tenant, over the same
	// agents (shared) and the same SQLite file: each has its own sessions,
	// messages, artifacts, inbound streams and workspace folders
	// (StateDir/workspaces/<tenant>/...). A request of any other tenant is
	// refused.
	Tenants []string
	// Env looks up environment variables (os.Getenv when nil): a secretKeyRef
	// {name: N, key: K} with no Secret manifest in Dir is read from
	// PICOBOT_SECRET_<N>_<K> (upper-case, other characters as '_').
	Env func(string) string
	Log *slog.Logger
	// Features add tools and prompt sections to every agent (memory,
	// skills, schedules, messaging, browser).
	Features []agenthost.Feature
	// Scheduler, when set, fires scheduled jobs in this process and gives
	// agents the cron tools (scheduler.go).
	Scheduler *SchedulerOptions
	// RunRetention is how long ended delegate runs are kept
	// (delegate.DefaultRetention when 0).
	RunRetention time.Duration
	// AuditRetention is how long the audit records of tool calls are kept
	// (audit.DefaultRetention when 0); they are deleted with the ended
	// runs, at start and every hour.
	AuditRetention time.Duration
	// WarmSandbox configures the warm sandboxes the shell tools' programs
	// start from, one per session workspace (package warm; defaults when
	// zero, off with a negative Max).
	WarmSandbox warm.Config
	// Health is the health service the runtime adds its checks to (state
	// database, each agent's model, its features and MCP servers, programs
	// and the tool sandbox); the caller hands the same service to the
	// health tool, so every surface reports the same checks. Open creates
	// one when nil.
	Health *health.Service
	// ModelProbe probes the agents' model endpoints for the health report
	// (modelcheck.NewProber when nil).
	ModelProbe *modelcheck.Prober
	// Clock times the gateway tool's restart delay (the real clock when
	// nil).
	Clock clock.WithDelayedExecution
	// State is the runtime's store, bus and artifact blobs, chosen by the
	// caller (picobot serve opens them with OpenState before the runtime,
	// so the outbound dispatcher it hands to features exists first). Open
	// opens them with OpenState when it is nil. The runtime closes them.
	State *State
	// Metrics records the turns, model and tool calls and chats of the
	// runtime (package metrics); nil records nothing. Gatherer is what
	// the gateway serves on /metrics (the registry Metrics is on); nil
	// serves no /metrics.
	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer
	// Nodes pairs the tenants' devices (`picobot node`): the gateway takes
	// their connections into it and the nodes tool reaches them through
	// it (runtime/node); nil pairs none. Open sets its Store to the
	// runtime's when it has none.
	Nodes *node.Service
	// TracerProvider traces turns, from the gateway's request through the
	// bus to the reply (package tracing); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// State is what an embedded runtime keeps its state in.
type State struct {
	Store store.Store
	Bus   bus.Bus
	Blobs *localblob.Store
	// Artifacts is Blobs with Store as the artifacts' index.
	Artifacts artifact.Store
	// UIKey is the install's key of the web UI (gateway.Loopback.UIKey),
	// kept in <dir>/ui-key so open tabs survive a restart.
	UIKey string
}

// StateDir is where a runtime keeps its state: stateDir, or <dir>/.picobot
// when empty.
func StateDir(dir, stateDir string) string {
	if stateDir == "" {
		return filepath.Join(dir, ".picobot")
	}
	return stateDir
}

// OpenState opens embedded mode's state in a folder: SQLite
// (dir/picobot.db), the in-process bus and the artifacts folder.
func OpenState(ctx context.Context, dir string) (*State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create state folder %s: %w", dir, err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, sqlite.FileName))
	if err != nil {
		return nil, err
	}
	blobs, err := localblob.Open(filepath.Join(dir, "artifacts"), localblob.Options{})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	key, err := uiKey(filepath.Join(dir, "ui-key"))
	if err != nil {
		_ = blobs.Close()
		_ = st.Close()
		return nil, err
	}
	return &State{Store: st, Bus: membus.New(membus.Options{}), Blobs: blobs, Artifacts: artifact.Store{Blobs: blobs, State: st}, UIKey: key}, nil
}

// uiKey reads the install's web UI key, creating it (0600) the first time.
func uiKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("failed to read the web UI key %s: %w", path, err)
	}
	key := gateway.NewUIKey()
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("failed to write the web UI key %s: %w", path, err)
	}
	return key, nil
}

// UIKey is the install's web UI key (gateway.New gives it to the UI).
func (r *Runtime) UIKey() string { return r.state.UIKey }

// Close closes the store, bus and blobs.
func (s *State) Close() {
	_ = s.Bus.Close()
	_ = s.Blobs.Close()
	_ = s.Store.Close()
}

// Runtime is a running embedded PicoBot. It implements gateway.Backend.
type Runtime struct {
	// Service implements the dialog methods of gateway.Backend.
	dialog.Service

	opts  Options
	state *State
	// disp delivers chat platform replies (ServeChannels).
	disp   *outbound.Dispatcher
	agents map[string]*agentRuntime
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	tenants map[string]bool // tenants served
	sched   *schedulerHost  // nil without Options.Scheduler
	// background runs the agents' background delegations (background.go).
	background *delegate.BackgroundRuns
	// exchanges runs sessions_send's agent-to-agent exchanges (send.go).
	exchanges *sessions.Exchanges
	// warm keeps the warm sandboxes of the sessions' workspaces.
	warm *warm.Pool
	// holder, delegates and active are shared by every generation of the
	// agents (build).
	holder    string
	delegates *agenthost.LocalDelegates
	active    *delegate.ActiveRuns
	// reloads serialises Reload; generation counts the generations built
	// (1 at start) and retired holds the agents of the earlier ones, closed
	// with the runtime since turns may still run on them.
	reloads    sync.Mutex
	generation int
	retired    []*agenthost.Built
	// quotas are the tenants' budgets and price tables of the folder's
	// TenantQuotas (quota.go), replaced by every generation.
	quotas atomic.Pointer[tenantQuotas]
	// admit enforces the tenants' session and message caps (one process:
	// counted in memory).
	admit *quota.LocalAdmitter

	mu      sync.Mutex
	waiters map[string]*waiter // tenantAgent.waiterKey -> the gateway calls waiting for it
	serving map[string]bool    // chat stream -> a goroutine serves the chat (owner)
	// draining: Drain was called, no new message is taken.
	draining bool
	// turns counts the messages being handled (Reporter.Begin to end),
	// running the same per tenant and agent (agentKey), for bot_status.
	turns   int
	running map[string]int
	// drained is closed when the last turn ends while draining.
	drained chan struct{}
}

type agentRuntime struct {
	name string
	// cur is the agent's running generation (reload.go switches it).
	cur atomic.Pointer[agentGen]
	// manager is that of the default tenant (Options.Tenant).
	manager *session.Manager
	// byTenant holds the session manager and session runtime of every
	// tenant served.
	byTenant map[string]*tenantAgent
}

// agentGen is one generation of an agent: what its manifest built.
type agentGen struct {
	*agenthost.Built
	info gateway.AgentInfo
	// spec and secrets configure the agent's chat platform channels.
	spec    *picobotv1alpha1.Agent
	secrets func(string) *corev1.Secret
}

// gen is the agent's running generation.
func (a *agentRuntime) gen() *agentGen { return a.cur.Load() }

// tenantAgent is an agent as one tenant uses it: its own sessions (the
// manager's workspaces include the tenant) and its own chat streams, served
// by its session runtime.
type tenantAgent struct {
	tenant  string
	agent   string
	manager *session.Manager
	rt      *sessionrt.Runtime
}

// Open loads the manifests and starts the runtime.
func Open(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Tenant == "" {
		opts.Tenant = manifest.DefaultNamespace
	}
	opts.StateDir = StateDir(opts.Dir, opts.StateDir)
	if opts.Env == nil {
		opts.Env = os.Getenv
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Health == nil {
		opts.Health = health.NewService()
	}
	if opts.ModelProbe == nil {
		opts.ModelProbe = modelcheck.NewProber()
	}
	set, err := manifest.Load(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("failed to load manifests from %s: %w", opts.Dir, err)
	}
	if len(set.Skipped) > 0 {
		opts.Log.Info("Skipped YAML files that hold no Kubernetes object", "files", set.Skipped)
	}
	if len(set.Agents) == 0 {
		return nil, fmt.Errorf("no Agent manifest in %s: add one (see config/samples/agents_v1alpha1_agent.yaml)", opts.Dir)
	}
	state := opts.State
	if state == nil {
		if state, err = OpenState(ctx, opts.StateDir); err != nil {
			return nil, err
		}
	}
	if opts.Nodes != nil && opts.Nodes.Store == nil {
		opts.Nodes.Store = state.Store
	}
	if opts.Metrics != nil {
		// The runtime's store and bus calls are timed and counted; the
		// caller's State keeps the bare ones.
		metered := *state
		if ms, ok := state.Store.(metrics.Stores); ok {
			metered.Store = opts.Metrics.Store(ms)
		}
		metered.Bus = opts.Metrics.Bus(state.Bus)
		state = &metered
	}
	st := state.Store
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Runtime{opts: opts, state: state, agents: map[string]*agentRuntime{},
		log: opts.Log, ctx: store.WithTenant(rctx, opts.Tenant), cancel: cancel, tenants: map[string]bool{opts.Tenant: true},
		waiters: map[string]*waiter{}, serving: map[string]bool{}, running: map[string]int{}}
	r.admit = &quota.LocalAdmitter{Clock: runtimeClock{r}}
	r.Service = dialog.Service{Store: st, Manager: r.manager, Tenant: r.checkTenant}
	wcfg := opts.WarmSandbox
	if wcfg.Log == nil {
		wcfg.Log = opts.Log
	}
	r.warm = warm.New(wcfg)
	for _, t := range opts.Tenants {
		if err := checkTenant(t); err != nil {
			r.Close()
			return nil, err
		}
		r.tenants[t] = true
	}
	if opts.Features, err = r.prepareScheduler(set); err != nil {
		r.Close()
		return nil, err
	}
	r.opts.Features = opts.Features // every generation of the agents gets the cron tools
	// One process per state folder: a holder stable across restarts lets a
	// restarted (even crashed) process take its sessions back at once.
	host, _ := os.Hostname()
	abs, _ := filepath.Abs(opts.StateDir)
	r.holder = "embedded:" + host + ":" + abs
	r.delegates = &agenthost.LocalDelegates{
		Find: func(name string) (*agenthost.Built, bool) {
			a := r.agents[name]
			if a == nil {
				return nil, false
			}
			return a.gen().Built, true
		},
		Workspace: func(tenant, agent string) func(session.ID) string { return workspaceFunc(opts.StateDir, tenant, agent) },
	}
	r.active = delegate.NewActiveRuns()
	r.background = delegate.NewBackgroundRuns(r.ctx, delegate.BackgroundConfig{Runner: r.delegates, Store: st, Completions: completions{r},
		Active: r.active, Retention: opts.RunRetention, Log: opts.Log.With("component", "background-runs")})
	r.exchanges = sessions.NewExchanges(r.ctx, sender{r}, nil, opts.Log.With("component", "agent-to-agent"))
	gens, err := r.build(set)
	if err != nil {
		r.Close()
		return nil, err
	}
	for _, a := range set.Agents {
		g := gens[a.Name]
		ar := &agentRuntime{name: a.Name, byTenant: map[string]*tenantAgent{}}
		ar.cur.Store(g)
		for t := range r.tenants {
			cfg := g.Session
			cfg.Workspace = workspaceFunc(opts.StateDir, t, a.Name)
			ta := &tenantAgent{tenant: t, agent: a.Name, manager: session.NewManager(cfg)}
			ta.rt = sessionrt.New(sessionrt.Config{Tenant: t, Agent: a.Name, Consumer: "embedded", Bus: r.state.Bus, Store: st,
				Manager: ta.manager, Owner: owner{r, ta}, Reporter: reporter{r, ta}, IdleTimeout: chatIdle, Metrics: opts.Metrics,
				TracerProvider: opts.TracerProvider, Log: opts.Log})
			ar.byTenant[t] = ta
		}
		ar.manager = ar.byTenant[opts.Tenant].manager
		r.agents[a.Name] = ar
	}
	if err := r.startScheduler(); err != nil {
		r.Close()
		return nil, err
	}
	opts.Health.Add(r.healthSources()...)
	r.resumeUnfinished()
	r.resumeBackground()
	return r, nil
}

// legacyName is how workspace folders were named before
// session.WorkspaceName: ids that read alike shared a folder.
var legacyName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// workspaceFunc returns where a tenant's sessions of an agent work:
// StateDir/workspaces/<tenant>/<agent>/<session.WorkspaceName>. A folder of
// the earlier naming is moved to the new name the first time its session
// works, so an upgrade loses no files.
func workspaceFunc(stateDir, tenant, agentName string) func(session.ID) string {
	base := filepath.Join(stateDir, "workspaces", tenant, agentName)
	var made sync.Map // folders created, so a turn costs no syscall
	return func(id session.ID) string {
		dir := filepath.Join(base, session.WorkspaceName(id))
		if _, ok := made.Load(dir); !ok {
			legacy := filepath.Join(base, legacyName.ReplaceAllString(id.String(), "_"))
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				_ = os.Rename(legacy, dir) // nothing to move is the usual case
			}
			if err := os.MkdirAll(dir, 0o700); err == nil {
				made.Store(dir, struct{}{})
			}
		}
		return dir
	}
}

// checkTenant accepts tenant names that are Kubernetes namespace names.
func checkTenant(t string) error {
	if t == "" || len(t) > 63 || strings.Trim(t, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasPrefix(t, "-") || strings.HasSuffix(t, "-") {
		return fmt.Errorf("tenant %q is not a namespace name (lower-case letters, digits and '-', at most 63)", t)
	}
	return nil
}

// Tenant is the default tenant: gateway.New serves it.
func (r *Runtime) Tenant() string { return r.opts.Tenant }

// Nodes returns the paired devices' service (Options.Nodes): gateway.New
// serves it.
func (r *Runtime) Nodes() *node.Service { return r.opts.Nodes }

// Metrics returns what the gateway records its own metrics on and what it
// serves on /metrics (Options.Metrics and Options.Gatherer).
func (r *Runtime) Metrics() (*metrics.Metrics, prometheus.Gatherer) {
	return r.opts.Metrics, r.opts.Gatherer
}

// TracerProvider returns what the gateway starts the trace of a request
// with (Options.TracerProvider; nil: tracing off).
func (r *Runtime) TracerProvider() trace.TracerProvider { return r.opts.TracerProvider }

// Tenants lists the tenants served, sorted.
func (r *Runtime) Tenants() []string {
	out := make([]string, 0, len(r.tenants))
	for t := range r.tenants {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
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

// SecretEnvName is the environment variable embedded mode reads a secretKeyRef
// from when the folder has no Secret of that name.
func SecretEnvName(name, key string) string { return agenthost.SecretEnvName(name, key) }

// Halt cuts short the turns still running (they keep their stored steps
// and resume at the next start; Drain first lets them finish) and waits for
// the runtime's goroutines. Gateway calls still waiting get CodeUnavailable.
func (r *Runtime) Halt() {
	r.cancel()
	r.wg.Wait()
	if r.background != nil {
		r.background.Wait()
	}
	if r.exchanges != nil {
		r.exchanges.Wait()
	}
}

// Close stops the runtime (Halt) and closes its state.
func (r *Runtime) Close() {
	r.Halt()
	for _, b := range r.retired {
		b.Close()
	}
	for _, a := range r.agents {
		a.gen().Close()
		for _, ta := range a.byTenant {
			if err := ta.manager.ReleaseAll(store.WithTenant(context.Background(), ta.tenant)); err != nil {
				r.log.Error("Failed to release session leases", "agent", a.name, "tenant", ta.tenant, "err", err)
			}
		}
	}
	// After the agents, whose tools have ended their programs.
	r.warm.Close()
	r.state.Close()
}

// Agents returns every agent (all tenants share them), by name.
func (r *Runtime) Agents() []gateway.AgentInfo {
	out := make([]gateway.AgentInfo, 0, len(r.agents))
	for _, a := range r.agents {
		out = append(out, a.gen().info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ListAgents implements gateway.Backend.
func (r *Runtime) ListAgents(ctx context.Context) ([]gateway.AgentInfo, error) {
	if _, err := r.tenantOf(ctx); err != nil {
		return nil, err
	}
	return r.Agents(), nil
}

// tenantOf returns the tenant of a request, which must be one this runtime
// serves.
func (r *Runtime) tenantOf(ctx context.Context) (string, error) {
	t, err := store.TenantFrom(ctx)
	if err != nil {
		return "", &gateway.CodedError{Code: gateway.CodeForbidden, Err: errors.New("the request carries no tenant")}
	}
	if !r.tenants[t] {
		return "", &gateway.CodedError{Code: gateway.CodeForbidden, Err: fmt.Errorf("tenant %q is not served by this runtime", t)}
	}
	return t, nil
}

// scope resolves the tenant of ctx and the agent of a chat.
func (r *Runtime) scope(ctx context.Context, agentName string) (*agentRuntime, *tenantAgent, error) {
	t, err := r.tenantOf(ctx)
	if err != nil {
		return nil, nil, err
	}
	a, err := r.agent(agentName)
	if err != nil {
		return nil, nil, err
	}
	return a, a.byTenant[t], nil
}

func (r *Runtime) agent(name string) (*agentRuntime, error) {
	a := r.agents[name]
	if a == nil {
		return nil, &gateway.CodedError{Code: gateway.CodeUnknownAgent, Err: fmt.Errorf("no agent %q", name)}
	}
	return a, nil
}

// Handle implements gateway.Backend: the message goes through the chat's
// stream to the goroutine serving the chat (started if none does); /stop
// bypasses the queue.
func (r *Runtime) Handle(ctx context.Context, s gateway.Send) (gateway.Outcome, error) {
	_, ta, err := r.scope(ctx, s.Agent)
	if err != nil {
		return gateway.Outcome{}, err
	}
	c := s.Chat()
	if cmd, ok := session.ParseCommand(s.Text); ok && cmd.Name == "stop" {
		stopped, err := r.Stop(ctx, c)
		if err != nil {
			return gateway.Outcome{}, err
		}
		text := "Nothing is running."
		if stopped {
			text = "Stopped."
		}
		return gateway.Outcome{Command: "stop", Text: text}, nil
	}
	if code, approve, ok := approval.ParseAnswer(s.Text); ok {
		// An answer to an exec approval must reach the turn waiting for
		// it, not queue behind it.
		answered, err := r.Approve(ctx, c, code, approve)
		if err != nil {
			return gateway.Outcome{}, err
		}
		return gateway.Outcome{Command: approval.CommandOf(approve), Text: gateway.ApprovalReply(code, approve, answered)}, nil
	}
	// Past the commands above (a /stop or an approval is never refused):
	// the tenant's session and message caps.
	if err := r.admit.Admit(ctx, ta.tenant, quota.Session(c.ChannelName(), c.Agent, c.ChatID), r.limits(ta.tenant)); err != nil {
		var ce *gateway.CodedError
		if errors.As(err, &ce) {
			r.opts.Metrics.QuotaRefused(ta.tenant, ce.Code)
		}
		return gateway.Outcome{}, err
	}
	id := c.Key() + "/" + s.ID
	chat := chatOf(c)
	key := ta.waiterKey(chat, id)
	w, first, err := r.await(key, s.Sink)
	if err != nil {
		return gateway.Outcome{}, err
	}
	defer r.leave(key, w)
	if first {
		// A message id sent again while its first sending waits is not
		// queued again: both wait for the one turn.
		if err := r.queue(ctx, ta, chat, protocol.Inbound{ID: id, Channel: chat.Channel, ChatKey: chat.Key, Text: s.Text, Files: s.Files, Actor: gateway.ActorFrom(ctx)}); err != nil {
			w.finish(result{err: err})
		}
	}
	return w.wait(ctx, r.ctx, !first)
}

// now is the runtime's clock's time (Options.Clock, else the real clock).
func (r *Runtime) now() time.Time {
	if r.opts.Clock != nil {
		return r.opts.Clock.Now()
	}
	return time.Now()
}

// queue puts a message on its chat's stream and has the chat served.
func (r *Runtime) queue(ctx context.Context, ta *tenantAgent, chat sessionrt.Chat, in protocol.Inbound) error {
	payload, err := protocol.EncodeInbound(in)
	if err != nil {
		return err
	}
	if err := r.state.Bus.Publish(ctx, ta.rt.Stream(chat), bus.Message{ID: in.ID, Payload: payload, Headers: bus.QueuedAt(r.now())}); err != nil {
		return fmt.Errorf("failed to queue message: %w", err)
	}
	r.wake(ta, chat)
	return nil
}

// Stop implements gateway.Backend: it drops the chat's queued messages and
// cancels its running turn.
func (r *Runtime) Stop(ctx context.Context, c gateway.Chat) (bool, error) {
	_, ta, err := r.scope(ctx, c.Agent)
	if err != nil {
		return false, err
	}
	stopped, err := ta.rt.Stop(r.ctx, chatOf(c))
	if err != nil {
		return false, fmt.Errorf("failed to stop chat %s: %w", c.Key(), err)
	}
	return stopped, nil
}

// Approve implements gateway.Backend: the answer goes to the chat's turn
// waiting on the exec approval request with code.
func (r *Runtime) Approve(ctx context.Context, c gateway.Chat, code string, approve bool) (bool, error) {
	_, ta, err := r.scope(ctx, c.Agent)
	if err != nil {
		return false, err
	}
	return ta.rt.Answer(chatOf(c), code, approve), nil
}

// CanvasAnswer implements gateway.CanvasBackend: the web client's answer
// goes to the chat's turn waiting on the canvas command id.
func (r *Runtime) CanvasAnswer(ctx context.Context, c gateway.Chat, id string, a tool.CanvasAnswer) (bool, error) {
	_, ta, err := r.scope(ctx, c.Agent)
	if err != nil {
		return false, err
	}
	return ta.rt.CanvasAnswer(chatOf(c), id, a), nil
}

// manager is the dialog service's view of the runtime: the session manager
// of an agent for the tenant of ctx.
func (r *Runtime) manager(ctx context.Context, agentName string) (*session.Manager, error) {
	_, ta, err := r.scope(ctx, agentName)
	if err != nil {
		return nil, err
	}
	return ta.manager, nil
}

// checkTenant checks that the tenant of ctx is served.
func (r *Runtime) checkTenant(ctx context.Context) error {
	_, err := r.tenantOf(ctx)
	return err
}

// Artifact implements gateway.Backend.
func (r *Runtime) Artifact(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error) {
	if _, err := r.tenantOf(ctx); err != nil {
		return nil, store.Artifact{}, err
	}
	return r.state.Artifacts.Open(ctx, id)
}

// Upload implements gateway.Backend: the file becomes an artifact of the
// chat's uploads.
func (r *Runtime) Upload(ctx context.Context, c gateway.Chat, f gateway.Upload) (store.Artifact, error) {
	if _, _, err := r.scope(ctx, c.Agent); err != nil {
		return store.Artifact{}, err
	}
	return gateway.SaveUpload(ctx, r.state.Artifacts, c, f)
}

// Health implements gateway.Backend: the report of the health service
// every surface shares (Options.Health).
func (r *Runtime) Health(ctx context.Context) health.Report {
	return r.opts.Health.Report(ctx)
}

// healthSources are the running runtime's checks: its state database and
// each agent's model (core), each agent's enabled features and MCP servers
// (feature), the programs and the tool sandbox its tools use (optional).
func (r *Runtime) healthSources() []health.Source {
	names := make([]string, 0, len(r.agents))
	for n := range r.agents {
		names = append(names, n)
	}
	sort.Strings(names)
	sources := []health.Source{{Kind: health.Core, Name: "runtime", Run: func(ctx context.Context) []health.Check {
		ctx = store.WithTenant(ctx, r.opts.Tenant) // probes carry no tenant
		_, err := r.state.Store.ListSessions(ctx, store.SessionFilter{Limit: 1})
		return []health.Check{check("state database", err == nil, errText(err, "SQLite at "+filepath.Join(r.opts.StateDir, sqlite.FileName)),
			"check that "+r.opts.StateDir+" is writable")}
	}}, {Kind: health.Core, Name: "model", Run: func(ctx context.Context) []health.Check {
		out := make([]health.Check, len(names))
		var wg sync.WaitGroup
		for i, n := range names {
			a := r.agents[n]
			wg.Go(func() { out[i] = a.gen().ModelCheck(ctx, r.opts.ModelProbe) })
		}
		wg.Wait()
		return out
	}}}
	for _, n := range names {
		// The current generation's features: a reload changes them.
		a := r.agents[n]
		sources = append(sources, health.Source{Kind: health.Feature, Name: "agent " + n,
			Run: func(ctx context.Context) []health.Check { return a.gen().FeatureChecks(ctx) }})
	}
	return append(sources, health.Programs(), health.Source{Kind: health.Optional, Name: "tool sandbox",
		Run: func(context.Context) []health.Check { return append(sandbox.Probe().Checks(), r.warm.Check()) }})
}

func check(name string, ok bool, msg, fix string) health.Check {
	c := health.Check{Name: name, OK: ok, Message: msg}
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
