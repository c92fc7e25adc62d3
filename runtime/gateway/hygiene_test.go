package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coder/websocket"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/test/logbuf"
)

// Guessing keys: every failure is logged without the key, and after ten
// from one address that address is refused with 429 before its key is even
// looked at (the right key included), while other endpoints' answers do not
// tell a wrong key from a right one.
func TestFailedAuthenticationIsThrottledAndLogged(t *testing.T) {
	g := NewWithT(t)
	logs := &logbuf.Buffer{}
	e := start(t, func(c *gateway.Config) { c.Log = slog.New(slog.NewJSONHandler(logs, nil)) })
	const guess = "guess-0123456789-secret"
	for i := range 10 {
		status, body := gatewaytest.Client{URL: e.url, Key: fmt.Sprintf("%s-%d", guess, i)}.Do(t, http.MethodGet, "/api/v1/agents", nil)
		g.Expect(status).To(Equal(http.StatusUnauthorized), "guess %d", i)
		g.Expect(errCode(body)).To(Equal("unauthorized"))
	}
	res, err := e.a.Request(http.MethodGet, "/api/v1/agents", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusTooManyRequests), "the right key from a throttled address: %s", res.Body)
	g.Expect(res.Header.Get("Retry-After")).To(MatchRegexp(`^[1-9][0-9]*$`))
	g.Expect(string(res.Body)).To(ContainSubstring("too many failed authentications"))
	res, err = e.a.Request(http.MethodPost, "/v1/chat/completions", `{}`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusTooManyRequests), "the OpenAI endpoint too")

	out := logs.String()
	g.Expect(strings.Count(out, `"msg":"Authentication failed"`)).To(Equal(10))
	g.Expect(out).To(ContainSubstring(`"remote":"127.0.0.1:`))
	g.Expect(out).To(ContainSubstring(`"path":"/api/v1/agents"`))
	g.Expect(out).NotTo(ContainSubstring(guess), "no key material in the log")
	g.Expect(out).NotTo(ContainSubstring(keyA))
	g.Expect(e.llm.Requests()).To(BeEmpty())
}

// Unauthenticated health says ok or not and nothing else: the checks name
// paths, providers and models.
func TestHealthShowsChecksOnlyToAuthenticatedClients(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	status, body := gatewaytest.Client{URL: e.url}.Do(t, http.MethodGet, "/api/v1/health", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("status", BeElementOf("ok", "degraded")))
	g.Expect(body).NotTo(Or(HaveKey("checks"), HaveKey("groups"), HaveKey("ok")))
	status, body = gatewaytest.Client{URL: e.url, Key: "wrong-key-0123456789"}.Do(t, http.MethodGet, "/api/v1/health", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).NotTo(Or(HaveKey("checks"), HaveKey("groups"), HaveKey("ok")))
	status, body = e.a.Do(t, http.MethodGet, "/api/v1/health", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("checks", Not(BeEmpty())))
	g.Expect(body).To(HaveKeyWithValue("groups", Not(BeEmpty())))
	g.Expect(body).To(HaveKey("ok"))
}

// A client that sends its body slowly gets 408 once the body timeout has
// passed, and its connection is closed: it cannot hold a handler.
func TestSlowBodyIsCutOff(t *testing.T) {
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) { c.BodyTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	_, err = fmt.Fprintf(conn, "POST /api/v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"agent\":", keyA)
	g.Expect(err).NotTo(HaveOccurred())
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a bound on the test, not the assertion
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = res.Body.Close() }()
	body, _ := io.ReadAll(res.Body)
	g.Expect(res.StatusCode).To(Equal(http.StatusRequestTimeout), "%s", body)
	g.Expect(string(body)).To(ContainSubstring(`"code":"timeout"`))
	_, err = conn.Read(make([]byte, 1))
	g.Expect(err).To(MatchError(io.EOF), "the connection is closed")
	g.Expect(e.llm.Requests()).To(BeEmpty())
}

// One address may hold MaxConnsPerIP connections; the next is closed at
// once, and a freed slot can be used again.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	limits := gateway.Limits{MaxConnsPerIP: 3}
	srv := gateway.HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), limits)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(gateway.Listen(ln, limits)) }()
	defer func() {
		_ = srv.Close()
		g.Expect(<-done).To(MatchError(http.ErrServerClosed))
	}()
	get := func(c net.Conn) (string, error) {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer func() { _ = res.Body.Close() }()
		b, err := io.ReadAll(io.LimitReader(res.Body, 2))
		return string(b), err
	}
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = c.Close() }()
		g.Expect(get(c)).To(Equal("ok")) // accepted and served: the slot is taken
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", ln.Addr().String())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = extra.Close() }()
	_, err = get(extra)
	g.Expect(err).To(HaveOccurred(), "the fourth connection of the address is closed")
	g.Expect(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset")).To(BeTrue(), "%v", err)

	g.Expect(held[0].Close()).To(Succeed())
	g.Eventually(func() (string, error) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return "", err
		}
		defer func() { _ = c.Close() }()
		return get(c)
	}).WithTimeout(10*time.Second).Should(Equal("ok"), "a freed slot is usable again")
}

