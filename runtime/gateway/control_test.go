package gateway_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coder/websocket"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

type frame = gatewaytest.Frame

const chatQuery = "?agent=assistant&chat_id=tab1"

func dialogURL(id, suffix string) string {
	return "/api/v1/dialogs/" + url.PathEscape(id) + suffix + chatQuery
}

func errCode(body frame) any {
	e, _ := body["error"].(map[string]any)
	return e["code"]
}

// TestControlChannelREST runs every dialog operation over REST, and the
// non-streaming send, checking bad input changes nothing.
func TestControlChannelREST(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	a := e.a

	status, body := a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "first"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("text", "echo: first"))
	g.Expect(body).To(HaveKeyWithValue("session", "web:assistant/tab1:default"))
	g.Expect(body).To(HaveKeyWithValue("duplicate", false))
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "first"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("duplicate", true))
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"agent": "assistant", "chat_id": "tab1", "text": "/info"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("command", "info"))
	g.Expect(body["id"]).To(HavePrefix("r-"), "an id is made up when the client sends none")

	status, body = a.Do(t, http.MethodPost, "/api/v1/dialogs"+chatQuery, frame{"title": "Trip plans"})
	g.Expect(status).To(Equal(http.StatusCreated), "%v", body)
	created := body["dialog"].(map[string]any)
	d2 := created["dialog_id"].(string)
	g.Expect(created).To(HaveKeyWithValue("title", "Trip plans"))
	g.Expect(body).To(HaveKeyWithValue("current", d2))
	status, body = a.Do(t, http.MethodPost, "/api/v1/dialogs"+chatQuery, nil)
	g.Expect(status).To(Equal(http.StatusCreated))
	d3 := body["dialog"].(map[string]any)["dialog_id"].(string)
	g.Expect(body["dialog"]).To(HaveKeyWithValue("title", "New conversation"))

	list := func() (string, []string) {
		status, body := a.Do(t, http.MethodGet, "/api/v1/dialogs"+chatQuery, nil)
		g.ExpectWithOffset(1, status).To(Equal(http.StatusOK))
		var ids []string
		for _, d := range body["dialogs"].([]any) {
			ids = append(ids, d.(map[string]any)["dialog_id"].(string)+"="+d.(map[string]any)["title"].(string))
		}
		return body["current"].(string), ids
	}
	cur, ids := list()
	g.Expect(cur).To(Equal(d3))
	g.Expect(ids).To(ConsistOf("default=first", d2+"=Trip plans", d3+"=New conversation"))

	status, body = a.Do(t, http.MethodPost, dialogURL(d2, "/switch"), nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("current", d2))
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m2", "agent": "assistant", "chat_id": "tab1", "text": "in trip"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("session", "web:assistant/tab1:"+d2))
	status, body = a.Do(t, http.MethodPatch, dialogURL(d3, ""), frame{"title": "  Groceries  "})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body["dialog"]).To(HaveKeyWithValue("title", "Groceries"))
	status, body = a.Do(t, http.MethodPost, dialogURL(d3, "/archive"), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body["dialog"]).To(HaveKeyWithValue("archived", true))
	status, body = a.Do(t, http.MethodDelete, dialogURL("default", ""), nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	cur, ids = list()
	g.Expect(cur).To(Equal(d2))
	g.Expect(ids).To(Equal([]string{d2 + "=Trip plans"}), "archived and deleted dialogs are not listed")
	status, body = a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("web:assistant/tab1:"+d2)+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body["messages"]).To(HaveLen(2))
	answer := body["messages"].([]any)[1].(map[string]any)
	g.Expect(answer).To(HaveKeyWithValue("role", "assistant"))
	g.Expect(answer["usage"]).To(HaveKeyWithValue("input_tokens", BeNumerically(">", 0)), "the turn's tokens come with its answer")
	g.Expect(body["messages"].([]any)[0]).NotTo(HaveKey("usage"))

	// Unknown things are 404 with specific codes; malformed input is 400;
	// neither changes anything.
	cases := []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{http.MethodPost, dialogURL("d_nothere", "/switch"), nil, 404, "unknown_dialog"},
		{http.MethodPatch, dialogURL("d_nothere", ""), frame{"title": "x"}, 404, "unknown_dialog"},
		{http.MethodPost, dialogURL("d_nothere", "/archive"), nil, 404, "unknown_dialog"},
		{http.MethodDelete, dialogURL("d_nothere", ""), nil, 404, "unknown_dialog"},
		{http.MethodDelete, dialogURL("default", ""), nil, 404, "unknown_dialog"}, // deleted already
		{http.MethodPost, "/api/v1/dialogs?agent=nobody&chat_id=tab1", nil, 404, "unknown_agent"},
		{http.MethodPost, "/api/v1/send", frame{"id": "x", "agent": "nobody", "chat_id": "tab1", "text": "hi"}, 404, "unknown_agent"},
		{http.MethodGet, "/api/v1/sessions/" + url.PathEscape("web:assistant/nobody:default") + "/messages", nil, 404, "unknown_session"},
		{http.MethodGet, "/api/v1/sessions/nonsense/messages", nil, 400, "bad_request"},
		{http.MethodGet, "/api/v1/artifacts/nothere", nil, 404, "unknown_artifact"},
		{http.MethodGet, "/api/v1/nothing", nil, 404, "not_found"},
		{http.MethodPatch, dialogURL(d2, ""), frame{"title": ""}, 400, "bad_request"},
		{http.MethodPatch, dialogURL(d2, ""), frame{"title": strings.Repeat("x", 201)}, 400, "bad_request"},
		{http.MethodPatch, dialogURL(d2, ""), frame{"title": "a\nb"}, 400, "bad_request"},
		{http.MethodPatch, dialogURL(d2, ""), frame{"name": "typo"}, 400, "bad_request"},
		{http.MethodPatch, dialogURL(d2, ""), `{"title":`, 400, "bad_request"},
		{http.MethodPatch, dialogURL(d2, ""), `{"title":"a"} {"title":"b"}`, 400, "bad_request"},
		{http.MethodPost, dialogURL("bad:id", "/switch"), nil, 400, "bad_request"},
		{http.MethodPost, "/api/v1/dialogs/" + d2 + "/switch?agent=assistant", nil, 400, "bad_request"},
		{http.MethodPost, "/api/v1/dialogs/" + d2 + "/switch?agent=assistant&chat_id=a/b", nil, 400, "bad_request"},
		{http.MethodPost, "/api/v1/dialogs/" + d2 + "/switch?agent=assistant&chat_id=tab1&channel=telegram", nil, 400, "bad_request"},
		{http.MethodPost, "/api/v1/dialogs" + chatQuery, frame{"title": "   "}, 400, "bad_request"},
		{http.MethodPost, "/api/v1/send", frame{"id": "x", "agent": "assistant", "chat_id": "tab1", "text": " "}, 400, "bad_request"},
		{http.MethodPost, "/api/v1/send", frame{"id": "x", "agent": "assistant", "chat_id": "tab1", "text": "a\x00b"}, 400, "bad_request"},
		{http.MethodPost, "/api/v1/send", frame{"id": "x", "agent": "assistant", "chat_id": "tab1", "text": strings.Repeat("a", gateway.MaxTextBytes+1)}, 400, "bad_request"},
		{http.MethodPost, "/api/v1/send", `[]`, 400, "bad_request"},
		{http.MethodPost, "/api/v1/send", `{"id":"x","agent":"assistant","chat_id":"tab1","text":"` + strings.Repeat("a", gateway.MaxBodyBytes) + `"}`, 413, "too_large"},
		{http.MethodPost, "/api/v1/stop", frame{"agent": "assistant"}, 400, "bad_request"},
	}
	for _, tc := range cases {
		status, body := a.Do(t, tc.method, tc.path, tc.body)
		g.Expect(status).To(Equal(tc.status), "%s %s: %v", tc.method, tc.path, body)
		g.Expect(errCode(body)).To(Equal(tc.code), "%s %s: %v", tc.method, tc.path, body)
	}
	cur, ids = list()
	g.Expect(cur).To(Equal(d2))
	g.Expect(ids).To(Equal([]string{d2 + "=Trip plans"}))
	g.Expect(e.llm.Requests()).To(HaveLen(2), "only the two good sends reached the model")

	status, body = a.Do(t, http.MethodPost, "/api/v1/stop", frame{"agent": "assistant", "chat_id": "tab1"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("stopped", false))
}

