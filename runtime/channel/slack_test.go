package channel

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// slackSign returns Slack's v0 signature headers for body sent at ts.
func slackSign(secret string, ts time.Time, body []byte) map[string]string {
	s := fmt.Sprint(ts.Unix())
	m := hmac.New(sha256.New, []byte(secret))
	_, _ = fmt.Fprintf(m, "v0:%s:%s", s, body)
	return map[string]string{"X-Slack-Request-Timestamp": s, "X-Slack-Signature": "v0=" + hex.EncodeToString(m.Sum(nil))}
}

func form(r recorded) url.Values {
	v, _ := url.ParseQuery(string(r.Body))
	return v
}

// newFakeSlack answers chat.postMessage and the external upload flow.
func newFakeSlack(t *testing.T) *fakeAPI {
	f := newFakeAPI(t, lastSegment)
	n := 0
	f.route("chat.postMessage", func(r recorded) canned {
		if r.Header.Get("Authorization") != "Bearer xoxb-test" && form(r).Get("token") != "xoxb-test" {
			return canned{body: map[string]any{"ok": false, "error": "invalid_auth"}}
		}
		n++
		return canned{body: map[string]any{"ok": true, "channel": form(r).Get("channel"), "ts": fmt.Sprintf("1700000000.00000%d", n)}}
	})
	f.route("files.getUploadURLExternal", func(recorded) canned {
		return canned{body: map[string]any{"ok": true, "upload_url": f.URL + "/upload/F0123", "file_id": "F0123"}}
	})
	f.route("F0123", func(recorded) canned { return canned{body: []byte("OK - 3")} })
	f.route("files.completeUploadExternal", func(recorded) canned {
		return canned{body: map[string]any{"ok": true, "files": []map[string]any{{"id": "F0123", "title": "chart.png"}}}}
	})
	return f
}

func slackEnv(t testing.TB, api *fakeAPI) *testEnv {
	return newEnv(t, Options{BaseURLs: BaseURLs{Slack: api.URL + "/api/"}}, []picobotv1alpha1.Channel{ch(TypeSlack, "", "sl")},
		map[string]map[string]string{"sl": {KeySlackBotToken: "xoxb-test", KeySlackSigningSecret: slackSecret}})
}

