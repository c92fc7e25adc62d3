package gateway_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestConfigPageWritesTheManifestFolder: GET /api/v1/config/agents/{name}
// shows an agent's model, whether its key is set and its tools; PUT writes
// the manifest folder through the loader's validation (a new key to a
// Secret manifest of mode 0600) and reloads, so the next turn uses the new
// model and key; an invalid change is refused with the loader's reason
// and leaves the files as they were; another tenant may not change them.
func TestConfigPageWritesTheManifestFolder(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/config/agents/assistant", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	cfg := body["config"].(map[string]any)
	g.Expect(cfg).To(HaveKeyWithValue("editable", true))
	g.Expect(cfg).To(HaveKeyWithValue("mode", "embedded"))
	g.Expect(cfg).To(HaveKeyWithValue("model", "fake"))
	g.Expect(cfg).To(HaveKeyWithValue("key_set", true))
	g.Expect(cfg).To(HaveKeyWithValue("tools_allow", []any{"calculator", "bash"}))
	g.Expect(cfg["edit"]).To(Equal(filepath.Join(e.dir, "agents.yaml")))

	// agents.yaml holds two Agents: the page cannot rewrite it.
	status, body = e.a.Do(t, http.MethodPut, "/api/v1/config/agents/assistant", frame{"provider": "openai", "model": "fake-2"})
	g.Expect(status).To(Equal(http.StatusBadRequest), "%v", body)
	g.Expect(body["error"].(map[string]any)["message"]).To(ContainSubstring("move the Agent to a file of its own"))

	// One Agent per file: the page changes it.
	data, err := os.ReadFile(filepath.Join(e.dir, "agents.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	assistant, keyless, _ := cutYAML(string(data))
	// A reload needs one root agent among several (agentspec.RootAgent).
	assistant = strings.Replace(assistant, "spec:\n", "spec:\n  role: root\n", 1)
	g.Expect(os.WriteFile(filepath.Join(e.dir, "agents.yaml"), []byte(assistant), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(e.dir, "keyless.yaml"), []byte(keyless), 0o600)).To(Succeed())
	e.llm.SetAPIKey("sk-new")
	status, body = e.a.Do(t, http.MethodPut, "/api/v1/config/agents/assistant", frame{"provider": "openai", "model": "fake-2", "base_url": e.llm.URL(),
		"api_key": "sk-new", "tools_profile": "minimal", "tools_allow": []string{"calculator"}})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	cfg = body["config"].(map[string]any)
	g.Expect(cfg).To(HaveKeyWithValue("model", "fake-2"))
	g.Expect(cfg).To(HaveKeyWithValue("key_source", "Secret assistant-model-key, key apiKey"))
	g.Expect(cfg).To(HaveKeyWithValue("tools_profile", "minimal"))
	st, err := os.Stat(filepath.Join(e.dir, "assistant-model-key.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the key's file is private")
	data, _ = os.ReadFile(filepath.Join(e.dir, "agents.yaml"))
	g.Expect(string(data)).To(ContainSubstring("model: fake-2"))
	g.Expect(string(data)).NotTo(ContainSubstring("sk-new"), "the key is in its Secret, not the Agent")

	e.llm.Script(fakellm.Turn{Text: "new model here"})
	status, body = e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"agent": "assistant", "chat_id": "tab1", "text": "hi"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("text", "new model here"))
	last := e.llm.Requests()[len(e.llm.Requests())-1]
	g.Expect(last.Model).To(Equal("fake-2"))
	g.Expect(last.Header.Get("Authorization")).To(Equal("Bearer sk-new"))
	g.Expect(last.Tools).To(ContainElement("calculator"))
	g.Expect(last.Tools).NotTo(ContainElement("bash"), "the new allow list")

	// Invalid: refused with the loader's reason, nothing changes.
	before, _ := os.ReadFile(filepath.Join(e.dir, "agents.yaml"))
	status, body = e.a.Do(t, http.MethodPut, "/api/v1/config/agents/assistant", frame{"provider": "openai", "model": "fake-3", "tools_profile": "everything"})
	g.Expect(status).To(Equal(http.StatusBadRequest), "%v", body)
	g.Expect(body["error"].(map[string]any)["message"]).To(ContainSubstring("everything"))
	after, _ := os.ReadFile(filepath.Join(e.dir, "agents.yaml"))
	g.Expect(string(after)).To(Equal(string(before)))
	status, body = e.a.Do(t, http.MethodPut, "/api/v1/config/agents/assistant", frame{"provider": "openai"})
	g.Expect(status).To(Equal(http.StatusBadRequest))
	g.Expect(errCode(body)).To(Equal(gateway.CodeBadRequest))

	// Another tenant sees the agent, and may not change it.
	b := gatewaytest.Client{URL: e.url, Key: keyB}
	status, body = b.Do(t, http.MethodGet, "/api/v1/config/agents/assistant", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body["config"]).To(HaveKeyWithValue("editable", false))
	status, body = b.Do(t, http.MethodPut, "/api/v1/config/agents/assistant", frame{"provider": "openai", "model": "x"})
	g.Expect(status).To(Equal(http.StatusForbidden), "%v", body)
	status, body = e.a.Do(t, http.MethodGet, "/api/v1/config/agents/nobody", nil)
	g.Expect(status).To(Equal(http.StatusNotFound))
	g.Expect(errCode(body)).To(Equal(gateway.CodeUnknownAgent))
}

// cutYAML splits a two-document YAML at its "---" line.
func cutYAML(s string) (string, string, bool) {
	for i := 0; i+4 <= len(s); i++ {
		if s[i:i+4] == "---\n" && (i == 0 || s[i-1] == '\n') {
			return s[:i], s[i+4:], true
		}
	}
	return s, "", false
}
