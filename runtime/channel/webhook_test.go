package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

const hookSecret = "whsec-test"

func webhookEnv(t testing.TB, url string) *testEnv {
	kv := map[string]string{KeyWebhookSigningSecret: hookSecret}
	if url != "" {
		kv[KeyWebhookURL] = url
	}
	return newEnv(t, Options{}, []picobotv1alpha1.Channel{ch(TypeWebhook, "tickets", "wh")}, map[string]map[string]string{"wh": kv})
}

func picoSign(secret string, ts time.Time, body []byte) map[string]string {
	s := fmt.Sprint(ts.Unix())
	return map[string]string{HeaderPicoBotTimestamp: s, HeaderPicoBotSignature: WebhookSignature(secret, s, body)}
}

func TestWebhookInbound(t *testing.T) {
	g := NewWithT(t)
	e := webhookEnv(t, "")
	path := HookPath(tenant, agentName, "tickets")
	body := testdata(t, "webhook_inbound.json")

	status, ans := e.post(t, path, body, picoSign(hookSecret, e.clock.Now(), body))
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(Equal(map[string]any{"ok": true}))
	g.Expect(e.box.all()).To(HaveLen(1))
	g.Expect(e.box.all()[0].In).To(Equal(Inbound{Channel: "tickets", Type: TypeWebhook, ChatID: "ticket-4711", MessageID: "msg-1",
		Sender: "helpdesk", Text: "Please summarise ticket 4711.", Time: e.clock.Now().UTC()}))

	// A replay inside the window is a duplicate; outside it, refused.
	status, ans = e.post(t, path, body, picoSign(hookSecret, e.clock.Now(), body))
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(HaveKeyWithValue("duplicate", true))
	old := picoSign(hookSecret, e.clock.Now(), body)
	e.clock.Step(SignatureWindow + time.Second)
	status, ans = e.post(t, path, body, old)
	g.Expect(status).To(Equal(http.StatusUnauthorized))
	g.Expect(errorCode(ans)).To(Equal(CodeStaleTimestamp))
	g.Expect(e.box.all()).To(HaveLen(1))
}

func TestWebhookInboundRefusals(t *testing.T) {
	e := webhookEnv(t, "")
	path := HookPath(tenant, agentName, "tickets")
	now := e.clock.Now()
	signed := func(body string) ([]byte, map[string]string) {
		return []byte(body), picoSign(hookSecret, now, []byte(body))
	}
	for _, tc := range []struct {
		name   string
		body   string
		header func(body []byte) map[string]string
		status int
		code   string
	}{
		{"unsigned", `{"chat_id":"c","message_id":"m","text":"t"}`, func([]byte) map[string]string { return nil }, 401, CodeBadSignature},
		{"forged", `{"chat_id":"c","message_id":"m","text":"t"}`, func(b []byte) map[string]string { return picoSign("guess", now, b) }, 401, CodeBadSignature},
		{"bad timestamp", `{"chat_id":"c","message_id":"m","text":"t"}`, func(b []byte) map[string]string {
			return map[string]string{HeaderPicoBotTimestamp: "yesterday", HeaderPicoBotSignature: WebhookSignature(hookSecret, "yesterday", b)}
		}, 401, CodeBadSignature},
		{"future", `{"chat_id":"c","message_id":"m","text":"t"}`, func(b []byte) map[string]string { return picoSign(hookSecret, now.Add(10*time.Minute), b) }, 401, CodeStaleTimestamp},
		{"malformed", `{"chat_id":`, nil, 400, CodeMalformed},
		{"not an object", `["chat_id"]`, nil, 400, CodeMalformed},
		{"unknown field", `{"chat_id":"c","message_id":"m","text":"t","admin":true}`, nil, 400, CodeMalformed},
		{"trailing data", `{"chat_id":"c","message_id":"m","text":"t"} {}`, nil, 400, CodeMalformed},
		{"no chat", `{"message_id":"m","text":"t"}`, nil, 400, CodeBadRequest},
		{"no text", `{"chat_id":"c","message_id":"m","text":"  "}`, nil, 400, CodeBadRequest},
		{"newline in id", `{"chat_id":"c\n","message_id":"m","text":"t"}`, nil, 400, CodeBadRequest},
		{"long id", `{"chat_id":"` + strings.Repeat("c", 300) + `","message_id":"m","text":"t"}`, nil, 400, CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			body, h := signed(tc.body)
			if tc.header != nil {
				h = tc.header(body)
			}
			status, ans := e.post(t, path, body, h)
			g.Expect(status).To(Equal(tc.status))
			g.Expect(errorCode(ans)).To(Equal(tc.code))
		})
	}
	NewWithT(t).Expect(e.box.all()).To(BeEmpty())
}

