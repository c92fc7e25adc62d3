package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/remote"
	"github.com/picobot/picobot/runtime/cluster"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/noderedis"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
	runtimesession "github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/tool"
	browsertool "github.com/picobot/picobot/runtime/tool/browser"
	"github.com/picobot/picobot/runtime/tracing"
)

// session is `picobot session`, the main of a cluster-mode session pod. The
// operator configures it through the environment (see runtime/cluster).
func session(args []string) error {
	fs := flag.NewFlagSet("session", flag.ContinueOnError)
	fs.Usage = func() {
		_, _ = fs.Output().Write([]byte("Usage: picobot session [--metrics-addr ADDR]\n\nRuns one session pod: waits for a wake, serves that chat until idle, exits.\n" +
			"Configured by the operator through PICOBOT_TENANT, PICOBOT_AGENT, PICOBOT_POD, PICOBOT_POSTGRES_URL,\n" +
			"PICOBOT_REDIS_URL, PICOBOT_S3_* and PICOBOT_SECRET_<NAME>_<KEY>.\n\n"))
		fs.PrintDefaults()
	}
	metricsAddr := fs.String("metrics-addr", os.Getenv("PICOBOT_METRICS_ADDR"), metricsAddrHelp)
	traces := bindTracingFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))
	reg, met, err := newMetrics()
	if err != nil {
		return err
	}
	ms, _, err := serveMetrics(*metricsAddr, reg, log) // a failed metrics server does not stop the pod's turns
	if err != nil {
		return err
	}
	defer func() { _ = ms.Close() }()
	if sock := os.Getenv(execserver.SocketEnv); sock != "" {
		// The workspace is shared with the sandbox container, another user
		// of the pod's group: what the runtime creates there stays group
		// read-write.
		syscall.Umask(0o007)
		log.Info("Tool programs run in the sandbox container", "socket", sock)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var files tool.WorkspaceFiles
	if pair := os.Getenv(paircred.EnvPair); pair != "" {
		if err := relaySandboxPod(ctx, pair, log); err != nil {
			return err
		}
		// The runtime's own reads and writes of workspace files go to the
		// sandbox pod's workspace too, through the relay (which copies a
		// chat message's uploads there first).
		files = execserver.WorkspaceFiles(execserver.NewClient(os.Getenv(execserver.SocketEnv)))
	}
	// The operator passes its OTEL_* settings on to session pods.
	tp, stopTracing, err := traces.start(ctx, "picobot-session", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	closeFeatures := func() {}
	defer func() { closeFeatures() }()
	checks := podHealthService()
	err = cluster.RunSession(ctx, cluster.SessionOptions{Log: log, Health: checks, Metrics: met, TracerProvider: tp, Features: func(svc *cluster.Services, pod cluster.Pod) []agenthost.Feature {
		o := featureOptions{log: log, cron: true, health: checks, probe: modelcheck.NewProber(), files: files,
			// Messages to chat platforms leave through the gateway, which
			// holds the channels' credentials.
			sender: cluster.RemoteSender{Bus: svc.Bus, Redis: svc.Redis},
			// Paired devices are connected to a gateway replica: calls
			// reach it through Redis.
			nodes: &node.Service{Store: svc.Store, Remote: noderedis.Remote{Redis: svc.Redis}, Log: log}}
		// bot_status reads the agent's pods and wakes where they keep them.
		status := cluster.BotStatus{Redis: svc.Redis, LeaseTTL: pod.LeaseTTL}
		o.instances, o.queue = status.Instances, status.Queue
		// Browsers run in browser pods the operator starts on request.
		prov, perr := remote.NewProvider(remote.ProviderConfig{Client: pod.Kube, Namespace: pod.Tenant, Agent: pod.Agent.Name,
			AgentUID: pod.Agent.UID, Holder: pod.Name})
		if perr == nil {
			o.browser = browser.Config{Endpoint: prov.Endpoint}
			o.onBrowser = func(f *browsertool.Feature) { go prov.Run(ctx, f.Driver().Active) }
		} else {
			log.Error("Browser pods are unavailable", "err", perr)
		}
		var feats []agenthost.Feature
		var closeAll func()
		feats, closeAll = features(o)
		closeFeatures = func() {
			closeAll()
			if prov != nil {
				_ = prov.Close(context.WithoutCancel(ctx))
			}
		}
		return feats
	}})
	if errors.Is(err, context.Canceled) {
		return nil // terminated while warm
	}
	return err
}

// relaySandboxPod serves the exec server socket (PICOBOT_SANDBOX_SOCKET) to
// the runtime's own tools and relays every program and file tool call to
// the session's sandbox pod (the operator's placement "pod"): over TLS to
// the address the pair's ConfigMap names, pinning the pair's certificate
// and showing its token. The address is looked up again when a connection
// fails (the operator replaced the sandbox pod).
func relaySandboxPod(ctx context.Context, pair string, log *slog.Logger) error {
	sock, ns := os.Getenv(execserver.SocketEnv), os.Getenv("PICOBOT_TENANT")
	if sock == "" || ns == "" {
		return fmt.Errorf("failed to reach sandbox pod %q: $%s and $PICOBOT_TENANT must be set", pair, execserver.SocketEnv)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to configure the Kubernetes client: %w", err)
	}
	kube, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("failed to create the Kubernetes client: %w", err)
	}
	c, err := execserver.NewRemoteClient(execserver.RemoteConfig{CertPEM: []byte(os.Getenv(paircred.EnvCert)), Token: os.Getenv(paircred.EnvToken),
		Root: filepath.Join(os.Getenv("PICOBOT_STATE_DIR"), "workspaces"),
		Address: func(ctx context.Context, _ string) (string, error) {
			var cm corev1.ConfigMap
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: pair}, &cm); err != nil {
				return "", fmt.Errorf("failed to look up the address of sandbox pod %q: %w", pair, err)
			}
			if a := cm.Data[paircred.KeyAddress]; a != "" {
				return a, nil
			}
			return "", fmt.Errorf("failed to look up the address of sandbox pod %q: it has none yet", pair)
		}})
	if err != nil {
		return err
	}
	// The runtime copies the files a chat message carries into the
	// workspace; the programs see them in the sandbox pod's.
	relay := &execserver.Relay{Socket: sock, Client: c, Mirror: []string{runtimesession.UploadsDir}, Log: log}
	l, err := relay.Listen()
	if err != nil {
		return err
	}
	go func() {
		if err := relay.Serve(ctx, l); err != nil {
			log.Error("Sandbox pod relay stopped", "err", err)
		}
	}()
	log.Info("Tool programs run in the sandbox pod", "pair", pair, "socket", sock)
	return nil
}