func TestSlackWebhook(t *testing.T) {
	g := NewWithT(t)
	e := slackEnv(t, newFakeSlack(t))
	path := HookPath(tenant, agentName, "slack")
	send := func(name string, extra map[string]string) (int, map[string]any) {
		body := testdata(t, name)
		h := slackSign(slackSecret, time.Now(), body)
		for k, v := range extra {
			h[k] = v
		}
		return e.post(t, path, body, h)
	}

	status, ans := send("slack_url_verification.json", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(Equal(map[string]any{"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}))

	status, _ = send("slack_event_message_im.json", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(e.box.all()).To(HaveLen(1))
	g.Expect(e.box.all()[0].In).To(Equal(Inbound{Channel: "slack", Type: TypeSlack, ChatID: "D024BE91L",
		MessageID: "1355517523.000005", Sender: "U2147483697", Text: "Hello hello can you hear me?",
		Time: time.UnixMilli(1355517523000).UTC()}))

	// Slack retries an event it got no timely 200 for, marking the retry.
	status, ans = send("slack_event_message_im.json", map[string]string{HeaderSlackRetryNum: "1", "X-Slack-Retry-Reason": "http_timeout"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(HaveKeyWithValue("duplicate", true))
	g.Expect(e.box.all()).To(HaveLen(1))

	// A mention arrives as app_mention and as message: handed on once.
	status, _ = send("slack_event_app_mention.json", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	status, ans = send("slack_event_message_channels.json", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(HaveKeyWithValue("duplicate", true))
	g.Expect(e.box.all()).To(HaveLen(2))
	g.Expect(e.box.all()[1].In.Text).To(Equal("<@U0LAN0Z89> is it everything a river should be?"))

	// Bots, ourselves included, are not answered.
	status, _ = send("slack_event_bot_message.json", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	own := strings.Replace(string(testdata(t, "slack_event_message_im.json")), `"user": "U2147483697"`, `"user": "U0BOTUSER1"`, 1)
	own = strings.Replace(own, "Ev08MFMKH6", "Ev08OWN", 1)
	status, _ = e.post(t, path, []byte(own), slackSign(slackSecret, time.Now(), []byte(own)))
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(e.box.all()).To(HaveLen(2))
}

func TestSlackWebhookRefusals(t *testing.T) {
	e := slackEnv(t, newFakeSlack(t))
	path := HookPath(tenant, agentName, "slack")
	body := testdata(t, "slack_event_message_im.json")
	for _, tc := range []struct {
		name   string
		body   []byte
		header map[string]string
		status int
		code   string
	}{
		{"unsigned", body, nil, 401, CodeBadSignature},
		{"forged", body, slackSign("not-the-secret", time.Now(), body), 401, CodeBadSignature},
		{"body changed", []byte(strings.Replace(string(body), "hear me", "HEAR ME", 1)), slackSign(slackSecret, time.Now(), body), 401, CodeBadSignature},
		{"replayed", body, slackSign(slackSecret, time.Now().Add(-6*time.Minute), body), 401, CodeStaleTimestamp},
		{"from the future", body, slackSign(slackSecret, time.Now().Add(6*time.Minute), body), 401, CodeStaleTimestamp},
		{"malformed", []byte(`{"type":"event_callback",`), slackSign(slackSecret, time.Now(), []byte(`{"type":"event_callback",`)), 400, CodeMalformed},
		{"no event id", []byte(`{"type":"event_callback","event":{"type":"message"}}`),
			slackSign(slackSecret, time.Now(), []byte(`{"type":"event_callback","event":{"type":"message"}}`)), 400, CodeBadRequest},
		{"bad inner event", []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":5}}`),
			slackSign(slackSecret, time.Now(), []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":5}}`)), 400, CodeMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, ans := e.post(t, path, tc.body, tc.header)
			g.Expect(status).To(Equal(tc.status))
			g.Expect(errorCode(ans)).To(Equal(tc.code))
		})
	}
	NewWithT(t).Expect(e.box.all()).To(BeEmpty())
}

func TestSlackSend(t *testing.T) {
	g := NewWithT(t)
	api := newFakeSlack(t)
	e := slackEnv(t, api)
	c, err := e.m.Lookup(tenant, agentName, "slack")
	g.Expect(err).NotTo(HaveOccurred())

	r, err := c.Send(t.Context(), Outbound{ChatID: "C123ABC456", Text: "Hello *world*",
		Files: []File{{Name: "chart.png", MediaType: "image/png", Data: []byte("PNG")}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.MessageIDs).To(Equal([]string{"1700000000.000001", "F0123"}))
	post := form(api.requests("chat.postMessage")[0])
	g.Expect(post.Get("channel")).To(Equal("C123ABC456"))
	g.Expect(post.Get("text")).To(Equal("Hello *world*"))
	up := form(api.requests("files.getUploadURLExternal")[0])
	g.Expect(up.Get("filename")).To(Equal("chart.png"))
	g.Expect(up.Get("length")).To(Equal("3"))
	g.Expect(api.requests("F0123")[0].Files["file"].Data).To(Equal([]byte("PNG")))
	done := form(api.requests("files.completeUploadExternal")[0])
	g.Expect(done.Get("channel_id")).To(Equal("C123ABC456"))
	g.Expect(done.Get("files")).To(ContainSubstring(`"id":"F0123"`))
}

func TestSlackSendErrors(t *testing.T) {
	api := newFakeSlack(t)
	e := slackEnv(t, api)
	c, _ := e.m.Lookup(tenant, agentName, "slack")
	checkSendErrors(t, api, "chat.postMessage", c, "C1", []sendErrorCase{
		{"HTTP 429", canned{status: 429, header: map[string]string{"Retry-After": "30"}, body: []byte("")}, true, 30 * time.Second, "ratelimited"},
		{"ok false ratelimited", canned{body: map[string]any{"ok": false, "error": "ratelimited"}}, true, 0, "ratelimited"},
		{"channel not found", canned{body: map[string]any{"ok": false, "error": "channel_not_found"}}, false, 0, "channel_not_found"},
		{"not in channel", canned{body: map[string]any{"ok": false, "error": "not_in_channel"}}, false, 0, "not_in_channel"},
		{"server error", canned{status: 503, body: []byte("<html>")}, true, 0, ""},
	})
}
