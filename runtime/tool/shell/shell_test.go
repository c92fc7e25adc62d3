package shell_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/shell"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hangGuard bounds calls that should return quickly; it only catches hangs.
const hangGuard = 30 * time.Second

// harness is a registry with every shell tool, its managers closed at the end
// of the test.
type harness struct {
	t     *testing.T
	reg   *tool.Registry
	procs *shell.ProcessManager
	ptys  *shell.PTYManager
	ws    string
	// initial holds output the exec answer already showed, per process id:
	// poll never shows it again.
	initial sync.Map
}

func newHarness(t *testing.T, opts ...shell.Option) *harness {
	t.Helper()
	procs := shell.NewProcessManager(opts...)
	ptys := shell.NewPTYManager(opts...)
	t.Cleanup(procs.Close)
	t.Cleanup(ptys.Close)
	tools := append([]tool.Tool{shell.NewBash(opts...), ptys.Tool()}, procs.Tools()...)
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		t.Fatalf("failed to build registry: %v", err)
	}
	return &harness{t: t, reg: reg, procs: procs, ptys: ptys, ws: t.TempDir()}
}

// call runs a tool as session "s1".
func (h *harness) call(name string, args any) tool.Result {
	h.t.Helper()
	return h.callAs("s1", name, args)
}

func (h *harness) callAs(session, name string, args any) tool.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), hangGuard)
	defer cancel()
	return h.callCtx(ctx, session, name, args)
}

func (h *harness) callCtx(ctx context.Context, session, name string, args any) tool.Result {
	h.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		h.t.Fatalf("failed to encode arguments: %v", err)
	}
	return h.reg.Execute(ctx, tool.Env{Workspace: h.ws, SessionID: session}, llm.ToolCall{ID: "c", Name: name, Arguments: string(raw)})
}

// gone reports whether a process no longer runs (absent, or a zombie nobody
// reaped yet).
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// waitMarked waits for the one process marked mark and returns its pid.
func waitMarked(g *WithT, mark string) int {
	var pids []int
	g.Eventually(func() []int { pids = sandboxtest.Marked(mark); return pids }).WithTimeout(10*time.Second).Should(HaveLen(1), mark)
	return pids[0]
}

func TestBash(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name    string
		args    map[string]any
		isError bool
		want    []string
		exact   string
	}{
		{name: "output and exit code", args: map[string]any{"command": "echo hello"}, exact: "hello\n[exit code 0]"},
		{name: "stderr is merged", args: map[string]any{"command": "echo out; echo err >&2"}, exact: "out\nerr\n[exit code 0]"},
		{name: "non-zero exit", args: map[string]any{"command": "echo failing; exit 3"}, exact: "failing\n[exit code 3]"},
		{name: "killed by a signal", args: map[string]any{"command": "kill -9 $$"}, exact: "(no output)\n[killed by signal SIGKILL]"},
		{name: "runs in the workspace", args: map[string]any{"command": `pwd; echo "$PWD"`}, exact: h.ws + "\n" + h.ws + "\n[exit code 0]"},
		{name: "stdin is empty", args: map[string]any{"command": "cat; echo done"}, exact: "done\n[exit code 0]"},
		{name: "bash features", args: map[string]any{"command": "a=(x y z); echo ${#a[@]} $((6*7))"}, exact: "3 42\n[exit code 0]"},
		{name: "empty command", args: map[string]any{"command": "  "}, isError: true, want: []string{"command is empty"}},
		{name: "missing command", args: map[string]any{}, isError: true, want: []string{"invalid arguments for bash", "command"}},
		{name: "timeout too large", args: map[string]any{"command": "true", "timeout": 601}, isError: true, want: []string{"invalid arguments for bash"}},
		{name: "timeout not a number", args: map[string]any{"command": "true", "timeout": "10"}, isError: true, want: []string{"invalid arguments for bash"}},
		{name: "unknown argument", args: map[string]any{"command": "true", "cwd": "/"}, isError: true, want: []string{"invalid arguments for bash"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := h.call("bash", tc.args)
			g.Expect(res.IsError).To(Equal(tc.isError), res.Content)
			if tc.exact != "" {
				g.Expect(res.Content).To(Equal(tc.exact))
			}
			for _, w := range tc.want {
				g.Expect(res.Content).To(ContainSubstring(w))
			}
		})
	}
}

