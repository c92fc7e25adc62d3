package shell_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var sessionIDLine = regexp.MustCompile(`sessionId: (p\d+)`)

// startBackground runs command with exec in the background and returns its id.
func (h *harness) startBackground(g *WithT, session, command string, extra map[string]any) string {
	id, initial := h.startBackgroundWithOutput(g, session, command, extra)
	h.initial.Store(id, initial)
	return id
}

// startBackgroundWithOutput also returns the "output so far" of the exec
// answer: output shown there is not shown again by poll.
func (h *harness) startBackgroundWithOutput(g *WithT, session, command string, extra map[string]any) (string, string) {
	args := map[string]any{"command": command, "background": true}
	for k, v := range extra {
		args[k] = v
	}
	res := h.callAs(session, "exec", args)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("status: running\n"))
	m := sessionIDLine.FindStringSubmatch(res.Content)
	g.Expect(m).To(HaveLen(2), res.Content)
	var initial string
	if _, after, ok := strings.Cut(res.Content, "output so far:\n"); ok {
		initial, _, _ = strings.Cut(after, "\nThe command continues")
		initial += "\n"
	}
	return m[1], initial
}

// pollUntil polls id until its status line contains want, returning all
// output seen by the polls.
func (h *harness) pollUntil(g *WithT, session, id, want string) string {
	var all strings.Builder
	if initial, ok := h.initial.LoadAndDelete(id); ok {
		all.WriteString(initial.(string))
	}
	g.Eventually(func() string {
		res := h.callAs(session, "process", map[string]any{"action": "poll", "sessionId": id})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		status, out, _ := strings.Cut(strings.SplitN(res.Content, "\n", 2)[1], "\n")
		if out != "(no new output)" {
			all.WriteString(out + "\n")
		}
		return status
	}).WithTimeout(15 * time.Second).WithPolling(50 * time.Millisecond).Should(ContainSubstring(want))
	return all.String()
}

func TestExecForeground(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name    string
		args    map[string]any
		isError bool
		exact   string
		want    []string
	}{
		{name: "finishes within yield", args: map[string]any{"command": "echo hi; echo err >&2; exit 2"}, exact: "hi\nerr\n[exit code 2]"},
		{name: "workspace", args: map[string]any{"command": "pwd"}, exact: h.ws + "\n[exit code 0]"},
		{name: "timeout before yield", args: map[string]any{"command": "echo begun; sleep 300", "timeout": 1, "yieldMs": 20000}, isError: true,
			want: []string{"command killed after 1 s (timeout)", "begun"}},
		{name: "empty command", args: map[string]any{"command": ""}, isError: true, want: []string{"command is empty"}},
		{name: "negative yield", args: map[string]any{"command": "true", "yieldMs": -1}, isError: true, want: []string{"invalid arguments for exec"}},
		{name: "timeout zero", args: map[string]any{"command": "true", "timeout": 0.5}, isError: true, want: []string{"invalid arguments for exec"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := h.call("exec", tc.args)
			g.Expect(res.IsError).To(Equal(tc.isError), res.Content)
			if tc.exact != "" {
				g.Expect(res.Content).To(Equal(tc.exact))
			}
			for _, w := range tc.want {
				g.Expect(res.Content).To(ContainSubstring(w))
			}
		})
	}
	// Foreground runs that finished are not kept.
	NewWithT(t).Expect(h.call("process", map[string]any{"action": "list"}).Content).To(Equal("no processes in this session"))
}

func TestExecYieldsToBackground(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	res := h.call("exec", map[string]any{"command": "echo first; sleep 300", "yieldMs": 300})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("status: running\nsessionId: p1\noutput so far:\nfirst\n"))
	g.Expect(res.Content).To(ContainSubstring(`Use the process tool with sessionId "p1"`))

	// Output already shown is not repeated.
	poll := h.call("process", map[string]any{"action": "poll", "sessionId": "p1"})
	g.Expect(poll.Content).To(MatchRegexp(`^sessionId: p1\nstatus: running for \d+s\n\(no new output\)$`))

	list := h.call("process", map[string]any{"action": "list"})
	g.Expect(list.Content).To(MatchRegexp(`^p1\trunning for \d+s\techo first; sleep 300$`))

	kill := h.call("process", map[string]any{"action": "kill", "sessionId": "p1"})
	g.Expect(kill.IsError).To(BeFalse(), kill.Content)
	g.Expect(kill.Content).To(ContainSubstring("killed p1: exited (killed by signal SIGKILL)"))
	g.Expect(kill.Content).To(ContainSubstring("killed on request"))

	again := h.call("process", map[string]any{"action": "kill", "sessionId": "p1"})
	g.Expect(again.Content).To(ContainSubstring("p1 had already ended"))
}

