//go:build linux

package execserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/mcp"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/builtin"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// saToken is where a pod's ServiceAccount token would be mounted; the
// sandbox container has none.
const saToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// fileTools are the runtime's file tools as the session pod builds them:
// run by the sandbox container's exec server.
func (p *pod) fileTools(t testing.TB, opts ...fs.Option) *tool.Registry {
	t.Helper()
	set, err := builtin.New(builtin.Config{ExecServer: p.socket, FS: opts})
	must(t, err)
	t.Cleanup(set.Close)
	return set.Registry
}

// runTool calls a tool of reg with args in workspace ws.
func runTool(t testing.TB, reg *tool.Registry, name, ws string, args any) (tool.Result, error) {
	t.Helper()
	tl, ok := reg.Get(name)
	if !ok {
		t.Fatalf("no tool %q", name)
	}
	raw, err := json.Marshal(args)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return tl.Run(ctx, tool.Env{Workspace: ws, SessionID: "s1"}, raw)
}

// A prompt-injected model drives the file tools to the runtime
// container's secrets: the runtime's /proc/<pid>/environ, its secret file,
// the ServiceAccount token, "../" and symlink escapes, a write through a
// symlink to outside. The tools' own checks refuse them; and with the
// Agent's allowedPaths opened to every one of those places (so the checks
// let the calls through), the kernel refuses the sandbox's user: the same
// opt-in in the runtime's own process reads them all.
func TestFileToolsCannotReachTheRuntimeSecrets(t *testing.T) {
	testFileToolsCannotReachTheRuntimeSecrets(t, newPod)
}

// TestFileToolsCannotReachTheRuntimeSecretsSandboxPod is TestFileToolsCannotReachTheRuntimeSecrets against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestFileToolsCannotReachTheRuntimeSecretsSandboxPod(t *testing.T) {
	testFileToolsCannotReachTheRuntimeSecrets(t, newSandboxPod)
}

