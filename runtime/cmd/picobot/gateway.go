package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/blob/blobgrant"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster"
	"github.com/picobot/picobot/runtime/cluster/published"
	"github.com/picobot/picobot/runtime/cluster/quotasource"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/kubeauth"
	"github.com/picobot/picobot/runtime/gateway/web"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/noderedis"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tracing"
)

// gatewayCmd is `picobot gateway`, the cluster-mode gateway: tenant API keys
// from Secrets, messages queued in Redis for session pods, state in
// PostgreSQL, artifacts in S3.
func gatewayCmd(args []string) error {
	fs := newFlags("gateway", `Usage: picobot gateway [flags]

Runs the cluster-mode gateway: the API, the web UI and chat platform webhooks, with API keys
from the operator's Secrets, the bus in Redis, state in PostgreSQL and artifacts in S3.
Configured by flags and PICOBOT_POSTGRES_URL, PICOBOT_REDIS_URL, PICOBOT_S3_*.
`)
	addr := fs.String("addr", ":8080", "Address of the gateway API and web UI.")
	replyTimeout := fs.Duration("reply-timeout", 10*time.Minute, "How long a send waits for its reply.")
	hosts := fs.String("allowed-hosts", os.Getenv("PICOBOT_ALLOWED_HOSTS"), "Comma-separated names clients reach the gateway by; other Host headers get 421 (default $PICOBOT_ALLOWED_HOSTS; empty: any).")
	origins := fs.String("allowed-origins", os.Getenv("PICOBOT_ALLOWED_ORIGINS"), "Comma-separated browser origins (host patterns such as app.example.com or *.example.com) allowed besides the gateway's own (default $PICOBOT_ALLOWED_ORIGINS).")
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "The gateway's namespace, where the operator publishes tenants' API-key hashes and channel credentials (default $POD_NAMESPACE).")
	publicURL := fs.String("public-url", os.Getenv("PICOBOT_PUBLIC_URL"), "Externally reachable root URL, for registering chat platform webhooks (default $PICOBOT_PUBLIC_URL).")
	blobAddr := fs.String("blob-addr", ":8090", "Address of the blob grant service for session pods (presigned S3 requests of their tenant's keys); empty: off.")
	metricsAddr := fs.String("metrics-addr", os.Getenv("PICOBOT_METRICS_ADDR"), metricsAddrHelp)
	quotaDefaults := fs.String("quota-defaults", os.Getenv(quota.DefaultsEnv),
		"The platform's default quota, a TenantQuota spec as JSON (the chart's quotaDefaults; default $"+quota.DefaultsEnv+"): its maxConcurrentSessions and messagesPerMinute cap tenants whose TenantQuota leaves them unset or who have none.")
	runRetention := fs.Duration("run-retention", delegate.DefaultRetention, "How long ended sub-agent (delegate) runs are kept before they are deleted.")
	runGrace := fs.Duration("run-watch-grace", 15*time.Second, "How long a background sub-agent run or its continuation may go without a runtime before the gateway wakes one.")
	traces := bindTracingFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tp, stopTracing, err := traces.start(ctx, "picobot-gateway", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to configure the Kubernetes client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	keys, err := kubeauth.New(cs, *namespace, log)
	if err != nil {
		return err
	}
	agents, err := gatewayCache(cfg, *namespace)
	if err != nil {
		return err
	}
	agentInformer, err := agents.GetInformer(ctx, &picobotv1alpha1.Agent{})
	if err != nil {
		return fmt.Errorf("failed to watch agents: %w", err)
	}
	// The outbound relay reads the streams of the namespaces with Agents.
	tenants := cluster.NewTenantSet()
	if _, err := agentInformer.AddEventHandler(tenants.Handler()); err != nil {
		return fmt.Errorf("failed to follow the agents' namespaces: %w", err)
	}
	svc, err := cluster.OpenServices(ctx, os.Getenv)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Close() }()

	// The background loops run under one group: the first that fails stops
	// the others and the server, and its error is the command's (the pod
	// restarts rather than serve without, say, reply delivery).
	loops, ctx := errgroup.WithContext(ctx)
	defer func() { _ = stopLoops(stop, loops) }()
	loops.Go(func() error { return keys.Start(ctx) })
	loops.Go(func() error { return agents.Start(ctx) })
	if !keys.WaitForSync(ctx) || !agents.WaitForCacheSync(ctx) {
		return errors.Join(errors.New("stopped before the API-key and agent caches synced"), stopLoops(stop, loops))
	}
	// The metrics are served on their own listener (--metrics-addr), not
	// behind the tenants' API keys: they span every tenant.
	reg, met, err := newMetrics()
	if err != nil {
		return err
	}
	// The tenants' session and message caps: their TenantQuotas read
	// directly (one GET per tenant per 30 s), counted in Redis so that
	// every replica enforces the same caps.
	quotaReader, err := client.New(cfg, client.Options{Scheme: cluster.NewScheme()})
	if err != nil {
		return fmt.Errorf("failed to create the TenantQuota client: %w", err)
	}
	defaults, err := quota.ParseDefaults(*quotaDefaults)
	if err != nil {
		return fmt.Errorf("--quota-defaults: %w", err)
	}
	limits := &quotasource.Limits{Kube: quotaReader, Clock: clock.RealClock{}, Log: log, Defaults: defaults}
	// The gateway's bus and store calls are counted and timed.
	mbus, mstore := met.Bus(svc.Bus), met.Store(svc.Store)
	backend := cluster.NewBackend(cluster.BackendConfig{Bus: mbus, Redis: svc.Redis, Store: mstore, Artifacts: svc.Artifacts,
		Kube: agents, ReplyTimeout: *replyTimeout, Log: log,
		Limits: limits.Limits, Admitter: &quota.RedisAdmitter{Redis: svc.Redis, Clock: clock.RealClock{}}, Metrics: met})
	// Paired devices connect to one replica; calls from session pods and
	// the other replicas reach them through Redis (package noderedis).
	nodeHub := node.NewHub()
	holder, _ := os.Hostname()
	nodeRelay := &noderedis.Relay{Redis: svc.Redis, Hub: nodeHub, Holder: holder, Log: log}
	nodeRelay.Follow(ctx)
	loops.Go(func() error { return nodeRelay.Start(ctx) })
	nodes := &node.Service{Store: mstore, Hub: nodeHub, Remote: noderedis.Remote{Redis: svc.Redis}, Log: log}
	srv, err := gateway.NewServer(gateway.Config{Backend: backend, Auth: keys, UI: web.FS, Log: log,
		AllowedHosts: splitList(*hosts), OriginPatterns: splitList(*origins), Metrics: met, TracerProvider: tp, Nodes: nodes})
	if err != nil {
		return err
	}
	// Chat platforms: webhooks arrive here, replies leave from here.
	channels := channel.NewManager(channel.Options{PublicURL: *publicURL, Log: log, TracerProvider: tp,
		OnInbound: func(ctx context.Context, agentName string, in channel.Inbound) error {
			return backend.Inbound(ctx, agentName, in)
		}})
	if err := followAgentChannels(ctx, agents, *namespace, channels, log); err != nil {
		return err
	}
	loops.Go(func() error { return channels.Start(ctx) })
	disp, err := outbound.New(outbound.Config{Store: svc.Store, Channels: channels, Artifacts: svc.Artifacts, Web: outbound.StoredOnly{}, Log: log})
	if err != nil {
		return err
	}
	relay := &cluster.OutboundRelay{Bus: svc.Bus, Redis: svc.Redis, Dispatcher: disp, Tenants: tenants, TracerProvider: tp, Log: log}
	loops.Go(func() error { return relay.Start(ctx) })
	// Background delegate runs outlive the pods that serve them: the watch
	// wakes a runtime for a run or a continuation whose pod died.
	runs := &cluster.RunWatch{Bus: svc.Bus, Redis: svc.Redis, Store: svc.Store, Tenants: tenants, Retention: *runRetention,
		Grace: *runGrace, Every: min(*runGrace/3, 5*time.Second), Log: log}
	loops.Go(func() error { return runs.Start(ctx) })
	root := http.NewServeMux()
	root.Handle("/hooks/", channels.Handler())
	root.Handle("/", srv)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", *addr, err)
	}
	hs := gateway.HTTPServer(root, gateway.Limits{})
	ln = gateway.Listen(ln, gateway.Limits{})
	fmt.Fprintf(os.Stderr, "PicoBot gateway is serving http://%s/\n", ln.Addr())
	loops.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("gateway server failed: %w", err)
		}
		return nil
	})
	blobs, err := serveBlobGrants(*blobAddr, svc, cs, loops, log)
	if err != nil {
		return errors.Join(err, hs.Close(), stopLoops(stop, loops))
	}
	ms, metricsFailed, err := serveMetrics(*metricsAddr, reg, log)
	if err != nil {
		return errors.Join(err, hs.Close(), blobs.Close(), stopLoops(stop, loops))
	}
	loops.Go(func() error {
		select {
		case err := <-metricsFailed:
			return err
		case <-ctx.Done():
			return nil
		}
	})
	<-ctx.Done() // a signal, or a loop failed
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(hs.Shutdown(shutdown), blobs.Shutdown(shutdown), ms.Shutdown(shutdown), stopLoops(stop, loops))
}

