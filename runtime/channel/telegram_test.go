package channel

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

const tgToken = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"

// newFakeTelegram answers the Bot API methods PicoBot uses.
func newFakeTelegram(t *testing.T) *fakeAPI {
	f := newFakeAPI(t, lastSegment)
	next := 100
	var mu sync.Mutex
	sent := func(recorded) canned {
		mu.Lock()
		defer mu.Unlock()
		next++
		return canned{body: map[string]any{"ok": true, "result": map[string]any{"message_id": next}}}
	}
	for _, m := range []string{"sendMessage", "sendPhoto", "sendDocument"} {
		f.route(m, sent)
	}
	for _, m := range []string{"deleteWebhook", "setWebhook"} {
		f.route(m, func(recorded) canned { return canned{body: map[string]any{"ok": true, "result": true}} })
	}
	f.route("getFile", func(recorded) canned {
		return canned{body: map[string]any{"ok": true, "result": map[string]any{"file_id": "x", "file_size": 5, "file_path": "photos/file_1.jpg"}}}
	})
	f.route("file_1.jpg", func(recorded) canned { return canned{body: []byte("JPEG!")} })
	return f
}

func telegramEnv(t testing.TB, api *fakeAPI, webhookSecret string, opts Options) *testEnv {
	kv := map[string]string{KeyTelegramToken: tgToken}
	if webhookSecret != "" {
		kv[KeyTelegramWebhookSecret] = webhookSecret
	}
	opts.BaseURLs.Telegram = api.URL
	return newEnv(t, opts, []picobotv1alpha1.Channel{ch(TypeTelegram, "", "tg")}, map[string]map[string]string{"tg": kv})
}

func TestTelegramWebhook(t *testing.T) {
	g := NewWithT(t)
	e := telegramEnv(t, newFakeTelegram(t), "s3cret-token", Options{})
	path := HookPath(tenant, agentName, "telegram")
	auth := map[string]string{HeaderTelegramSecret: "s3cret-token"}

	status, ans := e.post(t, path, testdata(t, "telegram_update_text.json"), auth)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(HaveKeyWithValue("ok", true))
	status, _ = e.post(t, path, testdata(t, "telegram_update_photo.json"), auth)
	g.Expect(status).To(Equal(http.StatusOK))
	status, _ = e.post(t, path, testdata(t, "telegram_update_document.json"), auth)
	g.Expect(status).To(Equal(http.StatusOK))

	got := e.box.all()
	g.Expect(got).To(HaveLen(3))
	g.Expect(got[0].Tenant).To(Equal(tenant))
	g.Expect(got[0].Agent).To(Equal(agentName))
	g.Expect(got[0].In).To(Equal(Inbound{Channel: "telegram", Type: TypeTelegram, ChatID: "1111111", MessageID: "1365",
		Sender: "1111111", SenderName: "Testusername", Text: "/start", Time: time.Unix(1441645532, 0).UTC()}))
	g.Expect(got[1].In.ChatID).To(Equal("-1001234567890"))
	g.Expect(got[1].In.Text).To(Equal("what is in this picture?"), "the caption is the text")
	g.Expect(got[1].In.Files).To(Equal([]File{{Name: "photo.jpg", MediaType: "image/jpeg", Size: 84325, Ref: "AgACAgIAAxkBAAIBZ2Large"}}))
	g.Expect(got[2].In.SenderName).To(Equal("Test Firstname Test Lastname"))
	g.Expect(got[2].In.Files).To(Equal([]File{{Name: "report.pdf", MediaType: "application/pdf", Size: 20480, Ref: "BQACAgIAAxkBAAIBaGDocument"}}))

	// Telegram redelivers an update it got no 200 for: handed on once.
	status, ans = e.post(t, path, testdata(t, "telegram_update_text.json"), auth)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(HaveKeyWithValue("duplicate", true))
	g.Expect(e.box.all()).To(HaveLen(3))

	// Edits and other non-message updates are acknowledged and dropped.
	status, _ = e.post(t, path, testdata(t, "telegram_update_edited.json"), auth)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(e.box.all()).To(HaveLen(3))
}

