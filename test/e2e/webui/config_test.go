package webui

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestWebUIConfiguration edits an agent on the Configuration page of
// picobot serve in headless Chromium: the form shows the manifest's model,
// key and tools; a change the loader refuses says why and leaves the file;
// a valid one is written to the manifest folder (the key to a Secret
// manifest), reloaded, and the next message goes to the new model with the
// new key; checked for layout at 1280x800 and 390x844.
func TestWebUIConfiguration(t *testing.T) {
	g := NewWithT(t)
	shots := os.Getenv("PICOBOT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatalf("failed to create screenshot folder: %v", err)
	}
	browser := launchBrowser(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "assistant.yaml")
	g.Expect(os.WriteFile(manifest, fmt.Appendf(nil, `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: model-api-key, key: apiKey}
  tools:
    allow: ["calculator", "bash"]
`, llm.URL()), 0o600)).To(Succeed())
	srv := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")

	u := openUI(t, browser, srv.url+"/#health", shots)
	u.page.MustSetViewport(1280, 800, 1, false)
	u.wait("the agent's configuration", `() => document.getElementById('cfg-model').value === 'fake' && document.getElementById('agent-config').dataset.editable === 'true'`)
	g.Expect(u.eval(`() => document.getElementById('cfg-allow').value`).Str()).To(Equal("calculator, bash"))
	g.Expect(u.eval(`() => document.getElementById('cfg-api-key').placeholder`).Str()).To(HavePrefix("set (Secret model-api-key, key apiKey)"))
	u.shot("config-form")

	// Refused by the loader: the reason shows, the file stays.
	before, _ := os.ReadFile(manifest)
	u.el("#cfg-model").MustSelectAllText().MustInput("fake-2")
	u.el("#cfg-base-url").MustSelectAllText().MustInput("ftp://models.local")
	u.click("#cfg-save")
	u.wait("the refusal", `() => document.getElementById('cfg-status').classList.contains('fail')`)
	g.Expect(u.text("#cfg-status")).To(ContainSubstring("baseURL must be an http:// or https:// URL"))
	after, _ := os.ReadFile(manifest)
	g.Expect(string(after)).To(Equal(string(before)))
	u.shot("config-refused")

	// Valid: saved, reloaded, used.
	llm.SetAPIKey("sk-ui")
	u.el("#cfg-base-url").MustSelectAllText().MustInput(llm.URL())
	u.el("#cfg-api-key").MustInput("sk-ui")
	u.el("#cfg-allow").MustSelectAllText().MustInput("calculator")
	u.click("#cfg-save")
	u.wait("the save", `() => document.getElementById('cfg-status').classList.contains('ok')`)
	g.Expect(u.text("#cfg-status")).To(Equal("Saved; the agent reloaded."))
	g.Expect(u.eval(`() => document.getElementById('cfg-api-key').value`).Str()).To(BeEmpty(), "the key is not kept in the page")
	data, _ := os.ReadFile(manifest)
	g.Expect(string(data)).To(ContainSubstring("model: fake-2"))
	g.Expect(string(data)).NotTo(ContainSubstring("sk-ui"))
	key, err := os.ReadFile(filepath.Join(dir, "assistant-model-key.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(key)).To(ContainSubstring("apiKey: sk-ui"))
	u.shot("config-saved")

	u.click("#chat-tab")
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "model " + r.Model} })
	u.send("which model?")
	u.waitLastTurn("done")
	g.Expect(u.text("#messages .turn:last-child .msg.assistant .content")).To(Equal("model fake-2"))
	last := llm.Requests()[len(llm.Requests())-1]
	g.Expect(last.Header.Get("Authorization")).To(Equal("Bearer sk-ui"))
	g.Expect(strings.Join(last.Tools, ",")).NotTo(ContainSubstring("bash"))

	u.page.MustSetViewport(390, 844, 1, true)
	u.click("#health-tab")
	u.wait("the form", `() => document.getElementById('cfg-model').value === 'fake-2'`)
	g.Expect(u.eval(`() => document.documentElement.scrollWidth <= innerWidth &&
	  [...document.querySelectorAll('#agent-config input, #agent-config select, #cfg-save')].every((e) => e.getBoundingClientRect().right <= innerWidth + 0.5)`).Bool()).
		To(BeTrue(), "the form fits 390 px")
	u.shot("config-mobile")
	g.Expect(u.problems()).To(BeEmpty(), "no script errors or CSP violations")
}
