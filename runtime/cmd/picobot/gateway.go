package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/kubeauth"
	"github.com/picobot/picobot/runtime/gateway/web"
	"github.com/picobot/picobot/runtime/outbound"
)

// gatewayCmd is `picobot gateway`, the cluster-mode gateway: tenant API keys
// from Secrets, messages queued in Redis for session pods, state in
// PostgreSQL, artifacts in S3.
func gatewayCmd(args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	addr := fs.String("addr", ":8080", "Address of the gateway API and web UI.")
	replyTimeout := fs.Duration("reply-timeout", 10*time.Minute, "How long a send waits for its reply.")
	hosts := fs.String("allowed-hosts", os.Getenv("PICOBOT_ALLOWED_HOSTS"), "Comma-separated names clients reach the gateway by; other Host headers get 421 (default $PICOBOT_ALLOWED_HOSTS; empty: any).")
	origins := fs.String("allowed-origins", os.Getenv("PICOBOT_ALLOWED_ORIGINS"), "Comma-separated browser origins (host patterns such as app.example.com or *.example.com) allowed besides the gateway's own (default $PICOBOT_ALLOWED_ORIGINS).")
	publicURL := fs.String("public-url", os.Getenv("PICOBOT_PUBLIC_URL"), "Externally reachable root URL, for registering chat platform webhooks (default $PICOBOT_PUBLIC_URL).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to configure the Kubernetes client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	keys, err := kubeauth.New(cs, log)
	if err != nil {
		return err
	}
	// Agents are read from an informer cache: every send checks its agent.
	resync := 5 * time.Minute // channel credentials are re-read this often
	agents, err := cache.New(cfg, cache.Options{Scheme: cluster.NewScheme(), SyncPeriod: &resync,
		ByObject: map[client.Object]cache.ByObject{&picobotv1alpha1.Agent{}: {}}})
	if err != nil {
		return fmt.Errorf("failed to create the agent cache: %w", err)
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
	backend := cluster.NewBackend(cluster.BackendConfig{Bus: svc.Bus, Redis: svc.Redis, Store: svc.Store, Artifacts: svc.Artifacts,
		Kube: agents, ReplyTimeout: *replyTimeout, Log: log})
	srv, err := gateway.NewServer(gateway.Config{Backend: backend, Auth: keys, UI: web.FS, Log: log,
		AllowedHosts: splitList(*hosts), OriginPatterns: splitList(*origins)})
	if err != nil {
		return err
	}
	// Chat platforms: webhooks arrive here, replies leave from here.
	channels := channel.NewManager(channel.Options{PublicURL: *publicURL, Log: log,
		OnInbound: func(ctx context.Context, agentName string, in channel.Inbound) error {
			return backend.Inbound(ctx, agentName, in)
		}})
	if err := followAgentChannels(ctx, agents, cs, channels, log); err != nil {
		return err
	}
	loops.Go(func() error { return channels.Start(ctx) })
	disp, err := outbound.New(outbound.Config{Store: svc.Store, Channels: channels, Artifacts: svc.Artifacts, Web: outbound.StoredOnly{}, Log: log})
	if err != nil {
		return err
	}
	relay := &cluster.OutboundRelay{Bus: svc.Bus, Redis: svc.Redis, Dispatcher: disp, Tenants: tenants, Log: log}
	loops.Go(func() error { return relay.Start(ctx) })
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
	<-ctx.Done() // a signal, or a loop failed
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(hs.Shutdown(shutdown), stopLoops(stop, loops))
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

// followAgentChannels keeps the channel manager in step with the Agents'
// spec.channels (credentials read from their Secrets when an Agent changes,
// and again every resync).
func followAgentChannels(ctx context.Context, agents cache.Cache, cs kubernetes.Interface, channels *channel.Manager, log *slog.Logger) error {
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
			s, err := cs.CoreV1().Secrets(a.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
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