func testFileToolsCannotReachTheRuntimeSecrets(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)
	environ := fmt.Sprintf("/proc/%d/environ", os.Getpid())
	runtimeDir := filepath.Join(p.root, "runtime-only")
	must(t, os.Mkdir(runtimeDir, 0o700))
	probe := filepath.Join("/etc", "picobot-probe-"+filepath.Base(p.root))
	for name, target := range map[string]string{"leak": p.secretFile, "environ": environ, "probe-x": probe,
		"up": p.root, "into-runtime": filepath.Join(runtimeDir, "planted.txt")} {
		must(t, os.Symlink(target, filepath.Join(p.ws, name)))
	}
	secrets := []string{plantedSecret, serverSecret, fileSecret}

	refused := func(reg *tool.Registry, name string, args map[string]any, want string) {
		t.Helper()
		res, err := runTool(t, reg, name, p.ws, args)
		g.Expect(err).NotTo(HaveOccurred(), "%s %v", name, args)
		g.Expect(res.IsError).To(BeTrue(), "%s %v: %s", name, args, res.Content)
		g.Expect(res.Content).To(ContainSubstring(want), "%s %v", name, args)
		for _, s := range secrets {
			g.Expect(res.Content).NotTo(ContainSubstring(s))
		}
	}

	// The tools' own confinement (the default).
	def := p.fileTools(t)
	refused(def, "file_read", map[string]any{"path": environ}, "outside the workspace")
	refused(def, "file_read", map[string]any{"path": p.secretFile}, "outside the workspace")
	refused(def, "file_read", map[string]any{"path": "../../runtime-secret.txt"}, "outside the workspace")
	refused(def, "file_read", map[string]any{"path": saToken}, "outside the workspace")
	refused(def, "file_read", map[string]any{"path": "leak"}, "symbolic link that leads outside")
	refused(def, "file_read", map[string]any{"path": "environ"}, "symbolic link that leads outside")
	refused(def, "file_read", map[string]any{"path": "up/runtime-secret.txt"}, "symbolic link that leads outside")
	refused(def, "file_write", map[string]any{"path": "probe-x", "content": "x"}, "leads outside the workspace")
	refused(def, "file_write", map[string]any{"path": "into-runtime", "content": "x"}, "leads outside the workspace")
	refused(def, "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Add File: ../../escaped.txt\n+x\n*** End Patch"}, "outside")
	res, err := runTool(t, def, "content_search", p.ws, map[string]any{"pattern": "sk-planted"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Content).NotTo(ContainSubstring(plantedSecret))

	// The Agent opts in to all of those places: the tools' checks pass,
	// the kernel refuses the sandbox container's user.
	must(t, os.Symlink(p.secretFile, filepath.Join(p.root, "secret-link")))
	ro, rw := []string{"/proc", p.secretFile, filepath.Dir(saToken)}, []string{runtimeDir, "/etc", p.root}
	opened := p.fileTools(t, fs.AllowPaths(ro, rw))
	refused(opened, "file_read", map[string]any{"path": environ}, "permission denied")
	refused(opened, "file_read", map[string]any{"path": p.secretFile}, "permission denied")
	refused(opened, "file_read", map[string]any{"path": saToken}, "does not exist")
	refused(opened, "file_read", map[string]any{"path": fmt.Sprintf("/proc/%d/environ", p.server.Process.Pid)}, "permission denied")
	refused(opened, "file_write", map[string]any{"path": filepath.Join(runtimeDir, "planted.txt"), "content": "x"}, "permission denied")
	refused(opened, "file_write", map[string]any{"path": probe, "content": "x"}, "permission denied")
	// Through a symlink that stays inside the opened folder, to the
	// runtime's file.
	refused(opened, "file_write", map[string]any{"path": filepath.Join(p.root, "secret-link"), "content": "x"}, "permission denied")
	refused(opened, "file_edit", map[string]any{"path": filepath.Join(p.root, "secret-link"), "old_string": "runtime", "new_string": "x"}, "permission denied")
	res, err = runTool(t, opened, "content_search", p.ws, map[string]any{"pattern": "runtime-file-secret", "path": p.root})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Content).NotTo(ContainSubstring(fileSecret))
	g.Expect(probe).NotTo(BeAnExistingFile())
	g.Expect(os.ReadFile(p.secretFile)).To(BeEquivalentTo(fileSecret))
	g.Expect(filepath.Join(runtimeDir, "planted.txt")).NotTo(BeAnExistingFile())

	// The same opt-in in the runtime's own process opens them (environ is
	// NUL-separated, which file_read declines to show once it has read
	// it): it is the sandbox's user, not a check of the tools, that
	// refused them.
	local := fs.NewFileRead(fs.AllowPaths(ro, rw))
	for path, want := range map[string]string{environ: "looks like a binary file", p.secretFile: fileSecret} {
		raw, _ := json.Marshal(map[string]any{"path": path})
		res, err := local.Run(context.Background(), tool.Env{Workspace: p.ws}, raw)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Content).To(ContainSubstring(want), "the runtime's own file_read of %s", path)
	}
}

// The file tools do their ordinary jobs through the server: what they write
// is the sandbox user's (so bash there may change it later), large
// arguments and results travel whole, bad arguments are argument errors.
func TestFileToolsThroughTheServer(t *testing.T) { testFileToolsThroughTheServer(t, newPod) }

// TestFileToolsThroughTheServerSandboxPod is TestFileToolsThroughTheServer against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestFileToolsThroughTheServerSandboxPod(t *testing.T) {
	testFileToolsThroughTheServer(t, newSandboxPod)
}

