//go:build linux

package shell_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
	"github.com/picobot/picobot/runtime/sandbox/warm"
	"github.com/picobot/picobot/runtime/tool/shell"
)

// warmHarness is a harness whose programs start from warm sandboxes, in a
// workspace outside /tmp (so the sandbox's own /tmp is in play).
func warmHarness(t *testing.T, cfg warm.Config) (*harness, *warm.Pool) {
	t.Helper()
	if !sandbox.Probe().Namespaces {
		t.Skipf("LOUD SKIP: this kernel refuses user namespaces, so there are no warm sandboxes: %s", sandbox.Probe())
	}
	pool := warm.New(cfg)
	h := newHarness(t, shell.WithWarmSandboxes(pool))
	t.Cleanup(pool.Close) // after the managers' Close (cleanups run last first)
	root, err := os.MkdirTemp("/var/tmp", "picobot-shell-warm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	h.ws = filepath.Join(root, "ws")
	if err := os.Mkdir(h.ws, 0o700); err != nil {
		t.Fatal(err)
	}
	return h, pool
}

// init1 is what runs as PID 1 of a program's namespace: the warm sandbox's
// exec server, or the launcher of a program started the usual way.
const init1 = `tr '\0' ' ' < /proc/1/cmdline | cut -d' ' -f1`

func TestShellToolsRunInTheWarmSandbox(t *testing.T) {
	g := NewWithT(t)
	h, pool := warmHarness(t, warm.Config{})
	res := h.call("bash", map[string]any{"command": "echo hi > /tmp/t; cat $TMPDIR/t; " + init1})
	g.Expect(res.Content).To(Equal("hi\npicobot-warm-sandbox\n[exit code 0]"))
	pids := pool.Pids()
	g.Expect(pids).To(HaveLen(1))
	res = h.call("bash", map[string]any{"command": "exit 3"})
	g.Expect(res.Content).To(Equal("(no output)\n[exit code 3]"))

	// exec and process: a background program, killed on request.
	res = h.call("exec", map[string]any{"command": "echo first; " + init1 + "; sleep 300", "yieldMs": 300})
	g.Expect(res.Content).To(HavePrefix("status: running\nsessionId: p1\noutput so far:\nfirst\npicobot-warm-sandbox\n"))
	kill := h.call("process", map[string]any{"action": "kill", "sessionId": "p1"})
	// The warm sandbox kills a program's descendants (sleep) before its
	// group: on a loaded machine bash may see sleep die and exit 137 first.
	g.Expect(kill.Content).To(MatchRegexp(`killed p1: exited \((killed by signal SIGKILL|exit code 137)\) .*killed on request`))

	// A command that leaves for a session of its own runs on as the
	// program, as under the launcher (setsid does not fork and end).
	mark := "picobot-shell-warm-setsid-" + strconv.Itoa(os.Getpid())
	res = h.call("exec", map[string]any{"command": "PICOBOT_TEST_MARK=" + mark + " setsid sleep 300", "background": true})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	waitMarked(g, mark)
	g.Consistently(func() string { return h.call("process", map[string]any{"action": "poll", "sessionId": "p2"}).Content }).
		WithTimeout(time.Second).Should(ContainSubstring("status: running"))
	h.call("process", map[string]any{"action": "kill", "sessionId": "p2"})
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(BeEmpty())

	// pty: an interactive shell on a terminal the server opened.
	id := h.spawnBash(g, "s1")
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": "echo $((6*7)) $COLUMNS; head -c 20 /proc/1/cmdline; echo\r"})
	h.readUntil(g, "s1", id, "42 100\npicobot-warm-sandbox\n")
	g.Expect(h.call("pty", map[string]any{"action": "kill", "session_id": id}).IsError).To(BeFalse())

	// One warm sandbox ran all of it.
	g.Expect(pool.Pids()).To(Equal(pids))
}

func TestAWarmSandboxThatDiedIsReplacedOnTheNextCall(t *testing.T) {
	g := NewWithT(t)
	h, pool := warmHarness(t, warm.Config{})
	mark := "picobot-shell-warm-" + strconv.Itoa(os.Getpid())
	res := h.call("exec", map[string]any{"command": "PICOBOT_TEST_MARK=" + mark + " sleep 300", "background": true})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	waitMarked(g, mark)
	pids := pool.Pids()
	g.Expect(pids).To(HaveLen(1))

	// kill -9 the server: what it ran ends with it, the process tool says
	// so, and the next call runs in a new one.
	g.Expect(syscall.Kill(pids[0], syscall.SIGKILL)).To(Succeed())
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(BeEmpty())
	res = h.call("bash", map[string]any{"command": "echo back; " + init1})
	g.Expect(res.Content).To(Equal("back\npicobot-warm-sandbox\n[exit code 0]"))
	g.Expect(pool.Pids()).To(HaveLen(1))
	g.Expect(pool.Pids()).NotTo(Equal(pids))
	g.Eventually(func() string { return h.call("process", map[string]any{"action": "poll", "sessionId": "p1"}).Content }).
		Should(ContainSubstring("exited"))
}

func TestWithoutAWarmSandboxProgramsStartTheUsualWay(t *testing.T) {
	g := NewWithT(t)
	h, pool := warmHarness(t, warm.Config{Max: 1})
	// The one warm sandbox is busy with another workspace's program.
	other := filepath.Join(filepath.Dir(h.ws), "other")
	g.Expect(os.Mkdir(other, 0o700)).To(Succeed())
	busy := &harness{t: t, reg: h.reg, ws: other}
	res := busy.call("exec", map[string]any{"command": "sleep 300", "background": true})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(pool.Len()).To(Equal(1))
	// So this one starts through its own launcher, in the same sandbox
	// layers.
	res = h.call("bash", map[string]any{"command": "echo hi > /tmp/t; cat $TMPDIR/t; " + init1})
	g.Expect(res.Content).To(Equal("hi\npicobot-sandbox\n[exit code 0]"))
	g.Expect(pool.Len()).To(Equal(1))
	g.Expect(strings.Count(fmt.Sprint(pool.Pids()), " ")).To(BeZero())
}
