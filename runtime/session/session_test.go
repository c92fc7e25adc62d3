package session

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

func TestParseID(t *testing.T) {
	cases := []struct {
		in      string
		want    ID
		wantErr string
	}{
		{"web:u1:default", ID{"web", "u1", "default"}, ""},
		{"feishu:oc_a:b:c:d_x1", ID{"feishu", "oc_a:b:c", "d_x1"}, ""},
		{"web:u1", ID{}, "want <channel>:<chat_id>:<dialog_id>"},
		{":u1:d", ID{}, "want <channel>:<chat_id>:<dialog_id>"},
		{"web::d", ID{}, "want <channel>:<chat_id>:<dialog_id>"},
		{"web:u1:", ID{}, "want <channel>:<chat_id>:<dialog_id>"},
		{"web:u\n1:d", ID{}, "control characters"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			id, err := ParseID(tc.in)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(id).To(Equal(tc.want))
			g.Expect(id.String()).To(Equal(tc.in))
		})
	}
	g := NewWithT(t)
	g.Expect(ID{"web", "u1", "d"}.ChatScope()).To(Equal("web:u1"))
	g.Expect(NewDialogID()).To(MatchRegexp(`^d_[a-z2-7]{8}$`))
	g.Expect(NewDialogID()).NotTo(Equal(NewDialogID()))
}

func TestParseCommand(t *testing.T) {
	cases := []struct {
		in   string
		want *Command
	}{
		{"/new", &Command{Name: "new"}},
		{"  /Switch   d_abc  ", &Command{Name: "switch", Args: "d_abc"}},
		{"/rename My  trip plan", &Command{Name: "rename", Args: "My  trip plan"}},
		{"/?", &Command{Name: "help"}},
		{"/etc/hosts is broken", nil},
		{"/ 2", nil},
		{"/2fa please", nil},
		{"/approve K7Q2", nil},
		{"/Nonsense and more", &Command{Name: "nonsense", Args: "and more", Unknown: true}},
		{"/start", &Command{Name: "start", Unknown: true}},
		{"hello /new", nil},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		c, ok := ParseCommand(tc.in)
		if tc.want == nil {
			g.Expect(ok).To(BeFalse(), tc.in)
			continue
		}
		g.Expect(ok).To(BeTrue(), tc.in)
		g.Expect(c).To(Equal(*tc.want))
	}
	for _, name := range []string{"/new", "/sessions", "/switch", "/rename", "/delete", "/compact", "/info", "/dump", "/help", "/mcp", "/health", "/stop"} {
		NewWithT(t).Expect(HelpText()).To(ContainSubstring(name))
	}
}

type fixture struct {
	s     *fakellm.Server
	st    store.Store
	m     *Manager
	ctx   context.Context
	tools *tool.Registry
}

func newFixture(t testing.TB, mutate ...func(*Config)) *fixture {
	t.Helper()
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: s.URL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	echo := tool.New("echo", "Echo text.", func(_ context.Context, _ tool.Env, a struct {
		Text string `json:"text"`
	}) (tool.Result, error) {
		return tool.Text("echo: " + a.Text), nil
	})
	reg, err := tool.NewRegistry(echo)
	g.Expect(err).NotTo(HaveOccurred())
	cfg := Config{Store: st, Loop: &agent.Loop{Provider: p, Tools: reg}, Agent: "assistant", System: "Be brief.",
		Timeline: StoreTimeline{Store: st}, Holder: "pod-a"}
	for _, fn := range mutate {
		fn(&cfg)
	}
	return &fixture{s: s, st: st, m: NewManager(cfg), ctx: store.WithTenant(context.Background(), "team-a"), tools: reg}
}

func (f *fixture) say(t *testing.T, chat, text string) Reply {
	t.Helper()
	r, err := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: chat, Text: text})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return r
}

