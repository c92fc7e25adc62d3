package terminal

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const tmuxBin = "/usr/bin/tmux"

// terminal is a real terminal: a tmux session of 120x40 on its own server
// (socket), running one command.
type terminal struct {
	t      *testing.T
	socket string
}

// openTerminal runs command (a shell command line) in a new terminal. After
// the command ends the shell prints "EXITED rc=<code>" and stays.
func openTerminal(t *testing.T, command string) *terminal {
	t.Helper()
	if _, err := os.Stat(tmuxBin); err != nil {
		t.Fatalf("these tests need tmux at %s: %v", tmuxBin, err)
	}
	tm := &terminal{t: t, socket: fmt.Sprintf("picobot-e2e-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))}
	tm.tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "main",
		command+`; echo "EXITED rc=$?"; sleep 600`)
	t.Cleanup(func() { _ = exec.Command(tmuxBin, "-L", tm.socket, "kill-server").Run() })
	return tm
}

func (tm *terminal) tmux(args ...string) string {
	tm.t.Helper()
	cmd := exec.Command(tmuxBin, append([]string{"-L", tm.socket, "-f", "/dev/null"}, args...)...)
	cmd.Env = append(cleanEnv(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the terminal shows now.
func (tm *terminal) screen() string { return tm.tmux("capture-pane", "-p", "-t", "main") }

// keys presses keys, in tmux's names (Enter, C-c, M-Enter, ...).
func (tm *terminal) keys(keys ...string) {
	tm.tmux(append([]string{"send-keys", "-t", "main"}, keys...)...)
}

// typeLine types text and presses Enter.
func (tm *terminal) typeLine(text string) {
	tm.tmux("send-keys", "-t", "main", "-l", text)
	tm.keys("Enter")
}

// waitFor polls the screen until cond holds, and returns that screen.
func (tm *terminal) waitFor(what string, cond func(screen string) bool) string {
	tm.t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		s := tm.screen()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal never showed %s; it shows:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tm *terminal) waitForText(s string) string {
	tm.t.Helper()
	return tm.waitFor(fmt.Sprintf("%q", s), func(screen string) bool { return strings.Contains(screen, s) })
}

func chatCommand(url string, args ...string) string {
	return fmt.Sprintf("PICOBOT_URL=%s %s chat %s", url, picobotBin, strings.Join(args, " "))
}

func TestChatInTerminal(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, nil), "")
	term := openTerminal(t, chatCommand(srv.url, "--chat", "tmux"))
	screen := term.waitForText("● online")
	g.Expect(screen).To(HavePrefix(" PicoBot │ assistant │ new conversation"))
	g.Expect(screen).To(ContainSubstring("› Message assistant — /help for commands"))

	// A message: the tool call shows dimmed on one line, the reply streams.
	reply := "The answer is 42, as the calculator tool has just worked out for you."
	llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_1", Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
		fakellm.Turn{Text: reply, ChunkDelay: 250 * time.Millisecond},
	)
	term.typeLine("what is 6*7?")
	screen = term.waitFor("the reply streaming in", func(s string) bool {
		return strings.Contains(s, "The answer ") && strings.Contains(s, "▍") && !strings.Contains(s, reply)
	})
	g.Expect(screen).To(ContainSubstring("You\nwhat is 6*7?"))
	g.Expect(screen).To(ContainSubstring(`  ▸ calculator {"function":"evaluate","expression":"6*7"} → 42`))
	g.Expect(screen).To(ContainSubstring("assistant is replying… (Ctrl+C stops)"))
	screen = term.waitFor("the whole reply", func(s string) bool {
		return strings.Contains(s, "assistant\n"+reply) && !strings.Contains(s, "is replying")
	})
	g.Expect(screen).NotTo(ContainSubstring("▍"))
	// The conversation list is refreshed after the turn, by its own request:
	// under load it may draw a moment after the reply.
	term.waitForText("│ what is 6*7? (default)") // titled by its first request

	// Ctrl+O opens the tool call, and closes it again.
	term.keys("C-o")
	term.waitForText("▾ calculator (call_1)\n    arguments\n      {\"function\":\"evaluate\",\"expression\":\"6*7\"}\n    result\n      42")
	term.keys("C-o")
	term.waitForText("▸ calculator")

	// A finished answer is drawn as markdown, not shown as markup.
	llm.Script(fakellm.Turn{Text: "Here: **bold words** and a table\n\n| city | km |\n|---|---|\n| Oslo | 12 |\n"})
	term.typeLine("markdown please")
	screen = term.waitFor("the markdown answer", func(s string) bool { return strings.Contains(s, "Oslo") && !strings.Contains(s, "is replying") })
	g.Expect(screen).To(ContainSubstring("Here: bold words and a table"))
	g.Expect(screen).NotTo(ContainSubstring("**"))
	g.Expect(screen).To(MatchRegexp(`Oslo\s+│\s+12`))
	g.Expect(screen).To(MatchRegexp(`\d+ in / \d+ out tokens`), "the finished turn's tokens")

	// /dump's link opens from the terminal: the gateway's address in front;
	// the token line was the last turn's, and /dump had none.
	term.typeLine("/dump")
	screen = term.waitForText(srv.url + "/api/v1/artifacts/")
	g.Expect(screen).NotTo(ContainSubstring("out tokens"))

	// Alt+Enter makes a message of several lines.
	llm.Script(fakellm.Turn{Text: "Two lines received."})
	term.tmux("send-keys", "-t", "main", "-l", "first line")
	term.keys("M-Enter")
	term.tmux("send-keys", "-t", "main", "-l", "second line")
	term.waitForText("› first line\n› second line")
	term.keys("Enter")
	term.waitForText("You\nfirst line\nsecond line\n\nassistant\nTwo lines received.")
	last := llm.Requests()[len(llm.Requests())-1]
	g.Expect(last.Messages[len(last.Messages)-1].Content).To(Equal("first line\nsecond line"))

	// Slash commands go to the agent; their replies show.
	term.typeLine("/new")
	term.waitForText("Started a new conversation (d_")
	// The new dialog's (empty) history replaces the old one's as soon as
	// the dialog list shows the switch.
	term.waitFor("a new dialog that starts empty", func(s string) bool {
		return strings.Contains(s, "Started a new conversation (d_") && !strings.Contains(s, "The answer is 42")
	})
	term.waitFor("the new dialog in the header", func(s string) bool { return strings.Contains(s, "│ New conversation (d_") })
	term.typeLine("/sessions")
	screen = term.waitForText("Switch with /switch <dialog_id>.")
	g.Expect(screen).To(MatchRegexp(`Recent conversations:\n\* d_\w+\s+New conversation`))
	g.Expect(screen).To(MatchRegexp(`\n  default\s+what is 6\*7\?`), "auto-titled after five messages")
	term.typeLine("/switch default")
	term.waitForText("Switched to default")
	term.waitForText("Two lines received.") // the dialog's history is back

	// Ctrl+C stops a running reply; the chat stays.
	llm.Script(fakellm.Turn{Text: "never", Delay: time.Minute})
	asked := len(llm.Requests())
	term.typeLine("take your time")
	term.waitForText("assistant is replying")
	g.Eventually(func() int { return len(llm.Requests()) }).WithTimeout(hangGuard).Should(Equal(asked + 1))
	term.keys("C-c")
	screen = term.waitForText("Stopped; what was done so far is kept.")
	g.Expect(screen).NotTo(ContainSubstring("EXITED"))

	// The gateway goes away: an error line; it comes back: the next message
	// reconnects.
	srv = srv.restart()
	screen = term.waitForText("✗ Lost the connection to the gateway at " + srv.url + "; it reconnects when you send.")
	g.Expect(screen).To(ContainSubstring("○ offline"))
	llm.Script(fakellm.Turn{Text: "Back again."})
	term.typeLine("are you there?")
	screen = term.waitForText("are you there?\n\nassistant\nBack again.")
	g.Expect(screen).To(ContainSubstring("● online"))
	g.Expect(screen).NotTo(ContainSubstring("Lost the connection"))

	// Ctrl+C when idle quits.
	term.keys("C-c")
	term.waitForText("EXITED rc=0")
}

// TestChatShowsANotReadyAgent: an agent without a model is "not ready" in
// the header from the start, never "online", and a message says why.
func TestChatShowsANotReadyAgent(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, []string{"keyless"}), "")
	term := openTerminal(t, chatCommand(srv.url, "--agent", "keyless", "--chat", "nr"))
	screen := term.waitForText("● not ready")
	g.Expect(screen).NotTo(ContainSubstring("● online"))
	term.typeLine("hello")
	screen = term.waitForText("has no usable model")
	g.Expect(screen).To(ContainSubstring("● not ready"))
	g.Expect(screen).NotTo(MatchRegexp(`out tokens`), "a failed turn shows no token line")
	term.keys("C-c")
	term.waitForText("EXITED rc=0")
}

