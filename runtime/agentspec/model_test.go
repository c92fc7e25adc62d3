package agentspec_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
)

// secrets serves the given Secrets by name.
func secrets(ss ...*corev1.Secret) agentspec.SecretLookup {
	return func(name string) *corev1.Secret {
		for _, s := range ss {
			if s.Name == name {
				return s
			}
		}
		return nil
	}
}

func keyRef(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func ptr[T any](v T) *T { return &v }

var (
	// llm has the key apiKey in data.
	llm = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "llm"}, Data: map[string][]byte{"apiKey": []byte("sk-1")}}
	// manifest has its key in stringData only, as a Secret read from a file.
	manifest = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "manifest"}, StringData: map[string]string{"apiKey": "sk-2"}}
	// other has a key of another name.
	other = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: map[string][]byte{"token": []byte("t")}}
	// demo holds what samples write when no key was given.
	demo = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Data: map[string][]byte{
		"openai": []byte("placeholder-set-OPENAI_API_KEY"), "empty": []byte(" \n"), "angle": []byte("<your OpenAI key>"),
		"sk": []byte("sk-proj-TODOlooking-but-real")}}
)

func TestCheckModelRef(t *testing.T) {
	lookup := secrets(llm, manifest, other, demo)
	cases := []struct {
		name    string
		ref     picobotv1alpha1.ModelRef
		reason  string
		problem string
	}{
		{name: "no key needed", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "local"}},
		{name: "key in data", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("llm", "apiKey")}},
		{name: "key in stringData", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("manifest", "apiKey")}},
		{name: "Secret missing", ref: picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "c", APIKeySecretRef: keyRef("gone", "apiKey")},
			reason: picobotv1alpha1.ReasonSecretNotFound, problem: `Secret "gone" (API key of anthropic/c) not found`},
		{name: "key missing", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("other", "apiKey")},
			reason: picobotv1alpha1.ReasonSecretKeyNotFound, problem: `Secret "other" has no key "apiKey" (API key of openai/m)`},
		{name: "placeholder", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("demo", "openai")},
			reason: picobotv1alpha1.ReasonPlaceholderKey, problem: `Secret "demo" key "openai" (API key of openai/m) holds a placeholder ("placeholder-set-OPENAI_API_KEY"), not an API key`},
		{name: "empty (the operator's cache empties every value)", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("demo", "empty")}},
		{name: "angle brackets", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("demo", "angle")},
			reason: picobotv1alpha1.ReasonPlaceholderKey, problem: `Secret "demo" key "angle" (API key of openai/m) holds a placeholder ("<your OpenAI key>"), not an API key`},
		{name: "a real-looking key with a placeholder word inside", ref: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("demo", "sk")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			reason, problem := agentspec.CheckModelRef(tc.ref, lookup)
			g.Expect(reason).To(Equal(tc.reason))
			g.Expect(problem).To(Equal(tc.problem))
		})
	}
}

