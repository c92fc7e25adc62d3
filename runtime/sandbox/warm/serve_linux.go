//go:build linux

package warm

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
)

// init turns the runtime binary, started by Pool.start through the sandbox
// launcher as the init of a warm sandbox, into its exec server. It runs in
// init, before the packages that import this one start anything: the
// process is the sandbox's, not a runtime.
func init() {
	if len(os.Args) != 2 || os.Args[0] != serverName {
		return
	}
	if err := serve(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "picobot warm sandbox: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve runs the exec server of workspace on its stdin, the control
// socket, until the runtime closes it.
func serve(workspace string) error {
	ctl, err := fdConn(0)
	if err != nil {
		return err
	}
	var rw []string
	if privateTmp(workspace) {
		// The launcher bound the workspace's temporary folder on /tmp.
		rw = []string{"/tmp"}
	}
	srv, err := execserver.New(execserver.Config{Workspace: workspace, ReadWrite: rw, KillDescendants: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	return srv.ServeControl(context.Background(), ctl)
}

// privateTmp reports whether /tmp is the workspace's temporary folder.
func privateTmp(workspace string) bool {
	tmp, err := os.Stat("/tmp")
	if err != nil {
		return false
	}
	own, err := os.Stat(sandbox.TmpDir(workspace))
	return err == nil && os.SameFile(tmp, own)
}