// TestControlChannelWebSocket runs every dialog operation as WebSocket
// frames.
func TestControlChannelWebSocket(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	ws := e.a.Dial(t)
	op := func(id, op string, extra frame) frame {
		f := frame{"type": "dialog", "id": id, "op": op, "agent": "assistant", "chat_id": "tab1"}
		for k, v := range extra {
			f[k] = v
		}
		return ws.Request(t, f)
	}
	r := op("1", "list", nil)
	g.Expect(r).To(HaveKeyWithValue("type", "dialog"))
	g.Expect(r).To(HaveKeyWithValue("current", ""))
	g.Expect(r["dialogs"]).To(BeEmpty())

	r = op("2", "create", frame{"title": "Work"})
	g.Expect(r).To(HaveKeyWithValue("op", "create"))
	work := r["dialog"].(map[string]any)["dialog_id"].(string)
	g.Expect(r).To(HaveKeyWithValue("current", work))
	fs := ws.Exchange(t, frame{"id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "hi"})
	g.Expect(fs[len(fs)-1]).To(HaveKeyWithValue("session", "web:assistant/tab1:"+work))

	r = op("3", "create", nil)
	home := r["dialog"].(map[string]any)["dialog_id"].(string)
	r = op("4", "rename", frame{"dialog_id": home, "title": "Home"})
	g.Expect(r["dialog"]).To(HaveKeyWithValue("title", "Home"))
	r = op("5", "switch", frame{"dialog_id": work})
	g.Expect(r).To(HaveKeyWithValue("current", work))
	r = op("6", "archive", frame{"dialog_id": home})
	g.Expect(r["dialog"]).To(HaveKeyWithValue("archived", true))
	r = op("7", "list", nil)
	g.Expect(r["dialogs"]).To(HaveLen(1))
	g.Expect(r).To(HaveKeyWithValue("current", work))
	r = op("8", "delete", frame{"dialog_id": work})
	g.Expect(r).To(HaveKeyWithValue("dialog_id", work))
	r = op("9", "list", nil)
	g.Expect(r["dialogs"]).To(BeEmpty())
	g.Expect(r).To(HaveKeyWithValue("current", ""))

	for _, tc := range []struct {
		op    string
		extra frame
		code  string
	}{
		{"switch", frame{"dialog_id": work}, "unknown_dialog"}, // deleted
		{"rename", frame{"dialog_id": "d_nothere", "title": "x"}, "unknown_dialog"},
		{"archive", frame{"dialog_id": "d_nothere"}, "unknown_dialog"},
		{"delete", frame{"dialog_id": "d_nothere"}, "unknown_dialog"},
		{"rename", frame{"dialog_id": home, "title": ""}, "bad_request"},
		{"switch", frame{"dialog_id": ""}, "bad_request"},
		{"explode", nil, "bad_request"},
		{"list", frame{"agent": "nobody"}, "unknown_agent"},
		{"list", frame{"chat_id": ""}, "bad_request"},
	} {
		r := op("bad-"+tc.op, tc.op, tc.extra)
		g.Expect(r).To(HaveKeyWithValue("type", "error"), "%s %v", tc.op, tc.extra)
		g.Expect(r).To(HaveKeyWithValue("code", tc.code), "%s %v", tc.op, tc.extra)
	}
	r = ws.Request(t, frame{"type": "stop", "id": "s", "agent": "assistant", "chat_id": "tab1"})
	g.Expect(r).To(HaveKeyWithValue("stopped", false))
	r = ws.Request(t, frame{"type": "stop", "id": "s2", "agent": "assistant", "chat_id": "a:b"})
	g.Expect(r).To(HaveKeyWithValue("code", "bad_request"))
	g.Expect(ws.Conn.Write(t.Context(), websocket.MessageText, []byte("not json"))).To(Succeed())
	r = ws.Read(t)
	g.Expect(r).To(HaveKeyWithValue("type", "error"))
	g.Expect(r).To(HaveKeyWithValue("code", "bad_request"))
	g.Expect(r["message"]).To(HavePrefix("frame is not valid JSON"))
	r = op("10", "list", nil) // the connection is still usable
	g.Expect(r).To(HaveKeyWithValue("type", "dialog"))
	g.Expect(e.llm.Requests()).To(HaveLen(1), "only the one good send reached the model")
}

// TestAuthAndLimits checks keys, tenants, rate limits and size limits.
func TestAuthAndLimits(t *testing.T) {
	g := NewWithT(t)
	limit := gateway.RateLimit{Rate: 0.001, Burst: 3}
	e := start(t, func(c *gateway.Config) {
		c.Auth = gateway.MustStaticKeys(
			gateway.StaticKey{ID: "a", Token: keyA, Tenant: "tenant-a", Limit: &limit},
			gateway.StaticKey{ID: "b", Token: keyB, Tenant: "tenant-b"})
		c.DefaultLimit = gateway.RateLimit{Rate: 1000, Burst: 1000}
	})
	e.echo()
	for _, key := range []string{"", "wrong", keyA + "x", strings.ToUpper(keyA)} {
		status, body := gatewaytest.Client{URL: e.url, Key: key}.Do(t, http.MethodGet, "/api/v1/agents", nil)
		g.Expect(status).To(Equal(http.StatusUnauthorized), key)
		g.Expect(errCode(body)).To(Equal("unauthorized"))
	}
	_, err := gatewaytest.Client{URL: e.url, Key: "wrong"}.DialErr(t.Context())
	g.Expect(err).To(MatchError(ContainSubstring("401")))
	status, _ := gatewaytest.Client{URL: e.url}.Do(t, http.MethodGet, "/api/v1/health", nil)
	g.Expect(status).To(Equal(http.StatusOK), "health needs no key (probes)")

	// Key a may make 3 requests, then gets 429 with Retry-After; key b is
	// not affected.
	for range 2 {
		status, _ := e.a.Do(t, http.MethodGet, "/api/v1/agents", nil)
		g.Expect(status).To(Equal(http.StatusOK))
	}
	ws := e.a.Dial(t) // the third
	ws.Write(t, frame{"type": "send", "id": "x", "agent": "assistant", "chat_id": "tab1", "text": "hi"})
	fs := ws.Until(t, "x", "done")
	errFrame := gatewaytest.ErrorFrame(fs)
	g.Expect(errFrame).To(HaveKeyWithValue("code", "rate_limited"))
	g.Expect(errFrame["retry_after_ms"]).To(BeNumerically(">", 1000))
	res, err := e.a.Request(http.MethodGet, "/api/v1/agents", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusTooManyRequests), "%s", res.Body)
	g.Expect(res.Header.Get("Retry-After")).To(MatchRegexp(`^[1-9][0-9]*$`))
	res, err = e.a.Request(http.MethodPost, "/v1/chat/completions", `{}`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusTooManyRequests))
	g.Expect(string(res.Body)).To(ContainSubstring(`"code":"rate_limit_exceeded"`))
	status, _ = gatewaytest.Client{URL: e.url, Key: keyB}.Do(t, http.MethodGet, "/api/v1/agents", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(e.llm.Requests()).To(BeEmpty())
}

// TestUIAndUnknownPaths checks the web UI is served beside the API, and
// unknown API paths answer in their API's shape after authentication.
func TestUIAndUnknownPaths(t *testing.T) {
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) { c.UI = fstest.MapFS{"index.html": {Data: []byte("<h1>PicoBot</h1>")}} })
	status, raw := e.a.Raw(t, http.MethodGet, "/", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(string(raw)).To(ContainSubstring("PicoBot"))
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodGet, "/api/v1/nothing", `"code":"not_found"`},
		{http.MethodPost, "/api/v1/agents", `"code":"not_found"`},
		{http.MethodGet, "/v1/embeddings", `"code":"unknown_url"`},
		{http.MethodDelete, "/v1/models", `"code":"unknown_url"`},
	} {
		status, raw := e.a.Raw(t, tc.method, tc.path, nil)
		g.Expect(status).To(Equal(http.StatusNotFound), tc.path)
		g.Expect(string(raw)).To(ContainSubstring(tc.want), tc.path)
		status, _ = gatewaytest.Client{URL: e.url}.Raw(t, tc.method, tc.path, nil)
		g.Expect(status).To(Equal(http.StatusUnauthorized), "unknown paths need a key too: %s", tc.path)
	}
	status, _ = e.a.Raw(t, http.MethodGet, "/api/v1/agents", nil)
	g.Expect(status).To(Equal(http.StatusOK))
}

