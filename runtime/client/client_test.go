package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, embeddedtest.LeakOptions()...)
}

// hangGuard bounds a test step that would otherwise hang on a bug.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, opts)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return c
}

func dial(t *testing.T, c *client.Client) *client.Conn {
	t.Helper()
	conn, err := c.Dial(hangGuard(t))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestAskStreamsToolCallsAndReply(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{})
	env.LLM.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_1", Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
		fakellm.Turn{Text: "The answer is 42."},
	)
	conn := dial(t, newClient(t, env.URL, client.Options{}))

	var events []client.Event
	reply, err := conn.Ask(hangGuard(t), client.Send{Agent: "assistant", ChatID: "t1", Text: "what is 6*7?"},
		func(e client.Event) { events = append(events, e) })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("The answer is 42."))
	g.Expect(reply.Command).To(BeFalse())
	g.Expect(reply.Streamed).To(Equal("The answer is 42."))
	g.Expect(reply.Session).To(HavePrefix("web:assistant/t1:"))

	kinds := []string{}
	var tools []client.Event
	for _, e := range events {
		if e.Kind != client.KindUsage {
			kinds = append(kinds, e.Kind)
		}
		if e.Kind == client.KindToolCall || e.Kind == client.KindToolResult {
			tools = append(tools, e)
		}
	}
	g.Expect(kinds[0:2]).To(Equal([]string{client.KindToolCall, client.KindToolResult}))
	g.Expect(kinds[len(kinds)-1]).To(Equal(client.KindFinal))
	g.Expect(kinds).To(ContainElement(client.KindDelta))
	g.Expect(tools).To(HaveLen(2))
	g.Expect(tools[0].Name).To(Equal("calculator"))
	g.Expect(tools[0].CallID).To(Equal("call_1"))
	g.Expect(tools[0].Arguments).To(ContainSubstring("6*7"))
	g.Expect(string(tools[0].Raw)).To(ContainSubstring(`"kind":"tool_call"`))
	g.Expect(tools[1].Name).To(Equal("calculator"))
	g.Expect(tools[1].CallID).To(Equal("call_1"))
	g.Expect(tools[1].Content).To(ContainSubstring("42"))
	g.Expect(tools[1].IsError).To(BeFalse())
}

