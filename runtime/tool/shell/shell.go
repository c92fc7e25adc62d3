// Package shell holds the tools that run programs for the model: bash (one
// command, wait for it), exec and process (commands that may outlive the call,
// managed per session) and pty (interactive programs on a terminal).
//
// Every program runs in its own process group, so a timeout, a kill or the end
// of a session takes down everything it started, not just the shell. Programs
// inherit the runtime's environment minus anything that looks like a secret
// (API keys, tokens, passwords), because the model can read whatever a program
// prints. This is not a sandbox: the pod (or, in embedded mode, the user's
// account) is the boundary.
package shell

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Option configures the shell tools and managers.
type Option func(*config)

type config struct {
	environ  func() []string
	allowEnv map[string]bool
	shell    string
}

func newConfig(opts []Option) config {
	c := config{environ: os.Environ, allowEnv: map[string]bool{}, shell: "bash"}
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// WithEnviron sets where the base environment of programs comes from (default
// os.Environ); tests pass a fixed one.
func WithEnviron(fn func() []string) Option { return func(c *config) { c.environ = fn } }

// AllowEnv lets the named variables through even though their names look like
// secrets (a deliberate GIT_ASKPASS_TOKEN a workflow needs, say).
func AllowEnv(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.allowEnv[strings.ToUpper(n)] = true
		}
	}
}

// WithShell sets the shell that runs commands with -c (default "bash").
func WithShell(path string) Option { return func(c *config) { c.shell = path } }

// IsSecretName reports whether an environment variable name looks like it
// holds a credential: *_KEY, *_TOKEN, *_SECRET, *API_KEY*, *PASSWORD*,
// *PASSWD*, *_CREDENTIALS (any case).
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

// env returns the environment of a program started in dir: the base
// environment without secrets, with PWD set to dir and extra appended.
func (c *config) env(dir string, extra ...string) []string {
	var out []string
	for _, kv := range c.environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "PWD" || (IsSecretName(name) && !c.allowEnv[strings.ToUpper(name)]) {
			continue
		}
		out = append(out, kv)
	}
	if dir != "" {
		out = append(out, "PWD="+dir)
	}
	return append(out, extra...)
}

// graceDrain is how long output is still read after a program (and its
// process group) ended: a descendant that left the group may hold the pipe.
const graceDrain = 2 * time.Second

// child is a command running in its own process group, its stdout and stderr
// going into one pipe that a goroutine copies to the output writer.
type child struct {
	cmd  *exec.Cmd
	pgid int
	// exited is closed once the shell process has been reaped; err is then
	// what Wait returned.
	exited chan struct{}
	err    error
	// drained is closed once all output has been copied.
	drained chan struct{}
	pr      *os.File
}

// startChild runs `shell -c command` in dir. With stdin false the program
// reads from /dev/null; with true the returned writer feeds its stdin.
func (c *config) startChild(dir, command string, out io.Writer, stdin bool) (*child, *os.File, error) {
	if dir != "" {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, nil, fmt.Errorf("failed to use workspace %q: not a directory", dir)
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create output pipe: %w", err)
	}
	cmd := exec.Command(c.shell, "-c", command)
	cmd.Dir = dir
	cmd.Env = c.env(dir)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var inR, in *os.File
	if stdin {
		inR, in, err = os.Pipe()
		if err != nil {
			_ = pr.Close()
			_ = pw.Close()
			return nil, nil, fmt.Errorf("failed to create input pipe: %w", err)
		}
		cmd.Stdin = inR
	}
	err = cmd.Start()
	_ = pw.Close() // the child has its copy; EOF comes when every holder is gone
	if inR != nil {
		_ = inR.Close()
	}
	if err != nil {
		_ = pr.Close()
		if in != nil {
			_ = in.Close()
		}
		return nil, nil, fmt.Errorf("failed to start command: %w", err)
	}
	ch := &child{cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{}), drained: make(chan struct{}), pr: pr}
	go func() {
		defer close(ch.drained)
		_, _ = io.Copy(out, pr)
	}()
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
	}()
	return ch, in, nil
}

// kill sends SIGKILL to the whole process group. SIGKILL rather than SIGTERM:
// the caller already decided the program must end, and a program that traps
// SIGTERM would otherwise survive.
func (ch *child) kill() {
	_ = syscall.Kill(-ch.pgid, syscall.SIGKILL)
}

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
	st := ch.cmd.ProcessState
	if st == nil {
		return -1, fmt.Sprintf("failed: %v", ch.err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("killed by signal %s", signalName(ws.Signal()))
	}
	var ee *exec.ExitError
	if ch.err != nil && !errors.As(ch.err, &ee) {
		return st.ExitCode(), fmt.Sprintf("exit code %d (%v)", st.ExitCode(), ch.err)
	}
	return st.ExitCode(), fmt.Sprintf("exit code %d", st.ExitCode())
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