func TestLoopbackNeedsLoopback(t *testing.T) {
	g := NewWithT(t)
	l := gateway.Loopback{Tenant: "default"}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	for addr, ok := range map[string]bool{"127.0.0.1:5000": true, "[::1]:5000": true, "192.0.2.7:5000": false, "garbage": false} {
		r.RemoteAddr = addr
		p, err := l.Authenticate(r, "")
		if ok {
			g.Expect(err).NotTo(HaveOccurred(), addr)
			g.Expect(p.Tenant).To(Equal("default"))
		} else {
			g.Expect(err).To(MatchError(gateway.ErrUnauthorized), addr)
		}
	}
	_, err := gateway.NewStaticKeys(gateway.StaticKey{Token: "t"})
	g.Expect(err).To(MatchError(ContainSubstring("needs a token and a tenant")))
	_, err = gateway.NewStaticKeys(gateway.StaticKey{Token: "t", Tenant: "a"}, gateway.StaticKey{Token: "t", Tenant: "b"})
	g.Expect(err).To(MatchError(ContainSubstring("given twice")))
}

func TestParseRateLimit(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]gateway.RateLimit{
		"10/s":          {Rate: 10, Burst: 10},
		"600/m":         {Rate: 10, Burst: 600},
		"600/m,burst=5": {Rate: 10, Burst: 5},
		" 36/h ":        {Rate: 0.01, Burst: 36},
		"unlimited":     gateway.Unlimited,
	} {
		got, err := gateway.ParseRateLimit(in)
		g.Expect(err).NotTo(HaveOccurred(), in)
		g.Expect(got).To(Equal(want), in)
	}
	for _, in := range []string{"", "10", "10/d", "-1/s", "0/s", "x/s", "10/s,burst=0", "10/s,bust=3", "NaN/s", "10/s,burst=2000000"} {
		_, err := gateway.ParseRateLimit(in)
		g.Expect(err).To(HaveOccurred(), in)
	}
}

