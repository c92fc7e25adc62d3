package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

const (
	eventually = 20 * time.Second
	poll       = 50 * time.Millisecond
)

func openAIAgent(ns, name, secret string) *picobotv1alpha1.Agent {
	return &picobotv1alpha1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: picobotv1alpha1.AgentSpec{
			Instructions: "You are a helpful assistant.",
			Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{
				Provider: picobotv1alpha1.ProviderOpenAI, Model: "gpt-5.2",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "apiKey"},
			}},
		},
	}
}

func secret(ns, name string, keys ...string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for _, k := range keys {
		s.Data[k] = []byte("sk-test-" + k)
	}
	return s
}

// getAgent fetches the Agent through the direct client.
func getAgent(g Gomega, ns, name string) *picobotv1alpha1.Agent {
	a := &picobotv1alpha1.Agent{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a)).To(Succeed())
	return a
}

// expectCondition waits until the Agent's condition has status and reason at
// the Agent's current generation, and returns the Agent.
func expectCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *picobotv1alpha1.Agent {
	t.Helper()
	var got *picobotv1alpha1.Agent
	NewWithT(t).Eventually(func(g Gomega) {
		got = getAgent(g, ns, name)
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "condition %s not set", typ)
		g.Expect(c.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(c.Status).To(Equal(status), "message: %s", c.Message)
		g.Expect(c.Reason).To(Equal(reason), "message: %s", c.Message)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return got
}

func cond(a *picobotv1alpha1.Agent, typ string) *metav1.Condition {
	return meta.FindStatusCondition(a.Status.Conditions, typ)
}

func TestAgentModelFromSpecFollowsSecret(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)

	g.Expect(k8s.Create(ctx, openAIAgent(ns, "assistant", "openai"))).To(Succeed())
	a := expectCondition(t, ns, "assistant", picobotv1alpha1.ConditionModelResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonSecretNotFound)
	g.Expect(cond(a, picobotv1alpha1.ConditionModelResolved).Message).To(Equal(`No usable model: spec.model: Secret "openai" (API key of openai/gpt-5.2) not found`))
	g.Expect(cond(a, picobotv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond(a, picobotv1alpha1.ConditionReady).Reason).To(Equal(picobotv1alpha1.ReasonSecretNotFound))
	g.Expect(a.Status.EffectiveModel).To(BeNil())

	// The Secret appears without the key: a different, precise reason.
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "token"))).To(Succeed())
	a = expectCondition(t, ns, "assistant", picobotv1alpha1.ConditionModelResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonSecretKeyNotFound)
	g.Expect(cond(a, picobotv1alpha1.ConditionModelResolved).Message).To(ContainSubstring(`Secret "openai" has no key "apiKey"`))

	// A placeholder where the key goes (what a demo writes without a key):
	// not Ready either, and it says so.
	s := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openai"}, s)).To(Succeed())
	s.Data["apiKey"] = []byte("placeholder-set-OPENAI_API_KEY")
	g.Expect(k8s.Update(ctx, s)).To(Succeed())
	a = expectCondition(t, ns, "assistant", picobotv1alpha1.ConditionModelResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonPlaceholderKey)
	g.Expect(cond(a, picobotv1alpha1.ConditionModelResolved).Message).To(ContainSubstring(`holds a placeholder ("placeholder-set-OPENAI_API_KEY"), not an API key`))
	g.Expect(cond(a, picobotv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))

	// The key is added: the watch on Secrets brings the Agent to Ready.
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openai"}, s)).To(Succeed())
	s.Data["apiKey"] = []byte("sk-live")
	g.Expect(k8s.Update(ctx, s)).To(Succeed())
	a = expectCondition(t, ns, "assistant", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	g.Expect(a.Status.EffectiveModel).To(Equal(&picobotv1alpha1.EffectiveModel{
		Provider: "openai", Model: "gpt-5.2", Source: picobotv1alpha1.ModelSourceSpec, ContextWindow: 128000,
	}))
	g.Expect(cond(a, picobotv1alpha1.ConditionModelResolved).Reason).To(Equal(picobotv1alpha1.ReasonResolvedFromSpec))
	g.Expect(a.Status.EffectiveTools).To(ContainElements("bash", "file_read", "web_fetch", "memory_recall"))
	g.Expect(a.Status.EffectiveTools).NotTo(ContainElement("delegate"), "no delegates configured")

	// Deleting the Secret takes it back.
	g.Expect(k8s.Delete(ctx, s)).To(Succeed())
	expectCondition(t, ns, "assistant", picobotv1alpha1.ConditionReady, metav1.ConditionFalse, picobotv1alpha1.ReasonSecretNotFound)

	// Transitions are recorded as events.
	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			reasons[e.Reason] = true
		}
		g.Expect(reasons).To(HaveKey(picobotv1alpha1.ReasonSecretNotFound), "%v", evs.Items)
		g.Expect(reasons).To(HaveKey(picobotv1alpha1.ReasonResolvedFromSpec))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func TestAgentFallbackModel(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	a := openAIAgent(ns, "fb", "missing")
	a.Spec.Model.Fallbacks = []picobotv1alpha1.ModelRef{
		{Provider: "anthropic", Model: "claude-sonnet-4-5", APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "also-missing"}, Key: "apiKey"}},
		{Provider: "openai", Model: "qwen3", BaseURL: "http://vllm.models:8000/v1"},
	}
	g.Expect(k8s.Create(ctx, a)).To(Succeed())
	got := expectCondition(t, ns, "fb", picobotv1alpha1.ConditionModelResolved, metav1.ConditionTrue, picobotv1alpha1.ReasonResolvedFromFallback)
	g.Expect(got.Status.EffectiveModel.Source).To(Equal(picobotv1alpha1.ModelSourceFallback))
	g.Expect(*got.Status.EffectiveModel.FallbackIndex).To(Equal(int32(1)))
	g.Expect(got.Status.EffectiveModel.Model).To(Equal("qwen3"))
	g.Expect(cond(got, picobotv1alpha1.ConditionModelResolved).Message).To(Equal(
		`Using fallback 1 openai/qwen3 because spec.model: Secret "missing" (API key of openai/gpt-5.2) not found; ` +
			`fallbacks[0]: Secret "also-missing" (API key of anthropic/claude-sonnet-4-5) not found`))
	g.Expect(cond(got, picobotv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))

	// The primary's Secret appears: the Agent switches back to its own model.
	g.Expect(k8s.Create(ctx, secret(ns, "missing", "apiKey"))).To(Succeed())
	got = expectCondition(t, ns, "fb", picobotv1alpha1.ConditionModelResolved, metav1.ConditionTrue, picobotv1alpha1.ReasonResolvedFromSpec)
	g.Expect(got.Status.EffectiveModel.FallbackIndex).To(BeNil())
}

