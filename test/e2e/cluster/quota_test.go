package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestTenantQuotaInSessionPods: a namespace's TenantQuota reaches its
// session pods (read with the pod's own ServiceAccount): with a budget of
// one token a day, the first turn is answered and the next is refused with
// budget_exhausted, while a tenant without a quota keeps being answered.
func TestTenantQuotaInSessionPods(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "answered", Usage: &fakellm.Usage{InputTokens: 40, OutputTokens: 2}}
	})
	capped, free := "tenant-budget-a", "tenant-budget-b"
	st.apply(t, fmt.Sprintf(tenantManifest, capped, capped+"-key", st.llm.URL(), "1m", 0))
	st.apply(t, fmt.Sprintf(tenantManifest, free, free+"-key", st.llm.URL(), "1m", 0))
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: %s}
spec:
  budget: {dayTokens: 1}
`, capped))
	for _, ns := range []string{capped, free} {
		g.Eventually(func(g Gomega) {
			agent := &picobotv1alpha1.Agent{}
			g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, agent)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(agent.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue(), "%+v", agent.Status.Conditions)
		}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	}
	send := func(ws *gatewaytest.WS, id string) []gatewaytest.Frame {
		return ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": "alice", "text": "hello"})
	}
	// The operator publishes the tenants' API keys to the gateway.
	dial := func(key string) *gatewaytest.WS {
		var ws *gatewaytest.WS
		g.Eventually(func() error {
			var err error
			ws, err = gatewaytest.Client{URL: st.gatewayURL, Key: key}.DialErr(context.Background())
			return err
		}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
		t.Cleanup(func() { _ = ws.Conn.CloseNow() })
		return ws
	}
	a, b := dial(capped+"-key"), dial(free+"-key")

	frames := send(a, "a1")
	g.Expect(gatewaytest.Event(frames, "final")).To(HaveKeyWithValue("text", "answered"), "nothing used yet: %v", frames)
	e := gatewaytest.ErrorFrame(send(a, "a2"))
	g.Expect(e).To(HaveKeyWithValue("code", "budget_exhausted"))
	g.Expect(e["message"]).To(ContainSubstring("today's model budget of 1 tokens is spent (42 used)"))
	for _, id := range []string{"b1", "b2"} {
		frames := send(b, id)
		g.Expect(gatewaytest.Event(frames, "final")).To(HaveKeyWithValue("text", "answered"), "%s: %v", id, frames)
	}
}

// TestSessionPodCapReachesTheChat: a tenant whose TenantQuota allows no
// session pod gets, for a chat with no runtime, quota_exceeded with the
// operator's reason (the Agent's WithinQuota condition, which the gateway
// reads while the message waits) instead of waiting out the reply timeout;
// another tenant's chats keep being answered by their pods.
func TestSessionPodCapReachesTheChat(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "answered"} })
	capped, free := "tenant-pods-a", "tenant-pods-b"
	st.apply(t, fmt.Sprintf(tenantManifest, capped, capped+"-key", st.llm.URL(), "1m", 0))
	st.apply(t, fmt.Sprintf(tenantManifest, free, free+"-key", st.llm.URL(), "1m", 0))
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: %s}
spec:
  maxSessionPods: 0
`, capped))
	for _, ns := range []string{capped, free} {
		g.Eventually(func(g Gomega) {
			agent := &picobotv1alpha1.Agent{}
			g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, agent)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(agent.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue(), "%+v", agent.Status.Conditions)
		}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	}
	dial := func(key string) *gatewaytest.WS {
		var ws *gatewaytest.WS
		g.Eventually(func() error {
			var err error
			ws, err = gatewaytest.Client{URL: st.gatewayURL, Key: key}.DialErr(context.Background())
			return err
		}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
		t.Cleanup(func() { _ = ws.Conn.CloseNow() })
		return ws
	}
	a, b := dial(capped+"-key"), dial(free+"-key")
	e := gatewaytest.ErrorFrame(a.Exchange(t, gatewaytest.Frame{"id": "a1", "agent": "helper", "chat_id": "alice", "text": "hello"}))
	g.Expect(e).To(HaveKeyWithValue("code", "quota_exceeded"))
	g.Expect(e["message"]).To(ContainSubstring("the tenant's maxSessionPods is 0 and 0 run in the namespace"))
	frames := b.Exchange(t, gatewaytest.Frame{"id": "b1", "agent": "helper", "chat_id": "bob", "text": "hello"})
	g.Expect(gatewaytest.Event(frames, "final")).To(HaveKeyWithValue("text", "answered"), "%v", frames)
	var pods corev1.PodList
	g.Expect(st.kube.List(context.Background(), &pods, client.InNamespace(capped), client.MatchingLabels{"app.kubernetes.io/component": "session"})).To(Succeed())
	g.Expect(pods.Items).To(BeEmpty())
}