func testFileToolsThroughTheServer(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)
	ws := filepath.Join(p.wsRoot, "agent", "s3")
	must(t, os.MkdirAll(ws, 0o700))
	reg := p.fileTools(t)
	ok := func(name string, args map[string]any) string {
		t.Helper()
		res, err := runTool(t, reg, name, ws, args)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(res.IsError).To(BeFalse(), "%s: %s", name, res.Content)
		return res.Content
	}

	g.Expect(ok("file_write", map[string]any{"path": "notes/a.txt", "content": "alpha\nbeta\n"})).To(Equal("Created notes/a.txt (11 bytes written)."))
	g.Expect(ok("file_read", map[string]any{"path": "notes/a.txt"})).To(Equal("     1\talpha\n     2\tbeta"))
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(ws, "notes", "a.txt"), &st))
	g.Expect(st.Uid).To(BeEquivalentTo(sandboxUID), "written by the sandbox's user")
	g.Expect(ok("file_edit", map[string]any{"path": "notes/a.txt", "old_string": "beta", "new_string": "gamma"})).To(ContainSubstring("replaced 1"))
	g.Expect(ok("file_search", map[string]any{"pattern": "*.txt"})).To(ContainSubstring("notes/a.txt"))
	g.Expect(ok("content_search", map[string]any{"pattern": "gamma"})).To(ContainSubstring("notes/a.txt:2: gamma"))
	g.Expect(ok("apply_patch", map[string]any{"input": "*** Begin Patch\n*** Add File: b.txt\n+from a patch\n*** End Patch"})).To(ContainSubstring("b.txt"))
	g.Expect(os.ReadFile(filepath.Join(ws, "b.txt"))).To(BeEquivalentTo("from a patch\n"))
	out, _ := p.runIn(t, ws, "bash", "-c", "echo more >> notes/a.txt && cat notes/a.txt")
	g.Expect(out).To(Equal("alpha\ngamma\nmore\n"), "bash in the sandbox changes what the file tools wrote")

	// Larger than a packet both ways (3-byte characters: the 50,000
	// characters file_read returns are 150 kB).
	big := strings.Repeat(strings.Repeat("日", 999)+"\n", 60)
	ok("file_write", map[string]any{"path": "big.txt", "content": big})
	g.Expect(os.ReadFile(filepath.Join(ws, "big.txt"))).To(BeEquivalentTo(big))
	read := ok("file_read", map[string]any{"path": "big.txt"})
	g.Expect(len(read)).To(BeNumerically(">", 128<<10))
	g.Expect(read).To(ContainSubstring("Output capped at 50000 characters"))

	// An image comes back as an artifact, for the agent loop to show the
	// model: its bytes cross the wire intact.
	pic := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 300<<10)...)
	must(t, os.WriteFile(filepath.Join(ws, "shot.png"), pic, 0o644))
	res, err := runTool(t, reg, "file_read", ws, map[string]any{"path": "shot.png"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("Image shot.png: image/png, 307208 bytes"))
	g.Expect(res.Artifacts).To(Equal([]tool.Artifact{{Name: "shot.png", MediaType: "image/png", Data: pic}}))

	// Calls at once share the server's confined threads without mixing
	// their results.
	var wg sync.WaitGroup
	reads := make([]string, 16)
	for i := range reads {
		name := fmt.Sprintf("c%d.txt", i)
		must(t, os.WriteFile(filepath.Join(ws, name), []byte(name), 0o644))
		wg.Go(func() {
			res, err := runTool(t, reg, "file_read", ws, map[string]any{"path": name})
			if err == nil {
				reads[i] = res.Content
			}
		})
	}
	wg.Wait()
	for i, got := range reads {
		g.Expect(got).To(Equal(fmt.Sprintf("     1\tc%d.txt", i)))
	}

	_, err = runTool(t, reg, "file_read", ws, map[string]any{"path": 5})
	g.Expect(tool.IsArgumentError(err)).To(BeTrue(), "%v", err)
	_, err = runTool(t, reg, "file_read", "/etc", map[string]any{"path": "passwd"})
	g.Expect(err).To(MatchError(ContainSubstring(`workspace "/etc" is not inside the sandbox's workspace folder`)))
}

// A stdio MCP server the Agent declares starts in the sandbox container
// with only the environment the Agent gives it (and the sandbox's
// allowlist), as the sandbox's user. The server is hostile: it dumps its
// environment and reads the runtime's secrets; it sees none and is refused,
// and its ordinary job (a file in its folder, a tool call round trip)
// works.
func TestMCPStdioServerRunsInTheSandbox(t *testing.T) { testMCPStdioServerRunsInTheSandbox(t, newPod) }

// TestMCPStdioServerRunsInTheSandboxSandboxPod is TestMCPStdioServerRunsInTheSandbox against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestMCPStdioServerRunsInTheSandboxSandboxPod(t *testing.T) {
	testMCPStdioServerRunsInTheSandbox(t, newSandboxPod)
}

