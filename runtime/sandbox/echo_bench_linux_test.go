//go:build linux

package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/warm"
)

// BenchmarkEchoHi is the added latency of the sandbox for one short program
// (`bash -c "echo hi"`, what a bash tool call costs beyond the tool): plain
// is a process group as the shell tools started programs before, sandbox
// adds the launcher with namespaces and Landlock, landlock-only the launcher
// without namespaces (a kernel that refuses them), sandbox-warm a program
// of a session's warm sandbox (package warm: a fork and an exec by its exec
// server, each program confined on its own), and sandbox-warm-first the
// first program of a session, which starts the warm sandbox. Reports
// p50/p99. Target: under 10 ms added at p50.
func BenchmarkEchoHi(b *testing.B) {
	ws := b.TempDir()
	env := sandbox.Env([]string{"PATH=" + sandbox.DefaultPath}, ws, nil)
	pool := warm.New(warm.Config{})
	defer pool.Close()
	first := 0
	run := map[string]func() error{
		"plain": func() error {
			cmd := exec.Command("bash", "-c", "echo hi")
			cmd.Dir, cmd.Env = ws, env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			return cmd.Run()
		},
		"sandbox":       func() error { return runSandboxed(ws, env, true) },
		"landlock-only": func() error { return runSandboxed(ws, env, false) },
		"sandbox-warm":  func() error { return runWarm(pool, sandbox.Spec{Workspace: ws, Env: env}) },
		"sandbox-warm-first": func() error {
			// A new session's workspace: its first program starts the
			// warm sandbox (the pool keeps the default number of them,
			// closing the least recently used).
			first++
			dir := filepath.Join(ws, "first-"+strconv.Itoa(first))
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return runWarm(pool, sandbox.Spec{Workspace: dir, Env: sandbox.Env([]string{"PATH=" + sandbox.DefaultPath}, dir, nil)})
		},
	}
	for _, name := range []string{"plain", "sandbox", "landlock-only", "sandbox-warm", "sandbox-warm-first"} {
		if name != "plain" && name != "landlock-only" && !sandbox.Probe().Namespaces {
			continue
		}
		b.Run(name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := run[name](); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

func runSandboxed(ws string, env []string, ns bool) error {
	cmd, err := sandbox.CommandNS(sandbox.Spec{Workspace: ws, Env: env}, ns, "bash", "-c", "echo hi")
	if err != nil {
		return err
	}
	err = cmd.Run()
	cmd.Exit()
	return err
}

// runWarm runs the program as the shell tools do through a warm sandbox:
// its output into a pipe read to the end, then its status.
func runWarm(pool *warm.Pool, spec sandbox.Spec) error {
	c, release, err := pool.Acquire(spec)
	if err != nil {
		return err
	}
	defer release()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	p, err := c.Start(execserver.Request{Workspace: spec.Workspace, Env: spec.Env, Argv: []string{"bash", "-c", "echo hi"}}, nil, w, w)
	_ = w.Close()
	if err != nil {
		return err
	}
	defer p.Close()
	buf := make([]byte, 64)
	for {
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	_, _, err = p.Wait()
	return err
}
