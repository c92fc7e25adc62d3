package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster/wake"
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
		st.waitReady(t, ns, "helper")
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

// sendOnce sends "hello" to the tenant's agent helper through gateway gw
// over REST, once the operator has published the tenant's API key to the
// gateways (until then the key is refused), and returns the status and
// body.
func sendOnce(t *testing.T, gw, key, id, chat string) (int, gatewaytest.Frame) {
	t.Helper()
	c := gatewaytest.Client{URL: gw, Key: key}
	var status int
	var body gatewaytest.Frame
	NewWithT(t).Eventually(func() int {
		status, body = c.Do(t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": chat, "text": "hello"})
		return status
	}, 90*time.Second, 250*time.Millisecond).ShouldNot(Equal(http.StatusUnauthorized))
	return status, body
}

// secondGateway starts another gateway replica on the stack's PostgreSQL,
// Redis and API server, with extra flags, and returns its URL.
func secondGateway(t *testing.T, extra ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway-2.log")
	urlc := make(chan string, 1)
	args := append([]string{"gateway", "--addr=127.0.0.1:0", "--blob-addr=", "--reply-timeout=2m", "--namespace=" + systemNamespace}, extra...)
	stop, err := st.spawn(path, func(line string) {
		if m := servingRE.FindStringSubmatch(line); m != nil {
			urlc <- m[1]
		}
	}, st.picobot, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	select {
	case u := <-urlc:
		return u
	case <-time.After(2 * time.Minute):
		t.Fatalf("the second gateway did not start; log:\n%s", tail(path, 40))
		return ""
	}
}

// TestTenantQuotaCapsAtTheGateways: two gateway replicas enforce one
// session cap per tenant between them (the counts are in the shared
// Redis): tenant A's chats opened through either fill its
// maxConcurrentSessions of 2, and a third chat is refused with
// session_limit through both, while its open chats go on; a tenant with
// messagesPerMinute 0 has every message refused with message_limit; a
// tenant without a quota is served through both.
func TestTenantQuotaCapsAtTheGateways(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "answered"} })
	capped, muted, free := "tenant-caps-a", "tenant-caps-m", "tenant-caps-b"
	for _, ns := range []string{capped, muted, free} {
		st.apply(t, fmt.Sprintf(tenantManifest, ns, ns+"-key", st.llm.URL(), "1m", 0))
	}
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: %s}
spec:
  maxConcurrentSessions: 2
---
apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: %s}
spec:
  messagesPerMinute: 0
