package shell_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
)

var terminalIDLine = regexp.MustCompile(`session_id: (t\d+)`)

// readUntil reads terminal id until the collected output contains want.
func (h *harness) readUntil(g *WithT, session, id, want string) string {
	return h.readUntilMatch(g, session, id, ContainSubstring(want))
}

// readUntilMatch reads terminal id until the collected output matches m.
func (h *harness) readUntilMatch(g *WithT, session, id string, m types.GomegaMatcher) string {
	var all strings.Builder
	g.Eventually(func() string {
		res := h.callAs(session, "pty", map[string]any{"action": "read", "session_id": id, "wait_ms": 1000})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		parts := strings.SplitN(res.Content, "\n", 3)
		if len(parts) == 3 && parts[2] != "(no new output)" {
			all.WriteString(parts[2])
		}
		return all.String()
	}).WithTimeout(20 * time.Second).Should(m)
	return all.String()
}

func (h *harness) spawnBash(g *WithT, session string) string {
	res := h.callAs(session, "pty", map[string]any{"action": "spawn", "command": "bash --norc --noprofile", "cols": 100, "rows": 30})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	m := terminalIDLine.FindStringSubmatch(res.Content)
	g.Expect(m).To(HaveLen(2), res.Content)
	return m[1]
}

func TestPTYInteractiveBash(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id := h.spawnBash(g, "s1")

	res := h.call("pty", map[string]any{"action": "write", "session_id": id, "data": "echo $((6*7)) $COLUMNS\r"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("wrote "))
	out := h.readUntil(g, "s1", id, "42 100")
	g.Expect(out).NotTo(ContainSubstring("\x1b"), "escape codes are removed")
	g.Expect(out).NotTo(ContainSubstring("\r"))

	// Backslash escapes written literally by the model are interpreted:
	// Ctrl-C interrupts the sleep, Enter runs the next command.
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": `sleep 300\r`})
	time.Sleep(200 * time.Millisecond) // let the shell start the sleep; not an assertion
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": `\u0003`})
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": `echo after-$((1+1))\r`})
	h.readUntil(g, "s1", id, "after-2")

	// literal sends the backslashes as typed: four characters, not three.
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": `X='a\tb'; echo len=${#X}`, "literal": true})
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": "\r"})
	h.readUntil(g, "s1", id, "len=4")

	// State persists between calls.
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": `cd /tmp && X=kept\r`})
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": `echo "$PWD $X"\r`})
	h.readUntil(g, "s1", id, "/tmp kept")

	list := h.call("pty", map[string]any{"action": "list"})
	g.Expect(list.Content).To(MatchRegexp(`^` + id + `\trunning for \d+s\t100x30\tbash --norc --noprofile$`))

	res = h.call("pty", map[string]any{"action": "read", "session_id": id, "wait_ms": 0})
	g.Expect(res.Content).To(HaveSuffix("(no new output)"))

	res = h.call("pty", map[string]any{"action": "kill", "session_id": id})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("killed " + id + " (killed by signal SIGKILL)"))
	g.Expect(h.call("pty", map[string]any{"action": "list"}).Content).To(Equal("no terminals in this session"))
	res = h.call("pty", map[string]any{"action": "read", "session_id": id})
	g.Expect(res.IsError).To(BeTrue())
}

func TestPTYKillEndsJobs(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id := h.spawnBash(g, "s1")
	// With job control the background job gets its own process group; kill
	// must end it too.
	h.call("pty", map[string]any{"action": "write", "session_id": id, "data": "set -m; PICOBOT_TEST_MARK=pty-job sleep 300 &\r"})
	pid := waitMarked(g, "pty-job")

	h.call("pty", map[string]any{"action": "kill", "session_id": id})
	g.Eventually(func() bool { return gone(pid) }).WithTimeout(10 * time.Second).Should(BeTrue())
}

func TestPTYProgramThatExits(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	res := h.call("pty", map[string]any{"action": "spawn", "command": "echo one-shot; exit 5", "wait_ms": 3000})
	g.Expect(res.Content).To(ContainSubstring("one-shot"))
	id := terminalIDLine.FindStringSubmatch(res.Content)[1]
	g.Eventually(func() string {
		return h.call("pty", map[string]any{"action": "read", "session_id": id, "wait_ms": 200}).Content
	}).WithTimeout(10 * time.Second).Should(ContainSubstring("status: exited (exit code 5)"))
	res = h.call("pty", map[string]any{"action": "write", "session_id": id, "data": "x"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("reads no more input"))
}

func TestPTYErrorsAndIsolation(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id := h.spawnBash(g, "alice")
	cases := []struct {
		name    string
		session string
		args    map[string]any
		want    string
	}{
		{"other session read", "bob", map[string]any{"action": "read", "session_id": id}, `no terminal "` + id + `" in this session`},
		{"other session write", "bob", map[string]any{"action": "write", "session_id": id, "data": "x"}, `no terminal "` + id + `" in this session`},
		{"other session kill", "bob", map[string]any{"action": "kill", "session_id": id}, `no terminal "` + id + `" in this session`},
		{"spawn without command", "alice", map[string]any{"action": "spawn"}, "command is required for spawn"},
		{"read without id", "alice", map[string]any{"action": "read"}, "session_id is required for read"},
		{"empty write", "alice", map[string]any{"action": "write", "session_id": id}, "data is empty"},
		{"bad action", "alice", map[string]any{"action": "resize"}, "invalid arguments for pty"},
		{"wait too long", "alice", map[string]any{"action": "read", "session_id": id, "wait_ms": 10001}, "invalid arguments for pty"},
		{"too narrow", "alice", map[string]any{"action": "spawn", "command": "bash", "cols": 5}, "invalid arguments for pty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := h.callAs(tc.session, "pty", tc.args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tc.want))
		})
	}
	g.Expect(h.callAs("bob", "pty", map[string]any{"action": "list"}).Content).To(Equal("no terminals in this session"))
	g.Expect(h.callAs("alice", "pty", map[string]any{"action": "list"}).Content).To(ContainSubstring(id + "\trunning"))
}

func TestPTYManagerClose(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	var pids []int
	for _, session := range []string{"a", "b"} {
		id := h.spawnBash(g, session)
		h.callAs(session, "pty", map[string]any{"action": "write", "session_id": id, "data": "PICOBOT_TEST_MARK=pty-" + session + " sleep 300 &\r"})
		pids = append(pids, waitMarked(g, "pty-"+session))
	}
	h.ptys.CloseSession("a")
	g.Eventually(func() bool { return gone(pids[0]) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(gone(pids[1])).To(BeFalse())

	h.ptys.Close()
	g.Eventually(func() bool { return gone(pids[1]) }).WithTimeout(10 * time.Second).Should(BeTrue())
	res := h.callAs("b", "pty", map[string]any{"action": "spawn", "command": "bash"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("shut down"))
}
