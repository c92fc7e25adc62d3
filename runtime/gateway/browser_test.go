package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coder/websocket"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const uiKey = "ui-key-0123456789abcdef"

// keyless is a gateway as `picobot serve` runs it without --api-key: loopback
// clients without a key, browsers only with the UI's cookie.
func keyless(t *testing.T) *env {
	t.Helper()
	e := start(t, func(c *gateway.Config) {
		c.Auth = gateway.Loopback{Tenant: "tenant-a", UIKey: uiKey}
		c.UI = fstest.MapFS{"index.html": {Data: []byte("<h1>PicoBot</h1>")}}
	})
	e.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ran"} })
	return e
}

// do sends a request with the given Host (empty: the server's address) and
// headers, and returns the status and body.
func do(t *testing.T, e *env, method, path, host, body string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

const sendBody = `{"agent":"assistant","chat_id":"tab1","text":"run bash"}`

// Another site's page cannot drive a keyless gateway through the browser:
// a cross-site "simple" POST (text/plain, no preflight) is refused for its
// Origin, and without one for its content type; nothing reaches the model.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	g := NewWithT(t)
	e := keyless(t)
	status, body, _ := do(t, e, http.MethodPost, "/api/v1/send", "", sendBody,
		map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"})
	g.Expect(status).To(Equal(http.StatusForbidden), body)
	g.Expect(body).To(ContainSubstring("cross-origin request refused"))
	status, body, _ = do(t, e, http.MethodPost, "/api/v1/send", "", sendBody, map[string]string{"Content-Type": "text/plain"})
	g.Expect(status).To(Equal(http.StatusUnsupportedMediaType), body)
	g.Expect(body).To(ContainSubstring(`"code":"unsupported_media_type"`))
	status, body, _ = do(t, e, http.MethodPost, "/v1/chat/completions", "",
		`{"model":"assistant","messages":[{"role":"user","content":"run bash"}]}`,
		map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"})
	g.Expect(status).To(Equal(http.StatusForbidden), body)
	// Another port of localhost is another site too.
	port := e.url[strings.LastIndex(e.url, ":")+1:]
	other := "http://localhost:1" + port
	status, body, _ = do(t, e, http.MethodPost, "/api/v1/send", "", sendBody,
		map[string]string{"Content-Type": "application/json", "Origin": other})
	g.Expect(status).To(Equal(http.StatusForbidden), body)
	g.Expect(e.llm.Requests()).To(BeEmpty(), "no turn ran")
}

// DNS rebinding: a page of rebind.evil.example whose name now resolves to
// 127.0.0.1 is same-origin with itself, but its requests carry its Host,
// which a keyless gateway does not answer.
func TestRebindingHostIsRefused(t *testing.T) {
	g := NewWithT(t)
	e := keyless(t)
	port := e.url[strings.LastIndex(e.url, ":")+1:]
	rebind := "rebind.evil.example:" + port
	status, body, _ := do(t, e, http.MethodPost, "/api/v1/send", rebind, sendBody,
		map[string]string{"Content-Type": "application/json", "Origin": "http://" + rebind})
	g.Expect(status).To(Equal(http.StatusMisdirectedRequest), body)
	g.Expect(body).To(ContainSubstring(`"code":"misdirected"`))
	status, _, _ = do(t, e, http.MethodGet, "/api/v1/sessions", rebind, "", nil)
	g.Expect(status).To(Equal(http.StatusMisdirectedRequest), "reads are refused too")
	status, _, _ = do(t, e, http.MethodGet, "/", rebind, "", nil)
	g.Expect(status).To(Equal(http.StatusMisdirectedRequest), "and the UI")
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "app.localhost:" + port} {
		status, body, _ := do(t, e, http.MethodGet, "/api/v1/agents", host, "", nil)
		g.Expect(status).To(Equal(http.StatusOK), "%s: %s", host, body)
	}
	g.Expect(e.llm.Requests()).To(BeEmpty())
}

// The UI the gateway serves gets the per-install key as a SameSite=Strict,
// HttpOnly cookie, and a browser request needs it even from the gateway's
// own origin; clients that are not browsers (no Origin) need no key.
func TestKeylessBrowsersNeedTheUICookie(t *testing.T) {
	g := NewWithT(t)
	e := keyless(t)
	origin := e.url
	status, body, _ := do(t, e, http.MethodPost, "/api/v1/send", "", sendBody,
		map[string]string{"Content-Type": "application/json", "Origin": origin})
	g.Expect(status).To(Equal(http.StatusUnauthorized), body)
	g.Expect(body).To(ContainSubstring("missing or wrong API key"))

	status, _, header := do(t, e, http.MethodGet, "/", "", "", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	cookie := header.Get("Set-Cookie")
	g.Expect(cookie).To(HavePrefix(gateway.UICookie + "=" + uiKey))
	g.Expect(cookie).To(ContainSubstring("HttpOnly"))
	g.Expect(cookie).To(ContainSubstring("SameSite=Strict"))

	status, body, _ = do(t, e, http.MethodPost, "/api/v1/send", "", sendBody,
		map[string]string{"Content-Type": "application/json", "Origin": origin, "Cookie": gateway.UICookie + "=" + uiKey})
	g.Expect(status).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring(`"text":"ran"`))
	status, body, _ = do(t, e, http.MethodPost, "/api/v1/send", "", `{"agent":"assistant","chat_id":"tab2","text":"hi"}`,
		map[string]string{"Content-Type": "application/json"})
	g.Expect(status).To(Equal(http.StatusOK), "a client without Origin: %s", body)
	g.Expect(e.llm.Requests()).To(HaveLen(2))
}

// The WebSocket takes only the gateway's own origin, and from a browser
// only with the UI's cookie.
func TestWebSocketOrigins(t *testing.T) {
	g := NewWithT(t)
	e := keyless(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(e.url, "http") + "/api/v1/ws"
	dial := func(h http.Header) (*websocket.Conn, int) {
		ws, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
		status := 0
		if res != nil {
			status = res.StatusCode
			if res.Body != nil {
				_ = res.Body.Close()
			}
		}
		if err != nil {
			return nil, status
		}
		return ws, status
	}
	port := e.url[strings.LastIndex(e.url, ":")+1:]
	for _, origin := range []string{"http://evil.example", "http://localhost:1" + port, "null"} {
		ws, status := dial(http.Header{"Origin": {origin}, "Cookie": {gateway.UICookie + "=" + uiKey}})
		g.Expect(ws).To(BeNil(), origin)
		g.Expect(status).To(Equal(http.StatusForbidden), origin)
	}
	ws, status := dial(http.Header{"Origin": {e.url}})
	g.Expect(ws).To(BeNil())
	g.Expect(status).To(Equal(http.StatusUnauthorized), "own origin without the cookie")
	ws, status = dial(http.Header{"Origin": {e.url}, "Cookie": {gateway.UICookie + "=" + uiKey}})
	g.Expect(ws).NotTo(BeNil(), "status %d", status)
	_ = ws.CloseNow()
	ws, _ = dial(nil)
	g.Expect(ws).NotTo(BeNil(), "a client without Origin")
	_ = ws.CloseNow()
}

// A keyed gateway answers any Host unless hosts are configured; then only
// those and loopback names.
func TestAllowedHosts(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	hdr := map[string]string{"Authorization": "Bearer " + keyA}
	status, _, _ := do(t, e, http.MethodGet, "/api/v1/agents", "chat.example.com", "", hdr)
	g.Expect(status).To(Equal(http.StatusOK), "behind an ingress under any name")
	e = start(t, func(c *gateway.Config) { c.AllowedHosts = []string{"chat.example.com"} })
	status, _, _ = do(t, e, http.MethodGet, "/api/v1/agents", "Chat.Example.com:443", "", hdr)
	g.Expect(status).To(Equal(http.StatusOK))
	status, _, _ = do(t, e, http.MethodGet, "/api/v1/agents", "other.example.com", "", hdr)
	g.Expect(status).To(Equal(http.StatusMisdirectedRequest))
}
