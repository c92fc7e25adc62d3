package controller

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// defaultContextWindow applies when neither the Agent nor the namespace default
// names one (picobot-architecture.md: default 128K).
const defaultContextWindow = 128000

// secretLookup returns the named Secret of the Agent's namespace, or nil.
type secretLookup func(name string) *corev1.Secret

// modelResolution is the outcome of choosing an Agent's model; it is computed by
// resolveModel (pure, given the lookups) and turned into status by
// modelCondition.
type modelResolution struct {
	effective *picobotv1alpha1.EffectiveModel
	reason    string
	message   string
}

// checkModelRef says why ref is unusable, or "" when it is usable.
func checkModelRef(ref picobotv1alpha1.ModelRef, secrets secretLookup) (reason, problem string) {
	if ref.APIKeySecretRef == nil {
		return "", ""
	}
	sel := ref.APIKeySecretRef
	s := secrets(sel.Name)
	if s == nil {
		return picobotv1alpha1.ReasonSecretNotFound, fmt.Sprintf("Secret %q (API key of %s/%s) not found", sel.Name, ref.Provider, ref.Model)
	}
	if !secretKeyPresent(s, sel.Key) {
		return picobotv1alpha1.ReasonSecretKeyNotFound, fmt.Sprintf("Secret %q has no key %q (API key of %s/%s)", sel.Name, sel.Key, ref.Provider, ref.Model)
	}
	return "", ""
}

func effectiveOf(ref picobotv1alpha1.ModelRef, src picobotv1alpha1.ModelSource, window int32) *picobotv1alpha1.EffectiveModel {
	return &picobotv1alpha1.EffectiveModel{Provider: ref.Provider, Model: ref.Model, BaseURL: ref.BaseURL, Source: src, ContextWindow: window}
}

// resolveModel picks the Agent's effective model: spec.model when usable, else
// the first usable fallback, else nothing; with no spec.model, the namespace
// default. "No model configured" and "configured but its Secret is missing" get
// different reasons so users can tell them apart.
func resolveModel(spec *picobotv1alpha1.ModelSpec, defaults *corev1.ConfigMap, secrets secretLookup) modelResolution {
	if spec == nil {
		return resolveNamespaceDefault(defaults, secrets)
	}
	window := int32(defaultContextWindow)
	if spec.ContextWindow != nil {
		window = *spec.ContextWindow
	}
	reason, problem := checkModelRef(spec.ModelRef, secrets)
	if problem == "" {
		return modelResolution{effective: effectiveOf(spec.ModelRef, picobotv1alpha1.ModelSourceSpec, window),
			reason: picobotv1alpha1.ReasonResolvedFromSpec, message: fmt.Sprintf("Using %s/%s from spec.model", spec.Provider, spec.Model)}
	}
	problems := []string{"spec.model: " + problem}
	for i, fb := range spec.Fallbacks {
		_, fbProblem := checkModelRef(fb, secrets)
		if fbProblem == "" {
			eff := effectiveOf(fb, picobotv1alpha1.ModelSourceFallback, window)
			idx := int32(i)
			eff.FallbackIndex = &idx
			return modelResolution{effective: eff, reason: picobotv1alpha1.ReasonResolvedFromFallback,
				message: fmt.Sprintf("Using fallback %d %s/%s because %s", i, fb.Provider, fb.Model, strings.Join(problems, "; "))}
		}
		problems = append(problems, fmt.Sprintf("fallbacks[%d]: %s", i, fbProblem))
	}
	return modelResolution{reason: reason, message: "No usable model: " + strings.Join(problems, "; ")}
}

func resolveNamespaceDefault(cm *corev1.ConfigMap, secrets secretLookup) modelResolution {
	if cm == nil {
		return modelResolution{reason: picobotv1alpha1.ReasonNoModelConfigured,
			message: fmt.Sprintf("spec.model is not set and the namespace has no ConfigMap %q with a default model", picobotv1alpha1.NamespaceDefaultsConfigMap)}
	}
	invalid := func(format string, args ...any) modelResolution {
		return modelResolution{reason: picobotv1alpha1.ReasonInvalidNamespaceDefault,
			message: fmt.Sprintf("ConfigMap %q: ", picobotv1alpha1.NamespaceDefaultsConfigMap) + fmt.Sprintf(format, args...)}
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
	window := int32(defaultContextWindow)
	if w := cm.Data["contextWindow"]; w != "" {
		n, err := strconv.ParseInt(w, 10, 32)
		if err != nil || n < 1024 {
			return invalid("contextWindow %q is not a whole number of at least 1024", w)
		}
		window = int32(n)
	}
	if reason, problem := checkModelRef(ref, secrets); problem != "" {
		return modelResolution{reason: reason, message: "Namespace default: " + problem}
	}
	return modelResolution{effective: effectiveOf(ref, picobotv1alpha1.ModelSourceNamespaceDefault, window),
		reason:  picobotv1alpha1.ReasonResolvedFromNamespaceDefault,
		message: fmt.Sprintf("Using %s/%s from ConfigMap %q", ref.Provider, ref.Model, picobotv1alpha1.NamespaceDefaultsConfigMap)}
}

func modelCondition(m modelResolution) metav1.Condition {
	return condition(picobotv1alpha1.ConditionModelResolved, m.effective != nil, m.reason, m.message)
}

func toolsCondition(err error, warnings []string, n int) metav1.Condition {
	switch {
	case err != nil:
		return condition(picobotv1alpha1.ConditionToolsResolved, false, picobotv1alpha1.ReasonInvalidToolPolicy, err.Error())
	case len(warnings) > 0:
		return condition(picobotv1alpha1.ConditionToolsResolved, true, picobotv1alpha1.ReasonResolvedWithWarnings,
			fmt.Sprintf("%d tools; %s", n, strings.Join(warnings, "; ")))
	default:
		return condition(picobotv1alpha1.ConditionToolsResolved, true, picobotv1alpha1.ReasonResolved, fmt.Sprintf("%d tools", n))
	}
}

// referencesCondition reports missing and invalid references; both lists are
// already sorted so the message is stable.
func referencesCondition(missing, invalid []string) metav1.Condition {
	switch {
	case len(invalid) > 0:
		return condition(picobotv1alpha1.ConditionReferencesResolved, false, picobotv1alpha1.ReasonInvalidReference, strings.Join(append(invalid, missing...), "; "))
	case len(missing) > 0:
		return condition(picobotv1alpha1.ConditionReferencesResolved, false, picobotv1alpha1.ReasonReferenceNotFound, "Not found: "+strings.Join(missing, ", "))
	default:
		return condition(picobotv1alpha1.ConditionReferencesResolved, true, picobotv1alpha1.ReasonResolved, "All references exist")
	}
}