func TestWebhookOutbound(t *testing.T) {
	g := NewWithT(t)
	api := newFakeAPI(t, urlPath)
	var mu sync.Mutex
	var verified []bool
	api.route("/inbox", func(r recorded) canned {
		ok := r.Header.Get(HeaderPicoBotSignature) == WebhookSignature(hookSecret, r.Header.Get(HeaderPicoBotTimestamp), r.Body)
		mu.Lock()
		verified = append(verified, ok)
		mu.Unlock()
		return canned{body: map[string]any{"message_id": "out-1"}}
	})
	e := webhookEnv(t, api.URL+"/inbox")
	c, _ := e.m.Lookup(tenant, agentName, "tickets")
	r, err := c.Send(t.Context(), Outbound{ChatID: "ticket-4711", Text: "Summary: all good", Files: []File{{Name: "../../etc/sum.txt", MediaType: "text/plain", Data: []byte("ok")}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.MessageIDs).To(Equal([]string{"out-1"}))
	g.Expect(verified).To(Equal([]bool{true}), "the receiver can check the signature")
	var got struct {
		ChatID string        `json:"chat_id"`
		Text   string        `json:"text"`
		Files  []webhookFile `json:"files"`
	}
	g.Expect(json.Unmarshal(api.requests("/inbox")[0].Body, &got)).To(Succeed())
	g.Expect(got.ChatID).To(Equal("ticket-4711"))
	g.Expect(got.Files).To(Equal([]webhookFile{{Name: "sum.txt", MediaType: "text/plain", Data: []byte("ok")}}))
	g.Expect(api.requests("/inbox")[0].Header.Get(HeaderPicoBotTimestamp)).To(Equal(fmt.Sprint(e.clock.Now().Unix())))

	for _, tc := range []struct {
		answer     canned
		transient  bool
		retryAfter time.Duration
	}{
		{canned{status: 429, header: map[string]string{"Retry-After": "12"}, body: []byte("slow down")}, true, 12 * time.Second},
		{canned{status: 500, body: []byte("oops")}, true, 0},
		{canned{status: 404, body: []byte("no such chat")}, false, 0},
	} {
		api.failNext("/inbox", tc.answer)
		_, err := c.Send(t.Context(), Outbound{ChatID: "x", Text: "y"})
		g.Expect(IsTransient(err)).To(Equal(tc.transient), "status %d", tc.answer.status)
		g.Expect(RetryAfter(err)).To(Equal(tc.retryAfter))
	}

	noURL := webhookEnv(t, "")
	c, _ = noURL.m.Lookup(tenant, agentName, "tickets")
	_, err = c.Send(t.Context(), Outbound{ChatID: "x", Text: "y"})
	g.Expect(err).To(MatchError(ContainSubstring(`add key "url" to its Secret`)))
	g.Expect(IsTransient(err)).To(BeFalse())
}

func TestHookRouting(t *testing.T) {
	e := webhookEnv(t, "")
	body := testdata(t, "webhook_inbound.json")
	auth := picoSign(hookSecret, e.clock.Now(), body)
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		status             int
		code               string
	}{
		{"unknown tenant", "POST", HookPath("team-z", agentName, "tickets"), body, 404, CodeUnknownTenant},
		{"unknown agent", "POST", HookPath(tenant, "nobody", "tickets"), body, 404, CodeUnknownAgent},
		{"unknown channel", "POST", HookPath(tenant, agentName, "fax"), body, 404, CodeUnknownChannel},
		{"not a hook path", "POST", "/hooks/" + tenant, body, 404, CodeUnknownChannel},
		{"GET", "GET", HookPath(tenant, agentName, "tickets"), nil, 405, CodeMethodNotAllowed},
		{"oversize", "POST", HookPath(tenant, agentName, "tickets"), bytes.Repeat([]byte("x"), MaxBodyBytes+1), 413, CodeTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req, _ := http.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			for k, v := range auth {
				req.Header.Set(k, v)
			}
			rec := newRecorder()
			e.h.ServeHTTP(rec, req)
			g.Expect(rec.Code).To(Equal(tc.status))
			var ans map[string]any
			g.Expect(json.Unmarshal(rec.Body.Bytes(), &ans)).To(Succeed())
			g.Expect(errorCode(ans)).To(Equal(tc.code))
			g.Expect(rec.Header().Get("Content-Type")).To(Equal("application/json"))
		})
	}
	t.Run("oversize without length", func(t *testing.T) {
		g := NewWithT(t)
		req, _ := http.NewRequest("POST", HookPath(tenant, agentName, "tickets"), struct{ *bytes.Reader }{bytes.NewReader(bytes.Repeat([]byte("x"), MaxBodyBytes+10))})
		req.ContentLength = -1
		rec := newRecorder()
		e.h.ServeHTTP(rec, req)
		g.Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
	})
	NewWithT(t).Expect(e.box.all()).To(BeEmpty())
}