func TestBashWritesInWorkspace(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	res := h.call("bash", map[string]any{"command": "echo content > made.txt"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	b, err := os.ReadFile(filepath.Join(h.ws, "made.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("content\n"))
}

func TestBashOutputCap(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name, command string
		head, tail    string
	}{
		{"many lines", "seq 1 100000", "1\n2\n3\n", "99999\n100000\n[exit code 0]"},
		{"one long line", "head -c 300000 /dev/zero | tr '\\0' a; echo; echo end", "aaaa", "aaaa\nend\n[exit code 0]"},
		{"multibyte", "printf x; for i in $(seq 1 30000); do printf 'é€'; done; echo", "xé€é€", "é€é€\n[exit code 0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := h.call("bash", map[string]any{"command": tc.command})
			g.Expect(res.IsError).To(BeFalse())
			g.Expect(res.Content).To(HavePrefix(tc.head))
			g.Expect(res.Content).To(HaveSuffix(tc.tail))
			g.Expect(res.Content).To(MatchRegexp(`\n\[\.\.\. \d+ bytes of output omitted \.\.\.\]\n`))
			g.Expect(len(res.Content)).To(BeNumerically("<", 51_000))
			g.Expect(strings.ToValidUTF8(res.Content, "?")).To(Equal(res.Content), "no rune is cut in half")
		})
	}
}

func TestBashTimeoutKillsProcessGroup(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	// The shell and a child ignore SIGTERM; a grandchild runs in a nested
	// shell; all of them must die.
	// It waits for the test to have seen both before it waits to be killed.
	script := `trap '' TERM
(trap '' TERM; PICOBOT_TEST_MARK=timeout-child sleep 300) &
sh -c 'PICOBOT_TEST_MARK=timeout-grandchild sleep 300 & wait' &
echo started
while [ ! -e seen ]; do sleep 0.05; done
sleep 300`
	seen := make(chan []int, 1)
	go func() {
		pids := []int{waitMarked(g, "timeout-child"), waitMarked(g, "timeout-grandchild")}
		_ = os.WriteFile(filepath.Join(h.ws, "seen"), nil, 0o600)
		seen <- pids
	}()
	res := h.call("bash", map[string]any{"command": script, "timeout": 5})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("command killed after 5 s (timeout)"))
	g.Expect(res.Content).To(ContainSubstring("Output so far:\nstarted"))

	var pids []int
	g.Eventually(seen).Should(Receive(&pids))
	for _, pid := range pids {
		g.Eventually(func() bool { return gone(pid) }).WithTimeout(10 * time.Second).Should(BeTrue())
	}
}

func TestBashKillsBackgroundJobsAtTheEnd(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	seen := make(chan int, 1)
	go func() {
		pid := waitMarked(g, "background")
		_ = os.WriteFile(filepath.Join(h.ws, "seen"), nil, 0o600)
		seen <- pid
	}()
	res := h.call("bash", map[string]any{"command": "PICOBOT_TEST_MARK=background sleep 300 & while [ ! -e seen ]; do sleep 0.05; done"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	var pid int
	g.Eventually(seen).Should(Receive(&pid))
	g.Eventually(func() bool { return gone(pid) }).WithTimeout(10 * time.Second).Should(BeTrue())
}

func TestBashCancel(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan tool.Result, 1)
	go func() {
		done <- h.callCtx(ctx, "s1", "bash", map[string]any{"command": "PICOBOT_TEST_MARK=cancel sleep 300"})
	}()
	pid := waitMarked(g, "cancel")
	cancel()
	var res tool.Result
	g.Eventually(done).WithTimeout(hangGuard).Should(Receive(&res))
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("bash was cancelled"))
	g.Eventually(func() bool { return gone(pid) }).WithTimeout(10 * time.Second).Should(BeTrue())
}

func TestOnlyAllowlistedEnvironmentIsInherited(t *testing.T) {
	g := NewWithT(t)
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=/root",
		"LANG=C.UTF-8",
		"PLAIN=not-allowlisted",
		"PWD=/somewhere/else",
		"OPENAI_API_KEY=sk-secret-1",
		"PICOBOT_SECRET_LLM_OPENAI=secret-2",
		"PICOBOT_API_KEY=secret-3",
		"PICOBOT_POSTGRES_URL=postgres://u:secret-4@db/x",
		"DEPLOY_TOKEN=allowed-9",
	}
	h := newHarness(t, shell.WithEnviron(func() []string { return base }), shell.AllowEnv("DEPLOY_TOKEN"),
		shell.WithEnv("AGENT_SETTING=declared"))

	for _, name := range []string{"bash", "exec"} {
		res := h.call(name, map[string]any{"command": "env"})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		g.Expect(res.Content).To(ContainSubstring("LANG=C.UTF-8"))
		g.Expect(res.Content).To(ContainSubstring("DEPLOY_TOKEN=allowed-9"))
		g.Expect(res.Content).To(ContainSubstring("AGENT_SETTING=declared"))
		g.Expect(res.Content).To(ContainSubstring("PWD=" + h.ws + "\n"))
		g.Expect(res.Content).To(ContainSubstring("HOME=" + h.ws + "\n"))
		g.Expect(res.Content).NotTo(ContainSubstring("/somewhere/else"))
		g.Expect(res.Content).NotTo(ContainSubstring("PLAIN"))
		g.Expect(res.Content).NotTo(MatchRegexp(`secret-\d`))
	}

	// The terminal's output is read until the end marker, however slowly
	// the program starts.
	res := h.call("pty", map[string]any{"action": "spawn", "command": "env; echo env-done; sleep 5", "wait_ms": 100})
	m := terminalIDLine.FindStringSubmatch(res.Content)
	g.Expect(m).To(HaveLen(2), res.Content)
	out := res.Content
	if !strings.Contains(out, "env-done") {
		out += h.readUntilMatch(g, "s1", m[1], ContainSubstring("env-done"))
	}
	g.Expect(out).To(ContainSubstring("LANG=C.UTF-8"))
	g.Expect(out).To(ContainSubstring("TERM=xterm-256color"))
	g.Expect(out).NotTo(MatchRegexp(`secret-\d`))
}

