// Package agentspec holds the rules that turn an Agent resource into what a
// runtime uses, shared by the operator (which publishes them in status) and
// embedded mode (which applies them to manifests from a folder), so both modes
// decide the same way.
package agentspec

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// DefaultContextWindow applies when neither the Agent nor the namespace default
// names one: 128K tokens.
const DefaultContextWindow = 128000

// SecretLookup returns the named Secret of the Agent's namespace, or nil.
type SecretLookup func(name string) *corev1.Secret

// ModelResolution is the outcome of choosing an Agent's model; it is computed by
// resolveModel (pure, given the lookups) and turned into status by
// modelCondition.
type ModelResolution struct {
	// Effective is the chosen model; nil when none is usable.
	Effective *picobotv1alpha1.EffectiveModel
	// Reason is a condition reason constant (ReasonResolvedFromSpec, ...).
	Reason string
	// Message explains the choice, or what is missing.
	Message string
	// Ref is the chosen model as a reference, API key included (the
	// effective model, a status field, names no Secret).
	Ref *picobotv1alpha1.ModelRef
}

// CheckModelRef says why ref is unusable, or "" when it is usable.
func CheckModelRef(ref picobotv1alpha1.ModelRef, secrets SecretLookup) (reason, problem string) {
	if ref.APIKeySecretRef == nil {
		return "", ""
	}
	sel := ref.APIKeySecretRef
	s := secrets(sel.Name)
	if s == nil {
		return picobotv1alpha1.ReasonSecretNotFound, fmt.Sprintf("Secret %q (API key of %s/%s) not found", sel.Name, ref.Provider, ref.Model)
	}
	if !hasKey(s, sel.Key) {
		return picobotv1alpha1.ReasonSecretKeyNotFound, fmt.Sprintf("Secret %q has no key %q (API key of %s/%s)", sel.Name, sel.Key, ref.Provider, ref.Model)
	}
	if why := placeholder(keyValue(s, sel.Key)); why != "" {
		return picobotv1alpha1.ReasonPlaceholderKey, fmt.Sprintf("Secret %q key %q (API key of %s/%s) %s, not an API key", sel.Name, sel.Key, ref.Provider, ref.Model, why)
	}
	return "", ""
}

// placeholderPrefixes start the values samples, charts and docs write where
// a key goes (compared in lower case).
var placeholderPrefixes = []string{"placeholder", "changeme", "change-me", "change_me", "your-", "your_", "<", "xxx", "todo", "replace"}

