package llmtask

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
)

func setup(t *testing.T, allowed ...string) (*fakellm.Server, *tool.Registry) {
	t.Helper()
	s := fakellm.New()
	t.Cleanup(s.Close)
	resolve := func(prov, model string) (llm.Provider, error) {
		base := s.URL()
		if prov == provider.Anthropic {
			base = s.AnthropicURL()
		}
		return provider.New(provider.Config{Provider: prov, Model: model, BaseURL: base, APIKey: "k"})
	}
	r, err := tool.NewRegistry(New(Config{DefaultProvider: "openai", DefaultModel: "gpt-5.2", AllowedModels: allowed, Resolve: resolve}))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return s, r
}

func run(r *tool.Registry, args map[string]any) tool.Result {
	raw, _ := json.Marshal(args)
	return r.Execute(context.Background(), tool.Env{}, llm.ToolCall{Name: "llm_task", Arguments: string(raw)})
}

var intentSchema = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"intent": map[string]any{"type": "string"}, "urgent": map[string]any{"type": "boolean"}},
	"required":             []any{"intent", "urgent"},
	"additionalProperties": false,
}

func TestLLMTaskValidJSON(t *testing.T) {
	for _, prov := range []string{provider.OpenAI, provider.Anthropic} {
		t.Run(prov, func(t *testing.T) {
			g := NewWithT(t)
			s, r := setup(t)
			s.Script(fakellm.Turn{Text: "```json\n{\"intent\": \"refund\", \"urgent\": true}\n```"})
			res := run(r, map[string]any{"prompt": "Classify the email.", "input": map[string]any{"subject": "Money back!"},
				"schema": intentSchema, "provider": prov, "model": "m1"})
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			g.Expect(res.Content).To(MatchJSON(`{"intent":"refund","urgent":true}`))
			req := s.Requests()[0]
			g.Expect(req.Tools).To(BeEmpty(), "no tools in an llm_task call")
			g.Expect(req.Model).To(Equal("m1"))
			g.Expect(req.Messages[len(req.Messages)-1].Content).To(ContainSubstring(`"subject": "Money back!"`))
			if prov == provider.OpenAI {
				g.Expect(req.JSONMode).To(BeTrue())
			}
		})
	}
}

func TestLLMTaskRepairsOnceThenFails(t *testing.T) {
	g := NewWithT(t)
	s, r := setup(t)
	s.Script(fakellm.Turn{Text: `{"intent": "refund"}`}, fakellm.Turn{Text: `{"intent": "refund", "urgent": false}`})
	res := run(r, map[string]any{"prompt": "Classify.", "schema": intentSchema})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(MatchJSON(`{"intent":"refund","urgent":false}`))
	g.Expect(s.Requests()[1].Messages[len(s.Requests()[1].Messages)-1].Content).To(ContainSubstring("does not match the schema"))

	s.Script(fakellm.Turn{Text: "Sure! Here it is"}, fakellm.Turn{Text: "still not json"})
	res = run(r, map[string]any{"prompt": "Classify."})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("llm_task answer rejected: not valid JSON"))
}

func TestLLMTaskRefusals(t *testing.T) {
	g := NewWithT(t)
	s, r := setup(t, "openai/gpt-5.2")
	res := run(r, map[string]any{"prompt": "x", "model": "gpt-4o"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(Equal(`error: model "openai/gpt-4o" is not allowed for llm_task; allowed: openai/gpt-5.2`))
	res = run(r, map[string]any{"prompt": "x", "schema": map[string]any{"type": 5}})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("schema is not a JSON Schema"))
	res = run(r, map[string]any{"prompt": "x", "maxTokens": 0.5})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(s.Requests()).To(BeEmpty(), "nothing refused reaches the model")

	s.Script(fakellm.Turn{Status: 400, ErrorBody: "bad request"})
	res = run(r, map[string]any{"prompt": "x"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("llm_task call to openai/gpt-5.2 failed"))
}
