package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/cluster/agentsource"
	"github.com/picobot/picobot/runtime/cluster/quotasource"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/scheduler/localrun"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/agentconfig"
	"github.com/picobot/picobot/runtime/turn"
)

// Environment of a session pod, set by the operator's pod spec.
const (
	EnvTenant      = "PICOBOT_TENANT"
	EnvAgent       = "PICOBOT_AGENT"
	EnvPod         = "PICOBOT_POD"
	EnvStateDir    = "PICOBOT_STATE_DIR"
	EnvIdleTimeout = "PICOBOT_IDLE_TIMEOUT"
	EnvLeaseTTL    = "PICOBOT_LEASE_TTL"
	// EnvShutdownGrace is how long a terminated session pod lets its running
	// turn finish (DefaultShutdownGrace); keep it under the pod's
	// terminationGracePeriodSeconds.
	EnvShutdownGrace = "PICOBOT_SHUTDOWN_GRACE"
	// EnvAuditRetention is how long the tenant's audit records of tool
	// calls are kept (audit.DefaultRetention); a pod that served a chat
	// deletes older ones before it exits.
	EnvAuditRetention = "PICOBOT_AUDIT_RETENTION"
)

// DefaultShutdownGrace is EnvShutdownGrace's default: the session pod's
// terminationGracePeriodSeconds (30) less time to release the chat and exit.
const DefaultShutdownGrace = 25 * time.Second

// NewScheme returns a scheme with the types the runtime processes (session
// pods, the gateway) read and write: core (ConfigMaps, Secrets, Pods),
// coordination (the browser pods' Leases) and PicoBot's. client-go's scheme
// with every built-in API group would cost each session pod about 0.6 MB of
// heap and 5,000 allocations for types it never touches.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, picobotv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // a type registered twice under different names: a programming error
		}
	}
	return s
}

// SessionOptions configure RunSession.
type SessionOptions struct {
	// Env reads the pod's environment (os.Getenv when nil).
	Env func(string) string
	// Kube reaches the API server; built from the in-cluster config or
	// KUBECONFIG when nil (a watching client: skills follow ConfigMaps live).
	Kube client.Client
	// Features returns the agent's features (memory, skills, schedules,
	// messaging, browser) once the shared services are connected.
	Features func(*Services, Pod) []agenthost.Feature
	// Health is the pod's health service (the health tool's): the agent's
	// model and feature checks are added to it, and /health reports it.
	Health *health.Service
	// Metrics records the pod's turns, model and tool calls and chat
	// (package metrics); nil records nothing.
	Metrics *metrics.Metrics
	// TracerProvider traces the pod's turns (package tracing); nil traces
	// nothing.
	TracerProvider trace.TracerProvider
	Log            *slog.Logger
}

// Pod is what features may know of the session pod.
type Pod struct {
	Kube   client.Client
	Agent  *picobotv1alpha1.Agent
	Name   string
	Tenant string
	// LeaseTTL is the chat lease's TTL, which the pod's heartbeat renews.
	LeaseTTL time.Duration
}

