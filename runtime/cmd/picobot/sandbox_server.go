package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
	"github.com/picobot/picobot/runtime/tool/builtin"
)

// sandboxServer is `picobot sandbox-server`, the main of a session pod's
// sandbox container: it starts the shell tools' programs and MCP stdio
// servers and runs the file tools for the runtime container, which reaches it through --socket (PICOBOT_SANDBOX_SOCKET there).
func sandboxServer(args []string) error {
	fs := newFlags("sandbox-server", `Usage: picobot sandbox-server [flags]

Starts the shell and file tools' programs of a session pod in its sandbox container, for the
runtime container that asks over a Unix socket (started by the operator's pod template).
`)
	socket := fs.String("socket", envOr(execserver.SocketEnv, "/sandbox/run/exec.sock"),
		"Unix socket to listen on, in an emptyDir shared with the runtime container (default $"+execserver.SocketEnv+").")
	workspace := fs.String("workspace", envOr("PICOBOT_SANDBOX_WORKSPACE", "/workspace"),
		"Folder the programs' workspaces must lie in, from the workspace emptyDir (default $PICOBOT_SANDBOX_WORKSPACE).")
	allow := fs.String("allow-uid", "", "Comma-separated users that may connect (the runtime container's); default any but this server's own.")
	listen := fs.String("listen", "", "TCP address to serve over TLS instead of the socket: a sandbox pod's (the certificate, key and token from $"+
		paircred.EnvCert+", $"+paircred.EnvKey+" and $"+paircred.EnvToken+", the pair's Secret).")
	if err := parse(fs, args); err != nil {
		return err
	}
	var uids []int
	for _, s := range strings.Split(*allow, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		uid, err := strconv.Atoi(s)
		if err != nil || uid < 0 {
			return fmt.Errorf("failed to parse --allow-uid %q: want user ids such as 65532", s)
		}
		uids = append(uids, uid)
	}
	// Programs create files the runtime container (another user of the
	// pod's shared group) reads and writes: group read-write.
	syscall.Umask(0o007)
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg := execserver.Config{Socket: *socket, Workspace: *workspace, AllowUIDs: uids, Tools: builtin.FileTools, Log: log}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *listen != "" {
		return serveSandboxPod(ctx, cfg, *listen)
	}
	srv, err := execserver.New(cfg)
	if err != nil {
		return err
	}
	return srv.Serve(ctx)
}

// serveSandboxPod serves a sandbox pod's runtime over TLS on addr: the
// workspace volume is the pod's own, so the server creates the workspaces
// the runtime names.
func serveSandboxPod(ctx context.Context, cfg execserver.Config, addr string) error {
	cert, err := tls.X509KeyPair([]byte(os.Getenv(paircred.EnvCert)), []byte(os.Getenv(paircred.EnvKey)))
	if err != nil {
		return fmt.Errorf("failed to load the sandbox pair's certificate from $%s and $%s: %w", paircred.EnvCert, paircred.EnvKey, err)
	}
	token := os.Getenv(paircred.EnvToken)
	if token == "" {
		return fmt.Errorf("failed to serve over TLS: $%s (the pair's token) is empty", paircred.EnvToken)
	}
	cfg.Socket, cfg.CreateWorkspaces = "", true
	if err := os.MkdirAll(cfg.Workspace, 0o700); err != nil {
		return fmt.Errorf("failed to create workspace folder %q: %w", cfg.Workspace, err)
	}
	srv, err := execserver.New(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %q: %w", addr, err)
	}
	return srv.ServeTLS(ctx, l, token, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
}

// envOr is the variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