func TestTelegramWebhookRefusals(t *testing.T) {
	e := telegramEnv(t, newFakeTelegram(t), "s3cret-token", Options{})
	path := HookPath(tenant, agentName, "telegram")
	for _, tc := range []struct {
		name   string
		body   string
		header map[string]string
		status int
		code   string
	}{
		{"no secret", string(testdata(t, "telegram_update_text.json")), nil, 401, CodeBadSignature},
		{"forged secret", string(testdata(t, "telegram_update_text.json")), map[string]string{HeaderTelegramSecret: "s3cret-tokem"}, 401, CodeBadSignature},
		{"malformed JSON", `{"update_id": 1, "message": {`, map[string]string{HeaderTelegramSecret: "s3cret-token"}, 400, CodeMalformed},
		{"no update_id", `{"message": {"message_id": 1}}`, map[string]string{HeaderTelegramSecret: "s3cret-token"}, 400, CodeBadRequest},
		{"wrong types", `{"update_id": "one"}`, map[string]string{HeaderTelegramSecret: "s3cret-token"}, 400, CodeMalformed},
		{"no chat", `{"update_id": 5, "message": {"message_id": 1, "from": {"id": 1}, "text": "x"}}`, map[string]string{HeaderTelegramSecret: "s3cret-token"}, 400, CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status, ans := e.post(t, path, []byte(tc.body), tc.header)
			g.Expect(status).To(Equal(tc.status))
			g.Expect(errorCode(ans)).To(Equal(tc.code))
		})
	}
	NewWithT(t).Expect(e.box.all()).To(BeEmpty(), "nothing refused is handed on")
}

func TestTelegramWebhookRetriesAfterHandlerFailure(t *testing.T) {
	g := NewWithT(t)
	e := telegramEnv(t, newFakeTelegram(t), "s3cret-token", Options{})
	path := HookPath(tenant, agentName, "telegram")
	auth := map[string]string{HeaderTelegramSecret: "s3cret-token"}
	e.box.failNext(1)
	status, ans := e.post(t, path, testdata(t, "telegram_update_text.json"), auth)
	g.Expect(status).To(Equal(http.StatusServiceUnavailable), "a 5xx makes Telegram deliver the update again")
	g.Expect(errorCode(ans)).To(Equal(CodeUnavailable))
	status, ans = e.post(t, path, testdata(t, "telegram_update_text.json"), auth)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).NotTo(HaveKey("duplicate"), "the failed attempt did not count as seen")
	g.Expect(e.box.all()).To(HaveLen(1))
}

func TestTelegramLongPolling(t *testing.T) {
	g := NewWithT(t)
	api := newFakeTelegram(t)
	var mu sync.Mutex
	pending := [][]byte{testdata(t, "telegram_getupdates.json")}
	api.route("getUpdates", func(r recorded) canned {
		mu.Lock()
		defer mu.Unlock()
		offset := int64(r.JSON()["offset"].(float64))
		var all struct {
			Result []json.RawMessage `json:"result"`
		}
		for _, p := range pending {
			var page struct {
				Result []json.RawMessage `json:"result"`
			}
			_ = json.Unmarshal(p, &page)
			all.Result = append(all.Result, page.Result...)
		}
		var out []json.RawMessage
		for _, u := range all.Result {
			var head struct {
				UpdateID int64 `json:"update_id"`
			}
			_ = json.Unmarshal(u, &head)
			if head.UpdateID >= offset {
				out = append(out, u)
			}
		}
		if len(out) == 0 {
			time.Sleep(5 * time.Millisecond) // a long poll that found nothing
		}
		return canned{body: map[string]any{"ok": true, "result": out}}
	})
	e := telegramEnv(t, api, "", Options{PollTimeout: time.Second})
	g.Expect(e.m.Status(tenant, agentName)).To(Equal([]Status{{Name: "telegram", Type: TypeTelegram, Ready: true, Mode: "polling"}}))
	e.box.failNext(1) // the first hand-on fails: the update must come again
	e.start(t)

	// The failure backs off on the injected clock.
	g.Eventually(e.clock.HasWaiters).Should(BeTrue())
	e.clock.Step(time.Second)
	g.Eventually(func() int { return len(e.box.all()) }).Should(Equal(2))
	got := e.box.all()
	g.Expect(got[0].In.Text).To(Equal("hello"))
	g.Expect(got[1].In.Text).To(Equal("are you there?"))
	g.Expect(got[0].In.SenderName).To(Equal("ann"))

	// Later polls confirm what was handed on.
	g.Eventually(func() float64 {
		reqs := api.requests("getUpdates")
		return reqs[len(reqs)-1].JSON()["offset"].(float64)
	}).Should(BeEquivalentTo(20002))
	g.Expect(api.requests("deleteWebhook")).To(HaveLen(1), "getUpdates needs the webhook removed")
	first := api.requests("getUpdates")[0].JSON()
	g.Expect(first).To(HaveKeyWithValue("timeout", BeEquivalentTo(1)))
	g.Expect(first).To(HaveKeyWithValue("allowed_updates", ConsistOf("message")))

	// A webhook request to a polling channel is refused.
	status, ans := e.post(t, HookPath(tenant, agentName, "telegram"), testdata(t, "telegram_update_text.json"), nil)
	g.Expect(status).To(Equal(http.StatusNotFound))
	g.Expect(errorCode(ans)).To(Equal(CodeWebhookDisabled))
	g.Expect(e.box.all()).To(HaveLen(2))
}