// TestFailedTurnComesBackAfterReload: the error a failed turn's client was
// told comes back on its user message from GET …/messages, and only there:
// the model's later requests never see it, a resend of the same message is
// still "unanswered", and a turn that later gets an answer shows none.
func TestFailedTurnComesBackAfterReload(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	a := e.a
	e.llm.Script(fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: `{"error":{"message":"prompt is too long","type":"invalid_request_error"}}`})
	status, body := a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "summarise the book"})
	g.Expect(status).To(Equal(http.StatusBadRequest), "%v", body)
	g.Expect(errCode(body)).To(Equal("model_rejected"))
	told := body["error"].(map[string]any)["message"]
	g.Expect(told).To(ContainSubstring("prompt is too long"))

	e.echo()
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m2", "agent": "assistant", "chat_id": "tab1", "text": "a shorter one then"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "summarise the book"})
	g.Expect(errCode(body)).To(Equal("unanswered"), "%d %v: overtaken by m2", status, body)

	// m3 fails, and its resend (same id, not overtaken) resumes and answers.
	e.llm.Script(fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: `{"error":{"message":"prompt is too long","type":"invalid_request_error"}}`})
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m3", "agent": "assistant", "chat_id": "tab1", "text": "try again"})
	g.Expect(errCode(body)).To(Equal("model_rejected"), "%d %v", status, body)
	e.echo()
	status, body = a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m3", "agent": "assistant", "chat_id": "tab1", "text": "try again"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)

	status, body = a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("web:assistant/tab1:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	msgs := body["messages"].([]any)
	g.Expect(msgs).To(HaveLen(5))
	first := msgs[0].(map[string]any)
	g.Expect(first).To(HaveKeyWithValue("content", "summarise the book"))
	g.Expect(first).To(HaveKeyWithValue("error", map[string]any{"code": "model_rejected", "message": told}), "what the client was told")
	g.Expect(msgs[1]).NotTo(HaveKey("error"))
	g.Expect(msgs[2]).To(HaveKeyWithValue("content", "echo: a shorter one then"))
	g.Expect(msgs[3]).To(HaveKeyWithValue("content", "try again"))
	g.Expect(msgs[3]).NotTo(HaveKey("error"), "answered after all")
	g.Expect(msgs[4]).To(HaveKeyWithValue("content", "echo: try again"))

	reqs := e.llm.Requests()
	last := reqs[len(reqs)-1]
	for _, m := range last.Messages {
		g.Expect(m.Content).NotTo(ContainSubstring("too long"), "the error is not in the model's history")
	}
	g.Expect(last.Messages).To(ContainElement(HaveField("Content", "summarise the book")))
}