func TestChatPicksAnAgent(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"alpha", "beta"}, []string{"keyless"}), "")
	term := openTerminal(t, chatCommand(srv.url, "--chat", "picker"))
	screen := term.waitForText("pick an agent")
	g.Expect(screen).To(ContainSubstring("› alpha  ready"))
	g.Expect(screen).To(ContainSubstring("  keyless  not ready: No usable model"))
	term.keys("Down")
	term.waitForText("› beta  ready")
	term.keys("Enter")
	term.waitForText("PicoBot │ beta │")
	term.waitForText("● online")
	llm.Script(fakellm.Turn{Text: "Beta speaking."})
	term.typeLine("who are you?")
	term.waitForText("beta\nBeta speaking.")
	term.keys("C-c")
	term.waitForText("EXITED rc=0")
}

func TestChatFailsClearly(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, nil), "")

	term := openTerminal(t, chatCommand(srv.url, "--agent", "nobody"))
	screen := term.waitForText("EXITED rc=1")
	g.Expect(screen).To(ContainSubstring(`picobot chat: no agent "nobody" at ` + srv.url + ": pick one of assistant with --agent"))

	// Without a terminal it says what to use instead.
	out, err := exec.Command(picobotBin, "chat", "--url", srv.url).CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("picobot chat needs a terminal; for scripts use picobot ask"))
}