// serveBlobGrants serves the blob grant service on its own listener: it is
// for session pods, so the gateway's Ingress does not route to it, and it
// reviews their tokens with the API server (a review is kept 30 s). addr "" turns it off (a server
// that serves nothing is returned, so shutting it down is always right).
func serveBlobGrants(addr string, svc *cluster.Services, cs kubernetes.Interface, loops *errgroup.Group, log *slog.Logger) (*http.Server, error) {
	if addr == "" {
		return &http.Server{}, nil
	}
	if svc.S3 == nil {
		return nil, errors.New("the blob grant service needs the gateway's own S3 access (PICOBOT_S3_BUCKET and credentials)")
	}
	h, err := blobgrant.New(blobgrant.Config{Reviews: cs.AuthenticationV1().TokenReviews(), Blobs: svc.S3, Log: log})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	hs := gateway.HTTPServer(h, gateway.Limits{})
	ln = gateway.Listen(ln, gateway.Limits{})
	fmt.Fprintf(os.Stderr, "PicoBot gateway serves blob grants on http://%s/\n", ln.Addr())
	loops.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("blob grant server failed: %w", err)
		}
		return nil
	})
	return hs, nil
}

// stopLoops cancels the gateway's background loops and returns the first
// error one of them failed with (ending because they were cancelled is none).
func stopLoops(stop context.CancelFunc, loops *errgroup.Group) error {
	stop()
	if err := loops.Wait(); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// gatewayCache is the informer cache of Agents (every send checks its
// agent) and of the copies of channel Secrets the operator publishes in the
// gateway's namespace ns (the gateway reads no tenant's Secret).
func gatewayCache(cfg *rest.Config, ns string) (cache.Cache, error) {
	resync := 5 * time.Minute // channels are set up again this often
	c, err := cache.New(cfg, cache.Options{Scheme: cluster.NewScheme(), SyncPeriod: &resync,
		ByObject: map[client.Object]cache.ByObject{
			&picobotv1alpha1.Agent{}: {},
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{ns: {}},
				Label: labels.SelectorFromSet(labels.Set{published.LabelChannelCredentials: "true"})},
		}})
	if err != nil {
		return nil, fmt.Errorf("failed to create the agent cache: %w", err)
	}
	return c, nil
}

