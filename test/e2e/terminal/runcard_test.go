package terminal

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

var youAreRE = regexp.MustCompile(`^You are (\w+)\.`)

// TestChatShowsRunCards: in `picobot chat` a background delegate run shows
// under its tool line as a card — target, status, the sub-agent's steps,
// the task and "/cancel-run ID" — that turns succeeded with the result,
// and the continuation turn's answer comes into the transcript; a second
// run is cancelled with /cancel-run and its card says cancelled.
func TestChatShowsRunCards(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	dir := t.TempDir()
	yaml := `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  role: root
  instructions: You are assistant.
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: llm, key: apiKey}}
  tools: {allow: [calculator]}
  delegates: [{name: researcher, agentRef: {name: researcher}}]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: researcher}
spec:
  instructions: You are researcher.
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: llm, key: apiKey}}
  tools: {allow: [calculator]}
`
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(yaml), 0o600)).To(Succeed())
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		agent := ""
		if m := youAreRE.FindStringSubmatch(r.System); m != nil {
			agent = m[1]
		}
		last := r.Messages[len(r.Messages)-1]
		user := ""
		for i := len(r.Messages) - 1; i >= 0; i-- {
			if r.Messages[i].Role == "user" {
				user = r.Messages[i].Content
				break
			}
		}
		switch {
		case agent == "researcher" && strings.Contains(user, "endless"):
			return fakellm.Turn{Text: "never", Delay: time.Hour}
		case agent == "researcher" && last.Role == "tool":
			<-release
			return fakellm.Turn{Text: "The answer is forty-two."}
		case agent == "researcher":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "calculator", Args: `{"function":"add","a":40,"b":2}`}}}
		case strings.HasPrefix(user, "[Background run "):
			return fakellm.Turn{Text: "CONTINUED with the answer."}
		case last.Role == "tool":
			return fakellm.Turn{Text: "Started it in the background."}
		case strings.Contains(user, "endless"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d2", Name: "delegate", Args: `{"target":"researcher","task":"an endless search","mode":"background"}`}}}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "delegate", Args: `{"target":"researcher","task":"find the answer","mode":"background"}`}}}
		}
	})
	srv := serve(t, dir, "")
	term := openTerminal(t, chatCommand(srv.url, "--agent", "assistant", "--chat", "cards"))
	term.waitForText("● online")

	term.typeLine("Research it")
	term.waitForText("Started it in the background.")
	screen := term.waitForText("⇢ researcher · running · 1 step · last: calculator  [/cancel-run ")
	g.Expect(screen).To(ContainSubstring("      find the answer"))

	once.Do(func() { close(release) })
	screen = term.waitForText("⇢ researcher · succeeded · 1 step · last: calculator")
	g.Expect(screen).To(ContainSubstring("→ The answer is forty-two."))
	term.waitForText("CONTINUED with the answer.")

	term.typeLine("Start the endless one")
	screen = term.waitFor("the second card running", func(s string) bool {
		return regexp.MustCompile(`an endless search`).MatchString(s) && regexp.MustCompile(`\[/cancel-run ([0-9a-f]{8})\]`).MatchString(s)
	})
	id := regexp.MustCompile(`\[/cancel-run ([0-9a-f]{8})\]`).FindStringSubmatch(screen)[1]
	term.typeLine("/cancel-run " + id)
	screen = term.waitForText("⇢ researcher · cancelled")
	g.Expect(screen).To(ContainSubstring("→ cancelled by the user"))
	g.Expect(screen).NotTo(ContainSubstring("/cancel-run " + id + "]"))
}