func TestConcurrentRedeliveryIsRefusedWhileInFlight(t *testing.T) {
	g := NewWithT(t)
	e := webhookEnv(t, "")
	release := make(chan struct{})
	entered := make(chan struct{})
	e.m.opts.OnInbound = func(ctx context.Context, agent string, in Inbound) error {
		close(entered)
		<-release
		return e.box.handle(ctx, agent, in)
	}
	path := HookPath(tenant, agentName, "tickets")
	body := testdata(t, "webhook_inbound.json")
	first := make(chan int)
	go func() {
		status, _ := e.post(t, path, body, picoSign(hookSecret, e.clock.Now(), body))
		first <- status
	}()
	<-entered
	status, ans := e.post(t, path, body, picoSign(hookSecret, e.clock.Now(), body))
	g.Expect(status).To(Equal(http.StatusConflict), "the platform retries later, when the first outcome is known")
	g.Expect(errorCode(ans)).To(Equal(CodeInProgress))
	close(release)
	g.Expect(<-first).To(Equal(http.StatusOK))
	g.Expect(e.box.all()).To(HaveLen(1))
}

func TestSetAgentStatus(t *testing.T) {
	g := NewWithT(t)
	m := NewManager(Options{})
	err := m.SetAgent(tenant, agentSpec(
		ch(TypeWeb, "", ""),
		ch(TypeTelegram, "", ""),
		ch(TypeTelegram, "tg2", "missing"),
		ch(TypeSlack, "", "partial"),
		ch(TypeFeishu, "", "feishu-no-verify"),
		ch(TypeWebhook, "hook", "hook"),
		ch(TypeWebhook, "hook", "hook"),
	), func(name string) *corev1.Secret {
		switch name {
		case "partial":
			return secret(map[string]string{KeySlackBotToken: "xoxb"})
		case "feishu-no-verify":
			return secret(map[string]string{KeyFeishuAppID: "a", KeyFeishuAppSecret: "b"})
		case "hook":
			return secret(map[string]string{KeyWebhookSigningSecret: "s"})
		}
		return nil
	})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(
		ContainSubstring(`channel "telegram" of agent bot: a telegram channel needs secretRef`),
		ContainSubstring(`channel "tg2" of agent bot: secret "missing" not found`),
		ContainSubstring(`channel "slack" of agent bot: secret "partial" lacks key(s) signingSecret`),
		ContainSubstring(`needs verificationToken or encryptKey`),
		ContainSubstring(`another channel is already named "hook"`)))
	st := m.Status(tenant, agentName)
	g.Expect(st).To(HaveLen(7))
	g.Expect(st[0]).To(Equal(Status{Name: "web", Type: TypeWeb, Ready: true}))
	g.Expect(st[5]).To(Equal(Status{Name: "hook", Type: TypeWebhook, Ready: true, Mode: "webhook"}))
	g.Expect(st[1].Ready).To(BeFalse())

	_, err = m.Lookup(tenant, agentName, "slack")
	g.Expect(err).To(MatchError(ErrUnknownChannel))
	g.Expect(err).To(MatchError(ContainSubstring("its channels: hook")))
	_, err = m.Lookup(tenant, "other", "hook")
	g.Expect(err).To(MatchError(ErrUnknownAgent))
	g.Expect(m.Status(tenant, "other")).To(BeNil())

	m.RemoveAgent(tenant, agentName)
	_, err = m.Lookup(tenant, agentName, "hook")
	g.Expect(err).To(MatchError(ErrUnknownAgent))
}
