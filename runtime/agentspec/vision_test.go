package agentspec_test

import (
	"testing"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/tool/policy"
)

func TestAcceptsImages(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		model  string
		vision *bool
		want   bool
	}{
		{"gpt-4o", nil, true},
		{"gpt-4o-mini", nil, true},
		{"gpt-4.1-nano", nil, true},
		{"gpt-5.2", nil, true},
		{"o3", nil, true},
		{"o3-mini", nil, false},
		{"o1-mini", nil, false},
		{"gpt-4o-audio-preview", nil, false},
		{"gpt-3.5-turbo", nil, false},
		{"claude-sonnet-4-5", nil, true},
		{"claude-3-5-sonnet-20241022", nil, true},
		{"anthropic/claude-opus-4.1", nil, true},
		{"Qwen/Qwen2.5-VL-7B-Instruct", nil, true},
		{"meta-llama/Llama-3.1-8B-Instruct", nil, false},
		{"deepseek-chat", nil, false},
		{"test-model", nil, false},
		{"test-model", &yes, true},
		{"gpt-4o", &no, false},
	}
	for _, tc := range cases {
		got := agentspec.AcceptsImages(picobotv1alpha1.ModelRef{Provider: "openai", Model: tc.model, Vision: tc.vision})
		NewWithT(t).Expect(got).To(Equal(tc.want), "%s vision=%v", tc.model, tc.vision)
	}
}

// The image tool's models come from the spec alone: the image model and its
// fallbacks (taken to see images), else the agent's models that see
// images; and the policy denies image when there are none, so the
// operator's status and the runtime agree.
func TestImageModelRefs(t *testing.T) {
	g := NewWithT(t)
	no := false
	text := picobotv1alpha1.ModelRef{Provider: "openai", Model: "deepseek-chat"}
	seer := picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "claude-haiku-4-5"}
	eye := picobotv1alpha1.ModelRef{Provider: "openai", Model: "my-vlm", Vision: &no}

	g.Expect(agentspec.ImageModelRefs(nil)).To(BeNil(), "the namespace default")
	g.Expect(agentspec.ImageModelRefs(&picobotv1alpha1.ModelSpec{ModelRef: text})).To(BeNil())
	g.Expect(agentspec.ImageModelRefs(&picobotv1alpha1.ModelSpec{ModelRef: text, Fallbacks: []picobotv1alpha1.ModelRef{text, seer}})).
		To(Equal([]picobotv1alpha1.ModelRef{seer}))
	refs := agentspec.ImageModelRefs(&picobotv1alpha1.ModelSpec{ModelRef: seer,
		ImageModel: &picobotv1alpha1.ImageModelSpec{ModelRef: eye, Fallbacks: []picobotv1alpha1.ModelRef{text}}})
	g.Expect(refs).To(HaveLen(2))
	g.Expect(refs[0].Model).To(Equal("my-vlm"))
	g.Expect(refs[1].Model).To(Equal("deepseek-chat"))
	for _, r := range refs {
		g.Expect(agentspec.AcceptsImages(r)).To(BeTrue(), "an image model is there to see images")
	}
	g.Expect(*eye.Vision).To(BeFalse(), "the spec is not modified")

	resolve := func(m *picobotv1alpha1.ModelSpec, tools *picobotv1alpha1.ToolsSpec) []string {
		r, err := policy.Resolve(policy.DefaultCatalog(), agentspec.ToolPolicy(&picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{Model: m, Tools: tools}}), "", "")
		g.Expect(err).NotTo(HaveOccurred())
		return r.Tools
	}
	coding := &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "coding"}}
	g.Expect(resolve(&picobotv1alpha1.ModelSpec{ModelRef: seer}, coding)).To(ContainElement("image"), "OpenClaw's coding profile names it")
	g.Expect(resolve(&picobotv1alpha1.ModelSpec{ModelRef: seer}, nil)).To(ContainElement("image"))
	g.Expect(resolve(&picobotv1alpha1.ModelSpec{ModelRef: text}, nil)).NotTo(ContainElement("image"))
	g.Expect(resolve(nil, nil)).NotTo(ContainElement("image"))
	g.Expect(resolve(&picobotv1alpha1.ModelSpec{ModelRef: text, ImageModel: &picobotv1alpha1.ImageModelSpec{ModelRef: eye}}, nil)).To(ContainElement("image"))
}

// Every model an Agent names has its key read: the image model's too.
func TestModelRefs(t *testing.T) {
	m := &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Model: "a"}, Fallbacks: []picobotv1alpha1.ModelRef{{Model: "b"}},
		ImageModel: &picobotv1alpha1.ImageModelSpec{ModelRef: picobotv1alpha1.ModelRef{Model: "c"}, Fallbacks: []picobotv1alpha1.ModelRef{{Model: "d"}}}}
	var names []string
	for _, r := range agentspec.ModelRefs(m) {
		names = append(names, r.Model)
	}
	NewWithT(t).Expect(names).To(Equal([]string{"a", "b", "c", "d"}))
}
