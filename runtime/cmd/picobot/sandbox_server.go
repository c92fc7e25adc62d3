package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/picobot/picobot/runtime/sandbox/execserver"
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
	srv, err := execserver.New(execserver.Config{Socket: *socket, Workspace: *workspace, AllowUIDs: uids,
		Tools: builtin.FileTools, Log: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Serve(ctx)
}

// envOr is the variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
