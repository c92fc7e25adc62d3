package webui

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

// TestWebUIRunCards: in headless Chromium a background delegate run shows
// as a card under the call — target, task, status running, its steps as the
// sub-agent takes them, a Cancel button — then succeeded with its result,
// and the continuation turn's answer comes into the conversation without a
// reload; a second run is cancelled with its card's button and ends
// cancelled with no continuation.
func TestWebUIRunCards(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	yaml := `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  role: root
  instructions: You are assistant.
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: model-api-key, key: apiKey}}
  tools: {allow: [calculator]}
  delegates: [{name: researcher, agentRef: {name: researcher}, description: finds facts}]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: researcher}
spec:
  instructions: You are researcher.
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: model-api-key, key: apiKey}}
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
			return fakellm.Turn{Text: "CONTINUED: " + user[strings.Index(user, "Result:")+8:strings.Index(user, "\n\nThis message")]}
		case last.Role == "tool":
			return fakellm.Turn{Text: "Started it in the background."}
		case strings.Contains(user, "endless"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d2", Name: "delegate", Args: `{"target":"researcher","task":"an endless search","mode":"background"}`}}}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "delegate", Args: `{"target":"researcher","task":"find the answer","mode":"background"}`}}}
		}
	})
	srv := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	u := openUI(t, launchBrowser(t), srv.url+"/?agent=assistant", t.TempDir())
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)

	const card = "#messages .turn:last-child .run-card"
	u.send("Research it")
	u.waitLastTurn("done")
	u.wait("the run card to show the sub-agent's step", `(sel) => {
	  const c = document.querySelector(sel);
	  return c.dataset.status === 'running' && c.querySelector('.run-progress').textContent === '1 step · last: calculator';
	}`, card)
	g.Expect(u.text(card + " .run-target")).To(Equal("researcher"))
	g.Expect(u.text(card + " .run-task")).To(Equal("find the answer"))
	g.Expect(u.eval(`(sel) => document.querySelector(sel + ' .run-cancel').checkVisibility()`, card).Bool()).To(BeTrue())
	g.Expect(u.eval(`(sel) => document.querySelector(sel).dataset.runId`, card).Str()).NotTo(BeEmpty())
	u.shot("run-card-running")

	once.Do(func() { close(release) })
	u.wait("the continuation's answer in the conversation", `() => [...document.querySelectorAll('#messages .msg.assistant .content')]
	  .some((e) => e.textContent.includes('CONTINUED: The answer is forty-two.'))`)
	first := "#messages .run-card[data-status]"
	u.wait("the card to end succeeded", `(sel) => document.querySelector(sel).dataset.status === 'succeeded'`, first)
	g.Expect(u.text(first + " .run-result")).To(Equal("The answer is forty-two."))
	g.Expect(u.eval(`(sel) => document.querySelector(sel + ' .run-cancel').checkVisibility()`, first).Bool()).To(BeFalse())
	u.shot("run-card-succeeded")

	u.send("Start the endless one")
	u.waitLastTurn("done")
	u.wait("the second card running", `(sel) => document.querySelector(sel).dataset.status === 'running'`, card)
	u.click(card + " .run-cancel")
	u.wait("the second card cancelled", `(sel) => document.querySelector(sel).dataset.status === 'cancelled'`, card)
	g.Expect(u.text(card + " .run-result")).To(Equal("cancelled by the user"))
	u.shot("run-card-cancelled")
	g.Expect(u.eval(`() => [...document.querySelectorAll('#messages .msg.user')].filter((e) => e.textContent.startsWith('[Background run ')).length`).Int()).
		To(BeNumerically("<=", 1), "one continuation, of the first run")
	g.Expect(u.problems()).To(BeEmpty())
}