// The UI may not be framed or sniffed and carries a CSP that keeps it to
// its own origin; API answers are not sniffed or framed either.
func TestSecurityHeaders(t *testing.T) {
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) { c.UI = fstest.MapFS{"index.html": {Data: []byte("<h1>PicoBot</h1>")}} })
	res, err := e.a.Request(http.MethodGet, "/", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusOK))
	csp := res.Header.Get("Content-Security-Policy")
	g.Expect(csp).To(ContainSubstring("frame-ancestors 'none'"))
	g.Expect(csp).To(ContainSubstring("default-src 'self'"))
	g.Expect(csp).To(ContainSubstring("object-src 'none'"))
	g.Expect(res.Header.Get("X-Content-Type-Options")).To(Equal("nosniff"))
	g.Expect(res.Header.Get("X-Frame-Options")).To(Equal("DENY"))
	res, err = e.a.Request(http.MethodGet, "/api/v1/agents", nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Header.Get("X-Content-Type-Options")).To(Equal("nosniff"))
	g.Expect(res.Header.Get("Content-Security-Policy")).To(BeEmpty(), "JSON needs no CSP")
}

// A WebSocket text frame that is not UTF-8 fails the connection with 1007
// (RFC 6455 8.1) instead of being decoded.
func TestInvalidUTF8FrameClosesTheWebSocket(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/api/v1/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + keyA}}})
	g.Expect(err).NotTo(HaveOccurred())
	if res.Body != nil {
		_ = res.Body.Close()
	}
	defer func() { _ = ws.CloseNow() }()
	g.Expect(ws.Write(ctx, websocket.MessageText, []byte("{\"v\":1,\"type\":\"send\",\"text\":\"\xff\xfe\"}"))).To(Succeed())
	_, _, err = ws.Read(ctx)
	g.Expect(websocket.CloseStatus(err)).To(Equal(websocket.StatusInvalidFramePayloadData), "%v", err)
	g.Expect(e.llm.Requests()).To(BeEmpty())
}

// A model failure reaches the client without the provider's address (the
// log keeps it): here the provider cannot be reached, and the client's
// error names neither its URL nor its host and port.
func TestErrorsDoNotLeakInternalURLs(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	dead := "http://" + ln.Addr().String() + "/internal-llm/v1"
	g.Expect(ln.Close()).To(Succeed()) // nothing listens there now
	logs := &logbuf.Buffer{}
	e := startAgents(t, func(string) string { return fmt.Sprintf(agentYAML, dead, dead) }, nil,
		func(c *gateway.Config) { c.Log = slog.New(slog.NewJSONHandler(logs, nil)) })
	ws := e.a.Dial(t)
	ws.Write(t, frame{"type": "send", "id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "hi"})
	errFrame := gatewaytest.ErrorFrame(ws.Until(t, "m1", "done"))
	g.Expect(errFrame).NotTo(BeNil())
	msg, _ := errFrame["message"].(string)
	g.Expect(msg).NotTo(BeEmpty())
	g.Expect(msg).NotTo(ContainSubstring("internal-llm"), "the provider's URL stays in the log")
	g.Expect(msg).NotTo(ContainSubstring(ln.Addr().String()))
	status, body := e.a.Do(t, http.MethodPost, "/api/v1/send", map[string]any{"agent": "assistant", "chat_id": "tab2", "text": "hi"})
	g.Expect(status).To(BeNumerically(">=", 400))
	g.Expect(fmt.Sprint(body)).NotTo(ContainSubstring("internal-llm"))
	g.Expect(fmt.Sprint(body)).NotTo(ContainSubstring(ln.Addr().String()))
	res, err := e.a.Request(http.MethodPost, "/v1/chat/completions", `{"model":"assistant","messages":[{"role":"user","content":"hi"}]}`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(BeNumerically(">=", 400))
	g.Expect(string(res.Body)).NotTo(ContainSubstring("internal-llm"))
	g.Expect(string(res.Body)).NotTo(ContainSubstring(ln.Addr().String()))
	g.Expect(logs.String()).To(ContainSubstring("internal-llm"), "the log keeps the whole error")
}
