package agentspec

import (
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// visionModels are name fragments of models known to accept images, matched
// against the lower-cased model name (after any "vendor/" prefix a router
// such as OpenRouter or LiteLLM adds). A model the table does not know is
// taken as text-only: sending an image to a text-only endpoint fails the
// whole request, while a vision model taken as text-only only loses the
// picture (and spec.model.vision says otherwise).
var visionModels = []string{
	"gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-4-vision", "gpt-5", "chatgpt-4o",
	"o1", "o3", "o4",
	"claude-3", "claude-sonnet-4", "claude-opus-4", "claude-haiku-4", "claude-4",
	"gemini", "gemma-3", "pixtral", "llava", "qwen-vl", "qwen2-vl", "qwen2.5-vl", "qwen3-vl",
	"llama-3.2-11b-vision", "llama-3.2-90b-vision", "llama-4", "grok-2-vision", "grok-4",
	"minicpm-v", "internvl", "glm-4v", "glm-4.5v",
}

// textOnlyModels are fragments that win over visionModels ("gpt-5" matches
// gpt-5-codex-mini too, which is fine; "o1-mini" and "o3-mini" are text only).
var textOnlyModels = []string{"o1-mini", "o1-preview", "o3-mini", "gpt-4o-audio", "gpt-4o-realtime", "gpt-4o-transcribe", "gpt-4o-mini-tts", "gpt-4o-search"}

// AcceptsImages reports whether ref's model accepts images: its vision
// field when set, else the table of known vision models.
func AcceptsImages(ref picobotv1alpha1.ModelRef) bool {
	if ref.Vision != nil {
		return *ref.Vision
	}
	name := strings.ToLower(ref.Model)
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	for _, f := range textOnlyModels {
		if strings.HasPrefix(name, f) {
			return false
		}
	}
	for _, f := range visionModels {
		if strings.HasPrefix(name, f) || strings.Contains(name, "-"+f) {
			return true
		}
	}
	return false
}

// ImageModelRefs are the models the image tool may ask, in order: the
// Agent's spec.model.imageModel and its fallbacks when set (taken to accept
// images whatever their vision field says: that is what they are for), else
// those of spec.model and its fallbacks that accept images; nil when none
// can see images, and the image tool is then not offered. It is decided from
// the spec alone, so the operator's status.effectiveTools and the runtime
// agree; an Agent on the namespace default model gets no image tool.
func ImageModelRefs(spec *picobotv1alpha1.ModelSpec) []picobotv1alpha1.ModelRef {
	if spec == nil {
		return nil
	}
	if spec.ImageModel != nil {
		refs := append([]picobotv1alpha1.ModelRef{spec.ImageModel.ModelRef}, spec.ImageModel.Fallbacks...)
		sees := true
		for i := range refs {
			refs[i].Vision = &sees
		}
		return refs
	}
	var refs []picobotv1alpha1.ModelRef
	for _, ref := range append([]picobotv1alpha1.ModelRef{spec.ModelRef}, spec.Fallbacks...) {
		if AcceptsImages(ref) {
			refs = append(refs, ref)
		}
	}
	return refs
}

// ModelRefs are every model an Agent names (its model, the fallbacks, the
// image model and its fallbacks), so API keys and indexes cover them all.
func ModelRefs(spec *picobotv1alpha1.ModelSpec) []picobotv1alpha1.ModelRef {
	if spec == nil {
		return nil
	}
	refs := append([]picobotv1alpha1.ModelRef{spec.ModelRef}, spec.Fallbacks...)
	if spec.ImageModel != nil {
		refs = append(refs, spec.ImageModel.ModelRef)
		refs = append(refs, spec.ImageModel.Fallbacks...)
	}
	return refs
}