func TestSecretsAreNotInheritedFromTheProcess(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("PICOBOT_SECRET_LLM_OPENAI", "sekrit-from-process")
	t.Setenv("TZ", "Europe/Berlin")
	h := newHarness(t)
	res := h.call("bash", map[string]any{"command": "env"})
	g.Expect(res.Content).To(ContainSubstring("TZ=Europe/Berlin"))
	g.Expect(res.Content).NotTo(ContainSubstring("sekrit-from-process"))
}

func TestIsSecretName(t *testing.T) {
	cases := []struct {
		name   string
		secret bool
	}{
		{"OPENAI_API_KEY", true}, {"ANTHROPIC_API_KEY", true}, {"openai_api_key", true},
		{"GITHUB_TOKEN", true}, {"SLACK_BOT_TOKEN", true}, {"JWT_SECRET", true},
		{"POSTGRES_PASSWORD", true}, {"PASSWORD", true}, {"MYSQL_ROOT_PASSWORD_FILE", true},
		{"APIKEY_API_KEY_V2", true}, {"SSH_KEY", true}, {"GOOGLE_APPLICATION_CREDENTIALS", true},
		{"PATH", false}, {"HOME", false}, {"KEYBOARD", false}, {"TOKENIZER_PATH", false},
		{"SECRETARY", false}, {"LANG", false}, {"TERM", false}, {"GOPATH", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(shell.IsSecretName(tc.name)).To(Equal(tc.secret))
		})
	}
}

func TestToolNamesAndTraits(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	g.Expect(h.reg.Names()).To(Equal([]string{"bash", "exec", "process", "pty"}))
	b, _ := h.reg.Get("bash")
	g.Expect(b.Traits().Exclusive).To(BeTrue())
	for _, n := range h.reg.Names() {
		tl, _ := h.reg.Get(n)
		g.Expect(tl.Traits().ReadOnly).To(BeFalse(), n)
	}
}