func TestTelegramRegistersWebhookAtPublicURL(t *testing.T) {
	g := NewWithT(t)
	api := newFakeTelegram(t)
	api.failNext("setWebhook", canned{status: 502, body: []byte("bad gateway")})
	e := telegramEnv(t, api, "s3cret-token", Options{PublicURL: "https://bot.example.com/"})
	e.start(t)
	g.Eventually(e.clock.HasWaiters).Should(BeTrue(), "backs off after the 502")
	e.clock.Step(time.Second)
	g.Eventually(func() int { return len(api.requests("setWebhook")) }).Should(Equal(2))
	g.Expect(api.requests("setWebhook")[1].JSON()).To(And(
		HaveKeyWithValue("url", "https://bot.example.com/hooks/team-a/bot/telegram"),
		HaveKeyWithValue("secret_token", "s3cret-token")))
	g.Expect(api.requests("getUpdates")).To(BeEmpty())
}

func TestTelegramSend(t *testing.T) {
	g := NewWithT(t)
	api := newFakeTelegram(t)
	e := telegramEnv(t, api, "", Options{})
	c, err := e.m.Lookup(tenant, agentName, "telegram")
	g.Expect(err).NotTo(HaveOccurred())

	r, err := c.Send(t.Context(), Outbound{ChatID: "1111111", Text: "hi there"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.MessageIDs).To(Equal([]string{"101"}))
	req := api.requests("sendMessage")[0]
	g.Expect(req.JSON()).To(Equal(map[string]any{"chat_id": "1111111", "text": "hi there"}))

	// A long text is cut at Telegram's 4096 characters, between lines.
	long := strings.Repeat("line of text\n", 400)
	r, err = c.Send(t.Context(), Outbound{ChatID: "1", Text: long})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.MessageIDs).To(HaveLen(2))
	msgs := api.requests("sendMessage")[1:]
	g.Expect(msgs[0].JSON()["text"].(string) + msgs[1].JSON()["text"].(string)).To(Equal(long))
	g.Expect(msgs[0].JSON()["text"]).To(HaveSuffix("\n"))

	// One file takes a short text as caption; pictures go as photos.
	_, err = c.Send(t.Context(), Outbound{ChatID: "1", Text: "the chart", Files: []File{{Name: "chart.png", MediaType: "image/png", Data: []byte("PNG")}}})
	g.Expect(err).NotTo(HaveOccurred())
	photo := api.requests("sendPhoto")[0]
	g.Expect(photo.Form).To(Equal(map[string]string{"chat_id": "1", "caption": "the chart"}))
	g.Expect(photo.Files["photo"]).To(Equal(recordedFile{Name: "chart.png", MediaType: "image/png", Data: []byte("PNG")}))

	// Several files: the text first, then each file.
	_, err = c.Send(t.Context(), Outbound{ChatID: "1", Text: "two files", Files: []File{
		{Name: "a.pdf", MediaType: "application/pdf", Data: []byte("%PDF")}, {Name: "b.jpg", MediaType: "image/jpeg", Data: []byte("JPG")}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(api.requests("sendMessage")).To(HaveLen(4))
	g.Expect(api.requests("sendDocument")[0].Files["document"].Name).To(Equal("a.pdf"))
	g.Expect(api.requests("sendPhoto")).To(HaveLen(2))
	g.Expect(api.requests("sendPhoto")[1].Form).NotTo(HaveKey("caption"))

	// The token never leaks into errors, even of network failures.
	bad := telegramEnv(t, &fakeAPI{Server: newClosedServer(t)}, "", Options{})
	bc, _ := bad.m.Lookup(tenant, agentName, "telegram")
	_, err = bc.Send(t.Context(), Outbound{ChatID: "1", Text: "x"})
	g.Expect(err).To(HaveOccurred())
	g.Expect(IsTransient(err)).To(BeTrue(), "a refused connection may work later")
	g.Expect(err.Error()).NotTo(ContainSubstring(tgToken))
}

func TestTelegramSendErrors(t *testing.T) {
	api := newFakeTelegram(t)
	e := telegramEnv(t, api, "", Options{})
	c, _ := e.m.Lookup(tenant, agentName, "telegram")
	checkSendErrors(t, api, "sendMessage", c, "1", []sendErrorCase{
		{"flood control", canned{status: 429, body: map[string]any{"ok": false, "error_code": 429,
			"description": "Too Many Requests: retry after 7", "parameters": map[string]any{"retry_after": 7}}}, true, 7 * time.Second, "429"},
		{"server error", canned{status: 502, body: []byte("<html>Bad Gateway</html>")}, true, 0, ""},
		{"chat not found", canned{status: 400, body: map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}}, false, 0, "400"},
		{"blocked", canned{status: 403, body: map[string]any{"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}}, false, 0, "403"},
		{"bad token", canned{status: 401, body: map[string]any{"ok": false, "error_code": 401, "description": "Unauthorized"}}, false, 0, "401"},
	})
}

func TestTelegramSendResumesAfterPartialFailure(t *testing.T) {
	g := NewWithT(t)
	api := newFakeTelegram(t)
	e := telegramEnv(t, api, "", Options{})
	c, _ := e.m.Lookup(tenant, agentName, "telegram")
	out := Outbound{ChatID: "1", Text: "report", Files: []File{{Name: "a.pdf", Data: []byte("A")}, {Name: "b.pdf", Data: []byte("B")}}}
	api.failNext("sendDocument", canned{status: 500, body: map[string]any{"ok": false, "error_code": 500, "description": "Internal"}})
	_, err := c.Send(t.Context(), out)
	g.Expect(err).To(HaveOccurred())
	g.Expect(PartsSent(err)).To(Equal(1), "the text went out before the first file failed")
	out.FromPart += PartsSent(err)
	r, err := c.Send(t.Context(), out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.MessageIDs).To(HaveLen(2))
	g.Expect(api.requests("sendMessage")).To(HaveLen(1), "the text is not sent twice")
	names := []string{}
	for _, r := range api.requests("sendDocument") {
		names = append(names, r.Files["document"].Name)
	}
	g.Expect(names).To(Equal([]string{"a.pdf", "a.pdf", "b.pdf"}))
}

// newClosedServer returns a server that no longer listens.
func newClosedServer(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.NotFoundHandler())
	s.Close()
	return s
}

func TestTelegramFetch(t *testing.T) {
	g := NewWithT(t)
	api := newFakeTelegram(t)
	e := telegramEnv(t, api, "", Options{})
	c, _ := e.m.Lookup(tenant, agentName, "telegram")
	data, err := c.(Fetcher).Fetch(t.Context(), File{Ref: "AgACAgIAAxkBAAIBZ2Large"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("JPEG!"))
	g.Expect(api.requests("getFile")[0].JSON()).To(HaveKeyWithValue("file_id", "AgACAgIAAxkBAAIBZ2Large"))
}

func TestSplitText(t *testing.T) {
	g := NewWithT(t)
	g.Expect(splitText("", 10)).To(BeEmpty())
	g.Expect(splitText("abc", 10)).To(Equal([]string{"abc"}))
	g.Expect(splitText("abcdefghij", 4)).To(Equal([]string{"abcd", "efgh", "ij"}))
	g.Expect(splitText("ab\ncdef", 5)).To(Equal([]string{"ab\n", "cdef"}))
	// Emoji take two UTF-16 units, as Telegram counts them.
	g.Expect(splitText("😀😀😀", 4)).To(Equal([]string{"😀😀", "😀"}))
	for i := range 50 {
		s := strings.Repeat("é"+strconv.Itoa(i), i)
		g.Expect(strings.Join(splitText(s, 7), "")).To(Equal(s))
	}
}