// RunSession is `picobot session`: it assembles the pod's agent, waits as a
// warm pod for a wake, serves that chat until idle and returns.
func RunSession(ctx context.Context, opts SessionOptions) error {
	env := opts.Env
	if env == nil {
		env = os.Getenv
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	tenant, agentName, pod := env(EnvTenant), env(EnvAgent), env(EnvPod)
	if tenant == "" || agentName == "" || pod == "" {
		return fmt.Errorf("a session pod needs %s, %s and %s", EnvTenant, EnvAgent, EnvPod)
	}
	idle, err := durationEnv(env, EnvIdleTimeout, 0)
	if err != nil {
		return err
	}
	ttl, err := durationEnv(env, EnvLeaseTTL, DefaultLeaseTTL)
	if err != nil {
		return err
	}
	grace, err := durationEnv(env, EnvShutdownGrace, DefaultShutdownGrace)
	if err != nil {
		return err
	}
	auditRetention, err := durationEnv(env, EnvAuditRetention, audit.DefaultRetention)
	if err != nil {
		return err
	}
	if limit, ok := memoryLimit(env, os.ReadFile); ok {
		debug.SetMemoryLimit(limit)
		log.Info("Set the Go soft memory limit from the container's limit", "bytes", limit)
	}
	kube := opts.Kube
	if kube == nil {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return fmt.Errorf("failed to configure the Kubernetes client: %w", err)
		}
		if kube, err = newKubeClient(cfg); err != nil {
			return err
		}
	}
	var a picobotv1alpha1.Agent
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenant, Name: agentName}, &a); err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // terminated while the API server was slow to answer
		}
		return fmt.Errorf("failed to read agent %s/%s: %w", tenant, agentName, err)
	}
	var defaults *corev1.ConfigMap
	cm := &corev1.ConfigMap{}
	switch err := kube.Get(ctx, client.ObjectKey{Namespace: tenant, Name: picobotv1alpha1.NamespaceDefaultsConfigMap}, cm); {
	case err == nil:
		defaults = cm
	case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
		return fmt.Errorf("failed to read %s: %w", picobotv1alpha1.NamespaceDefaultsConfigMap, err)
	}
	svc, err := OpenServices(ctx, env)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Close() }()
	// The pod's bus and store calls are counted and timed.
	mbus, mstore := opts.Metrics.Bus(svc.Bus), opts.Metrics.Store(svc.Store)
	stateDir := env(EnvStateDir)
	if stateDir == "" {
		stateDir = filepath.Join(os.TempDir(), "picobot-"+pod)
	}
	var feats []agenthost.Feature
	if opts.Features != nil {
		feats = opts.Features(svc, Pod{Kube: kube, Agent: &a, Name: pod, Tenant: tenant, LeaseTTL: ttl})
	}
	// gateway's restart drains the pod as SIGTERM does (restart cancels
	// ctx; runDraining lets the turn running finish).
	ctx, restart := context.WithCancel(ctx)
	defer restart()
	// cur is the agent's running generation: reload_config and gateway
	// switch it (the root agent's, see configSource).
	var cur atomic.Pointer[agenthost.Built]
	var retiredMu sync.Mutex
	var retired []*agenthost.Built
	defer func() {
		retiredMu.Lock()
		defer retiredMu.Unlock()
		for _, b := range retired {
			b.Close()
		}
	}()
	// The namespace's TenantQuota: read now so that the first turn is
	// checked, then again every quotasource.DefaultEvery.
	quotaDefaults, err := quota.ParseDefaults(env(quota.DefaultsEnv))
	if err != nil {
		return err
	}
	quotas := &quotasource.Source{Kube: kube, Namespace: tenant, Clock: clock.RealClock{}, Log: log, Defaults: quotaDefaults}
	_ = quotas.Refresh(ctx) // logged; no quota read is no budget yet
	var built *agenthost.Built
	delegates := &Delegates{Tenant: tenant, Bus: svc.Bus, Redis: svc.Redis, Kube: kube, Log: log}
	exchanges := &Exchanges{Tenant: tenant, Bus: svc.Bus, Redis: svc.Redis, Log: log.With("component", "agent-to-agent")}
	host := &agenthost.Host{Budget: quotas.Budget, Prices: quotas.Prices, MaxCronJobs: quotas.MaxCronJobs, Mode: agenthost.ModeCluster, Tenant: tenant, Store: mstore, Artifacts: svc.Artifacts,
		ArtifactURL: func(a store.Artifact) string { return "/api/v1/artifacts/" + a.ID },
		StateDir:    stateDir, Holder: pod, LeaseTTL: ttl, Defaults: defaults, Kube: kube, Features: feats, Log: log, Health: opts.Health, Metrics: opts.Metrics,
		Secrets: agenthost.EnvSecrets(nil, env, &a),
		// A sub-agent's model key is its own Agent's Secret, which this pod
		// must not read: its runs go to its own session pods.
		Delegates:  delegates,
		Background: &BackgroundRuns{Delegates: delegates},
		Exchanges:  exchanges,
		SecretHint: func(sel corev1.SecretKeySelector) string {
			return fmt.Sprintf("the operator passes Secret %q key %q to the pod as %s; check that the Secret exists", sel.Name, sel.Key, agenthost.SecretEnvName(sel.Name, sel.Key))
		}}
	host.ConfigSource = func(a *picobotv1alpha1.Agent) agentconfig.Source {
		// Only an Agent saying spec.role: root: the pod sees no other
		// Agent to apply the rest of the rule, and the operator grants
		// patch of the Agent to such pods only.
		if !agentspec.IsRoot(a) {
			return nil
		}
		return &agentsource.Source{Kube: kube, Namespace: tenant, Name: a.Name, Stop: restart,
			Switch: func(ctx context.Context, next *picobotv1alpha1.Agent) (string, error) {
				nb, err := host.Build(store.WithTenant(ctx, tenant), next)
				if err != nil {
					return "", err
				}
				if !nb.Info.Ready && cur.Load().Info.Ready {
					nb.Close()
					return "", fmt.Errorf("the new spec leaves the agent without a usable model (%s); a session pod gets its Secrets when it starts: "+
						"restart it (gateway restart) after creating the Secret", nb.Info.Message)
				}
				old := cur.Swap(nb)
				// The runtime keeps the first generation's manager (its
				// sessions and leases); its turns switch generation.
				built.Manager.Reconfigure(nb.Session)
				retiredMu.Lock()
				retired = append(retired, old)
				retiredMu.Unlock()
				return fmt.Sprintf("generation %d of Agent %s/%s", next.Generation, tenant, next.Name), nil
			}}
	}
	built, err = host.Build(store.WithTenant(ctx, tenant), &a)
	if err != nil {
		return err
	}
	cur.Store(built)
	defer func() { cur.Load().Close() }()
	if opts.Health != nil {
		// The current generation's model and features: a reload changes them.
		probe := modelcheck.NewProber()
		opts.Health.Add(health.Source{Kind: health.Core, Name: "model", Run: func(ctx context.Context) []health.Check {
			return []health.Check{cur.Load().ModelCheck(ctx, probe)}
		}}, health.Source{Kind: health.Feature, Name: "agent " + agentName, Run: func(ctx context.Context) []health.Check {
			return cur.Load().FeatureChecks(ctx)
		}})
	}
	if idle == 0 && a.Spec.Runtime != nil && a.Spec.Runtime.IdleTimeout != nil {
		idle = a.Spec.Runtime.IdleTimeout.Duration
	}
	log.Info("Session runtime ready", "tenant", tenant, "agent", agentName, "pod", pod, "idleTimeout", idle)
	runs := localrun.New(func(name string) (localrun.Agent, bool) { return cur.Load().RunTarget(), name == agentName })
	rt := NewRuntime(RuntimeConfig{Tenant: tenant, Agent: agentName, Pod: pod, Bus: mbus, Redis: svc.Redis, Store: mstore,
		Manager: built.Manager, IdleTimeout: idle, LeaseTTL: ttl, Runs: runs, AuditRetention: auditRetention,
		Stateless: func(ctx context.Context, req protocol.Stateless, stream bool, sink func(turn.Event)) (protocol.Outcome, error) {
			ctx, timer := opts.Metrics.StartTurn(ctx, tenant, agentName)
			out, err := cur.Load().Complete(ctx, req, stream, sink)
			timer.End(sessionrt.Outcome(err))
			return out, err
		}, Log: log, Drain: ctx.Done(), Metrics: opts.Metrics, TracerProvider: opts.TracerProvider,
		Delegated: SubAgentRuns(svc.Store, agentName, func(tools []string, background bool) (session.Config, error) {
			return cur.Load().SubAgentRun(tools, background)
		}),
		Completion: &RunCompletion{Store: svc.Store, Completions: Continuations{Tenant: tenant, Bus: svc.Bus, Redis: svc.Redis},
			Exchanges: exchanges, Log: log},
		// A session pod spends most of its life waiting: warm for a wake,
		// then for the user's next message. Start-up and each turn leave
		// garbage and heap the Go runtime would hand back to the OS only
		// gradually (a forced GC every two minutes, the background
		// scavenger); collecting and releasing it as soon as the pod goes
		// quiet keeps an idle pod's resident memory near its live heap.
		// It costs one GC of a small heap per turn. The executable's code
		// pages go too (see releaseCodePages): the next turn faults back
		// the few it runs.
		OnQuiet: func() {
			debug.FreeOSMemory()
			if _, err := releaseCodePages(); err != nil {
				log.Warn("Failed to release code pages", "err", err)
			}
		}})
	return runDraining(ctx, grace, rt.Run)
}

