package webui

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// The gateway restarts with another agent while the page is open: once it
// reconnects, the page lists the agents again (it kept the old list before).
func TestWebUIReadsTheAgentsAgainOnReconnect(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	agent := func(name string) string {
		return `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: ` + name + `}
spec:
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: model-api-key, key: apiKey}}
`
	}
	g.Expect(os.WriteFile(filepath.Join(dir, "assistant.yaml"), []byte(agent("assistant")), 0o600)).To(Succeed())
	env := "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"
	srv := serve(t, dir, env)
	u := openUI(t, launchBrowser(t), srv.url+"/", t.TempDir())
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	options := `() => [...document.querySelectorAll('#agent-select option')].map((o) => o.value).join(',')`
	g.Expect(u.eval(options).Str()).To(Equal("assistant"))

	srv.stop()
	u.wait("the page to see the gateway gone", `() => document.getElementById('conn-status').dataset.state !== 'open'`)
	g.Expect(os.WriteFile(filepath.Join(dir, "planner.yaml"), []byte(agent("planner")), 0o600)).To(Succeed())
	serveAt(t, dir, strings.TrimPrefix(srv.url, "http://"), env)
	u.wait("the WebSocket to reconnect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the new agent in the list", `() => document.querySelectorAll('#agent-select option').length === 2`)
	g.Expect(u.eval(options).Str()).To(Equal("assistant,planner"))
	g.Expect(u.eval(`() => document.getElementById('agent-select').value`).Str()).To(Equal("assistant"), "the agent talked to stays chosen")
	g.Expect(u.problems()).To(BeEmpty())
}