func TestProcessPollAndLog(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id := h.startBackground(g, "s1", "for i in 1 2 3 4 5; do echo line$i; done; sleep 0.3; echo done; exit 4", nil)
	out := h.pollUntil(g, "s1", id, "exited (exit code 4)")
	g.Expect(out).To(Equal("line1\nline2\nline3\nline4\nline5\ndone\n"))

	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"default: last lines", map[string]any{}, "lines 0-5 of 6:\nline1\nline2\nline3\nline4\nline5\ndone"},
		{"last 2", map[string]any{"limit": 2}, "lines 4-5 of 6:\nline5\ndone"},
		{"offset and limit", map[string]any{"offset": 1, "limit": 2}, "lines 1-2 of 6:\nline2\nline3"},
		{"offset to the end", map[string]any{"offset": 4}, "lines 4-5 of 6:\nline5\ndone"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			args := map[string]any{"action": "log", "sessionId": id}
			for k, v := range tc.args {
				args[k] = v
			}
			res := h.call("process", args)
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			g.Expect(res.Content).To(HaveSuffix(tc.want))
		})
	}
	res := h.call("process", map[string]any{"action": "log", "sessionId": id, "offset": 7})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("offset 7 is past the end of the output (6 lines)"))
}

func TestProcessWrite(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id := h.startBackground(g, "s1", "cat", nil)

	res := h.call("process", map[string]any{"action": "write", "sessionId": id, "data": "hello cat\n"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("wrote 10 bytes to the stdin of " + id))
	g.Eventually(func() string {
		return h.call("process", map[string]any{"action": "log", "sessionId": id}).Content
	}).WithTimeout(10 * time.Second).Should(HaveSuffix("\nhello cat"))

	res = h.call("process", map[string]any{"action": "write", "sessionId": id, "data": "bye\n", "eof": true})
	g.Expect(res.Content).To(ContainSubstring("and closed it"))
	out := h.pollUntil(g, "s1", id, "exited (exit code 0)")
	g.Expect(out).To(ContainSubstring("bye"))

	res = h.call("process", map[string]any{"action": "write", "sessionId": id, "data": "more"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("has ended (exit code 0); it reads no more input"))
}

func TestProcessListClearRemove(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	done := h.startBackground(g, "s1", "echo quick", nil)
	running := h.startBackground(g, "s1", "sleep 300", nil)
	other := h.startBackground(g, "s1", "sleep 301", nil)
	h.pollUntil(g, "s1", done, "exited")

	list := h.call("process", map[string]any{"action": "list"}).Content
	g.Expect(strings.Split(list, "\n")).To(HaveExactElements(
		MatchRegexp(`^`+done+`\texited \(exit code 0\) after .*\techo quick$`),
		MatchRegexp(`^`+running+`\trunning for \d+s\tsleep 300$`),
		MatchRegexp(`^`+other+`\trunning for \d+s\tsleep 301$`),
	))

	res := h.call("process", map[string]any{"action": "clear", "sessionId": running})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("is still running; kill it first or use action remove"))

	res = h.call("process", map[string]any{"action": "clear"})
	g.Expect(res.Content).To(Equal("cleared " + done))

	res = h.call("process", map[string]any{"action": "remove", "sessionId": running})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("removed " + running))

	list = h.call("process", map[string]any{"action": "list"}).Content
	g.Expect(list).To(MatchRegexp(`^` + other + `\trunning for \d+s\tsleep 301$`))

	for _, id := range []string{done, running} {
		res = h.call("process", map[string]any{"action": "poll", "sessionId": id})
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(res.Content).To(ContainSubstring("no process"))
	}
}

