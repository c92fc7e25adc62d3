// Package shell holds the tools that run programs for the model: bash (one
// command, wait for it), exec and process (commands that may outlive the call,
// managed per session) and pty (interactive programs on a terminal).
//
// Every program runs in its own process group, so a timeout, a kill or the end
// of a session takes down everything it started, not just the shell. Programs
// start in the kernel sandbox of package sandbox: an allowlisted environment
// (never the runtime's secrets), their own namespaces where Linux allows, and
// Landlock confining them to the workspace, because the model can read
// whatever a program prints and a prompt-injected page can choose what runs.
// In a cluster-mode session pod they start in the sandbox container instead,
// through its exec server (PICOBOT_SANDBOX_SOCKET, package execserver); in
// embedded mode through the exec server of a warm sandbox of the session's
// workspace (WithWarmSandboxes, package warm), which the first program of
// the session starts through the launcher.
package shell

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
)

// Option configures the shell tools and managers.
type Option func(*config)

type config struct {
	launch    launcher
	environ   func() []string
	allowEnv  []string
	extraEnv  []string
	readOnly  []string
	readWrite []string
	ports     []uint16
	shell     string
	// approvals is the Agent's exec policy; foreground runs exec to the
	// end (the process tool is denied).
	approvals  approval.Policy
	foreground bool
	warm       WarmSandboxes
}

func newConfig(opts []Option) config {
	c := config{environ: os.Environ, shell: "bash"}
	for _, opt := range opts {
		opt(&c)
	}
	if c.launch == nil {
		c.launch = localLauncher{}
		for _, kv := range c.environ() {
			if sock, ok := strings.CutPrefix(kv, execserver.SocketEnv+"="); ok && sock != "" {
				c.launch = serverLauncher{execserver.NewClient(sock)}
			}
		}
	}
	if _, local := c.launch.(localLauncher); local && c.warm != nil {
		c.launch = warmLauncher{c.warm}
	}
	return c
}

// WithWarmSandboxes starts programs through the exec server of a warm
// sandbox of their workspace (embedded mode, package warm) instead of a
// launcher each; an exec server socket (cluster mode) goes first.
func WithWarmSandboxes(w WarmSandboxes) Option { return func(c *config) { c.warm = w } }

// WithExecServer starts programs through the exec server of the sandbox
// container listening on socket (cluster mode) instead of the runtime's own
// sandbox launcher. Without this option the shell tools use the server when
// the environment names one in PICOBOT_SANDBOX_SOCKET.
func WithExecServer(socket string) Option {
	return func(c *config) { c.launch = serverLauncher{execserver.NewClient(socket)} }
}

// WithEnviron sets where the base environment of programs comes from (default
// os.Environ); tests pass a fixed one.
func WithEnviron(fn func() []string) Option { return func(c *config) { c.environ = fn } }

// AllowEnv passes the named variables of the runtime's environment to
// programs; nothing else but the sandbox's allowlist (PATH, locale, TERM, TZ)
// is passed. Naming a credential here hands it to the model: it is for what
// a workflow needs on purpose (a GIT_ASKPASS_TOKEN, say).
func AllowEnv(names ...string) Option {
	return func(c *config) { c.allowEnv = append(c.allowEnv, names...) }
}

// WithEnv sets variables ("NAME=value") every program gets: what the Agent
// declares.
func WithEnv(kv ...string) Option {
	return func(c *config) { c.extraEnv = append(c.extraEnv, kv...) }
}

// WithPaths lets programs read readOnly and write readWrite besides the
// workspace (the Agent's spec.tools.fs.allowedPaths).
func WithPaths(readOnly, readWrite []string) Option {
	return func(c *config) {
		c.readOnly = append(c.readOnly, readOnly...)
		c.readWrite = append(c.readWrite, readWrite...)
	}
}

// WithPorts lets programs connect to the TCP ports ports besides the
// sandbox's defaults (the Agent's spec.tools.network.allowedPorts).
func WithPorts(ports ...uint16) Option {
	return func(c *config) { c.ports = append(c.ports, ports...) }
}

// WithShell sets the shell that runs commands with -c (default "bash").
func WithShell(path string) Option { return func(c *config) { c.shell = path } }