// followAgentChannels keeps the channel manager in step with the Agents'
// spec.channels, with credentials from the copies of their Secrets the
// operator publishes in namespace ns: set up again when an Agent or a copy
// changes, and every resync.
func followAgentChannels(ctx context.Context, agents cache.Cache, ns string, channels *channel.Manager, log *slog.Logger) error {
	inf, err := agents.GetInformer(ctx, &picobotv1alpha1.Agent{})
	if err != nil {
		return err
	}
	set := func(obj any) {
		a, ok := obj.(*picobotv1alpha1.Agent)
		if !ok {
			return
		}
		if len(a.Spec.Channels) == 0 {
			channels.RemoveAgent(a.Namespace, a.Name)
			return
		}
		err := channels.SetAgent(a.Namespace, a, func(name string) *corev1.Secret {
			s := &corev1.Secret{}
			key := client.ObjectKey{Namespace: ns, Name: published.ChannelCredentialsName(a.Namespace, name)}
			if err := agents.Get(ctx, key, s); err != nil || !published.IsChannelCredentials(s, a.Namespace, name) {
				return nil
			}
			return s
		})
		if err != nil {
			log.Warn("Some channels of an agent are not usable", "tenant", a.Namespace, "agent", a.Name, "err", err)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, n any) { set(n) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if a, ok := obj.(*picobotv1alpha1.Agent); ok {
				channels.RemoveAgent(a.Namespace, a.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	// A copy that arrives, changes or goes sets up the Agents naming it.
	copies, err := agents.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("failed to watch channel credentials: %w", err)
	}
	resetNaming := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		tenant, secret := s.Labels[published.LabelTenant], s.Annotations[published.AnnotationSecret]
		var list picobotv1alpha1.AgentList
		if tenant == "" || agents.List(ctx, &list, client.InNamespace(tenant)) != nil {
			return
		}
		for i := range list.Items {
			if slices.ContainsFunc(list.Items[i].Spec.Channels, func(c picobotv1alpha1.Channel) bool {
				return c.SecretRef != nil && c.SecretRef.Name == secret
			}) {
				set(&list.Items[i])
			}
		}
	}
	_, err = copies.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    resetNaming,
		UpdateFunc: func(_, n any) { resetNaming(n) },
		DeleteFunc: resetNaming,
	})
	return err
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
