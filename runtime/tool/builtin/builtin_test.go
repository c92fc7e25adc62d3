package builtin

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/llmtask"
	"github.com/picobot/picobot/runtime/tool/policy"
)

func TestCoreToolsMatchThePolicyCatalog(t *testing.T) {
	g := NewWithT(t)
	set, err := New(Config{LLMTask: &llmtask.Config{Resolve: func(string, string) (llm.Provider, error) { return nil, nil }}})
	g.Expect(err).NotTo(HaveOccurred())
	defer set.Close()
	g.Expect(set.Registry.Names()).To(Equal([]string{
		"apply_patch", "bash", "calculator", "canvas", "content_search", "exec", "file_edit", "file_read", "file_search",
		"file_write", "http_request", "llm_task", "process", "pty", "todo", "web_fetch",
	}))
	// Every core tool is a name the operator's policy knows, so status and
	// runtime agree on the effective set.
	known := map[string]bool{}
	for _, n := range policy.DefaultCatalog().Tools() {
		known[n] = true
	}
	for _, d := range set.Registry.Definitions() {
		g.Expect(known).To(HaveKey(d.Name))
		var schema map[string]any
		g.Expect(json.Unmarshal(d.Parameters, &schema)).To(Succeed(), d.Name)
		g.Expect(schema["type"]).To(Equal("object"), d.Name)
		g.Expect(len(d.Description)).To(BeNumerically("<=", 400), "%s: descriptions travel with every request; keep them short", d.Name)
	}

	res, err := policy.Resolve(policy.DefaultCatalog(), policy.Spec{Profile: policy.ProfileCoding, Deny: []string{"pty"}}, "openai", "gpt-5.2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(set.For(res).Names()).To(Equal([]string{
		"apply_patch", "bash", "content_search", "exec", "file_edit", "file_read", "file_search", "file_write", "process",
	}))
}

// web_search joins the core tools only with a backend; one that cannot work
// (here a Brave backend without its key) is still offered and says why.
func TestWebSearchOnlyWhenConfigured(t *testing.T) {
	g := NewWithT(t)
	set, err := New(Config{WebSearch: &WebSearchConfig{
		Spec:       picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchBrave},
		MissingKey: `No Brave Search key: Secret "search" has no key "apiKey".`,
	}})
	g.Expect(err).NotTo(HaveOccurred())
	defer set.Close()
	g.Expect(set.Registry.Names()).To(ContainElement("web_search"))
	res := set.Registry.Execute(t.Context(), tool.Env{Workspace: t.TempDir()}, llm.ToolCall{ID: "1", Name: "web_search", Arguments: `{"query":"x"}`})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(Equal(`error: web_search (brave) failed: No Brave Search key: Secret "search" has no key "apiKey". The agent's owner must provide it; do not retry.`))

	bad, err := New(Config{WebSearch: &WebSearchConfig{
		Spec: picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "ftp://searxng"},
	}})
	g.Expect(err).NotTo(HaveOccurred())
	defer bad.Close()
	res = bad.Registry.Execute(t.Context(), tool.Env{Workspace: t.TempDir()}, llm.ToolCall{ID: "1", Name: "web_search", Arguments: `{"query":"x"}`})
	g.Expect(res.Content).To(ContainSubstring(`failed to use SearXNG base URL "ftp://searxng": refused: scheme "ftp" is not allowed`))
	g.Expect(res.Content).To(ContainSubstring("spec.tools.webSearch.baseURL"))
}