func TestAgentNamespaceDefaultModel(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	a := openAIAgent(ns, "plain", "")
	a.Spec.Model = nil
	g.Expect(k8s.Create(ctx, a)).To(Succeed())

	got := expectCondition(t, ns, "plain", picobotv1alpha1.ConditionModelResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonNoModelConfigured)
	g.Expect(cond(got, picobotv1alpha1.ConditionModelResolved).Message).To(Equal(
		`spec.model is not set and the namespace has no ConfigMap "picobot-defaults" with a default model`))

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: picobotv1alpha1.NamespaceDefaultsConfigMap},
		Data: map[string]string{"provider": "bard", "model": "x"}}
	g.Expect(k8s.Create(ctx, cm)).To(Succeed())
	got = expectCondition(t, ns, "plain", picobotv1alpha1.ConditionModelResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonInvalidNamespaceDefault)
	g.Expect(cond(got, picobotv1alpha1.ConditionModelResolved).Message).To(ContainSubstring(`provider "bard" is not one of openai, anthropic`))

	cm.Data = map[string]string{"provider": "anthropic", "model": "claude-sonnet-4-5", "apiKeySecret": "anthropic", "contextWindow": "200000"}
	g.Expect(k8s.Update(ctx, cm)).To(Succeed())
	got = expectCondition(t, ns, "plain", picobotv1alpha1.ConditionModelResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonSecretNotFound)
	g.Expect(cond(got, picobotv1alpha1.ConditionModelResolved).Message).To(HavePrefix("Namespace default: "))

	// The default's Secret is not named by the Agent: the Secret watch still
	// finds the Agent through the ConfigMap.
	g.Expect(k8s.Create(ctx, secret(ns, "anthropic", "apiKey"))).To(Succeed())
	got = expectCondition(t, ns, "plain", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	g.Expect(got.Status.EffectiveModel).To(Equal(&picobotv1alpha1.EffectiveModel{
		Provider: "anthropic", Model: "claude-sonnet-4-5", Source: picobotv1alpha1.ModelSourceNamespaceDefault, ContextWindow: 200000,
	}))
}

