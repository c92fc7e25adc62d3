package bot_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/tool/bot"
)

// The model line keeps apart the cases that all read "no model": nothing
// configured, configured but unusable (a missing key), configured but
// unreachable (the probe's verdict), and names the source of a working one.
// The agents' models are resolved by the same rules the runtime uses.
func TestModelLine(t *testing.T) {
	key := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "apiKey"}
	withKey := func(name string) *corev1.Secret {
		if name == "llm" {
			return &corev1.Secret{Data: map[string][]byte{"apiKey": []byte("sk-live-0123456789abcdef")}}
		}
		return nil
	}
	none := func(string) *corev1.Secret { return nil }
	spec := &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt-5.2", APIKeySecretRef: key},
		Fallbacks: []picobotv1alpha1.ModelRef{{Provider: "anthropic", Model: "claude", BaseURL: "http://models.local"}}}
	defaults := &corev1.ConfigMap{Data: map[string]string{"provider": "openai", "model": "house-model", "baseURL": "http://models.local"}}
	unreachable := func(context.Context, *feature.Agent) (bool, string) {
		return false, "dial tcp 10.0.0.9:443: connection refused"
	}

	for _, tc := range []struct {
		name     string
		spec     *picobotv1alpha1.ModelSpec
		defaults *corev1.ConfigMap
		secrets  func(string) *corev1.Secret
		probe    bot.ModelProbe
		state    string
		source   string
		says     string
	}{
		{"nothing configured", nil, nil, none, nil, bot.ModelNotConfigured, "",
			"No model is configured for this agent: spec.model is not set and the namespace has no ConfigMap \"picobot-defaults\""},
		{"from spec", spec, nil, withKey, nil, bot.ModelOK, "spec", "Using openai/gpt-5.2 (from spec). Reachability is not probed here."},
		{"fallback when the key is missing", spec, nil, none, nil, bot.ModelOK, "fallback", "Using anthropic/claude (from fallback)."},
		{"namespace default", nil, defaults, none, nil, bot.ModelOK, "namespace default", "Using openai/house-model (from namespace default)."},
		{"configured but unusable", &picobotv1alpha1.ModelSpec{ModelRef: spec.ModelRef}, nil, none, nil, bot.ModelUnusable, "",
			"A model is configured but cannot be used: No usable model: spec.model: Secret \"llm\" (API key of openai/gpt-5.2) not found"},
		{"configured but unreachable", spec, nil, withKey, unreachable, bot.ModelUnreachable, "spec",
			"A model is configured (openai/gpt-5.2 from spec) but this runtime cannot reach it: dial tcp 10.0.0.9:443: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := agentspec.ResolveModel(tc.spec, tc.defaults, tc.secrets)
			a := &feature.Agent{Model: res.Effective, ModelReason: res.Reason, ModelMessage: res.Message}
			line := bot.ModelLine(context.Background(), a, tc.probe)
			g.Expect(line.State).To(Equal(tc.state))
			g.Expect(line.Source).To(Equal(tc.source))
			g.Expect(line.Says).To(HavePrefix(tc.says))
		})
	}
}