func TestTurnPersistsAndRestores(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"one"}`}}},
		fakellm.Turn{Text: "First answer."},
		fakellm.Turn{Text: "Second answer."},
	)
	r := f.say(t, "u1", "Plan my trip to Hangzhou next week")
	g.Expect(r.SessionID).To(Equal("web:u1:default"))
	g.Expect(r.Text).To(Equal("First answer."))
	r = f.say(t, "u1", "and the return?")
	g.Expect(r.Text).To(Equal("Second answer."))

	// The second request carried the whole first exchange, restored from the store.
	reqs := f.s.Requests()
	g.Expect(reqs).To(HaveLen(3))
	var roles []string
	for _, m := range reqs[2].Messages {
		roles = append(roles, m.Role)
	}
	g.Expect(roles).To(Equal([]string{"system", "user", "assistant", "tool", "assistant", "user"}))

	msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(6))
	// Six messages and a default title: auto-titled from the first request.
	s, err := f.st.GetSession(f.ctx, r.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Title).To(Equal("Plan my trip to Hangzhou next week"))
	g.Expect(s.TitleIsDefault).To(BeFalse())
	g.Expect(s.Agent).To(Equal("assistant"))
}

func TestDuplicateInboundIsProcessedOnce(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Script(fakellm.Turn{Text: "Once."})
	in := Inbound{Channel: "telegram", ChatID: "42", MessageID: "tg-1001", Text: "hello"}
	r1, err := f.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	r2, err := f.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r1.Text).To(Equal("Once."))
	g.Expect(r2.Duplicate).To(BeTrue())
	g.Expect(r2.Text).To(Equal("Once."), "a duplicate carries the stored answer, not an empty one")
	g.Expect(f.s.Requests()).To(HaveLen(1))
	n, err := f.st.CountMessages(f.ctx, r1.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(int64(2)))
}

func TestDialogsAndCommands(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "ok: " + r.Messages[len(r.Messages)-1].Content}
	})
	g.Expect(f.say(t, "u1", "in default").SessionID).To(Equal("web:u1:default"))

	r := f.say(t, "u1", "/new")
	g.Expect(r.Command).To(Equal("new"))
	newID, err := ParseID(r.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(newID.DialogID).To(HavePrefix("d_"))
	g.Expect(f.say(t, "u1", "in the new one").SessionID).To(Equal(r.SessionID))

	list := f.say(t, "u1", "/sessions").Text
	// Each is titled after its first exchange, by its first request.
	g.Expect(list).To(ContainSubstring("* " + newID.DialogID + "  in the new one"))
	g.Expect(list).To(ContainSubstring("  default  in default"))

	bad := f.say(t, "u1", "/switch nope")
	g.Expect(bad.Text).To(Equal(`no conversation "nope" in this chat; /sessions lists them`))
	g.Expect(bad.Failed).To(BeTrue())
	calls := len(f.s.Requests())
	bad = f.say(t, "u1", "/nonsense")
	g.Expect(bad.Failed).To(BeTrue())
	g.Expect(bad.Text).To(HavePrefix("Unknown command /nonsense.\nCommands:\n"))
	g.Expect(f.s.Requests()).To(HaveLen(calls), "the model never sees an unknown command")
	g.Expect(f.say(t, "u1", "/switch default").Text).To(Equal("Switched to default: in default"))
	g.Expect(f.say(t, "u1", "back in default").SessionID).To(Equal("web:u1:default"))

	g.Expect(f.say(t, "u1", "/rename  Trip planning ").Text).To(Equal(`Renamed to "Trip planning".`))
	info := f.say(t, "u1", "/info").Text
	g.Expect(info).To(ContainSubstring("Session web:u1:default\nTitle: Trip planning\nAgent: assistant\nMessages: 4"))
	g.Expect(f.say(t, "u1", "/help").Text).To(Equal(HelpText()))
	calls = len(f.s.Requests())
	noHealth := f.say(t, "u1", "/health")
	g.Expect(noHealth.Failed).To(BeTrue())
	g.Expect(noHealth.Text).To(Equal("No health service runs here."))
	g.Expect(f.s.Requests()).To(HaveLen(calls), "/health never reaches the model")

	// Deleting the current dialog: the next message goes to the most recent
	// remaining one.
	g.Expect(f.say(t, "u1", "/delete").Text).To(Equal("Deleted conversation default."))
	g.Expect(f.say(t, "u1", "where am I?").SessionID).To(Equal(r.SessionID))
	g.Expect(f.say(t, "u1", "/sessions").Text).NotTo(ContainSubstring("default"))

	// Another chat is separate.
	g.Expect(f.say(t, "u2", "hi").SessionID).To(Equal("web:u2:default"))
	// Slash-looking text that is not a command goes to the model.
	g.Expect(f.say(t, "u2", "/etc/hosts is broken").Text).To(Equal("ok: /etc/hosts is broken"))
}

func TestRestoreRepairsAChainBrokenByACrash(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	id, err := f.m.Resolve(f.ctx, "web", "u1")
	g.Expect(err).NotTo(HaveOccurred())
	// A runtime died after the model asked for a tool, before its result.
	_, err = f.st.AppendMessages(f.ctx, id.String(),
		store.Message{ID: "in-1", Role: llm.RoleUser, Content: "run it"},
		withID("in-1/0", store.FromLLM(llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "echo", Arguments: `{"text":"x"}`}}})))
	g.Expect(err).NotTo(HaveOccurred())
	f.s.Script(fakellm.Turn{Text: "Recovered."})
	r := f.say(t, "u1", "are you there?")
	g.Expect(r.Text).To(Equal("Recovered."))
	var results []fakellm.ToolResult
	for _, m := range f.s.Requests()[0].Messages {
		results = append(results, m.ToolResults...)
	}
	g.Expect(results).To(HaveLen(1))
	g.Expect(results[0].CallID).To(Equal("call_1"))
	g.Expect(results[0].Content).To(ContainSubstring("no result was recorded"))
}

func withID(id string, m store.Message) store.Message {
	m.ID = id
	return m
}

func TestLeaseMakesOneRuntimeTheOwner(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	id, err := f.m.Resolve(f.ctx, "web", "u1")
	g.Expect(err).NotTo(HaveOccurred())
	ok, err := f.st.AcquireLease(f.ctx, id.String(), "pod-b", time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	_, err = f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "hello"})
	g.Expect(errors.Is(err, ErrBusy)).To(BeTrue(), "%v", err)
	g.Expect(f.s.Requests()).To(BeEmpty())

	g.Expect(f.st.ReleaseLease(f.ctx, id.String(), "pod-b")).To(Succeed())
	f.s.Script(fakellm.Turn{Text: "mine now"})
	g.Expect(f.say(t, "u1", "hello").Text).To(Equal("mine now"))
}

func TestStopCancelsTheRunningTurn(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Script(fakellm.Turn{Text: strings.Repeat("slow ", 500), ChunkDelay: 20 * time.Millisecond})
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "talk a lot", Stream: true,
			Sink: func(e turn.Event) {
				if e.Kind == turn.EventDelta {
					once.Do(func() { close(started) })
				}
			}})
		done <- err
	}()
	<-started
	g.Expect(f.say(t, "u1", "/stop").Text).To(Equal("Stopped."))
	err := <-done
	g.Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "%v", err)
	g.Expect(f.say(t, "u1", "/stop").Text).To(Equal("Nothing is running."))
}

func TestCompressionMarkAndTimelineRestore(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, func(c *Config) {
		c.Compressor = &agent.Compressor{Window: 1500, ToolTrimChars: 1 << 20, Summarizer: c.Loop.Provider}
	})
	f.s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if strings.HasPrefix(r.System, "You compress conversation history") {
			return fakellm.Turn{Text: "The user is planning a trip; I looked up trains."}
		}
		if last := r.Messages[len(r.Messages)-1]; last.Role == "user" && strings.HasPrefix(last.Content, "look") {
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"` + strings.Repeat("train ", 200) + `"}`}}}
		}
		return fakellm.Turn{Text: "noted"}
	})
	f.say(t, "u1", "look up trains")
	f.say(t, "u1", "look up hotels")
	r := f.say(t, "u1", "summarise please")
	s, err := f.st.GetSession(f.ctx, r.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.LastCompressedAt).NotTo(BeNil(), "the history crossed 70%% of the window")
	tl, err := f.st.ListMemories(f.ctx, store.MemoryFilter{Agent: "assistant", Category: store.MemoryTimeline, SessionID: r.SessionID})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tl).NotTo(BeEmpty())
	g.Expect(tl[0].Importance).To(Equal(0.3))

	id, _ := ParseID(r.SessionID)
	h, err := f.m.History(f.ctx, id)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h[0].Content).To(HavePrefix("[Previous Context]\nThe user is planning a trip"))
	g.Expect(h[len(h)-1].Role).To(Equal(llm.RoleAssistant))

	// Later turns, whose history is cached, start at the mark too.
	f.say(t, "u1", "thanks")
	f.say(t, "u1", "and tomorrow?")
	reqs := f.s.Requests()
	last := reqs[len(reqs)-1].Messages
	g.Expect(last[1].Content).To(HavePrefix("[Previous Context]\nThe user is planning a trip"))
	for _, m := range last {
		g.Expect(m.Content).NotTo(Equal("look up trains"), "a message from before the mark")
	}
	g.Expect(last[len(last)-1].Content).To(Equal("and tomorrow?"))

	g.Expect(f.say(t, "u1", "/compact").Text).To(ContainSubstring("Compressed the context of default"))

	// A new conversation has nothing to compress, and says so.
	calls := len(f.s.Requests())
	f.say(t, "u1", "/new")
	g.Expect(f.say(t, "u1", "/compact").Text).To(HavePrefix("Nothing to compress yet: d_"))
	g.Expect(f.s.Requests()).To(HaveLen(calls), "no summary asked of the model")
}

