package builtin

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool/llmtask"
	"github.com/picobot/picobot/runtime/tool/policy"
)

func TestCoreToolsMatchThePolicyCatalog(t *testing.T) {
	g := NewWithT(t)
	set, err := New(Config{LLMTask: &llmtask.Config{Resolve: func(string, string) (llm.Provider, error) { return nil, nil }}})
	g.Expect(err).NotTo(HaveOccurred())
	defer set.Close()
	g.Expect(set.Registry.Names()).To(Equal([]string{
		"apply_patch", "bash", "calculator", "content_search", "exec", "file_edit", "file_read", "file_search",
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