func TestSlashCommandsAndREST(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{})
	env.LLM.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "hi there"} })
	c := newClient(t, env.URL+"/", client.Options{})
	conn := dial(t, c)
	ctx := hangGuard(t)

	agents, err := c.Agents(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agents).To(HaveLen(1))
	g.Expect(agents[0].Name).To(Equal("assistant"))
	g.Expect(agents[0].Ready).To(BeTrue())
	g.Expect(agents[0].Tools).To(ContainElement("calculator"))

	first, err := conn.Ask(ctx, client.Send{Agent: "assistant", ChatID: "t2", Text: "hello"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Text).To(Equal("hi there"))

	reply, err := conn.Ask(ctx, client.Send{Agent: "assistant", ChatID: "t2", Text: "/new"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Command).To(BeTrue())
	g.Expect(reply.Text).To(HavePrefix("Started a new conversation"))

	sessions, err := c.Sessions(ctx, "assistant", "t2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sessions.Sessions).To(HaveLen(2))
	cur, ok := sessions.CurrentSession()
	g.Expect(ok).To(BeTrue())
	g.Expect(cur.ID).To(Equal(reply.Session))
	g.Expect(cur.ID).NotTo(Equal(first.Session))

	msgs, err := c.Messages(ctx, first.Session, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(2))
	g.Expect(msgs[0].Role).To(Equal("user"))
	g.Expect(msgs[0].Content).To(Equal("hello"))
	g.Expect(msgs[1].Role).To(Equal("assistant"))
	g.Expect(msgs[1].Content).To(Equal("hi there"))

	health, err := c.Health(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(health.Status).To(Equal("ok"))
	g.Expect(health.Checks).NotTo(BeEmpty())

	_, err = c.Messages(ctx, "web:assistant/t2:nope", 0)
	var ge *client.Error
	g.Expect(errors.As(err, &ge)).To(BeTrue(), "%v", err)
	g.Expect(ge.Status).To(Equal(http.StatusNotFound))
}

func TestStopEndsTheTurnWithStopped(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{})
	env.LLM.Script(fakellm.Turn{Text: "too late", Delay: time.Minute})
	conn := dial(t, newClient(t, env.URL, client.Options{}))
	ctx := hangGuard(t)

	turn, err := conn.Send(ctx, client.Send{Agent: "assistant", ChatID: "t3", Text: "slow one"})
	g.Expect(err).NotTo(HaveOccurred())
	// Stop once the model was asked, so the turn is running, not queued.
	g.Eventually(func() int { return len(env.LLM.Requests()) }).WithTimeout(20 * time.Second).Should(Equal(1))
	stopped, err := conn.Stop(ctx, "assistant", "t3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeTrue())
	_, err = turn.Wait(ctx, nil)
	g.Expect(client.HasCode(err, client.CodeStopped)).To(BeTrue(), "%v", err)
	g.Expect(turn.Session()).To(HavePrefix("web:assistant/t3:"))

	stopped, err = conn.Stop(ctx, "assistant", "t3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeFalse(), "nothing is running any more")
	_, err = conn.Stop(ctx, "assistant", "a:b")
	g.Expect(err).To(MatchError(ContainSubstring("must not contain")))
}

func TestGatewayErrorsCarryTheirCode(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{Keyless: "keyless"})
	conn := dial(t, newClient(t, env.URL, client.Options{}))
	ctx := hangGuard(t)

	_, err := conn.Ask(ctx, client.Send{Agent: "nobody", ChatID: "t4", Text: "hi"}, nil)
	g.Expect(client.HasCode(err, client.CodeUnknownAgent)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("nobody"))

	_, err = conn.Ask(ctx, client.Send{Agent: "keyless", ChatID: "t4", Text: "hi"}, nil)
	g.Expect(client.HasCode(err, client.CodeNoModel)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("no usable model"))

	// The connection stays usable after errors.
	env.LLM.Script(fakellm.Turn{Text: "fine"})
	reply, err := conn.Ask(ctx, client.Send{Agent: "assistant", ChatID: "t4", Text: "hi"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("fine"))

	// Bad input is refused before anything is sent.
	_, err = conn.Send(ctx, client.Send{Agent: "assistant", ChatID: "a:b", Text: "hi"})
	g.Expect(err).To(MatchError(ContainSubstring("must not contain")))
	_, err = conn.Send(ctx, client.Send{Agent: "assistant", ChatID: "t4", Text: "  "})
	g.Expect(err).To(MatchError("message text is empty"))
}

func TestAPIKeyInHeaderOrQuery(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{APIKey: "s3cret"})
	env.LLM.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	ctx := hangGuard(t)

	anon := newClient(t, env.URL, client.Options{})
	_, err := anon.Agents(ctx)
	var ge *client.Error
	g.Expect(errors.As(err, &ge)).To(BeTrue(), "%v", err)
	g.Expect(ge.Status).To(Equal(http.StatusUnauthorized))
	g.Expect(ge.Code).To(Equal(client.CodeUnauthorized))
	_, err = anon.Dial(ctx)
	g.Expect(client.HasCode(err, client.CodeUnauthorized)).To(BeTrue(), "%v", err)
	g.Expect(err).NotTo(MatchError(client.ErrUnreachable))

	for _, inQuery := range []bool{false, true} {
		c := newClient(t, env.URL, client.Options{APIKey: "s3cret", KeyInQuery: inQuery})
		_, err := c.Agents(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		reply, err := dial(t, c).Ask(ctx, client.Send{Agent: "assistant", ChatID: "t5", Text: "hi"}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(reply.Text).To(Equal("ok"))
	}
}

func TestUnreachableGateway(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	g.Expect(ln.Close()).To(Succeed())

	c := newClient(t, "http://"+addr, client.Options{})
	_, err = c.Agents(hangGuard(t))
	g.Expect(err).To(MatchError(client.ErrUnreachable))
	_, err = c.Dial(hangGuard(t))
	g.Expect(err).To(MatchError(client.ErrUnreachable))
}

func TestConnectionLostEndsRunningTurns(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{})
	env.LLM.Script(fakellm.Turn{Text: "never", Delay: time.Minute})
	proxy := embeddedtest.NewProxy(t, env.Server.Listener.Addr().String())
	c := newClient(t, proxy.URL(), client.Options{})
	conn := dial(t, c)
	ctx := hangGuard(t)

	turn, err := conn.Send(ctx, client.Send{Agent: "assistant", ChatID: "t6", Text: "slow"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int { return len(env.LLM.Requests()) }).WithTimeout(20 * time.Second).Should(Equal(1))
	proxy.Cut()

	r, err := turn.Wait(ctx, nil)
	g.Expect(err).To(MatchError(client.ErrConnectionLost), "%+v", r)
	select {
	case <-conn.Done():
	case <-ctx.Done():
		t.Fatal("connection not reported as lost")
	}
	g.Expect(conn.Err()).To(MatchError(client.ErrConnectionLost))
	_, err = conn.Send(ctx, client.Send{Agent: "assistant", ChatID: "t6", Text: "again"})
	g.Expect(err).To(MatchError(client.ErrConnectionLost))
	g.Expect(conn.Close()).To(Succeed())

	// A new connection works (the stopped-by-nobody turn is still running on
	// the gateway, so use another chat).
	env.LLM.Script(fakellm.Turn{Text: "back"})
	reply, err := dial(t, c).Ask(ctx, client.Send{Agent: "assistant", ChatID: "t7", Text: "hi"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("back"))
}

// A gateway newer than this client may send frame types and event kinds it
// does not know; they must not break a turn.
func TestUnknownFramesAndKindsAreTolerated(t *testing.T) {
	g := NewWithT(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer func() { _ = ws.CloseNow() }()
		_, data, err := ws.Read(r.Context())
		if err != nil {
			return
		}
		var in struct{ ID string }
		_ = json.Unmarshal(data, &in)
		for _, f := range []string{
			`{"v":1,"type":"ack","id":"` + in.ID + `"}`,
			`{"v":1,"type":"dialogs","dialogs":[{"id":"d_1"}]}`,
			`not json at all`,
			`{"v":1,"type":"event","id":"other","event":{"kind":"delta","text":"not mine"}}`,
			`{"v":1,"type":"event","id":"` + in.ID + `","session":"web:a/c:d","event":{"kind":"attachment","url":"/x.png","extra":1}}`,
			`{"v":1,"type":"event","id":"` + in.ID + `","session":"web:a/c:d","event":{"kind":"delta","text":"Hel","future":true}}`,
			`{"v":1,"type":"event","id":"` + in.ID + `","session":"web:a/c:d","event":{"kind":"final","text":"Hello"}}`,
			`{"v":1,"type":"done","id":"` + in.ID + `","session":"web:a/c:d"}`,
		} {
			if ws.Write(r.Context(), websocket.MessageText, []byte(f)) != nil {
				return
			}
		}
		_, _, _ = ws.Read(r.Context()) // until the client closes
	}))
	defer hs.Close()
	conn := dial(t, newClient(t, hs.URL, client.Options{}))
	var kinds []string
	var raw string
	reply, err := conn.Ask(hangGuard(t), client.Send{Agent: "a", ChatID: "c", Text: "hi"}, func(e client.Event) {
		kinds = append(kinds, e.Kind)
		if e.Kind == "attachment" {
			raw = string(e.Raw)
		}
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kinds).To(Equal([]string{"attachment", client.KindDelta, client.KindFinal}))
	g.Expect(raw).To(ContainSubstring(`"url":"/x.png"`))
	g.Expect(reply).To(Equal(client.Reply{Session: "web:a/c:d", Text: "Hello", Streamed: "Hel"}))
}

func TestNewValidatesTheURL(t *testing.T) {
	for _, tt := range []struct {
		url, want string
	}{
		{"http://127.0.0.1:8080", ""},
		{"https://bot.example.com/prefix/", ""},
		{"127.0.0.1:8080", "must start with http:// or https://"},
		{"ftp://host", "must start with http:// or https://"},
		{"http://", "has no host"},
		{"http://host:bad port", "failed to parse"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			g := NewWithT(t)
			c, err := client.New(tt.url, client.Options{})
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c.URL()).NotTo(HaveSuffix("/"))
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"cli-alice", ""},
		{"", "is empty"},
		{"a:b", "must not contain ':' or '/'"},
		{"a/b", "must not contain ':' or '/'"},
		{"a\nb", "control characters"},
		{strings.Repeat("x", 201), "at most 200"},
	} {
		err := client.CheckName("chat id", tt.in)
		if tt.want == "" {
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
		} else {
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.want)), tt.in)
		}
	}
}

func TestErrorText(t *testing.T) {
	g := NewWithT(t)
	g.Expect((&client.Error{Code: "busy", Message: "wait"}).Error()).To(Equal("busy: wait"))
	g.Expect((&client.Error{Status: 502, Message: "Bad Gateway"}).Error()).To(Equal("HTTP 502: Bad Gateway"))
	g.Expect(client.HasCode(io.EOF, "busy")).To(BeFalse())
}
