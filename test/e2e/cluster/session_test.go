package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// tenantBase is a tenant namespace (%[1]s) with a model key and a gateway
// API key (%[2]s); the manifests of the tests' Agents follow it.
const tenantBase = `
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Secret
metadata:
  name: model-key
  namespace: %[1]s
stringData:
  apiKey: sk-fake
---
apiVersion: v1
kind: Secret
metadata:
  name: gateway-key
  namespace: %[1]s
  labels:
    gateway.picobot.io/api-key: "true"
  annotations:
    gateway.picobot.io/rate-limit: unlimited # the tests send in bursts
stringData:
  key: %[2]s
---
`

// tenantManifest is tenantBase with Agent "helper" of the fake model
// (%[3]s), its idle timeout (%[4]s) and warm pool (%[5]d).
const tenantManifest = tenantBase + `
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: helper
  namespace: %[1]s
spec:
  instructions: You are a test agent.
  model:
    provider: openai
    model: fake-model
    baseURL: %[3]s
    apiKeySecretRef: {name: model-key, key: apiKey}
  runtime:
    idleTimeout: %[4]s
    warmPool: %[5]d
`

// lastUser is the text of the last user message of a recorded request.
func lastUser(r fakellm.Recorded) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

func userTexts(r fakellm.Recorded) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

func TestSessionPodsEndToEnd(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-e2e", "tenant-e2e-key"
	var slowOnce atomic.Bool
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		text := lastUser(r)
		if text == "slow" && slowOnce.CompareAndSwap(false, true) {
			return fakellm.Turn{Text: "too late", Delay: time.Minute} // the pod dies before this answers
		}
		return fakellm.Turn{Text: fmt.Sprintf("reply to %q after %d user messages", text, len(userTexts(r)))}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "6s", 1))

	// The operator resolves the agent and starts its warm pod, which
	// registers as warm.
	agent := &picobotv1alpha1.Agent{}
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, agent)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(agent.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue(), "%+v", agent.Status.Conditions)
		g.Expect(agent.Status.WarmPods).To(HaveValue(Equal(int32(1))))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	warm := st.pods(t, ns, "helper")
	g.Expect(warm).To(HaveLen(1))

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	send := func(id, text string) []gatewaytest.Frame {
		return ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": "alice", "text": text})
	}
	final := func(frames []gatewaytest.Frame) string {
		ev := gatewaytest.Event(frames, "final")
		if ev == nil {
			t.Fatalf("no final event in %v", frames)
		}
		return ev["text"].(string)
	}

	// First message: the warm pod claims the chat and answers.
	g.Expect(final(send("m1", "hello"))).To(Equal(`reply to "hello" after 1 user messages`))
	first := st.busyPod(ns, "helper", "helper/alice")
	g.Expect(first).To(Equal(warm[0].Name), "the warm pod served the chat")

	// The second message goes to the same pod; the pool is refilled and
	// the busy pod carries its session label.
	g.Expect(final(send("m2", "again"))).To(Equal(`reply to "again" after 2 user messages`))
	g.Expect(st.busyPod(ns, "helper", "helper/alice")).To(Equal(first))
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, agent)).To(Succeed())
		g.Expect(agent.Status.ActiveSessions).To(HaveValue(Equal(int32(1))))
		g.Expect(agent.Status.WarmPods).To(HaveValue(Equal(int32(1))))
		names := []string{}
		for _, p := range st.pods(t, ns, "helper") {
			names = append(names, p.Name)
			if p.Name == first {
				g.Expect(p.Labels).To(HaveKeyWithValue("agents.picobot.io/session", MatchRegexp(`^[0-9a-f]{32}$`)))
			}
		}
		g.Expect(names).To(HaveLen(2))
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())

	// After the idle timeout the pod exits and is reaped.
	g.Eventually(func() []string {
		var names []string
		for _, p := range st.pods(t, ns, "helper") {
			names = append(names, p.Name)
		}
		return names
	}, 90*time.Second, 250*time.Millisecond).ShouldNot(ContainElement(first))
	g.Expect(st.busyPod(ns, "helper", "helper/alice")).To(BeEmpty())

	// A new message wakes another pod; the history is intact.
	g.Expect(final(send("m3", "still there?"))).To(Equal(`reply to "still there?" after 3 user messages`))
	second := st.busyPod(ns, "helper", "helper/alice")
	g.Expect(second).NotTo(BeEmpty())
	g.Expect(second).NotTo(Equal(first))
	reqs := st.llm.Requests()
	g.Expect(userTexts(reqs[len(reqs)-1])).To(Equal([]string{"hello", "again", "still there?"}))

	// Killing the pod mid-turn still yields exactly one reply: the next
	// runtime reclaims the unacknowledged message and runs the turn once.
	before := len(st.llm.Requests())
	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m4", "agent": "helper", "chat_id": "alice", "text": "slow"})
	g.Eventually(func() int { return len(st.llm.Requests()) }, 60*time.Second, 50*time.Millisecond).Should(BeNumerically(">", before))
	var victim string
	for _, p := range st.pods(t, ns, "helper") {
		if p.Name == second {
			g.Expect(st.runner.Kill(p.UID)).To(BeTrue())
			victim = p.Name
		}
	}
	g.Expect(victim).NotTo(BeEmpty())
	frames := ws.Until(t, "m4", "done")
	finals := 0
	for _, f := range frames {
		if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == "final" {
			finals++
		}
		g.Expect(f["type"]).NotTo(Equal("error"), "%v", f)
	}
	g.Expect(finals).To(Equal(1))
	g.Expect(final(frames)).To(Equal(`reply to "slow" after 4 user messages`))
	third := st.busyPod(ns, "helper", "helper/alice")
	g.Expect(third).NotTo(BeEmpty())
	g.Expect(third).NotTo(Equal(victim))

	// The store holds the turn once.
	status, body := c.Do(t, "GET", "/api/v1/sessions/web:helper%2Falice:default/messages?last=50", nil)
	g.Expect(status).To(Equal(200), "%v", body)
	var contents []string
	for _, m := range body["messages"].([]any) {
		contents = append(contents, fmt.Sprint(m.(map[string]any)["content"]))
	}
	g.Expect(strings.Join(contents, "|")).To(Equal(`hello|reply to "hello" after 1 user messages|again|reply to "again" after 2 user messages|` +
		`still there?|reply to "still there?" after 3 user messages|slow|reply to "slow" after 4 user messages`))
}