func TestResolveModel(t *testing.T) {
	lookup := secrets(llm, manifest, other)
	primary := picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt", BaseURL: "http://llm.local/v1", APIKeySecretRef: keyRef("llm", "apiKey")}
	missing := picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("gone", "apiKey")}
	keyless := picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "k", APIKeySecretRef: keyRef("other", "apiKey")}
	defaults := func(data map[string]string) *corev1.ConfigMap { return &corev1.ConfigMap{Data: data} }
	cases := []struct {
		name     string
		spec     *picobotv1alpha1.ModelSpec
		defaults *corev1.ConfigMap
		want     *picobotv1alpha1.EffectiveModel
		reason   string
		message  string
	}{
		{name: "spec.model with its key and base URL", spec: &picobotv1alpha1.ModelSpec{ModelRef: primary},
			want:   &picobotv1alpha1.EffectiveModel{Provider: "openai", Model: "gpt", BaseURL: "http://llm.local/v1", Source: picobotv1alpha1.ModelSourceSpec, ContextWindow: 128000},
			reason: picobotv1alpha1.ReasonResolvedFromSpec, message: "Using openai/gpt from spec.model"},
		{name: "spec.model's context window", spec: &picobotv1alpha1.ModelSpec{ModelRef: primary, ContextWindow: ptr(int32(32000))},
			want:   &picobotv1alpha1.EffectiveModel{Provider: "openai", Model: "gpt", BaseURL: "http://llm.local/v1", Source: picobotv1alpha1.ModelSourceSpec, ContextWindow: 32000},
			reason: picobotv1alpha1.ReasonResolvedFromSpec, message: "Using openai/gpt from spec.model"},
		{name: "first usable fallback, with the spec's window and the problems before it",
			spec: &picobotv1alpha1.ModelSpec{ModelRef: missing, ContextWindow: ptr(int32(64000)),
				Fallbacks: []picobotv1alpha1.ModelRef{keyless, {Provider: "anthropic", Model: "f1", APIKeySecretRef: keyRef("manifest", "apiKey")}, primary}},
			want: &picobotv1alpha1.EffectiveModel{Provider: "anthropic", Model: "f1", Source: picobotv1alpha1.ModelSourceFallback,
				FallbackIndex: ptr(int32(1)), ContextWindow: 64000},
			reason: picobotv1alpha1.ReasonResolvedFromFallback,
			message: `Using fallback 1 anthropic/f1 because spec.model: Secret "gone" (API key of openai/m) not found; ` +
				`fallbacks[0]: Secret "other" has no key "apiKey" (API key of anthropic/k)`},
		{name: "nothing usable: spec.model's reason, every problem",
			spec:   &picobotv1alpha1.ModelSpec{ModelRef: keyless, Fallbacks: []picobotv1alpha1.ModelRef{missing}},
			reason: picobotv1alpha1.ReasonSecretKeyNotFound,
			message: `No usable model: spec.model: Secret "other" has no key "apiKey" (API key of anthropic/k); ` +
				`fallbacks[0]: Secret "gone" (API key of openai/m) not found`},
		{name: "an unusable spec.model does not fall back to the namespace default",
			spec: &picobotv1alpha1.ModelSpec{ModelRef: missing}, defaults: defaults(map[string]string{"provider": "openai", "model": "d"}),
			reason: picobotv1alpha1.ReasonSecretNotFound, message: `No usable model: spec.model: Secret "gone" (API key of openai/m) not found`},
		{name: "no spec.model and no namespace default", reason: picobotv1alpha1.ReasonNoModelConfigured,
			message: `spec.model is not set and the namespace has no ConfigMap "picobot-defaults" with a default model`},
		{name: "namespace default", defaults: defaults(map[string]string{"provider": "anthropic", "model": "d", "baseURL": "http://proxy/v1",
			"apiKeySecret": "llm", "contextWindow": "1024"}),
			want: &picobotv1alpha1.EffectiveModel{Provider: "anthropic", Model: "d", BaseURL: "http://proxy/v1",
				Source: picobotv1alpha1.ModelSourceNamespaceDefault, ContextWindow: 1024},
			reason: picobotv1alpha1.ReasonResolvedFromNamespaceDefault, message: `Using anthropic/d from ConfigMap "picobot-defaults"`},
		{name: "namespace default's key is apiKey unless named", defaults: defaults(map[string]string{"provider": "openai", "model": "d", "apiKeySecret": "other"}),
			reason: picobotv1alpha1.ReasonSecretKeyNotFound, message: `Namespace default: Secret "other" has no key "apiKey" (API key of openai/d)`},
		{name: "namespace default with a named key", defaults: defaults(map[string]string{"provider": "openai", "model": "d", "apiKeySecret": "other", "apiKeySecretKey": "token"}),
			want:   &picobotv1alpha1.EffectiveModel{Provider: "openai", Model: "d", Source: picobotv1alpha1.ModelSourceNamespaceDefault, ContextWindow: 128000},
			reason: picobotv1alpha1.ReasonResolvedFromNamespaceDefault, message: `Using openai/d from ConfigMap "picobot-defaults"`},
		{name: "namespace default's Secret missing", defaults: defaults(map[string]string{"provider": "openai", "model": "d", "apiKeySecret": "gone"}),
			reason: picobotv1alpha1.ReasonSecretNotFound, message: `Namespace default: Secret "gone" (API key of openai/d) not found`},
		{name: "namespace default without provider", defaults: defaults(map[string]string{"model": "d"}),
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: `ConfigMap "picobot-defaults": provider "" is not one of openai, anthropic`},
		{name: "namespace default of an unknown provider", defaults: defaults(map[string]string{"provider": "gemini", "model": "d"}),
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: `ConfigMap "picobot-defaults": provider "gemini" is not one of openai, anthropic`},
		{name: "namespace default without model", defaults: defaults(map[string]string{"provider": "openai"}),
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: `ConfigMap "picobot-defaults": key model is empty`},
		{name: "namespace default window below 1024", defaults: defaults(map[string]string{"provider": "openai", "model": "d", "contextWindow": "1023"}),
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: `ConfigMap "picobot-defaults": contextWindow "1023" is not a whole number of at least 1024`},
		{name: "namespace default window beyond int32", defaults: defaults(map[string]string{"provider": "openai", "model": "d", "contextWindow": "4294967296"}),
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: `ConfigMap "picobot-defaults": contextWindow "4294967296" is not a whole number of at least 1024`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := agentspec.ResolveModel(tc.spec, tc.defaults, lookup)
			g.Expect(r.Effective).To(Equal(tc.want))
			g.Expect(r.Reason).To(Equal(tc.reason))
			g.Expect(r.Message).To(Equal(tc.message))
		})
	}
}
