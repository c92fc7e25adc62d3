//go:build linux

package mcp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/mcp"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

// Embedded mode: a stdio server starts in the sandbox of the shell tools'
// programs. The server is hostile (it dumps its environment and reads the
// runtime's secrets, as a prompt-injected model could make a filesystem or
// shell server do): it sees only the Agent's env and the allowlist, the
// runtime's /proc/<pid>/environ and a secret file of the runtime's user are
// refused by the kernel, and its ordinary job works.
func TestStdioServersRunInTheSandbox(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	rep := sandbox.Probe()
	if rep.LandlockABI == 0 && !rep.PrivateProc {
		t.Skipf("this kernel gives the sandbox neither Landlock nor a private /proc: %s", rep)
	}
	self, err := os.Executable()
	g.Expect(err).NotTo(HaveOccurred())
	secretFile := filepath.Join(t.TempDir(), "runtime-secret.txt")
	g.Expect(os.WriteFile(secretFile, []byte("runtime-file-secret-value"), 0o600)).To(Succeed())
	dir := filepath.Join(t.TempDir(), "workspaces", "agent", ".mcp")
	g.Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
	m := connect(t, []picobotv1alpha1.MCPServer{{Name: "probe", Transport: "stdio", Command: self,
		Env: []corev1.EnvVar{{Name: sandboxtest.MCPProbeEnv, Value: "1"}, {Name: "DECLARED_BY_AGENT", Value: "visible"}}}},
		mcp.WithWorkDir(dir))
	g.Expect(m.Status()[0].Connected).To(BeTrue(), "%+v", m.Status())
	environ := fmt.Sprintf("/proc/%d/environ", os.Getpid())
	reg := registry(t, m)
	res := execute(t.Context(), reg, "mcp_probe_probe",
		fmt.Sprintf(`{"read":[%q,%q,"/proc/1/environ"],"write":"job.txt"}`, environ, secretFile))
	out := res.Content
	t.Logf("what the probe saw (sandbox: %s):\n%s", rep, out)
	g.Expect(res.IsError).To(BeFalse())

	var names []string
	for _, line := range strings.Split(out, "\n") {
		if kv, ok := strings.CutPrefix(line, "env: "); ok {
			name, _, _ := strings.Cut(kv, "=")
			names = append(names, name)
		}
	}
	g.Expect(names).To(ContainElements("DECLARED_BY_AGENT", sandboxtest.MCPProbeEnv, "HOME", "PATH"))
	allowed := []string{"DECLARED_BY_AGENT", sandboxtest.MCPProbeEnv, "HOME", "PWD", "TMPDIR",
		"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ"}
	for _, n := range names {
		g.Expect(slices.Contains(allowed, n)).To(BeTrue(), "%s reached the server: only the Agent's env and the sandbox's allowlist may", n)
	}
	g.Expect(out).NotTo(ContainSubstring(plantedSecret))
	g.Expect(out).NotTo(ContainSubstring("runtime-file-secret-value"))
	// With a PID namespace the runtime's pid is not in the server's /proc;
	// without one Landlock refuses another domain's environ.
	g.Expect(out).To(MatchRegexp(`read %s: error: open %s: (permission denied|no such file or directory)`, environ, environ))
	g.Expect(out).To(ContainSubstring("read " + secretFile + ": error: open " + secretFile + ": permission denied"))
	g.Expect(out).To(ContainSubstring(`wrote job.txt: "written by the probe"`))
	g.Expect(os.ReadFile(filepath.Join(dir, "job.txt"))).To(BeEquivalentTo("written by the probe"))
}