// countingStore counts session and message reads.
type countingStore struct {
	store.Store
	gets, loads atomic.Int64
}

func (c *countingStore) LoadMessages(ctx context.Context, id string, opts store.LoadOptions) ([]store.Message, error) {
	c.loads.Add(1)
	return c.Store.LoadMessages(ctx, id, opts)
}

func (c *countingStore) GetSession(ctx context.Context, id string) (store.Session, error) {
	c.gets.Add(1)
	return c.Store.GetSession(ctx, id)
}

// TestLeasedSessionTurnReadsNoSession: while the lease is held, a turn reads
// neither the session row (the current dialog's read checks it is not
// deleted) nor messages: its history and compression mark come from the
// cache, which the turn's own writes keep up to date.
func TestLeasedSessionTurnReadsNoSession(t *testing.T) {
	g := NewWithT(t)
	var cs *countingStore
	f := newFixture(t, func(c *Config) {
		cs = &countingStore{Store: c.Store}
		c.Store = cs
	})
	f.s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	for _, text := range []string{"one", "two", "three"} { // titled after the first
		f.say(t, "u1", text)
	}
	gets, loads := cs.gets.Load(), cs.loads.Load()
	for _, text := range []string{"four", "five", "six"} {
		f.say(t, "u1", text)
	}
	g.Expect(cs.gets.Load() - gets).To(BeZero())
	g.Expect(cs.loads.Load() - loads).To(BeZero())
	var got []string
	for _, m := range f.s.Requests()[5].Messages[1:] {
		got = append(got, m.Role+": "+m.Content)
	}
	g.Expect(got).To(Equal([]string{"user: one", "assistant: ok", "user: two", "assistant: ok", "user: three", "assistant: ok",
		"user: four", "assistant: ok", "user: five", "assistant: ok", "user: six"}))
}

