package cluster

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"

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
	send := func(ws *gatewaytest.WS, id string) []gatewaytest.Frame {
		return ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": "alice", "text": "hello"})
	}
	a := gatewaytest.Client{URL: st.gatewayURL, Key: capped + "-key"}.Dial(t)
	b := gatewaytest.Client{URL: st.gatewayURL, Key: free + "-key"}.Dial(t)

	g.Expect(gatewaytest.Event(send(a, "a1"), "final")).To(HaveKeyWithValue("text", "answered"), "nothing used yet")
	e := gatewaytest.ErrorFrame(send(a, "a2"))
	g.Expect(e).To(HaveKeyWithValue("code", "budget_exhausted"))
	g.Expect(e["message"]).To(ContainSubstring("today's model budget of 1 tokens is spent (42 used)"))
	for _, id := range []string{"b1", "b2"} {
		g.Expect(gatewaytest.Event(send(b, id), "final")).To(HaveKeyWithValue("text", "answered"), id)
	}
}
