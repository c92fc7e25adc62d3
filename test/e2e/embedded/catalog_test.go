package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// catalogAgents are one Agent per tools profile (and an allowlist, and
// delegate edges past a profile), keyed by name: the spec lines after
// the model.
var catalogAgents = map[string]string{
	"unset":     "",
	"full":      "  tools: {profile: full}\n",
	"minimal":   "  tools: {profile: minimal}\n",
	"coding":    "  tools: {profile: coding}\n",
	"messaging": "  tools: {profile: messaging}\n",
	"allowlist": "  tools: {allow: [calculator, todo, web_fetch]}\n",
	"lead":      "  tools: {profile: minimal}\n  delegates: [{name: helper, agentRef: {name: unset}}]\n",
	"seer":      "  tools: {profile: coding}\n",
	// The root agent: the only one offered reload_config and gateway.
	"boss": "  role: root\n",
}

// seeing are the catalog agents whose model accepts images (vision: true),
// so they get the image tool.
var seeing = map[string]bool{"seer": true}

// TestCatalogTellsTheTruth runs `picobot serve` with an Agent per tools
// profile and, for each, compares three lists: the effective tools the
// operator would publish in status.effectiveTools (the same resolution over
// the catalog), what /api/v1/agents says, and the tool names the model
// really received in a turn. They must be equal: a catalog entry without
// an implementation, or a tool the policy does not show, fails here.
func TestCatalogTellsTheTruth(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	names := make([]string, 0, len(catalogAgents))
	for name := range catalogAgents {
		names = append(names, name)
	}
	slices.Sort(names)
	var docs []string
	status := map[string][]string{}
	for _, name := range names {
		doc := fmt.Sprintf(`apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: %s}
spec:
  instructions: You are %s.
  model: {provider: openai, model: fake, vision: %t, baseURL: %s, apiKeySecretRef: {name: model-api-key, key: apiKey}}
%s`, name, name, seeing[name], llm.URL(), catalogAgents[name])
		docs = append(docs, doc)
		var a picobotv1alpha1.Agent
		g.Expect(yaml.UnmarshalStrict([]byte(doc), &a)).To(Succeed())
		r, err := policy.Resolve(policy.DefaultCatalog(), agentspec.ToolPolicy(&a), "openai", "fake")
		g.Expect(err).NotTo(HaveOccurred())
		status[name] = r.Tools
	}
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(strings.Join(docs, "---\n")), 0o600)).To(Succeed())
	p := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")

	res, err := http.Get(p.url + "/api/v1/agents")
	g.Expect(err).NotTo(HaveOccurred())
	var listed struct {
		Agents []struct {
			Name  string   `json:"name"`
			Tools []string `json:"tools"`
		} `json:"agents"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&listed)).To(Succeed())
	_ = res.Body.Close()
	api := map[string][]string{}
	for _, a := range listed.Agents {
		api[a.Name] = sorted(a.Tools)
	}

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			body, _ := json.Marshal(map[string]string{"agent": name, "chat_id": "catalog", "text": "hello"})
			res, err := http.Post(p.url+"/api/v1/send", "application/json", bytes.NewReader(body))
			g.Expect(err).NotTo(HaveOccurred())
			_ = res.Body.Close()
			g.Expect(res.StatusCode).To(Equal(http.StatusOK))
			var sent []string
			for _, r := range llm.Requests() {
				if strings.HasPrefix(r.System, "You are "+name+".") {
					sent = sorted(r.Tools)
				}
			}
			g.Expect(sent).NotTo(BeNil(), "the model was called")
			g.Expect(api[name]).To(Equal(status[name]), "/api/v1/agents against the status the operator computes")
			g.Expect(sent).To(Equal(status[name]), "the tools the model received against the status")
		})
	}
	g.Expect(status["minimal"]).To(Equal([]string{"session_status"}))
	g.Expect(status["seer"]).To(ContainElement("image"), "a model that sees images gets the image tool")
	g.Expect(status["coding"]).NotTo(ContainElement("image"), "a text-only model does not")
	g.Expect(status["lead"]).To(Equal([]string{"agent_task", "delegate", "session_status"}))
	g.Expect(status["boss"]).To(ContainElements("reload_config", "gateway"), "the root agent gets the config tools")
	for name, tools := range status {
		if name != "boss" {
			g.Expect(tools).NotTo(ContainElement("gateway"), "%s is not the root agent", name)
			g.Expect(tools).NotTo(ContainElement("reload_config"), "%s is not the root agent", name)
		}
		g.Expect(tools).NotTo(ContainElement("emit_signal"), "%s: emit_signal is for background runs only", name)
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}
