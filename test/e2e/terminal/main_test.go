// Package terminal tests the terminal clients as a user meets them: the real
// `picobot` binary, `picobot ask` as a process and `picobot chat` in a real
// terminal (tmux), against `picobot serve` answered by the scripted fake LLM.
package terminal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/test/controlplane"
)

var picobotBin string

func TestMain(m *testing.M) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to find the repository root:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "picobot-terminal-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to create a temporary folder:", err)
		os.Exit(1)
	}
	picobotBin = filepath.Join(dir, "picobot")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", picobotBin, "./runtime/cmd/picobot")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "failed to build picobot:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// hangGuard bounds any wait of these tests; it is never an assertion on
// how long something took.
const hangGuard = 60 * time.Second

// writeAgents writes a manifests folder with agents answered by the fake LLM
// at llmURL, and keyless agents whose model key is missing.
func writeAgents(t *testing.T, llmURL string, agents, keyless []string) string {
	t.Helper()
	docs := []string{}
	for _, a := range agents {
		docs = append(docs, embeddedtest.AgentYAML(a, llmURL, "llm"))
	}
	for _, a := range keyless {
		docs = append(docs, embeddedtest.AgentYAML(a, llmURL, "missing"))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// server is a running `picobot serve`.
type server struct {
	t    *testing.T
	dir  string
	env  []string
	addr string
	url  string
	cmd  *exec.Cmd
	done chan struct{}

	mu  sync.Mutex
	log bytes.Buffer
}

var servingRE = regexp.MustCompile(`PicoBot is serving http://(\S+)/`)

// serve starts `picobot serve` on dir, at addr ("" for any free port), with
// extra environment variables.
func serve(t *testing.T, dir, addr string, env ...string) *server {
	t.Helper()
	s, err := startServer(t, dir, addr, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startServer(t *testing.T, dir, addr string, env []string) (*server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cmd := exec.Command(picobotBin, "serve", "--dir", dir, "--addr", addr)
	cmd.Env = append(append(cleanEnv(), embedded.SecretEnvName("llm", "apiKey")+"=sk-test"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{t: t, dir: dir, env: env, cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case s.addr = <-addrc:
	case <-s.done:
		return nil, fmt.Errorf("picobot serve exited:\n%s", s.output())
	case <-time.After(hangGuard):
		s.stop()
		return nil, fmt.Errorf("picobot serve did not start:\n%s", s.output())
	}
	s.url = "http://" + s.addr
	t.Cleanup(s.stop)
	return s, nil
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop ends the server the way Ctrl+C would.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// restart starts the server again on the same folder and address; another
// process may take the port in between, so it tries again for a while.
func (s *server) restart() *server {
	s.t.Helper()
	s.stop()
	deadline := time.Now().Add(hangGuard)
	for {
		n, err := startServer(s.t, s.dir, s.addr, s.env)
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("failed to restart picobot serve on %s: %v", s.addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cleanEnv is the test's environment without the variables the clients
// read, so the developer's own settings do not leak in.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PICOBOT_URL=") && !strings.HasPrefix(kv, "PICOBOT_API_KEY=") {
			env = append(env, kv)
		}
	}
	return env
}

// result is how a `picobot` process ended.
type result struct {
	code           int
	stdout, stderr string
}

// ask runs `picobot ask` with args, stdin and extra environment.
func ask(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	return picobot(t, stdin, env, append([]string{"ask"}, args...)...)
}

// picobot runs `picobot args...` with stdin and extra environment.
func picobot(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, picobotBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("failed to run picobot %s: %v", strings.Join(args, " "), err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}