// Agents that cannot run get a condition saying why, and a message to them is
// answered with that reason instead of silence.
func TestAgentsThatCannotRunAnswerWithTheReason(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-broken", "tenant-broken-key"
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0))
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: nokey, namespace: %[1]s}
spec:
  model: {provider: openai, model: m, apiKeySecretRef: {name: missing, key: apiKey}}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: badimage, namespace: %[1]s}
spec:
  model: {provider: openai, model: m, baseURL: %[2]s, apiKeySecretRef: {name: model-key, key: apiKey}}
  runtime: {image: registry.example/does-not-exist:1, warmPool: 1}
`, ns, st.llm.URL()))
	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	errorOf := func(agentName, id string) gatewaytest.Frame {
		frames := ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": agentName, "chat_id": "bob", "text": "hello"})
		return gatewaytest.ErrorFrame(frames)
	}

	// A missing model Secret.
	g.Eventually(func() gatewaytest.Frame { return errorOf("nokey", fmt.Sprintf("k%d", time.Now().UnixNano())) }, 60*time.Second, time.Second).
		Should(And(HaveKeyWithValue("code", "no_model"), HaveKeyWithValue("message", ContainSubstring(`Secret "missing"`))))

	// An image that cannot be pulled: RuntimeReady=False ImagePullFailed.
	agent := &picobotv1alpha1.Agent{}
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "badimage"}, agent)).To(Succeed())
		c := meta.FindStatusCondition(agent.Status.Conditions, picobotv1alpha1.ConditionRuntimeReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonImagePullFailed))
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
	e := errorOf("badimage", "img-1")
	g.Expect(e).To(HaveKeyWithValue("code", "not_ready"))
	g.Expect(e["message"]).To(ContainSubstring("cannot pull its image"))

	// An exhausted quota: pod creation is forbidden, the condition says so.
	st.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s-quota}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: no-pods, namespace: %[1]s-quota}
spec: {hard: {pods: "0"}}
`, ns))
	quota := &corev1.ResourceQuota{}
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns + "-quota", Name: "no-pods"}, quota)).To(Succeed())
	// No quota controller runs here: publish the usage it would.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	g.Expect(st.kube.Status().Update(context.Background(), quota)).To(Succeed())
	st.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: model-key, namespace: %[1]s-quota}
stringData: {apiKey: sk-fake}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: capped, namespace: %[1]s-quota}
spec:
  model: {provider: openai, model: m, baseURL: %[2]s, apiKeySecretRef: {name: model-key, key: apiKey}}
  runtime: {warmPool: 1}
`, ns, st.llm.URL()))
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns + "-quota", Name: "capped"}, agent)).To(Succeed())
		c := meta.FindStatusCondition(agent.Status.Conditions, picobotv1alpha1.ConditionRuntimeReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonQuotaExceeded))
		g.Expect(c.Message).To(ContainSubstring("exceeded quota"))
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
}