func testMCPStdioServerRunsInTheSandbox(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)
	dir := filepath.Join(p.wsRoot, "agent", ".mcp")
	must(t, os.MkdirAll(dir, 0o700))
	m := mcp.NewManager([]picobotv1alpha1.MCPServer{{Name: "probe", Transport: "stdio", Command: p.bin,
		Env: []corev1.EnvVar{{Name: sandboxtest.MCPProbeEnv, Value: "1"}, {Name: "DECLARED_BY_AGENT", Value: "visible"}}}},
		mcp.WithExecServer(p.socket), mcp.WithWorkDir(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g.Expect(m.Connect(ctx)).To(Succeed())
	defer func() { g.Expect(m.Close()).To(Succeed()) }()
	g.Expect(m.Status()[0].Connected).To(BeTrue(), "%+v\nserver log:\n%s", m.Status(), p.serverLog)
	reg, err := tool.NewRegistry(m.Tools()...)
	must(t, err)
	environ := fmt.Sprintf("/proc/%d/environ", os.Getpid())
	res, err := runTool(t, reg, "mcp_probe_probe", p.ws, map[string]any{
		"read": []string{environ, p.secretFile, saToken, fmt.Sprintf("/proc/%d/environ", p.server.Process.Pid)}, "write": "job.txt"})
	g.Expect(err).NotTo(HaveOccurred())
	out := res.Content
	t.Logf("what the probe saw:\n%s", out)

	var names []string
	for _, line := range strings.Split(out, "\n") {
		if kv, ok := strings.CutPrefix(line, "env: "); ok {
			name, _, _ := strings.Cut(kv, "=")
			names = append(names, name)
		}
	}
	g.Expect(names).To(ContainElements("DECLARED_BY_AGENT", sandboxtest.MCPProbeEnv, "HOME", "PATH"))
	allowed := []string{"DECLARED_BY_AGENT", sandboxtest.MCPProbeEnv, "HOME", "PWD", "TMPDIR", // the Agent's and the sandbox's
		"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ"} // the allowlist of the runtime's
	for _, n := range names {
		g.Expect(slices.Contains(allowed, n)).To(BeTrue(), "%s reached the server: only the Agent's env and the sandbox's allowlist may", n)
	}
	for _, s := range []string{plantedSecret, serverSecret, fileSecret} {
		g.Expect(out).NotTo(ContainSubstring(s))
	}
	g.Expect(out).To(ContainSubstring("read " + environ + ": error: open " + environ + ": permission denied"))
	g.Expect(out).To(ContainSubstring("read " + p.secretFile + ": error: open " + p.secretFile + ": permission denied"))
	g.Expect(out).To(ContainSubstring("read " + saToken + ": error: open " + saToken + ": no such file or directory"))
	g.Expect(out).To(ContainSubstring(fmt.Sprintf("read /proc/%d/environ: error: open /proc/%d/environ: permission denied", p.server.Process.Pid, p.server.Process.Pid)))
	g.Expect(out).To(ContainSubstring(`wrote job.txt: "written by the probe"`))
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dir, "job.txt"), &st))
	g.Expect(st.Uid).To(BeEquivalentTo(sandboxUID), "the server ran as the sandbox's user")
}

// The runtime connects its MCP servers at start, possibly before the
// sandbox container listens: the connection waits for the socket.
func TestMCPStdioServerWaitsForTheSandbox(t *testing.T) {
	g := NewWithT(t)
	p := newPod(t)
	dir := filepath.Join(p.wsRoot, "agent", ".mcp")
	must(t, os.MkdirAll(dir, 0o700))
	late := p.socket + ".late" // not there yet
	m := mcp.NewManager([]picobotv1alpha1.MCPServer{{Name: "probe", Transport: "stdio", Command: p.bin,
		Env: []corev1.EnvVar{{Name: sandboxtest.MCPProbeEnv, Value: "1"}}}}, mcp.WithExecServer(late), mcp.WithWorkDir(dir))
	defer func() { g.Expect(m.Close()).To(Succeed()) }()
	connected := make(chan error, 1)
	go func() { connected <- m.Connect(t.Context()) }()
	// No socket, no connection: the attempt waits.
	g.Consistently(connected).WithTimeout(300 * time.Millisecond).ShouldNot(Receive())
	must(t, os.Symlink(p.socket, late))
	g.Eventually(connected).WithTimeout(time.Minute).Should(Receive(BeNil()))
	g.Expect(m.Status()[0].Connected).To(BeTrue(), "%+v", m.Status())
}
