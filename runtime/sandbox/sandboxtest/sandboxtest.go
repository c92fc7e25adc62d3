// Package sandboxtest finds a test's sandboxed processes from outside: they
// run in PID namespaces, so the pids they print are not the host's, and a
// test marks them with an environment variable instead. Box is the folder
// layout the hostile tests attack: a workspace, another session's, secrets.
package sandboxtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// MarkEnv is the variable that marks a test's processes.
const MarkEnv = "PICOBOT_TEST_MARK"

// Marked returns the host pids of the live (not zombie) processes whose
// environment has PICOBOT_TEST_MARK=mark.
func Marked(mark string) []int {
	want := []byte("\x00" + MarkEnv + "=" + mark + "\x00")
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			continue
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !zombie(stat) {
			out = append(out, pid)
		}
	}
	return out
}

// zombie reads the state field of /proc/<pid>/stat.
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	f := bytes.Fields(stat[i+1:])
	return len(f) == 0 || string(f[0]) == "Z" || string(f[0]) == "X"
}

// Box is a test's folder outside /tmp (so a sandbox's own /tmp is in play)
// with two sessions' workspaces and an agent's state folder, the other
// session's and the state folder each holding a secret a sandboxed program
// of the first session must not read.
type Box struct {
	Root, WS, Other, State string
}

// Secrets in a Box's other workspace and state folder.
const (
	OtherSessionSecret = "other-session-data"
	AgentSecret        = "agent-secret"
)

// NewBox creates a Box under /var/tmp (removed when the test ends).
func NewBox(t testing.TB, prefix string) Box {
	t.Helper()
	root, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		t.Fatalf("failed to create test folder: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	b := Box{Root: root, WS: filepath.Join(root, "workspaces", "s1"), Other: filepath.Join(root, "workspaces", "s2"),
		State: filepath.Join(root, "agent")}
	for _, d := range []string{b.WS, b.Other, b.State} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for p, v := range map[string]string{filepath.Join(b.Other, "secret.txt"): OtherSessionSecret,
		filepath.Join(b.State, "secret.yaml"): "stringData: {key: " + AgentSecret + "}"} {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// ProgramsDieWithTheirHolder starts this test binary again as a holder (its
// TestMain runs sandboxed programs in workspace ws when PICOBOT_TEST_HOLDER
// names it and prints "ready"), waits for want marked processes, kills the
// holder with -9 and requires that none of them survives it.
func ProgramsDieWithTheirHolder(t *testing.T, ws string, want int) {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run", "^$")
	cmd.Env = append(os.Environ(), "PICOBOT_TEST_HOLDER="+ws)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("the holder said %q, want ready", line)
	}
	waitMarked := func(what string, ok func(n int) bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			n := len(Marked(ws))
			if ok(n) {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("%s: %d marked processes", what, n)
			}
		}
	}
	waitMarked(fmt.Sprintf("waiting for %d programs", want), func(n int) bool { return n == want })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitMarked("programs left after the holder was killed", func(n int) bool { return n == 0 })
}
