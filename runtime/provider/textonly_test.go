package provider_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// In a chain whose first model sees images, a text-only fallback gets the
// request's images as notes: no image part reaches it, and the caller's
// request is not changed for the links before it.
func TestTextOnlyFallbackGetsNotes(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Script(fakellm.Turn{Status: 401}, fakellm.Turn{Text: "I cannot see it."})
	vision, err := provider.New(provider.Config{Provider: provider.Anthropic, Model: "seer", BaseURL: s.AnthropicURL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	text, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "blind", BaseURL: s.URL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	chain := provider.Fallback(provider.Named{Name: "anthropic/seer", Provider: vision}, provider.Named{Name: "openai/blind", Provider: provider.TextOnly(text)})

	msgs := []llm.Message{
		{Role: llm.RoleUser, Content: "look"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "browser", Arguments: "{}"}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Name: "browser", Content: "Took a screenshot.", Images: []llm.Image{{MediaType: "image/png", Data: []byte("\x89PNG....")}}},
	}
	resp, err := chain.Complete(context.Background(), llm.Request{Messages: msgs}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Model).To(Equal("openai/blind"))
	reqs := s.Requests()
	g.Expect(reqs).To(HaveLen(2))
	seen := 0
	for _, m := range reqs[0].Messages {
		seen += m.Images
	}
	g.Expect(seen).To(Equal(1), "the vision model got the image")
	for _, m := range reqs[1].Messages {
		g.Expect(m.Images).To(BeZero())
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	g.Expect(last.Role).To(Equal("tool"))
	g.Expect(last.Content).To(Equal("Took a screenshot.\n[image image/png, 8 bytes, not shown: this model does not accept images]"))
	g.Expect(msgs[2].Images).To(HaveLen(1), "the caller's messages are not modified")
}