func TestAgentToolPolicy(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t)
	NewWithT(t).Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())

	cases := []struct {
		name        string
		provider    picobotv1alpha1.ModelProvider
		tools       picobotv1alpha1.ToolsSpec
		status      metav1.ConditionStatus
		reason      string
		exactly     []string
		contains    []string
		notContains []string
		message     string
	}{
		{name: "coding minus runtime", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "coding", Deny: []string{"group:runtime"}}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolved,
			contains: []string{"file_read", "apply_patch", "memory_recall", "chat_manager"}, notContains: []string{"bash", "exec", "browser", "delegate"}},
		{name: "minimal", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "minimal"}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolved, exactly: []string{"session_status"}},
		{name: "deny wins, case-insensitive wildcard", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:fs", "BASH"}, Deny: []string{"FILE_W*"}}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolved,
			exactly: []string{"apply_patch", "bash", "content_search", "file_edit", "file_read", "file_search"}},
		{name: "allow of only unknown tools is ignored with a warning", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"slack", "discord"}}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolvedWithWarnings,
			contains: []string{"bash", "browser", "send_message"}, message: `allow list names only unknown tools ["discord" "slack"]; ignored so core tools stay available`},
		{name: "byProvider narrows for anthropic", provider: "anthropic",
			tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "coding"},
				ByProvider: map[string]picobotv1alpha1.ToolPolicy{"anthropic": {Allow: []string{"group:fs"}}, "openai": {Profile: "minimal"}}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolved,
			exactly: []string{"apply_patch", "content_search", "file_edit", "file_read", "file_search", "file_write"}},
		{name: "web_search with a backend", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:web"}},
			WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchSearXNG, BaseURL: "http://searxng:8080"}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolved, exactly: []string{"http_request", "web_fetch", "web_search"}},
		{name: "no web_search without a backend", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:web"}}},
			status: metav1.ConditionTrue, reason: picobotv1alpha1.ReasonResolved, exactly: []string{"http_request", "web_fetch"}},
		{name: "unknown group is an error", tools: picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:nope"}}},
			status: metav1.ConditionFalse, reason: picobotv1alpha1.ReasonInvalidToolPolicy, message: `unknown group "group:nope"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := fmt.Sprintf("tools-%d", i)
			a := openAIAgent(ns, name, "k")
			if tc.provider != "" {
				a.Spec.Model.Provider = tc.provider
			}
			a.Spec.Tools = &tc.tools
			g.Expect(k8s.Create(ctx, a)).To(Succeed())
			got := expectCondition(t, ns, name, picobotv1alpha1.ConditionToolsResolved, tc.status, tc.reason)
			c := cond(got, picobotv1alpha1.ConditionToolsResolved)
			if tc.message != "" {
				g.Expect(c.Message).To(ContainSubstring(tc.message))
			}
			if tc.exactly != nil {
				g.Expect(got.Status.EffectiveTools).To(Equal(tc.exactly))
			}
			g.Expect(got.Status.EffectiveTools).To(ContainElements(tc.contains))
			for _, n := range tc.notContains {
				g.Expect(got.Status.EffectiveTools).NotTo(ContainElement(n))
			}
			ready := cond(got, picobotv1alpha1.ConditionReady)
			g.Expect(ready.Status).To(Equal(tc.status))
			if tc.status == metav1.ConditionFalse {
				g.Expect(got.Status.EffectiveTools).To(BeEmpty())
				g.Expect(ready.Reason).To(Equal(tc.reason))
			}
		})
	}
}

func TestAgentReferences(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())

	a := openAIAgent(ns, "lead", "k")
	a.Spec.Delegates = []picobotv1alpha1.Delegate{{Name: "researcher", AgentRef: corev1.LocalObjectReference{Name: "researcher"}}}
	a.Spec.Browser = &picobotv1alpha1.BrowserSpec{ProfileRef: &corev1.LocalObjectReference{Name: "work"}}
	a.Spec.Skills = []picobotv1alpha1.SkillSource{{Name: "triage", ConfigMapRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "skills"}, Key: "SKILL.md"}}}
	a.Spec.Channels = []picobotv1alpha1.Channel{{Type: "telegram", SecretRef: &corev1.LocalObjectReference{Name: "tg"}}}
	g.Expect(k8s.Create(ctx, a)).To(Succeed())
	got := expectCondition(t, ns, "lead", picobotv1alpha1.ConditionReferencesResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonReferenceNotFound)
	g.Expect(cond(got, picobotv1alpha1.ConditionReferencesResolved).Message).To(Equal(
		`Not found: Agent "researcher", BrowserProfile "work", ConfigMap "skills", Secret "tg"`))
	g.Expect(got.Status.EffectiveTools).To(ContainElement("delegate"))

	// Each reference appearing is noticed through its own watch.
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "researcher", "k"))).To(Succeed())
	g.Expect(k8s.Create(ctx, &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"}})).To(Succeed())
	g.Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "skills"}, Data: map[string]string{"SKILL.md": "x"}})).To(Succeed())
	got = expectCondition(t, ns, "lead", picobotv1alpha1.ConditionReferencesResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonReferenceNotFound)
	g.Eventually(func(g Gomega) {
		got = getAgent(g, ns, "lead")
		g.Expect(cond(got, picobotv1alpha1.ConditionReferencesResolved).Message).To(Equal(`Not found: Secret "tg"`))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(k8s.Create(ctx, secret(ns, "tg", "token"))).To(Succeed())
	expectCondition(t, ns, "lead", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)

	// A delegate Agent deleted later is noticed too.
	g.Expect(k8s.Delete(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "researcher"}})).To(Succeed())
	expectCondition(t, ns, "lead", picobotv1alpha1.ConditionReady, metav1.ConditionFalse, picobotv1alpha1.ReasonReferenceNotFound)

	self := openAIAgent(ns, "narcissus", "k")
	self.Spec.Delegates = []picobotv1alpha1.Delegate{{Name: "me", AgentRef: corev1.LocalObjectReference{Name: "narcissus"}}}
	g.Expect(k8s.Create(ctx, self)).To(Succeed())
	got = expectCondition(t, ns, "narcissus", picobotv1alpha1.ConditionReferencesResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonInvalidReference)
	g.Expect(cond(got, picobotv1alpha1.ConditionReferencesResolved).Message).To(Equal(`delegate "me" refers to the Agent itself`))
}

// The Brave key's Secret is a reference like a channel's: missing, the
// Agent says so (its session pods could not start without it), and its
// appearing is noticed through the Secret index.
func TestAgentWebSearchKeyIsAReference(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())
	a := openAIAgent(ns, "searcher", "k")
	a.Spec.Tools = &picobotv1alpha1.ToolsSpec{WebSearch: &picobotv1alpha1.WebSearchSpec{Provider: picobotv1alpha1.WebSearchBrave,
		APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "search"}, Key: "apiKey"}}}
	g.Expect(k8s.Create(ctx, a)).To(Succeed())
	got := expectCondition(t, ns, "searcher", picobotv1alpha1.ConditionReferencesResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonReferenceNotFound)
	g.Expect(cond(got, picobotv1alpha1.ConditionReferencesResolved).Message).To(Equal(`Not found: Secret "search"`))
	g.Expect(got.Status.EffectiveTools).To(ContainElement("web_search"))
	g.Expect(k8s.Create(ctx, secret(ns, "search", "apiKey"))).To(Succeed())
	expectCondition(t, ns, "searcher", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)

	keys := secretKeysOf(a, nil)
	g.Expect(keys).To(ContainElement(*a.Spec.Tools.WebSearch.APIKeySecretRef), "the session pods get the key in their environment")
}

// A saved credential's Secret (spec.tools.secrets) is a reference too: the
// session pods get it in their environment, so without it they could not
// start, and the Agent says so; bot_secret is then in its effective tools.
func TestAgentSavedSecretIsAReference(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())
	a := openAIAgent(ns, "shopper", "k")
	sel := corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "shop"}, Key: "password"}
	a.Spec.Tools = &picobotv1alpha1.ToolsSpec{Secrets: []picobotv1alpha1.ToolSecret{{Name: "shop-password", SecretKeyRef: sel, Domains: []string{"shop.example"}}}}
	g.Expect(k8s.Create(ctx, a)).To(Succeed())
	got := expectCondition(t, ns, "shopper", picobotv1alpha1.ConditionReferencesResolved, metav1.ConditionFalse, picobotv1alpha1.ReasonReferenceNotFound)
	g.Expect(cond(got, picobotv1alpha1.ConditionReferencesResolved).Message).To(Equal(`Not found: Secret "shop"`))
	g.Expect(got.Status.EffectiveTools).To(ContainElement("bot_secret"))
	g.Expect(k8s.Create(ctx, secret(ns, "shop", "password"))).To(Succeed())
	expectCondition(t, ns, "shopper", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	g.Expect(secretKeysOf(a, nil)).To(ContainElement(sel), "the session pods get the value in their environment")
}

func TestAgentSpecChangeUpdatesObservedGeneration(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "gen", "k"))).To(Succeed())
	a := expectCondition(t, ns, "gen", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	g.Expect(a.Generation).To(Equal(int64(1)))
	a.Spec.Tools = &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "minimal"}}
	g.Expect(k8s.Update(ctx, a)).To(Succeed())
	a = expectCondition(t, ns, "gen", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	g.Expect(a.Generation).To(Equal(int64(2)))
	g.Expect(a.Status.EffectiveTools).To(Equal([]string{"session_status"}))
	// Ready did not flip, so its transition time is the original one.
	g.Expect(cond(a, picobotv1alpha1.ConditionReady).ObservedGeneration).To(Equal(int64(2)))
}

// TestNoOpResyncWritesNothing restarts the operator (a fresh manager, which
// reconciles every Agent again) over settled Agents and counts the writes it
// sends to the API server: there must be none.
func TestNoOpResyncWritesNothing(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())
	const n = 30
	for i := range n {
		a := openAIAgent(ns, fmt.Sprintf("a%d", i), "k")
		if i%3 == 0 {
			a.Spec.Model.APIKeySecretRef.Name = "absent" // not Ready: also settled
		}
		g.Expect(k8s.Create(ctx, a)).To(Succeed())
	}
	cj := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "daily"},
		Spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"}, Prompt: "p",
			AgentRef: &corev1.LocalObjectReference{Name: "a1"}}}
	g.Expect(k8s.Create(ctx, cj)).To(Succeed())
	g.Expect(k8s.Create(ctx, &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bp"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		l := &picobotv1alpha1.AgentList{}
		g.Expect(k8s.List(ctx, l, client.InNamespace(ns))).To(Succeed())
		g.Expect(l.Items).To(HaveLen(n))
		for _, a := range l.Items {
			g.Expect(a.Status.ObservedGeneration).To(Equal(a.Generation))
		}
		c := &picobotv1alpha1.CronJob{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cj), c)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// A fresh operator restricted to this namespace re-reconciles everything.
	// Its client counts writes, and records which objects its reconcilers read,
	// to prove each one was really reconciled.
	wc := &writeCounter{}
	mctx, cancel := context.WithCancel(ctx)
	mgr, _ := newTestManager(mctx, wc, ns)
	var wg sync.WaitGroup
	wg.Go(func() { _ = mgr.Start(mctx) })
	defer func() { cancel(); wg.Wait() }()
	g.Eventually(func() int { return wc.readCount() }).WithTimeout(eventually).WithPolling(poll).Should(Equal(n + 2))
	g.Consistently(func() int64 { return wc.n.Load() }).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(BeZero())

}

// expectEvent waits for an event about the object of kind and name with the
// type, reason and note given.
func expectEvent(t *testing.T, ns, kind, name, typ, reason, note string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(k8s.List(context.Background(), evs, client.InNamespace(ns))).To(Succeed())
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name {
				if e.Type == typ && e.Reason == reason && e.Note == note {
					return
				}
				seen = append(seen, e.Type+"/"+e.Reason+": "+e.Note)
			}
		}
		g.Expect(seen).To(ContainElement(typ + "/" + reason + ": " + note))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// TestSecondRootAgentIsReported: the API server cannot see that two Agents
// of a namespace say spec.role: root; the operator marks both not Ready,
// naming the other, with an Event, and clears it when one steps down.
func TestSecondRootAgentIsReported(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())
	first := openAIAgent(ns, "first", "k")
	first.Spec.Role = new(picobotv1alpha1.AgentRoleRoot)
	g.Expect(k8s.Create(ctx, first)).To(Succeed())
	expectCondition(t, ns, "first", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)

	second := openAIAgent(ns, "second", "k")
	second.Spec.Role = new(picobotv1alpha1.AgentRoleRoot)
	g.Expect(k8s.Create(ctx, second)).To(Succeed())
	for name, other := range map[string]string{"first": "second", "second": "first"} {
		got := expectCondition(t, ns, name, picobotv1alpha1.ConditionReady, metav1.ConditionFalse, picobotv1alpha1.ReasonInvalidReference)
		g.Expect(cond(got, picobotv1alpha1.ConditionReferencesResolved).Message).To(Equal(
			"spec.role is root, but so is it on " + other + ": a namespace has one root Agent"))
		g.Eventually(func(g Gomega) {
			evs := &eventsv1.EventList{}
			g.Expect(k8s.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range evs.Items {
				if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == picobotv1alpha1.ReasonInvalidReference {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring("a namespace has one root Agent")))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}

	got := getAgent(g, ns, "second")
	got.Spec.Role = new(picobotv1alpha1.AgentRoleNamed)
	g.Expect(k8s.Update(ctx, got)).To(Succeed())
	expectCondition(t, ns, "first", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	expectCondition(t, ns, "second", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
}