func TestProcessTimeout(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id, initial := h.startBackgroundWithOutput(g, "s1", "echo waiting; sleep 300", map[string]any{"timeout": 1})
	out := h.pollUntil(g, "s1", id, "killed at its timeout")
	g.Expect(initial+out).To(Equal("waiting\n"), "each byte of output is shown exactly once")
}

func TestProcessErrors(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"poll without id", map[string]any{"action": "poll"}, "sessionId is required for poll; use action list"},
		{"unknown id", map[string]any{"action": "log", "sessionId": "p99"}, `no process "p99" in this session`},
		{"unknown action", map[string]any{"action": "restart", "sessionId": "p1"}, "invalid arguments for process"},
		{"missing action", map[string]any{"sessionId": "p1"}, "invalid arguments for process"},
		{"negative offset", map[string]any{"action": "log", "sessionId": "p1", "offset": -1}, "invalid arguments for process"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := h.call("process", tc.args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tc.want))
		})
	}
}

func TestProcessSessionIsolation(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	id := h.startBackground(g, "alice", "sleep 300", nil)

	for _, action := range []string{"poll", "log", "write", "kill", "remove", "clear"} {
		res := h.callAs("bob", "process", map[string]any{"action": action, "sessionId": id, "data": "x"})
		g.Expect(res.IsError).To(BeTrue(), action)
		g.Expect(res.Content).To(ContainSubstring(`no process "`+id+`" in this session`), action)
	}
	g.Expect(h.callAs("bob", "process", map[string]any{"action": "list"}).Content).To(Equal("no processes in this session"))
	g.Expect(h.callAs("bob", "process", map[string]any{"action": "clear"}).Content).To(Equal("no finished processes to clear"))

	res := h.callAs("alice", "process", map[string]any{"action": "poll", "sessionId": id})
	g.Expect(res.Content).To(ContainSubstring("status: running"))
}

func TestProcessManagerClose(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	var pids []int
	for _, session := range []string{"a", "b", "c"} {
		h.startBackground(g, session, "PICOBOT_TEST_MARK=close-"+session+" sleep 300 & wait", nil)
		pids = append(pids, waitMarked(g, "close-"+session))
	}

	h.procs.CloseSession("a")
	g.Eventually(func() bool { return gone(pids[0]) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(gone(pids[1])).To(BeFalse(), "other sessions keep running")
	g.Expect(h.callAs("a", "process", map[string]any{"action": "list"}).Content).To(Equal("no processes in this session"))

	h.procs.Close()
	for _, pid := range pids {
		g.Eventually(func() bool { return gone(pid) }).WithTimeout(10 * time.Second).Should(BeTrue())
	}
	res := h.call("exec", map[string]any{"command": "true"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("shut down"))
	h.procs.Close() // idempotent
}

func TestProcessOutputIsBounded(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	// About 2 MiB of output: more than the 1 MiB buffer.
	id := h.startBackground(g, "s1", "seq 1 300000", nil)
	h.pollUntil(g, "s1", id, "exited (exit code 0)")
	res := h.call("process", map[string]any{"action": "log", "sessionId": id, "limit": 2})
	g.Expect(res.Content).To(MatchRegexp(`the first \d+ bytes of output were dropped`))
	g.Expect(res.Content).To(HaveSuffix("299999\n300000"))

	id = h.startBackground(g, "s1", "seq 1 20000; sleep 300", nil)
	g.Eventually(func() string {
		return h.call("process", map[string]any{"action": "log", "sessionId": id, "limit": 1}).Content
	}).WithTimeout(10 * time.Second).Should(HaveSuffix("\n20000"))
	res = h.call("process", map[string]any{"action": "poll", "sessionId": id})
	g.Expect(res.Content).To(MatchRegexp(`\[\d+ bytes not shown; use process log to page through the output\]`))
	g.Expect(len(res.Content)).To(BeNumerically("<", 51_000))
	g.Expect(res.Content).To(HaveSuffix("19999\n20000"))
}