// IsSecretName reports whether an environment variable name looks like it
// holds a credential: *_KEY, *_TOKEN, *_SECRET, *API_KEY*, *PASSWORD*,
// *PASSWD*, *_CREDENTIALS (any case). It is defence in depth for places that
// pass a chosen environment on (MCP servers); the boundary is the sandbox's
// allowlist.
func IsSecretName(name string) bool {
	n := strings.ToUpper(name)
	for _, suffix := range []string{"_KEY", "_TOKEN", "_SECRET", "_CREDENTIALS"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	for _, part := range []string{"API_KEY", "PASSWORD", "PASSWD"} {
		if strings.Contains(n, part) {
			return true
		}
	}
	return false
}

// spec is where a program of workspace dir runs, its environment built from
// the allowlist.
func (c *config) spec(dir string, extraEnv ...string) sandbox.Spec {
	return sandbox.Spec{Workspace: dir, ReadOnly: c.readOnly, ReadWrite: c.readWrite, AllowedPorts: c.ports,
		Env: sandbox.Env(c.environ(), dir, c.allowEnv, slices.Concat(c.extraEnv, extraEnv)...)}
}

// argv is `shell -c command`.
func (c *config) argv(command string) []string { return []string{c.shell, "-c", command} }

// graceDrain is how long output is still read after a program (and its
// process group) ended: a descendant that left the group may hold the pipe.
const graceDrain = 2 * time.Second

// child is a command running in its own process group, its stdout and stderr
// going into one pipe that a goroutine copies to the output writer.
type child struct {
	prog program
	// exited is closed once the shell process has been reaped; status, ok
	// and err are then what wait returned.
	exited chan struct{}
	status syscall.WaitStatus
	ok     bool
	err    error
	// drained is closed once all output has been copied.
	drained chan struct{}
	pr      *os.File
}

// startChild runs `shell -c command` in dir. With stdin false the program
// reads from /dev/null; with true the returned writer feeds its stdin.
func (c *config) startChild(dir, command string, out io.Writer, stdin bool) (*child, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create output pipe: %w", err)
	}
	var inR, in *os.File
	if stdin {
		inR, in, err = os.Pipe()
		if err != nil {
			_ = pr.Close()
			_ = pw.Close()
			return nil, nil, fmt.Errorf("failed to create input pipe: %w", err)
		}
	}
	prog, err := c.launch.start(c.spec(dir), c.argv(command), inR, pw)
	_ = pw.Close() // the child has its copy; EOF comes when every holder is gone
	if inR != nil {
		_ = inR.Close()
	}
	if err != nil {
		_ = pr.Close()
		if in != nil {
			_ = in.Close()
		}
		return nil, nil, err
	}
	ch := &child{prog: prog, exited: make(chan struct{}), drained: make(chan struct{}), pr: pr}
	go func() {
		defer close(ch.drained)
		_, _ = io.Copy(out, pr)
	}()
	go func() {
		ch.status, ch.ok, ch.err = prog.wait()
		close(ch.exited)
	}()
	return ch, in, nil
}

// kill sends SIGKILL to the whole process group. SIGKILL rather than SIGTERM:
// the caller already decided the program must end, and a program that traps
// SIGTERM would otherwise survive.
func (ch *child) kill() { ch.prog.kill() }

// finish runs after the shell exited: it kills what is left of the process
// group (background jobs the command started) and waits for the output to be
// copied, giving up after graceDrain if an escaped descendant keeps the pipe
// open.
func (ch *child) finish() {
	<-ch.exited
	ch.kill()
	select {
	case <-ch.drained:
	case <-time.After(graceDrain):
		_ = ch.pr.Close()
		<-ch.drained
	}
	_ = ch.pr.Close()
}

// exitSummary describes how a finished command ended.
func (ch *child) exitSummary() (code int, summary string) {
	return describeExit(ch.status, ch.ok, ch.err)
}

// describeExit says how a sandboxed program ended, from what its wait
// returned: the program's own status, which the sandbox reports.
func describeExit(ws syscall.WaitStatus, ok bool, err error) (code int, summary string) {
	if !ok {
		return -1, fmt.Sprintf("failed: %v", err)
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("killed by signal %s", signalName(ws.Signal()))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return ws.ExitStatus(), fmt.Sprintf("exit code %d (%v)", ws.ExitStatus(), err)
	}
	return ws.ExitStatus(), fmt.Sprintf("exit code %d", ws.ExitStatus())
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return s.String()
}
