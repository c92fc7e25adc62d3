package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
)

// A stdio server is someone else's code, and a prompt-injected model can
// steer what it does (a filesystem server reads what it is asked to), so it
// runs in the same sandbox as the shell tools' programs: in embedded mode
// through the runtime's sandbox launcher (allowlisted environment, its own
// namespaces, Landlock), in a cluster-mode session pod in the sandbox
// container, started by its exec server with the pipes passed to it.

// stdioSpec is where a stdio server runs: its working folder read-write,
// with HOME there (npx's cache), and read-only the folders of the programs
// and scripts its command line names by absolute path, which Landlock would
// otherwise hide when they lie outside the system folders; the TCP ports of
// the Agent's opt-in besides the defaults.
func (s *server) stdioSpec(env []string) sandbox.Spec {
	var ro []string
	for _, a := range append([]string{s.spec.Command}, s.spec.Args...) {
		if d := programDir(a); d != "" {
			ro = append(ro, d)
		}
	}
	return sandbox.Spec{Workspace: s.opts.workDir, ReadOnly: ro, AllowedPorts: s.opts.ports, Env: env}
}

// programDir is the folder to open read-only for an absolute path on a
// stdio server's command line: the file's folder, or for a script inside a
// node_modules tree the folder that holds the outermost node_modules (its
// dependencies lie beside it). Anything else (a flag, a relative path) is
// "".
func programDir(arg string) string {
	if !filepath.IsAbs(arg) {
		return ""
	}
	p := filepath.Clean(arg)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return ""
	}
	if i := strings.Index(p, "/node_modules/"); i > 0 {
		return p[:i]
	}
	return filepath.Dir(p)
}

// localTransport starts the server through the runtime's sandbox launcher.
func (s *server) localTransport(c *connection, env []string) (mcpsdk.Transport, error) {
	cmd, err := sandbox.Command(s.stdioSpec(env), s.spec.Command, s.spec.Args...)
	if err != nil {
		return nil, fmt.Errorf("failed to sandbox stdio server %q: %w", s.spec.Name, err)
	}
	cmd.Stderr = c.stderr
	cmd.WaitDelay = stderrGrace
	// The launcher leads its own process group (Close also ends what the
	// server started: npx runs it as a grandchild) and dies with the
	// runtime.
	c.cmd, c.sandboxed = cmd.Cmd, cmd
	inner := &lookedUpTransport{command: s.spec.Command, inner: &mcpsdk.CommandTransport{Command: cmd.Cmd, TerminateDuration: terminateGrace}}
	return &detachedTransport{inner: inner, life: c.life, cancel: c.cancel}, nil
}

// lookedUpTransport finds the command before starting the launcher, which
// would only say on stderr that it is missing.
type lookedUpTransport struct {
	command string
	inner   mcpsdk.Transport
}

// Connect implements mcpsdk.Transport.
func (t *lookedUpTransport) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	if _, err := exec.LookPath(t.command); err != nil {
		return nil, err
	}
	return t.inner.Connect(ctx)
}

// serverTransport starts the server in the sandbox container.
type serverTransport struct {
	c    *execserver.Client
	req  execserver.Request
	conn *connection
}

// Connect implements mcpsdk.Transport: it starts the program with pipes of
// the runtime's as stdin, stdout and stderr.
func (t *serverTransport) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	if err := execserver.ShareWorkspace(t.req.Workspace); err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("failed to create a pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW)
		return nil, fmt.Errorf("failed to create a pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW, outR, outW)
		return nil, fmt.Errorf("failed to create a pipe: %w", err)
	}
	p, err := startWhenListening(ctx, t.c, t.req, inR, outW, errW)
	closeFiles(inR, outW, errW) // the server holds its own copies
	if err != nil {
		closeFiles(inW, outR, errR)
		return nil, err
	}
	t.conn.proc = p
	t.conn.stderrDone = make(chan struct{})
	go func() {
		defer close(t.conn.stderrDone)
		_, _ = io.Copy(t.conn.stderr, errR)
		_ = errR.Close()
	}()
	return (&mcpsdk.IOTransport{Reader: outR, Writer: inW}).Connect(ctx)
}

// startWhenListening starts the program, waiting (until ctx ends) for the
// exec server to listen: the runtime connects its MCP servers at start,
// and the sandbox container, a sidecar without a startup probe, may not be
// listening yet.
func startWhenListening(ctx context.Context, c *execserver.Client, req execserver.Request, stdin, stdout, stderr *os.File) (*execserver.Process, error) {
	for {
		p, err := c.Start(req, stdin, stdout, stderr)
		if err == nil || (!errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED)) {
			return p, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopRemote ends a program of the exec server as the SDK ends a local one:
// its stdin is closed already, so it has terminateGrace to exit, then the
// server kills its process group.
func (c *connection) stopRemote() {
	if c.proc == nil {
		return
	}
	select {
	case <-c.proc.Done():
	case <-time.After(terminateGrace):
		_ = c.proc.Signal(syscall.SIGTERM)
		select {
		case <-c.proc.Done():
		case <-time.After(terminateGrace):
		}
	}
	c.proc.Close()
	if c.stderrDone != nil {
		select {
		case <-c.stderrDone:
		case <-time.After(stderrGrace):
		}
	}
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