// runDraining runs a session pod's loop so that the end of ctx (SIGTERM)
// drains it: run's context goes on for grace more, for the turn running to
// finish (it is cut short after that, its steps stored for the chat's next
// owner), while the runtime takes no new wake or message (drain). A drained
// pod exits 0.
func runDraining(ctx context.Context, grace time.Duration, run func(context.Context) error) error {
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-hard.Done():
		}
	})
	defer stop()
	err := run(hard)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return context.Canceled // terminated: a clean exit
	}
	return err
}

func durationEnv(env func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := env(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive duration (e.g. 30s, 10m)", name, v)
	}
	return d, nil
}

// DiscoveryTimeout bounds each API discovery request of a session pod's
// Kubernetes client. controller-runtime's REST mapper discovers an API
// group on first use with no context, so against an API server that
// accepts connections but does not answer, a pod would otherwise hang
// there for ever, deaf to SIGTERM until the kubelet kills it.
const DiscoveryTimeout = 10 * time.Second

// newKubeClient is the session pod's client: requests follow their
// context as usual (watches stay open), discovery gives up after
// DiscoveryTimeout.
func newKubeClient(cfg *rest.Config) (client.WithWatch, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create the Kubernetes HTTP client: %w", err)
	}
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = DiscoveryTimeout
	dhc, err := rest.HTTPClientFor(dcfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create the Kubernetes discovery client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(dcfg, dhc)
	if err != nil {
		return nil, fmt.Errorf("failed to create the Kubernetes REST mapper: %w", err)
	}
	kube, err := client.NewWithWatch(cfg, client.Options{Scheme: NewScheme(), HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("failed to create the Kubernetes client: %w", err)
	}
	return kube, nil
}