// TestUsageOfTheTenant: GET /api/v1/usage shows the tokens the fake model
// reported for the tenant's turns, per agent and day, with today's and
// the month's totals; another tenant's key sees none of it, and bad
// ranges are refused.
func TestUsageOfTheTenant(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.llm.Script(fakellm.Turn{Text: "one", Usage: &fakellm.Usage{InputTokens: 120, OutputTokens: 7}},
		fakellm.Turn{Text: "two", Usage: &fakellm.Usage{InputTokens: 300, OutputTokens: 11}})
	for _, id := range []string{"u1", "u2"} {
		status, body := e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": id, "agent": "assistant", "chat_id": "tab1", "text": "count me"})
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	}
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/usage", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	days := body["days"].([]any)
	g.Expect(days).To(HaveLen(1))
	day := days[0].(map[string]any)
	g.Expect(day).To(HaveKeyWithValue("agent", "assistant"))
	g.Expect(day).To(HaveKeyWithValue("day", time.Now().UTC().Format(time.DateOnly)))
	g.Expect(day).To(HaveKeyWithValue("input_tokens", 420.0))
	g.Expect(day).To(HaveKeyWithValue("output_tokens", 18.0))
	g.Expect(day).To(HaveKeyWithValue("model_calls", 2.0))
	g.Expect(body["today"]).To(HaveKeyWithValue("input_tokens", 420.0))
	g.Expect(body["month"]).To(HaveKeyWithValue("output_tokens", 18.0))

	status, body = gatewaytest.Client{URL: e.url, Key: keyB}.Do(t, http.MethodGet, "/api/v1/usage", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body["days"]).To(BeEmpty(), "tenant B used nothing")
	g.Expect(body["today"]).To(HaveKeyWithValue("input_tokens", 0.0))

	for _, q := range []string{"?from=yesterday", "?from=2026-02-01&to=2026-01-01", "?from=2020-01-01&to=2026-01-01"} {
		status, body = e.a.Do(t, http.MethodGet, "/api/v1/usage"+q, nil)
		g.Expect(status).To(Equal(http.StatusBadRequest), q)
		g.Expect(errCode(body)).To(Equal("bad_request"), q)
	}
}
