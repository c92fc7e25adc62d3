package terminal

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestChatApprovesCommands: in `picobot chat` an exec approval request shows
// the command with y/n; y runs it, n refuses it (the model reads the denial
// as the tool's error), and no answer refuses it once approvalTimeout has
// passed. The commands are real bash in the session's workspace.
func TestChatApprovesCommands(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	agent := strings.Replace(embeddedtest.AgentYAML("assistant", llm.URL(), "llm"), `allow: ["calculator", "todo"]`,
		"allow: [\"exec\"]\n    exec: {ask: always, approvalTimeout: 5s}", 1)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(agent), 0o600)).To(Succeed())
	srv := serve(t, dir, "")
	term := openTerminal(t, chatCommand(srv.url, "--chat", "approvals"))
	term.waitForText("● online")
	ran := func(x string) bool {
		m, _ := filepath.Glob(filepath.Join(dir, ".picobot", "workspaces", "*", "*", "*", "approved-"+x+".txt"))
		return len(m) > 0
	}
	ask := func(x string) string {
		llm.Script(
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "exec", Args: `{"command":"touch approved-` + x + `.txt && echo ran-` + x + `"}`}}},
			fakellm.Turn{Text: "Finished " + x + "."},
		)
		term.waitFor("the chat idle", func(s string) bool { return !strings.Contains(s, "is replying") && !strings.Contains(s, "? y approve") })
		term.typeLine("run " + x)
		screen := term.waitForText("⚠ Approve this exec command? this agent asks before every command (ask: always).\n" +
			"  touch approved-" + x + ".txt && echo ran-" + x)
		g.Expect(screen).To(MatchRegexp(`y approve · n deny \(code [A-Z2-9]{4}; refused without an answer within 5s\)`))
		g.Expect(screen).To(MatchRegexp(`Approve exec command [A-Z2-9]{4}\? y approve · n deny`))
		g.Expect(ran(x)).To(BeFalse(), "nothing runs before the answer")
		return regexp.MustCompile(`echo ran-` + x + `\n  y approve · n deny \(code ([A-Z2-9]{4});`).FindStringSubmatch(screen)[1]
	}

	ask("Y")
	term.keys("y")
	// The transcript is reloaded from the session after the turn: the
	// tool's line, which is stored, says what became of the command. (The
	// line shows as soon as the tool ends, before the model's last answer.)
	screen := term.waitFor("the turn's end", func(s string) bool {
		return strings.Contains(s, "Finished Y.") && !strings.Contains(s, "is replying")
	})
	g.Expect(screen).To(ContainSubstring("→ ran-Y [exit code 0]"))
	g.Expect(ran("Y")).To(BeTrue())

	ask("N")
	term.keys("n")
	term.waitForText("Finished N.")
	term.waitForText("✗ error: the command was not run: the user denied it")
	g.Expect(ran("N")).To(BeFalse())
	last := llm.Requests()[len(llm.Requests())-1]
	g.Expect(last.Messages[len(last.Messages)-1].ToolResults[0].Content).To(ContainSubstring("the user denied it"))

	// "/approve CODE" typed while the turn waits answers it too.
	code := ask("S")
	term.typeLine("/approve " + code)
	term.waitForText("→ ran-S [exit code 0]")
	g.Expect(ran("S")).To(BeTrue())

	ask("T")
	term.waitForText("Finished T.")
	term.keys("C-o") // the whole result
	term.waitForText("the user did not answer the approval request within 5s")
	g.Expect(ran("T")).To(BeFalse())
	term.keys("C-c")
	term.waitForText("EXITED rc=0")
}
