package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// backgroundAgents: assistant may delegate to researcher.
const backgroundAgents = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  role: root
  instructions: You are assistant.
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: model-api-key, key: apiKey}}
  tools: {allow: [calculator]}
  delegates: [{name: researcher, agentRef: {name: researcher}}]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: researcher}
spec:
  instructions: You are researcher.
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: model-api-key, key: apiKey}}
  tools: {allow: [calculator]}
`

// TestBackgroundRunSurvivesKill: `picobot serve` is killed with -9 while a
// background run is in its model call, and started again on the same
// folder: the run is run again, and the chat gets its continuation turn
// exactly once, with the reply in its history.
func TestBackgroundRunSurvivesKill(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	var killed atomic.Bool
	stuck := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case strings.HasPrefix(r.System, "You are researcher."):
			if !killed.Load() {
				stuck <- struct{}{}
				<-release // the process dies meanwhile
			}
			return fakellm.Turn{Text: "the answer is 42"}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "CONTINUED: " + strings.SplitN(last.Content, "\n", 2)[0]}
		case last.Role == "tool":
			return fakellm.Turn{Text: "started"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "delegate",
				Args: `{"target":"researcher","task":"find the answer","mode":"background"}`}}}
		}
	})
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, backgroundAgents, s.URL()), 0o600)).To(Succeed())
	env := "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"
	p := serve(t, dir, env)

	body, _ := json.Marshal(map[string]string{"id": "m1", "agent": "assistant", "chat_id": "kill", "text": "go"})
	res, err := http.Post(p.url+"/api/v1/send", "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	var out struct {
		Text    string `json:"text"`
		Session string `json:"session"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&out)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(out.Text).To(Equal("started"))
	<-stuck
	killed.Store(true)
	g.Expect(p.cmd.Process.Kill()).To(Succeed())
	<-p.done

	p = serve(t, dir, env)
	history := func() []map[string]any {
		res, err := http.Get(p.url + "/api/v1/sessions/" + url.PathEscape(out.Session) + "/messages?last=500")
		if err != nil {
			return nil
		}
		defer func() { _ = res.Body.Close() }()
		var h struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.NewDecoder(res.Body).Decode(&h)
		return h.Messages
	}
	count := func(prefix string) int {
		n := 0
		for _, m := range history() {
			if c, _ := m["content"].(string); strings.HasPrefix(c, prefix) {
				n++
			}
		}
		return n
	}
	g.Eventually(func() int { return count("CONTINUED: [Background run ") }).WithTimeout(60*time.Second).
		WithPolling(50*time.Millisecond).Should(Equal(1), "the continuation's reply is in the chat")

	// A probe message answered after everything queued before it: still one.
	body, _ = json.Marshal(map[string]string{"id": "m2", "agent": "assistant", "chat_id": "kill", "text": "/info"})
	res, err = http.Post(p.url+"/api/v1/send", "application/json", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	_ = res.Body.Close()
	g.Expect(count("[Background run ")).To(Equal(1), "one continuation message")
	g.Expect(count("CONTINUED: ")).To(Equal(1), "one continuation reply")
	var continuations int
	for _, r := range s.Requests() {
		if last := r.Messages[len(r.Messages)-1]; strings.HasPrefix(last.Content, "[Background run ") {
			continuations++
			g.Expect(last.Content).To(ContainSubstring("the answer is 42"))
		}
	}
	g.Expect(continuations).To(Equal(1), "one continuation turn")
}

// TestBackgroundContinuationOverWebhookChannel: a chat platform's chat
// starts a background run; its continuation's reply is delivered to the
// platform like the chat's other replies, once.
func TestBackgroundContinuationOverWebhookChannel(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case strings.HasPrefix(r.System, "You are researcher."):
			return fakellm.Turn{Text: "the answer is 42"}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "CONTINUED"}
		case last.Role == "tool":
			return fakellm.Turn{Text: "started"}
		case strings.HasPrefix(last.Content, "probe"):
			return fakellm.Turn{Text: "probed"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "delegate",
				Args: `{"target":"researcher","task":"find the answer","mode":"background"}`}}}
		}
	})
	h := startHookChat(t, s.URL(), "calculator")
	post := func(body string) { h.post(t, body) }
	replies := h.replies
	post(`{"chat_id":"c-7","message_id":"m-1","text":"start a background run"}`)
	g.Eventually(replies, 30*time.Second, 20*time.Millisecond).Should(ContainElements("started", "CONTINUED"))
	post(`{"chat_id":"c-7","message_id":"m-2","text":"probe"}`)
	g.Eventually(replies, 30*time.Second, 20*time.Millisecond).Should(ContainElement("probed"))
	g.Expect(replies()).To(ConsistOf("started", "CONTINUED", "probed"), "the continuation's reply went out once")
}