// A runtime that died after storing the user message but before storing its
// turn leaves the message last in the session; the redelivery runs the turn
// once, and a further redelivery is a plain duplicate.
func TestRedeliveryAfterCrashRunsTheTurnOnce(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	sid := "telegram:42:default"
	_, err := f.st.CreateSession(f.ctx, store.Session{Channel: "telegram", ChatID: "42", DialogID: "default", Agent: "assistant", Title: "New conversation", TitleIsDefault: true})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.st.AppendMessages(f.ctx, sid, store.Message{ID: "tg-7", Role: llm.RoleUser, Content: "hello"})
	g.Expect(err).NotTo(HaveOccurred())

	f.s.Script(fakellm.Turn{Text: "Recovered."})
	in := Inbound{Channel: "telegram", ChatID: "42", MessageID: "tg-7", Text: "hello"}
	r, err := f.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Duplicate).To(BeFalse())
	g.Expect(r.Text).To(Equal("Recovered."))

	r, err = f.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Duplicate).To(BeTrue())
	g.Expect(r.Text).To(Equal("Recovered."))
	g.Expect(f.s.Requests()).To(HaveLen(1))
	msgs, err := f.st.LoadMessages(f.ctx, sid, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(2))
	g.Expect(msgs[0].Content).To(Equal("hello"))
	g.Expect(msgs[1].Content).To(Equal("Recovered."))
}

func TestPromptSectionsJoinTheSystemPromptOfEachTurn(t *testing.T) {
	g := NewWithT(t)
	var seen []PromptInput
	f := newFixture(t, func(c *Config) {
		c.Prompt = func(_ context.Context, in PromptInput) string {
			seen = append(seen, in)
			return "## Memory\n- diet: vegetarian"
		}
	})
	f.s.Script(fakellm.Turn{Text: "ok"})
	r := f.say(t, "u1", "what should I cook?")
	g.Expect(r.Text).To(Equal("ok"))
	g.Expect(seen).To(HaveLen(1))
	g.Expect(seen[0].Text).To(Equal("what should I cook?"))
	g.Expect(seen[0].SessionID.String()).To(Equal("web:u1:default"))
	reqs := f.s.Requests()
	g.Expect(reqs).To(HaveLen(1))
	g.Expect(reqs[0].Messages[0].Content).To(HavePrefix("Be brief.\n\n## Memory\n- diet: vegetarian"))
}

