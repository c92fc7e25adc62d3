// Package sandboxtest finds a test's sandboxed processes from outside: they
// run in PID namespaces, so the pids they print are not the host's, and a
// test marks them with an environment variable instead. Box is the folder
// layout the hostile tests attack: a workspace, another session's, secrets.
package sandboxtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
