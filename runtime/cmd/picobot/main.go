// Command picobot is PicoBot's runtime binary. `picobot serve` runs embedded
// mode: the agents of a manifests folder, with the gateway and web UI, in one
// process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/web"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/warm"
	"github.com/picobot/picobot/runtime/tool/bot"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tracing"
)

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve", "session", "gateway", "sandbox-server":
		// Servers that hold keys keep them out of /proc/<pid>/environ.
		if err := sandbox.SealEnvironment(); err != nil {
			slog.Warn("Environment not sealed", "err", err)
		}
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "session":
		err = session(os.Args[2:])
	case "gateway":
		err = gatewayCmd(os.Args[2:])
	case "migrate":
		err = migrate(os.Args[2:])
	case "dead-letters":
		err = deadLetters(os.Args[2:], os.Stdout)
	case "ask":
		os.Exit(askCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	case "chat":
		os.Exit(chatCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	case "browser":
		err = browserCmd(os.Args[2:])
	case "sandbox-server":
		err = sandboxServer(os.Args[2:])
	case "health":
		err = healthCmd(os.Args[2:])
	case "version":
		err = versionCmd(os.Args[2:], os.Stdout)
	case "node":
		err = nodeCmd(os.Args[2:])
	case "nodes":
		err = nodesCmd(os.Args[2:], os.Stdout)
	case "completion":
		err = completionCmd(os.Args[2:], os.Stdout)
	case "help", "-h", "-help", "--help":
		usage(os.Stdout)
		return
	default:
		fmt.Fprintf(os.Stderr, "picobot: unknown command %q\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errFlagParse):
		os.Exit(2) // the flag package said what was wrong
	default:
		fmt.Fprintln(os.Stderr, "picobot:", err)
		os.Exit(1)
	}
}

// usage is the list of commands: on stdout when asked for, on stderr with
// a usage error.
func usage(w io.Writer) {
	_, _ = fmt.Fprint(w, `Usage: picobot <command> [flags]

Commands:
  serve   run the agents of a manifests folder with the gateway and web UI (embedded mode)
  browser run headless Chromium behind an authenticating DevTools proxy (browser pods)
  health  the running gateway's health report, or local checks when none runs (--json; exit 1 on failures)
  session run one session pod (cluster mode; started by the operator)
  sandbox-server  start the shell tools' programs in a session pod's sandbox container (--socket, --workspace)
  gateway run the cluster-mode gateway (API keys from Secrets, Redis, PostgreSQL, S3)
  migrate bring the PostgreSQL schema up to date and create the S3 bucket (cluster mode)
  dead-letters  list a tenant's messages set aside after too many deliveries, or requeue them (cluster mode)
  ask     send one message to an agent and print the reply ('picobot ask -h')
  chat    talk to an agent in a full-screen terminal UI ('picobot chat -h')
  node    pair this machine with a gateway as a node its agents can reach ('picobot node -h')
  nodes   list, approve, reject or revoke paired nodes ('picobot nodes -h')
  version print the build's version (and a gateway's, with --url)
  completion  print a shell completion script (bash, zsh or fish)

Run 'picobot <command> -h' for a command's flags.
`)
}

func serve(args []string) error {
	fs := newFlags("serve", `Usage: picobot serve [flags]

Runs the agents of a manifests folder with the gateway and the web UI in one process (embedded
mode: SQLite, an in-process bus and a local folder).
`)
	dir := fs.String("dir", ".", "Folder with Agent/CronJob/BrowserProfile manifests (and Secrets).")
	stateDir := fs.String("state", "", "Folder for picobot.db, artifacts and workspaces (default <dir>/.picobot).")
	addr := fs.String("addr", "127.0.0.1:8080", "Address of the gateway and web UI.")
	key := fs.String("api-key", os.Getenv("PICOBOT_API_KEY"), "API key clients must send (default $PICOBOT_API_KEY; none on loopback when empty).")
	publicURL := fs.String("public-url", os.Getenv("PICOBOT_PUBLIC_URL"), "Externally reachable root URL, for chat platform webhooks (default $PICOBOT_PUBLIC_URL; without it Telegram bots poll).")
	grace := fs.Duration("shutdown-grace", 25*time.Second, "On SIGTERM/SIGINT, how long running turns may take to finish before they are cut short (they resume at the next start).")
	retention := fs.Duration("run-retention", delegate.DefaultRetention, "How long ended sub-agent (delegate) runs are kept before they are deleted.")
	auditRetention := fs.Duration("audit-retention", audit.DefaultRetention, "How long the audit records of tool calls are kept before they are deleted.")
	warmMax := fs.Int("warm-sandboxes", warm.DefaultMax, "Most warm tool sandboxes kept at once, one per session workspace (0 starts every program through its own sandbox launcher).")
	warmIdle := fs.Duration("warm-sandbox-idle", warm.DefaultIdle, "How long a warm tool sandbox with no program running is kept.")
	traces := bindTracingFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *retention <= 0 {
		return fmt.Errorf("--run-retention %s is not a positive duration", *retention)
	}
	if *auditRetention <= 0 {
		return fmt.Errorf("--audit-retention %s is not a positive duration", *auditRetention)
	}
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tp, stopTracing, err := traces.start(ctx, "picobot", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	// The state is chosen here, before the runtime: the dispatcher that
	// delivers send_message, replies and scheduled notices works on it, and
	// the features get it when the runtime builds the agents.
	state, err := embedded.OpenState(ctx, embedded.StateDir(*dir, *stateDir))
	if err != nil {
		return err
	}
	var rt *embedded.Runtime
	channels := channel.NewManager(channel.Options{PublicURL: *publicURL, Log: log, TracerProvider: tp,
		OnInbound: func(ctx context.Context, agentName string, in channel.Inbound) error {
			return rt.Inbound(ctx, agentName, in)
		}})
	disp, err := outbound.New(outbound.Config{Store: state.Store, Channels: channels, Artifacts: state.Artifacts,
		Web: outbound.StoredOnly{}, Log: log})
	if err != nil {
		state.Close()
		return err
	}
	// One health service behind every surface: the runtime adds its checks
	// to it (Options.Health), the health tool and /health report it, the
	// gateway serves it as GET /api/v1/health (the web UI's health page,
	// `picobot health`).
	checks, probe := health.NewService(), modelcheck.NewProber()
	// Paired devices connect to this process's gateway; the nodes tool
	// reaches them here.
	nodes := &node.Service{Store: state.Store, Hub: node.NewHub(), Log: log}
	feats, closeFeatures := features(featureOptions{log: log, manifestsDir: *dir, sender: disp, channels: channels,
		health: checks, probe: probe, nodes: nodes,
		instances: func(ctx context.Context, tenant, agent string) ([]bot.Instance, error) {
			return rt.Instances(ctx, tenant, agent)
		},
		queue: func(ctx context.Context, tenant, agent string) (bot.Queue, error) {
			return rt.Queue(ctx, tenant, agent)
		}})
	defer closeFeatures()
	owner := func(channel string) string { return rt.ChannelOwner(channel) }
	wcfg := warm.Config{Max: *warmMax, Idle: *warmIdle}
	if *warmMax <= 0 {
		wcfg.Max = -1
	}
	// One registry per process, served on the gateway's /metrics behind
	// its API key.
	reg := metrics.NewRegistry()
	met, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		state.Close()
		return err
	}
	rt, err = embedded.Open(ctx, embedded.Options{Dir: *dir, StateDir: *stateDir, State: state, Log: log, Features: feats, Nodes: nodes,
		RunRetention: *retention, AuditRetention: *auditRetention, WarmSandbox: wcfg, Health: checks, ModelProbe: probe, Metrics: met, Gatherer: reg, TracerProvider: tp,
		Scheduler: &embedded.SchedulerOptions{Deliverer: notices{sender: disp, owner: owner}}})
	if err != nil {
		state.Close()
		return err
	}
	defer rt.Close()
	hooks := rt.ServeChannels(ctx, channels, disp)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", *addr, err)
	}
	if *key == "" {
		if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
			_ = ln.Close()
			return errors.New("refusing to serve beyond loopback without --api-key")
		}
	}
	root := http.NewServeMux()
	root.Handle("/hooks/", hooks) // chat platforms authenticate with their own signatures
	root.Handle("/", gateway.New(rt, *key, web.FS, log))
	srv := gateway.HTTPServer(root, gateway.Limits{})
	ln = gateway.Listen(ln, gateway.Limits{})
	for _, a := range rt.Agents() {
		state := "ready"
		if !a.Ready {
			state = "NOT READY: " + a.Message
		}
		log.Info("Agent loaded", "agent", a.Name, "state", state)
	}
	fmt.Fprintf(os.Stderr, "PicoBot is serving http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	return drain(rt, srv, *grace, log)
}

// drain shuts the server down cleanly: new messages are refused (resend with
// the same id after the restart), running turns get the grace period to
// finish, what still runs then is cut short with its steps stored (resumed
// at the next start), and the HTTP server closes once its calls have
// returned. A clean shutdown is not an error: the exit code is 0.
func drain(rt *embedded.Runtime, srv *http.Server, grace time.Duration, log *slog.Logger) error {
	log.Info("Shutting down: finishing running turns", "grace", grace)
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	rt.Drain(graceCtx)
	rt.Halt()
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdown); err != nil {
		log.Warn("Closed connections still open at shutdown", "err", err)
		return srv.Close()
	}
	return nil
}
