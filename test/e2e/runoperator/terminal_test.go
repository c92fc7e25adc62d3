package runoperator

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chatInTerminal runs the banner's `picobot chat` line, as printed, in a
// real terminal (tmux, 120x40, a server of its own): a message typed there
// is answered by the session pod with the calculator's result (19*3,
// which the conversation the ask line started does not hold).
func chatInTerminal(t *testing.T, chatLine string) {
	const tmuxBin = "/usr/bin/tmux"
	if _, err := os.Stat(tmuxBin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("this test needs tmux at %s: %v", tmuxBin, err)
		}
		t.Skip("SKIPPED LOUDLY: no tmux at " + tmuxBin)
	}
	socket := fmt.Sprintf("picobot-runoperator-%d", os.Getpid())
	tmux := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(tmuxBin, append([]string{"-L", socket, "-f", "/dev/null"}, args...)...)
		cmd.Env = append(os.Environ(), "TERM=xterm-256color")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "main", chatLine+`; echo "EXITED rc=$?"; sleep 600`)
	t.Cleanup(func() { _ = exec.Command(tmuxBin, "-L", socket, "kill-server").Run() })
	waitFor := func(what string, cond func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // a hang guard, not a performance assertion
		for {
			s := tmux("capture-pane", "-p", "-t", "main")
			if cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q; it shows:\n%s", what, s)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("the chat", func(s string) bool { return strings.Contains(s, "chat") })
	tmux("send-keys", "-t", "main", "-l", "what is 19*3?")
	tmux("send-keys", "-t", "main", "Enter")
	// The answer: the tool's report, its result on a line of its own (the
	// screen's other numbers, such as the gateway's port, are elsewhere).
	answer := regexp.MustCompile(`(?m)^[\s│|]*57[\s│|]*$`)
	screen := waitFor("the answer 57", func(s string) bool { return strings.Contains(s, "tool returned") && answer.MatchString(s) })
	if strings.Contains(screen, "EXITED") {
		t.Fatalf("picobot chat ended:\n%s", screen)
	}
	t.Logf("the terminal:\n%s", screen)
}