`, capped, muted))
	for _, ns := range []string{capped, muted, free} {
		st.waitReady(t, ns, "helper")
	}
	gw2 := secondGateway(t)
	send := func(gw, key, id, chat string) (int, gatewaytest.Frame) { return sendOnce(t, gw, key, id, chat) }
	code := func(body gatewaytest.Frame) any {
		e, _ := body["error"].(map[string]any)
		return e["code"]
	}
	a := capped + "-key"
	status, body := send(st.gatewayURL, a, "a1", "c1")
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	status, body = send(gw2, a, "a2", "c2")
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	for _, gw := range []string{st.gatewayURL, gw2} {
		status, body = send(gw, a, "a3", "c3")
		g.Expect(status).To(Equal(http.StatusTooManyRequests), "%v", body)
		g.Expect(code(body)).To(Equal("session_limit"))
		g.Expect(body["error"].(map[string]any)["message"]).To(ContainSubstring("this workspace has 2 sessions open, the most its quota allows (maxConcurrentSessions)"))
	}
	status, body = send(gw2, a, "a4", "c1")
	g.Expect(status).To(Equal(http.StatusOK), "an open chat goes on through the other replica: %v", body)

	for _, gw := range []string{st.gatewayURL, gw2} {
		status, body = send(gw, muted+"-key", "m1", "c1")
		g.Expect(status).To(Equal(http.StatusTooManyRequests), "%v", body)
		g.Expect(code(body)).To(Equal("message_limit"))
	}
	// A chat platform's chat (a webhook channel) of the muted tenant is
	// told why through the outbound stream, once a minute however many of
	// its messages are refused, through either replica; nothing is queued
	// for a session pod.
	st.apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: alerts, namespace: %[1]s}
stringData: {signingSecret: s3cret, url: "http://127.0.0.1:9/unused"}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: hooked, namespace: %[1]s}
spec:
  model: {provider: openai, model: fake-model, baseURL: %[2]s, apiKeySecretRef: {name: model-key, key: apiKey}}
  channels:
  - {type: webhook, name: alerts, secretRef: {name: alerts}}
`, muted, st.llm.URL()))
	hook := func(gw, id string) int {
		body := fmt.Appendf(nil, `{"chat_id":"room1","message_id":%q,"text":"status?"}`, id)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, err := http.NewRequest(http.MethodPost, gw+"/hooks/"+muted+"/hooked/alerts", bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set(channel.HeaderPicoBotTimestamp, ts)
		req.Header.Set(channel.HeaderPicoBotSignature, channel.WebhookSignature("s3cret", ts, body))
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// Both replicas set the channel up once the operator published its
	// credentials.
	for i, gw := range []string{st.gatewayURL, gw2} {
		g.Eventually(func() int { return hook(gw, fmt.Sprint("h", i)) }, 90*time.Second, 250*time.Millisecond).Should(Equal(http.StatusOK))
	}
	g.Expect(hook(st.gatewayURL, "h2")).To(Equal(http.StatusOK))
	entries, err := st.redis.XRange(context.Background(), wake.OutboundStream(muted), "-", "+").Result()
	g.Expect(err).NotTo(HaveOccurred())
	var told []string
	for _, e := range entries {
		var req wake.OutboundRequest
		g.Expect(json.Unmarshal([]byte(fmt.Sprint(e.Values["p"])), &req)).To(Succeed())
		if req.Message.Target == "alerts:room1" {
			told = append(told, req.Message.Text)
		}
	}
	g.Expect(told).To(HaveLen(1), "three refused messages, one notice: %v", told)
	g.Expect(told[0]).To(ContainSubstring("the most its quota allows (messagesPerMinute)"))

	for i, gw := range []string{st.gatewayURL, gw2, st.gatewayURL} {
		status, body = send(gw, free+"-key", fmt.Sprint("b", i), fmt.Sprint("c", i))
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
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
		st.waitReady(t, ns, "helper")
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

// TestQuotaDefaultsAtTheGateway: a gateway given the platform's default
// quota (the chart's quotaDefaults, here messagesPerMinute 0) refuses the
// messages of a tenant without a TenantQuota with message_limit, while a
// tenant whose TenantQuota sets its own messagesPerMinute is served by it,
// and the stack's gateway, without defaults, serves both.
func TestQuotaDefaultsAtTheGateway(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "answered"} })
	bare, own := "tenant-defaults-a", "tenant-defaults-b"
	for _, ns := range []string{bare, own} {
		st.apply(t, fmt.Sprintf(tenantManifest, ns, ns+"-key", st.llm.URL(), "1m", 0))
	}
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: %s}
spec:
  messagesPerMinute: 100
`, own))
	for _, ns := range []string{bare, own} {
		st.waitReady(t, ns, "helper")
	}
	withDefaults := secondGateway(t, `--quota-defaults={"messagesPerMinute":0}`)
	send := func(gw, key, id string) (int, gatewaytest.Frame) { return sendOnce(t, gw, key, id, "c1") }
	status, body := send(withDefaults, bare+"-key", "d1")
	g.Expect(status).To(Equal(http.StatusTooManyRequests), "%v", body)
	g.Expect(body["error"].(map[string]any)["code"]).To(Equal("message_limit"))
	status, body = send(withDefaults, own+"-key", "d2")
	g.Expect(status).To(Equal(http.StatusOK), "the tenant's own messagesPerMinute wins: %v", body)
	status, body = send(st.gatewayURL, bare+"-key", "d3")
	g.Expect(status).To(Equal(http.StatusOK), "a gateway without defaults: %v", body)
}