// IsPlaceholderKey reports whether v is what samples and docs write where
// an API key goes ("placeholder-set-OPENAI_API_KEY", "changeme", "<your
// key>", ...). Such a value is no secret: the operator's cache, which drops
// every other Secret value, keeps it so that this check still works there.
// Empty is not reported: a stripped value is empty too.
func IsPlaceholderKey(v string) bool {
	t := strings.ToLower(strings.TrimSpace(v))
	for _, p := range placeholderPrefixes {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// placeholder says why v is no API key, or "" when it may be one. A check
// on the value's form only: whether a key works is for the provider to say.
func placeholder(v string) string {
	if !IsPlaceholderKey(v) {
		return ""
	}
	shown := strings.TrimSpace(v)
	if len(shown) > 40 {
		shown = shown[:40] + "…"
	}
	return fmt.Sprintf("holds a placeholder (%q)", shown)
}

// keyValue is the value of key in data or stringData.
func keyValue(s *corev1.Secret, key string) string {
	if v, ok := s.Data[key]; ok {
		return string(v)
	}
	return s.StringData[key]
}

func effectiveOf(ref picobotv1alpha1.ModelRef, src picobotv1alpha1.ModelSource, window int32) *picobotv1alpha1.EffectiveModel {
	return &picobotv1alpha1.EffectiveModel{Provider: ref.Provider, Model: ref.Model, BaseURL: ref.BaseURL, Source: src, ContextWindow: window}
}

// ResolveModel picks the Agent's effective model: spec.model when usable, else
// the first usable fallback, else nothing; with no spec.model, the namespace
// default. "No model configured" and "configured but its Secret is missing" get
// different reasons so users can tell them apart.
func ResolveModel(spec *picobotv1alpha1.ModelSpec, defaults *corev1.ConfigMap, secrets SecretLookup) ModelResolution {
	if spec == nil {
		return resolveNamespaceDefault(defaults, secrets)
	}
	window := int32(DefaultContextWindow)
	if spec.ContextWindow != nil {
		window = *spec.ContextWindow
	}
	reason, problem := CheckModelRef(spec.ModelRef, secrets)
	if problem == "" {
		ref := spec.ModelRef
		return ModelResolution{Effective: effectiveOf(spec.ModelRef, picobotv1alpha1.ModelSourceSpec, window), Ref: &ref,
			Reason: picobotv1alpha1.ReasonResolvedFromSpec, Message: fmt.Sprintf("Using %s/%s from spec.model", spec.Provider, spec.Model)}
	}
	problems := []string{"spec.model: " + problem}
	for i, fb := range spec.Fallbacks {
		_, fbProblem := CheckModelRef(fb, secrets)
		if fbProblem == "" {
			eff := effectiveOf(fb, picobotv1alpha1.ModelSourceFallback, window)
			idx := int32(i)
			eff.FallbackIndex = &idx
			return ModelResolution{Effective: eff, Ref: &fb, Reason: picobotv1alpha1.ReasonResolvedFromFallback,
				Message: fmt.Sprintf("Using fallback %d %s/%s because %s", i, fb.Provider, fb.Model, strings.Join(problems, "; "))}
		}
		problems = append(problems, fmt.Sprintf("fallbacks[%d]: %s", i, fbProblem))
	}
	return ModelResolution{Reason: reason, Message: "No usable model: " + strings.Join(problems, "; ")}
}

func resolveNamespaceDefault(cm *corev1.ConfigMap, secrets SecretLookup) ModelResolution {
	if cm == nil {
		return ModelResolution{Reason: picobotv1alpha1.ReasonNoModelConfigured,
			Message: fmt.Sprintf("spec.model is not set and the namespace has no ConfigMap %q with a default model", picobotv1alpha1.NamespaceDefaultsConfigMap)}
	}
	invalid := func(format string, args ...any) ModelResolution {
		return ModelResolution{Reason: picobotv1alpha1.ReasonInvalidNamespaceDefault,
			Message: fmt.Sprintf("ConfigMap %q: ", picobotv1alpha1.NamespaceDefaultsConfigMap) + fmt.Sprintf(format, args...)}
	}
	ref := picobotv1alpha1.ModelRef{
		Provider: picobotv1alpha1.ModelProvider(cm.Data["provider"]),
		Model:    cm.Data["model"],
		BaseURL:  cm.Data["baseURL"],
	}
	switch ref.Provider {
	case picobotv1alpha1.ProviderOpenAI, picobotv1alpha1.ProviderAnthropic:
	default:
		return invalid("provider %q is not one of openai, anthropic", ref.Provider)
	}
	if ref.Model == "" {
		return invalid("key model is empty")
	}
	if name := cm.Data["apiKeySecret"]; name != "" {
		key := cm.Data["apiKeySecretKey"]
		if key == "" {
			key = "apiKey"
		}
		ref.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	window := int32(DefaultContextWindow)
	if w := cm.Data["contextWindow"]; w != "" {
		n, err := strconv.ParseInt(w, 10, 32)
		if err != nil || n < 1024 {
			return invalid("contextWindow %q is not a whole number of at least 1024", w)
		}
		window = int32(n)
	}
	if reason, problem := CheckModelRef(ref, secrets); problem != "" {
		return ModelResolution{Reason: reason, Message: "Namespace default: " + problem}
	}
	return ModelResolution{Effective: effectiveOf(ref, picobotv1alpha1.ModelSourceNamespaceDefault, window), Ref: &ref,
		Reason:  picobotv1alpha1.ReasonResolvedFromNamespaceDefault,
		Message: fmt.Sprintf("Using %s/%s from ConfigMap %q", ref.Provider, ref.Model, picobotv1alpha1.NamespaceDefaultsConfigMap)}
}

// hasKey reports whether the Secret has key, in data or (for manifests read
// from files) stringData.
func hasKey(s *corev1.Secret, key string) bool {
	if _, ok := s.Data[key]; ok {
		return true
	}
	_, ok := s.StringData[key]
	return ok
}
