package messaging

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		// modernc.org/sqlite keeps no goroutines, but database/sql's opener does until Close.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

const (
	tenant   = "team-a"
	agent    = "bot"
	current  = "web:bot/alice:default"
	agentDoc = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: bot
spec:
  model:
    provider: openai
    model: test-model
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["send_message", "chat_manager"]
  channels:
  - type: webhook
    name: tickets
    secretRef: {name: tickets}
  - type: telegram
    secretRef: {name: tg-missing}
  - type: web
`
)

// receiver is a generic webhook endpoint that records deliveries and can
// refuse them.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	refuse bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.bodies = append(r.bodies, m)
		if r.refuse {
			http.Error(w, "unknown ticket", http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, `{"message_id":"x1"}`)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.bodies...)
}

// env is a store, a channel manager with the agent's channels (the webhook
// one pointing at a local receiver), a dispatcher, and the built tools.
type env struct {
	ctx   context.Context
	st    store.Store
	recv  *receiver
	mgr   *channel.Manager
	d     *outbound.Dispatcher
	spec  *picobotv1alpha1.Agent
	feat  *Feature
	tools *tool.Registry
	ws    string
}

func newEnv(t *testing.T, llmURL string) *env {
	t.Helper()
	return newEnvFor(t, llmURL, agentDoc, `secret "tg-missing" not found`)
}

// newEnvFor is newEnv for another agent spec (doc, with %s for the LLM's
// URL); wantErr is the error its channels are set up with ("" for none).
func newEnvFor(t *testing.T, llmURL, doc, wantErr string) *env {
	t.Helper()
	return newEnvWith(t, llmURL, doc, wantErr, channel.BaseURLs{})
}

// newEnvWith is newEnvFor with the chat platforms' APIs at base (local
// fakes).
func newEnvWith(t *testing.T, llmURL, doc, wantErr string, base channel.BaseURLs) *env {
	t.Helper()
	g := NewWithT(t)
	e := &env{ctx: store.WithTenant(t.Context(), tenant), recv: newReceiver(t), ws: t.TempDir()}
	// The store's clock stands before the messages tests append, so their
	// times order the sessions.
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"),
		sqlite.WithClock(clocktesting.NewFakePassiveClock(testBase.Add(-2*time.Hour))))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	e.st = st
	e.spec = &picobotv1alpha1.Agent{}
	g.Expect(yaml.Unmarshal(fmt.Appendf(nil, doc, llmURL), e.spec)).To(Succeed())
	e.mgr = channel.NewManager(channel.Options{Log: slog.New(slog.DiscardHandler), BaseURLs: base})
	err = e.mgr.SetAgent(tenant, e.spec, e.secrets)
	if wantErr == "" {
		g.Expect(err).NotTo(HaveOccurred())
	} else {
		g.Expect(err).To(MatchError(ContainSubstring(wantErr)))
	}
	// Both modes give the dispatcher this web sink.
	e.d, err = outbound.New(outbound.Config{Store: st, Channels: e.mgr, Web: outbound.StoredOnly{}, Log: slog.New(slog.DiscardHandler)})
	g.Expect(err).NotTo(HaveOccurred())
	e.feat = NewFeature(Options{Sender: e.d, Channels: e.mgr})
	parts, err := e.feat.Build(e.ctx, &feature.Agent{Spec: e.spec, Host: &feature.Host{Store: st, Tenant: tenant}})
	g.Expect(err).NotTo(HaveOccurred())
	e.tools, err = tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	return e
}

func (e *env) secrets(name string) *corev1.Secret {
	switch name {
	case "tickets":
		return &corev1.Secret{Data: map[string][]byte{channel.KeyWebhookSigningSecret: []byte("s"), channel.KeyWebhookURL: []byte(e.recv.URL)}}
	case "tg":
		return &corev1.Secret{Data: map[string][]byte{channel.KeyTelegramToken: []byte(tgToken)}}
	case "sl":
		return &corev1.Secret{Data: map[string][]byte{channel.KeySlackBotToken: []byte("xoxb-test"), channel.KeySlackSigningSecret: []byte("s")}}
	case "llm":
		return &corev1.Secret{Data: map[string][]byte{"apiKey": []byte("sk-test")}}
	}
	return nil
}

// call runs a tool the way the agent loop does.
func (e *env) call(name string, args any) tool.Result {
	b, _ := json.Marshal(args)
	return e.tools.Execute(e.ctx, tool.Env{Workspace: e.ws, SessionID: current, Agent: agent},
		llm.ToolCall{ID: "c1", Name: name, Arguments: string(b)})
}

func (e *env) file(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(e.ws, name)
	NewWithT(t).Expect(os.MkdirAll(filepath.Dir(p), 0o700)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(p, data, 0o600)).To(Succeed())
	return p
}

func TestSendMessageDeliversToAChannel(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	e.file(t, "out/report.txt", []byte("all tickets closed"))

	res := e.call("send_message", map[string]any{"target_chat_id": "tickets:T-1", "content": "Weekly report", "files": []string{"out/report.txt"}})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("Delivered to tickets:T-1 (session tickets:T-1:default, 1 attempt(s))."))
	g.Expect(res.Artifacts).To(BeEmpty())

	got := e.recv.got()
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0]).To(HaveKeyWithValue("chat_id", "T-1"))
	g.Expect(got[0]).To(HaveKeyWithValue("text", "Weekly report"))
	files := got[0]["files"].([]any)
	g.Expect(files[0]).To(HaveKeyWithValue("name", "report.txt"))
	g.Expect(files[0]).To(HaveKeyWithValue("media_type", "text/plain; charset=utf-8"))

	dels, err := e.st.ListDeliveries(e.ctx, store.DeliveryFilter{Status: store.DeliveryDelivered})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dels).To(HaveLen(1))
	msgs, err := e.st.LoadMessages(e.ctx, "tickets:T-1:default", store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs[0].Meta).To(HaveKeyWithValue(outbound.MetaOrigin, current), "origin defaults to the calling session")

	// An explicit origin is kept.
	res = e.call("send_message", map[string]any{"target_chat_id": "tickets:T-1", "content": "again", "origin": "cron:weekly"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	msgs, _ = e.st.LoadMessages(e.ctx, "tickets:T-1:default", store.LoadOptions{})
	g.Expect(msgs[1].Meta).To(HaveKeyWithValue(outbound.MetaOrigin, "cron:weekly"))
}

func TestSendMessageToTheCurrentSessionAttachesToTheReply(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 32)...)
	abs := e.file(t, "shot.png", png)
	e.file(t, "capture", png) // no extension: sniffed

	for _, target := range []string{"web:bot/alice", current, "web:alice", "web:alice:default"} {
		res := e.call("send_message", map[string]any{"target_chat_id": target, "content": "here it is", "files": []string{abs, "capture"}})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		g.Expect(res.Content).To(Equal("Attached shot.png, capture to your reply in this conversation. Write the message itself in your reply."))
		g.Expect(res.Content).NotTo(ContainSubstring("message from"), "no self-referencing prefix")
		g.Expect(res.Artifacts).To(Equal([]tool.Artifact{
			{Name: "shot.png", MediaType: "image/png", Data: png, PresentToUser: true},
			{Name: "capture", MediaType: "image/png", Data: png, PresentToUser: true},
		}))
	}
	res := e.call("send_message", map[string]any{"target_chat_id": "web:bot/alice", "content": "hi"})
	g.Expect(res.IsError).To(BeFalse())
	g.Expect(res.Content).To(ContainSubstring("Nothing sent"))

	dels, err := e.st.ListDeliveries(e.ctx, store.DeliveryFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dels).To(BeEmpty(), "nothing goes through the dispatcher")
	g.Expect(e.recv.got()).To(BeEmpty())
}

func TestSendMessageErrorsAreToolResults(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1")
	outside := filepath.Join(t.TempDir(), "secret.txt")
	NewWithT(t).Expect(os.WriteFile(outside, []byte("top secret"), 0o600)).To(Succeed())
	NewWithT(t).Expect(os.Symlink(outside, filepath.Join(e.ws, "link.txt"))).To(Succeed())
	NewWithT(t).Expect(os.Mkdir(filepath.Join(e.ws, "dir"), 0o700)).To(Succeed())
	e.file(t, "empty.txt", nil)
	e.file(t, "ok.txt", []byte("ok"))
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"unknown channel", map[string]any{"target_chat_id": "fax:1", "content": "x"}, `unknown channel: unknown channel "fax" of agent bot (its channels: tickets)`},
		{"bad target", map[string]any{"target_chat_id": "tickets", "content": "x"}, "want <channel>:<chat_id>"},
		{"missing dialog", map[string]any{"target_chat_id": "tickets:T-1:d_none", "content": "x"}, `no dialog "d_none"`},
		{"missing file", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": []string{"nope.txt"}}, `file "nope.txt" does not exist`},
		{"outside", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": []string{outside}}, "is outside the workspace"},
		{"dot-dot", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": []string{"../" + filepath.Base(filepath.Dir(outside)) + "/secret.txt"}}, "outside the workspace"},
		{"symlink out", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": []string{"link.txt"}}, "is outside the workspace"},
		{"directory", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": []string{"dir"}}, "not a regular file"},
		{"empty file", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": []string{"empty.txt"}}, "is empty"},
		{"too many files", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "files": strings.Split(strings.Repeat("ok.txt,", 11), ",")[:11]}, "invalid arguments"},
		{"no content", map[string]any{"target_chat_id": "tickets:T-1"}, "invalid arguments"},
		{"unknown argument", map[string]any{"target_chat_id": "tickets:T-1", "content": "x", "file_types": []string{"png"}}, "invalid arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := e.call("send_message", tc.args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tc.want))
		})
	}
	g := NewWithT(t)
	g.Expect(e.recv.got()).To(BeEmpty(), "nothing sent")

	// A delivery that fails is reported as a failure, never as sent.
	e.recv.refuse = true
	res := e.call("send_message", map[string]any{"target_chat_id": "tickets:T-1", "content": "x"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(HavePrefix("error: NOT delivered to tickets:T-1: failed after 1 attempt(s)"))
	g.Expect(res.Content).To(ContainSubstring("unknown ticket"))
}

func TestSendMessageCapsFileSize(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	cfg := toolConfig{opts: Options{MaxFileBytes: 4}, store: e.st, agent: agent}
	e.file(t, "big.bin", []byte("12345"))
	_, err := cfg.loadFile(context.Background(), tool.Env{Workspace: e.ws}, "big.bin")
	g.Expect(err).To(MatchError(ContainSubstring("more than the 4 byte limit")))
	extra := t.TempDir()
	NewWithT(t).Expect(os.WriteFile(filepath.Join(extra, "s.png"), []byte("1234"), 0o600)).To(Succeed())
	cfg.opts.ExtraRoots = []string{extra}
	f, err := cfg.loadFile(context.Background(), tool.Env{Workspace: e.ws}, filepath.Join(extra, "s.png"))
	g.Expect(err).NotTo(HaveOccurred(), "extra roots are allowed")
	g.Expect(f.MediaType).To(Equal("image/png"))
}

func TestChatManager(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	base := testBase
	mk := func(id, ag string) {
		s, _ := parseSession(id)
		_, err := e.st.CreateSession(e.ctx, store.Session{ID: id, Channel: s[0], ChatID: s[1], DialogID: s[2], Agent: ag, Title: "t " + id})
		g.Expect(err).NotTo(HaveOccurred())
	}
	mk(current, agent)
	mk("tickets:T-7:default", agent)
	mk("web:other/bob:default", "other")
	var msgs []store.Message
	for i := range 30 {
		role := llm.RoleUser
		if i%2 == 1 {
			role = llm.RoleAssistant
		}
		msgs = append(msgs, store.Message{ID: fmt.Sprint("m", i), Role: role, Content: fmt.Sprintf("message %d", i), CreatedAt: base.Add(time.Duration(i) * time.Minute)})
	}
	msgs = append(msgs, store.Message{ID: "tc", Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "1", Name: "calculator", Arguments: "{}"}}, CreatedAt: base.Add(31 * time.Minute)},
		store.Message{ID: "tr", Role: llm.RoleTool, Name: "calculator", ToolCallID: "1", Content: strings.Repeat("4", 300), IsError: true, CreatedAt: base.Add(32 * time.Minute)})
	_, err := e.st.AppendMessages(e.ctx, current, msgs...)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.st.AppendMessages(e.ctx, "tickets:T-7:default", store.Message{ID: "x", Role: llm.RoleUser, Content: "old ticket", CreatedAt: base.Add(-time.Hour)})
	g.Expect(err).NotTo(HaveOccurred())

	res := e.call("chat_manager", map[string]any{"action": "list_sessions"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("Sessions 1-2 of 2"))
	g.Expect(res.Content).To(ContainSubstring(`- web:bot/alice:default "t web:bot/alice:default" last 2023-11-14 22:45:20Z (this session)`))
	g.Expect(res.Content).To(ContainSubstring("tickets:T-7:default"))
	g.Expect(res.Content).NotTo(ContainSubstring("other/bob"), "another agent's sessions are not listed")
	res = e.call("chat_manager", map[string]any{"action": "list_sessions", "count": 1, "offset": 1})
	g.Expect(res.Content).To(And(ContainSubstring("Sessions 2-2 of 2"), ContainSubstring("tickets:T-7")))
	res = e.call("chat_manager", map[string]any{"action": "list_sessions", "before_time": base.Unix()})
	g.Expect(res.Content).To(And(ContainSubstring("1-1 of 1"), ContainSubstring("tickets:T-7")))

	res = e.call("chat_manager", map[string]any{"action": "list_channels"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("Channels (target: <channel>:<chat_id>[:<dialog_id>]; web:px-art means your web chat bot/px-art):\n" +
		"- tickets (webhook, ready) recent chats: T-7\n" +
		`- telegram (telegram, NOT ready: secret "tg-missing" not found)` + "\n" +
		"- web (web, ready) recent chats: bot/alice"))

	// Default: the 20 newest, oldest first.
	res = e.call("chat_manager", map[string]any{"action": "list_messages", "session_id": current})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	lines := strings.Split(res.Content, "\n")
	g.Expect(lines[0]).To(Equal("20 message(s) of session web:bot/alice:default (32 in total), oldest first:"))
	g.Expect(lines[1]).To(Equal("[2023-11-14 22:25:20Z] user: message 12"))
	g.Expect(lines[19]).To(Equal("[2023-11-14 22:44:20Z] assistant: [called calculator]"))
	g.Expect(lines[20]).To(HavePrefix("[2023-11-14 22:45:20Z] tool calculator (error): 4444"))
	g.Expect(lines[20]).To(HaveSuffix("…"))

	res = e.call("chat_manager", map[string]any{"action": "list_messages", "session_id": current, "count": 2, "offset": 30})
	g.Expect(strings.Split(res.Content, "\n")[1:]).To(Equal([]string{"[2023-11-14 22:13:20Z] user: message 0", "[2023-11-14 22:14:20Z] assistant: message 1"}))
	res = e.call("chat_manager", map[string]any{"action": "list_messages", "session_id": current,
		"after_time": base.Add(4 * time.Minute).Unix(), "before_time": base.Add(7 * time.Minute).Unix()})
	g.Expect(strings.Split(res.Content, "\n")[1:]).To(Equal([]string{"[2023-11-14 22:18:20Z] assistant: message 5", "[2023-11-14 22:19:20Z] user: message 6"}))

	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"action": "list_messages"}, "needs session_id"},
		{map[string]any{"action": "list_messages", "session_id": "web:other/bob:default"}, `no session "web:other/bob:default"`},
		{map[string]any{"action": "list_messages", "session_id": "nope"}, `no session "nope"`},
		{map[string]any{"action": "list_messages", "session_id": current, "count": 101}, "invalid arguments"},
		{map[string]any{"action": "list_messages", "session_id": current, "count": 0, "offset": -1}, "invalid arguments"},
		{map[string]any{"action": "list_messages", "session_id": current, "after_time": 10, "before_time": 5}, "must be before"},
		{map[string]any{"action": "delete_session"}, "invalid arguments"},
	} {
		res := e.call("chat_manager", tc.args)
		g.Expect(res.IsError).To(BeTrue(), "%v: %s", tc.args, res.Content)
		g.Expect(res.Content).To(ContainSubstring(tc.want), "%v", tc.args)
	}
}

var testBase = time.Unix(1_700_000_000, 0).UTC()

func parseSession(id string) ([3]string, error) {
	c, chat, d, err := store.ParseSessionID(id)
	return [3]string{c, chat, d}, err
}

func TestFeatureHealthAndSchemas(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	parts, err := e.feat.Build(e.ctx, &feature.Agent{Spec: e.spec, Host: &feature.Host{Store: e.st, Tenant: tenant}})
	g.Expect(err).NotTo(HaveOccurred())
	checks := parts.Health(e.ctx)
	g.Expect(checks).To(HaveLen(3))
	g.Expect(checks[0].OK).To(BeTrue())
	g.Expect(checks[0].Message).To(Equal("ready, webhook"))
	g.Expect(checks[1].OK).To(BeFalse())
	g.Expect(checks[1].Message).To(ContainSubstring(`secret "tg-missing" not found`))
	// Schemas stay small: they are sent with every model request.
	size := 0
	for _, d := range e.tools.Definitions() {
		if d.Name == "message" { // TestMessageOfferedOnlyWithAChatChannel
			continue
		}
		b, _ := json.Marshal(d)
		size += len(b)
	}
	g.Expect(size).To(BeNumerically("<", 2000), "send_message + chat_manager definitions: %d bytes", size)
	t.Logf("send_message + chat_manager tool definitions: %d bytes", size)
}

// TestAgentTurnWithSendMessage runs a real agent turn (agenthost, session
// manager, agent loop) against the fake LLM: the model sends a report to a
// ticket chat and attaches a chart to its own reply.
func TestAgentTurnWithSendMessage(t *testing.T) {
	g := NewWithT(t)
	llmServer := fakellm.New()
	t.Cleanup(llmServer.Close)
	e := newEnv(t, llmServer.URL())
	host := &agenthost.Host{Mode: feature.ModeEmbedded, Tenant: tenant, Store: e.st, StateDir: t.TempDir(), Holder: "test",
		Secrets: e.secrets, Features: []feature.Feature{e.feat}, Log: slog.New(slog.DiscardHandler)}
	built, err := host.Build(e.ctx, e.spec)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(built.Close)
	g.Expect(built.Info.Tools).To(ContainElements("send_message", "chat_manager"))

	ws := built.Session.Workspace(session.ID{Channel: "web", ChatID: "bot/alice", DialogID: session.DefaultDialog})
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 16)...)
	g.Expect(os.WriteFile(filepath.Join(ws, "report.txt"), []byte("42 tickets closed"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(ws, "chart.png"), png, 0o600)).To(Succeed())

	llmServer.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{
			{ID: "c1", Name: "send_message", Args: `{"target_chat_id":"tickets:T-1","content":"Weekly report","files":["report.txt"]}`},
			{ID: "c2", Name: "send_message", Args: `{"target_chat_id":"web:bot/alice","content":"the chart","files":["chart.png"]}`},
		}},
		fakellm.Turn{Text: "Sent the report to T-1; the chart is below."},
	)
	reply, err := built.Manager.Handle(e.ctx, session.Inbound{Channel: "web", ChatID: "bot/alice", Text: "send the weekly report to T-1 and show me the chart"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.SessionID).To(Equal(current))
	g.Expect(reply.Text).To(Equal("Sent the report to T-1; the chart is below."))
	g.Expect(reply.Output.Artifacts).To(Equal([]tool.Artifact{{Name: "chart.png", MediaType: "image/png", Data: png, PresentToUser: true}}))

	got := e.recv.got()
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0]).To(HaveKeyWithValue("text", "Weekly report"))

	reqs := llmServer.Requests()
	g.Expect(reqs).To(HaveLen(2))
	g.Expect(reqs[0].Tools).To(ContainElements("send_message", "chat_manager"))
	results := reqs[1].Messages[len(reqs[1].Messages)-2:]
	g.Expect(results[0].ToolResults[0].Content).To(Equal("Delivered to tickets:T-1 (session tickets:T-1:default, 1 attempt(s))."))
	g.Expect(results[1].ToolResults[0].Content).To(HavePrefix("Attached chart.png to your reply"))

	// The ticket chat's session holds what was sent there, with its origin.
	msgs, err := e.st.LoadMessages(e.ctx, "tickets:T-1:default", store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(1))
	g.Expect(msgs[0].Content).To(Equal("Weekly report\n\n[attachments: report.txt]"))
	g.Expect(msgs[0].Meta).To(HaveKeyWithValue(outbound.MetaOrigin, current))
}

// seed stores a session of agent ag with msgs.
func (e *env) seed(t *testing.T, id, ag string, msgs ...store.Message) {
	t.Helper()
	g := NewWithT(t)
	p, err := parseSession(id)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.st.CreateSession(e.ctx, store.Session{ID: id, Channel: p[0], ChatID: p[1], DialogID: p[2], Agent: ag})
	g.Expect(err).NotTo(HaveOccurred())
	if len(msgs) > 0 {
		_, err = e.st.AppendMessages(e.ctx, id, msgs...)
		g.Expect(err).NotTo(HaveOccurred())
	}
}

func userMsg(id, text string) store.Message {
	return store.Message{ID: id, Role: llm.RoleUser, Content: text, CreatedAt: testBase}
}

// sentMsg is a message as the dispatcher stores it in its target session.
func sentMsg(id, text string) store.Message {
	return store.Message{ID: id, Role: llm.RoleAssistant, Content: text, CreatedAt: testBase,
		Meta: map[string]string{outbound.MetaDelivery: "d" + id, outbound.MetaAgent: agent}}
}

func (e *env) messages(t *testing.T, sessionID string) []store.Message {
	t.Helper()
	msgs, err := e.st.LoadMessages(e.ctx, sessionID, store.LoadOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return msgs
}

func (e *env) deliveries(t *testing.T) []store.Delivery {
	t.Helper()
	dels, err := e.st.ListDeliveries(e.ctx, store.DeliveryFilter{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return dels
}

// TestSendMessageToAWebChat: "web:px-art", the form the web client names its
// chat by, is the agent's own chat web:bot/px-art, which its client reads —
// not a chat keyed "px-art" that no client can open.
func TestSendMessageToAWebChat(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	e.seed(t, "web:bot/px-art:default", agent, userMsg("u1", "draw me a cat"))
	e.seed(t, "web:px-art:default", agent, sentMsg("o1", "sent here by the bare form before"))

	for i, tc := range []struct{ target, want string }{
		{"web:px-art", "web:bot/px-art"},
		{"web:bot/px-art", "web:bot/px-art"},
		{"web:px-art:default", "web:bot/px-art:default"},
	} {
		text := fmt.Sprint("the cat, take ", i+1)
		res := e.call("send_message", map[string]any{"target_chat_id": tc.target, "content": text})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		g.Expect(res.Content).To(Equal("Delivered to " + tc.want + " (session web:bot/px-art:default, 1 attempt(s)): " +
			"stored in the chat's history, which its client shows when it loads the chat."))
		msgs := e.messages(t, "web:bot/px-art:default")
		g.Expect(msgs).To(HaveLen(i + 2))
		g.Expect(msgs[i+1].Content).To(Equal(text))
		g.Expect(msgs[i+1].Meta).To(HaveKeyWithValue(outbound.MetaOrigin, current))
	}
	g.Expect(e.messages(t, "web:px-art:default")).To(HaveLen(1), "the orphan chat gets nothing")
	dels := e.deliveries(t)
	g.Expect(dels).To(HaveLen(3))
	for _, d := range dels {
		g.Expect(d.Status).To(Equal(store.DeliveryDelivered))
		g.Expect(d.ChatID).To(Equal("bot/px-art"))
	}

	// The orphan is not listed as a chat to send to: its key is no chat.
	res := e.call("chat_manager", map[string]any{"action": "list_channels"})
	g.Expect(strings.Split(res.Content, "\n")).To(ContainElement("- web (web, ready) recent chats: bot/px-art"))
}

// TestSendMessageWebChatNeedsAReader: a web or terminal chat only shows a
// message to a client that loads it, so a chat no user has written in is
// refused, and nothing is stored or recorded for it.
func TestSendMessageWebChatNeedsAReader(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1")
	// Only messages sent to it: nobody ever opened it.
	e.seed(t, "web:bot/ghost:default", agent, sentMsg("o1", "hello?"))
	// The user wrote, but then deleted the dialog.
	e.seed(t, "web:bot/gone:default", agent, userMsg("u1", "hi"))
	_, err := e.st.UpdateSession(e.ctx, "web:bot/gone:default", store.SessionUpdate{Deleted: ptr(true)})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	// The user wrote long ago; since then more than a page of messages were sent.
	old := []store.Message{userMsg("u1", "report daily")}
	for i := range readerRecent + 5 {
		old = append(old, sentMsg(fmt.Sprint("o", i), "daily report"))
	}
	e.seed(t, "web:bot/daily:default", agent, old...)
	e.seed(t, "terminal:bot/tty1:default", agent, userMsg("u1", "hi from the terminal"))

	for _, tc := range []struct {
		target, want string
	}{
		{"web:nobody", "web:bot/nobody"},
		{"web:bot/nobody:default", "web:bot/nobody:default"},
		{"terminal:tty9", "terminal:bot/tty9"},
		{"web:ghost", "web:bot/ghost"},
		{"web:gone", "web:bot/gone"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			g := NewWithT(t)
			res := e.call("send_message", map[string]any{"target_chat_id": tc.target, "content": "x"})
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(HavePrefix("error: NOT sent to " + tc.want + ": no user has written in this chat"))
			g.Expect(res.Content).To(ContainSubstring("nothing was stored"))
			g.Expect(res.Content).NotTo(ContainSubstring("Delivered"))
		})
	}
	g := NewWithT(t)
	g.Expect(e.deliveries(t)).To(BeEmpty())
	for _, chat := range []string{"bot/nobody", "nobody"} {
		s, err := e.st.ListSessions(e.ctx, store.SessionFilter{Channel: "web", ChatID: chat, IncludeArchived: true, IncludeDeleted: true})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s).To(BeEmpty(), "no session is made for %s", chat)
	}
	g.Expect(e.messages(t, "web:bot/ghost:default")).To(HaveLen(1))

	// Chats a user has written in are reached.
	for _, target := range []string{"web:daily", "terminal:tty1"} {
		res := e.call("send_message", map[string]any{"target_chat_id": target, "content": "x"})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		g.Expect(res.Content).To(HavePrefix("Delivered to "))
	}
	g.Expect(e.deliveries(t)).To(HaveLen(2))
}

func ptr[T any](v T) *T { return &v }

// TestSendMessageRefusesAnotherAgentsChat: an agent sends to its own chats
// only, as it sees only its own sessions.
func TestSendMessageRefusesAnotherAgentsChat(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	e.seed(t, "web:other/bob:default", "other", userMsg("u1", "hi other"))

	for _, target := range []string{"web:other/bob", "web:other/bob:default"} {
		res := e.call("send_message", map[string]any{"target_chat_id": target, "content": "from bot"})
		g.Expect(res.IsError).To(BeTrue(), res.Content)
		g.Expect(res.Content).To(HavePrefix(`error: bad target "` + target + `": other/bob is a chat of agent "other", not yours (bot); ` +
			"you can only send to your own chats. Nothing was sent. Accepted targets:"))
	}
	g.Expect(e.messages(t, "web:other/bob:default")).To(HaveLen(1))
	g.Expect(e.deliveries(t)).To(BeEmpty())
}

// TestSendMessageGarbageTargets: a target that is not one of the accepted
// forms is refused with the forms, and nothing is stored.
func TestSendMessageGarbageTargets(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1")
	for _, tc := range []struct{ target, why string }{
		{"", "empty"},
		{"   ", "empty"},
		{"px-art", "no channel"},
		{":px-art", "no channel"},
		{"web:", "no chat id"},
		{"web:px-art:", "empty dialog id"},
		{"web:/px-art", "a web chat is <chat_id> or bot/<chat_id>"},
		{"web:bot/", "a web chat is <chat_id> or bot/<chat_id>"},
		{"web:bot/px/art", "a web chat is <chat_id> or bot/<chat_id>"},
		{"terminal:a/b/c", "a terminal chat is <chat_id> or bot/<chat_id>"},
		{"openai:bot/x", "openai clients only get answers to their own requests"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			g := NewWithT(t)
			res := e.call("send_message", map[string]any{"target_chat_id": tc.target, "content": "x"})
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(HavePrefix("error: bad target"))
			g.Expect(res.Content).To(ContainSubstring(tc.why))
			g.Expect(res.Content).To(ContainSubstring("Nothing was sent. " + targetForms(agent)))
			g.Expect(res.Content).To(HaveSuffix("Accepted targets: <channel>:<chat_id> or <channel>:<chat_id>:<dialog_id>. " +
				"On a chat platform the chat id is the platform's: telegram:123456789, telegram:123456789:d_k3x9qa2m. " +
				"On web and terminal it is one of your own chats, which a user has written in: " +
				"web:px-art (your chat web:bot/px-art, which may be written so too), web:px-art:default (one of its dialogs). " +
				"chat_manager list_channels shows your channels and chats."))
		})
	}
	g := NewWithT(t)
	g.Expect(e.deliveries(t)).To(BeEmpty())
	all, err := e.st.ListSessions(e.ctx, store.SessionFilter{IncludeArchived: true, IncludeDeleted: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(all).To(BeEmpty())
}

// TestSendMessageToAPlatformChannelNamedWeb: a chat platform's channel that
// happens to be named like a gateway channel takes the platform's chat ids,
// as the dispatcher routes to it first.
func TestSendMessageToAPlatformChannelNamedWeb(t *testing.T) {
	g := NewWithT(t)
	e := newEnvFor(t, "http://127.0.0.1:1", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: bot
spec:
  model:
    provider: openai
    model: test-model
    baseURL: %s
  channels:
  - type: webhook
    name: web
    secretRef: {name: tickets}
`, "")
	res := e.call("send_message", map[string]any{"target_chat_id": "web:T-1", "content": "ticket update"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("Delivered to web:T-1 (session web:T-1:default, 1 attempt(s))."))
	got := e.recv.got()
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0]).To(HaveKeyWithValue("chat_id", "T-1"))
}

// TestListChannelsNamesOnlyReachableChats: list_channels names the chats
// send_message can reach: no orphan keyed without the agent, no OpenAI or
// scheduled-run sessions; a terminal chat is a gateway client's.
func TestListChannelsNamesOnlyReachableChats(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "http://127.0.0.1:1")
	e.seed(t, current, agent, userMsg("u1", "hi"))
	e.seed(t, "web:px-art:default", agent, sentMsg("o1", "orphan"))
	e.seed(t, "openai:bot/api:default", agent, userMsg("u1", "hi"))
	e.seed(t, "cron:nightly:run1", agent, userMsg("u1", "run"))
	e.seed(t, "terminal:bot/tty1:default", agent, userMsg("u1", "hi"))

	res := e.call("chat_manager", map[string]any{"action": "list_channels"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("Channels (target: <channel>:<chat_id>[:<dialog_id>]; web:px-art means your web chat bot/px-art):\n" +
		"- tickets (webhook, ready)\n" +
		`- telegram (telegram, NOT ready: secret "tg-missing" not found)` + "\n" +
		"- web (web, ready) recent chats: bot/alice\n" +
		"- terminal (gateway clients) recent chats: bot/tty1"))
}