// TestHistoryKeepsUpWithMessagesStoredElsewhere: between turns the history is
// read incrementally from what this manager last loaded; a message another
// writer appended meanwhile (the outbound dispatcher delivering a
// send_message into this conversation) is part of the next turn, and
// nothing is sent twice.
func TestHistoryKeepsUpWithMessagesStoredElsewhere(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "re: " + r.Messages[len(r.Messages)-1].Content}
	})
	r := f.say(t, "u1", "one")
	_, err := f.st.AppendMessages(f.ctx, r.SessionID, store.Message{ID: "push-1", Role: llm.RoleAssistant, Content: "Reminder: train at 9"})
	g.Expect(err).NotTo(HaveOccurred())
	f.say(t, "u1", "two")
	f.say(t, "u1", "three")
	var got []string
	for _, m := range f.s.Requests()[2].Messages[1:] {
		got = append(got, m.Role+": "+m.Content)
	}
	g.Expect(got).To(Equal([]string{"user: one", "assistant: re: one", "assistant: Reminder: train at 9", "user: two",
		"assistant: re: two", "user: three"}))
}

// TestCachedHistoryEqualsStoredHistory: the history a manager keeps from its
// own writes (a turn with tool calls included) is what a fresh runtime reads
// from the store.
func TestCachedHistoryEqualsStoredHistory(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if last := r.Messages[len(r.Messages)-1]; last.Role == "user" && last.Content == "use the tool" {
			return fakellm.Turn{Text: "calling", ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"hi"}`}}}
		}
		return fakellm.Turn{Text: "done"}
	})
	var r Reply
	for _, text := range []string{"hello", "use the tool", "thanks"} {
		r = f.say(t, "u1", text)
	}
	id, err := ParseID(r.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	cached, err := f.m.History(f.ctx, id)
	g.Expect(err).NotTo(HaveOccurred())
	fresh, err := NewManager(Config{Store: f.st, Agent: "assistant", Holder: "pod-b"}).History(f.ctx, id)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cached).To(Equal(fresh))
	g.Expect(cached).To(HaveLen(8)) // hello, done, use the tool, call, result, done, thanks, done
}

func TestWorkspaceNamesAreReadableAndNeverShared(t *testing.T) {
	g := NewWithT(t)
	g.Expect(WorkspaceName(ID{"web", "helper/alice.smith", "default"})).To(MatchRegexp(`^web_helper_alice\.smith_default-[0-9a-f]{16}$`))
	// Ids that read alike (or differ only in case, which a case-insensitive
	// file system folds) get folders of their own.
	alike := [][2]ID{
		{{"web", "helper/alice.smith", "default"}, {"web", "helper/Alice.Smith", "default"}},
		{{"web", "helper/a b", "default"}, {"web", "helper/a_b", "default"}},
		{{"feishu", "oc_a:b", "default"}, {"feishu", "oc_a_b", "default"}},
	}
	for _, p := range alike {
		a, b := WorkspaceName(p[0]), WorkspaceName(p[1])
		g.Expect(strings.ToLower(a)).NotTo(Equal(strings.ToLower(b)), "%s and %s", p[0], p[1])
	}
	long := WorkspaceName(ID{"web", strings.Repeat("x", 300), "default"})
	g.Expect(len(long)).To(Equal(100 + 1 + 16))
}

// TestAnswerKeepsTheTurnsTokens: a turn's answer is stored with the tokens
// of all its model calls, so a client shows them after a reload; the
// steps before it carry none.
func TestAnswerKeepsTheTurnsTokens(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"one"}`}}, Usage: &fakellm.Usage{InputTokens: 100, OutputTokens: 7}},
		fakellm.Turn{Text: "Done.", Usage: &fakellm.Usage{InputTokens: 130, OutputTokens: 5}},
	)
	r := f.say(t, "u1", "go")
	msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(4))
	for _, m := range msgs[:3] {
		g.Expect(m.Meta).NotTo(HaveKey(store.MetaTokensIn), "%s %q", m.Role, m.Content)
	}
	g.Expect(msgs[3].Content).To(Equal("Done."))
	g.Expect(msgs[3].Meta).To(HaveKeyWithValue(store.MetaTokensIn, "230"))
	g.Expect(msgs[3].Meta).To(HaveKeyWithValue(store.MetaTokensOut, "12"))
}
