package agenthost_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// The image tool is offered only to an agent with a model that can see
// images: its image model (whose key must be there), or its own model when
// that accepts images (spec.model.vision, or a model name the table
// knows); the loop shows tools' images to the main model on the same rule.
func TestImageToolOnlyWithAModelThatSees(t *testing.T) {
	f := newFixture(t)
	h := f.host(secret("llm", "apiKey", "sk-main"), secret("eye", "apiKey", "sk-eye"))
	main := func(model string, vision *bool) picobotv1alpha1.ModelRef {
		return picobotv1alpha1.ModelRef{Provider: "openai", Model: model, BaseURL: f.llm.URL(), APIKeySecretRef: keyRef("llm", "apiKey"), Vision: vision}
	}
	eye := &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "eye-model",
		BaseURL: f.llm.AnthropicURL(), APIKeySecretRef: keyRef("eye", "apiKey")}}
	cases := []struct {
		name       string
		model      picobotv1alpha1.ModelSpec
		tool, sees bool
		answer     string
	}{
		{name: "a text-only model", model: picobotv1alpha1.ModelSpec{ModelRef: main("test-model", nil)}},
		{name: "vision: false wins over the table", model: picobotv1alpha1.ModelSpec{ModelRef: main("gpt-4o", ptr.To(false))}},
		{name: "vision: true", model: picobotv1alpha1.ModelSpec{ModelRef: main("test-model", ptr.To(true))}, tool: true, sees: true},
		{name: "a vision model the table knows", model: picobotv1alpha1.ModelSpec{ModelRef: main("gpt-4.1-mini", nil)}, tool: true, sees: true},
		{name: "a text-only model with an image model", model: picobotv1alpha1.ModelSpec{ModelRef: main("test-model", nil), ImageModel: eye}, tool: true},
		{name: "an image model without its key (the tool says so)", model: picobotv1alpha1.ModelSpec{ModelRef: main("test-model", nil),
			ImageModel: &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "eye", APIKeySecretRef: keyRef("missing", "k")}}}, tool: true,
			answer: `error: the image model openai/eye did not answer: agent seer has no usable model: no usable image model: openai/eye has no API key (Secret "missing", key "k")`},
		{name: "a vision fallback of a text-only model", model: picobotv1alpha1.ModelSpec{ModelRef: main("test-model", nil),
			Fallbacks: []picobotv1alpha1.ModelRef{main("claude-sonnet-4-5", nil)}}, tool: true},
		{name: "an image model whose fallback has its key", model: picobotv1alpha1.ModelSpec{ModelRef: main("test-model", nil),
			ImageModel: &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "eye", APIKeySecretRef: keyRef("missing", "k")},
				Fallbacks: []picobotv1alpha1.ModelRef{eye.ModelRef}}}, tool: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			b := build(t, h, agentWith("seer", picobotv1alpha1.AgentSpec{Model: &tc.model}))
			if tc.tool {
				g.Expect(b.Info.Tools).To(ContainElement("image"))
			} else {
				g.Expect(b.Info.Tools).NotTo(ContainElement("image"), "not declared to the model")
				_, ok := b.Loop.Tools.Get("image")
				g.Expect(ok).To(BeFalse())
			}
			g.Expect(b.Loop.Images.Accept).To(Equal(tc.sees))
			// The operator's status says the same of image.
			res, err := policy.Resolve(policy.DefaultCatalog(), agentspec.ToolPolicy(agentWith("seer", picobotv1alpha1.AgentSpec{Model: &tc.model})), "openai", tc.model.Model)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(slices.Contains(res.Tools, "image")).To(Equal(tc.tool))
			if tc.answer != "" {
				ws := t.TempDir()
				g.Expect(os.WriteFile(filepath.Join(ws, "dot.png"), grayPNG(t), 0o600)).To(Succeed())
				out := b.Loop.Tools.Execute(context.Background(), tool.Env{Workspace: ws}, llm.ToolCall{ID: "c", Name: "image", Arguments: `{"image":"dot.png"}`})
				g.Expect(out.IsError).To(BeTrue())
				g.Expect(out.Content).To(Equal(tc.answer))
			}
		})
	}

	t.Run("the policy can still deny it", func(t *testing.T) {
		b := build(t, h, agentWith("seer", picobotv1alpha1.AgentSpec{Model: &picobotv1alpha1.ModelSpec{ModelRef: main("test-model", nil), ImageModel: eye},
			Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Deny: []string{"image"}}}}))
		NewWithT(t).Expect(b.Info.Tools).NotTo(ContainElement("image"))
	})
}

// The image tool of an agent whose own model is text-only asks the image
// model, on its own protocol and with its own key, while the main model's
// conversation carries only text.
func TestImageToolUsesTheImageModel(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	h := f.host(secret("llm", "apiKey", "sk-main"), secret("eye", "apiKey", "sk-eye"))
	b := build(t, h, agentWith("seer", picobotv1alpha1.AgentSpec{Model: &picobotv1alpha1.ModelSpec{
		ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "test-model", BaseURL: f.llm.URL(), APIKeySecretRef: keyRef("llm", "apiKey")},
		ImageModel: &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "eye-model",
			BaseURL: f.llm.AnthropicURL(), APIKeySecretRef: keyRef("eye", "apiKey")}},
	}}))
	ws := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(ws, "dot.png"), grayPNG(t), 0o600)).To(Succeed())

	f.llm.Script(fakellm.Turn{Text: "A grey square."})
	res := b.Loop.Tools.Execute(context.Background(), tool.Env{Workspace: ws}, llm.ToolCall{ID: "c1", Name: "image", Arguments: `{"image":"dot.png"}`})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("\nA grey square.\n<<<END_EXTERNAL_UNTRUSTED_CONTENT>>>\n\n[dot.png: image/png"))
	reqs := f.llm.Requests()
	g.Expect(reqs).To(HaveLen(1))
	g.Expect(reqs[0].Protocol).To(Equal(fakellm.ProtocolAnthropic))
	g.Expect(reqs[0].Model).To(Equal("eye-model"))
	g.Expect(reqs[0].Header.Get("X-Api-Key")).To(Equal("sk-eye"), "the image model's own key")
	g.Expect(reqs[0].Messages[0].Images).To(Equal(1))
}

func grayPNG(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	NewWithT(t).Expect(png.Encode(&buf, image.NewGray(image.Rect(0, 0, 8, 8)))).To(Succeed())
	return buf.Bytes()
}
