package sessionrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/turn"
	"github.com/picobot/picobot/test/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// owner is a test Owner: a set of held chats, with hooks.
type owner struct {
	mu       sync.Mutex
	held     map[Chat]bool
	acquires int
	releases int
	// onRelease runs after a release (a message arriving meanwhile).
	onRelease func()
	// refuse makes Acquire fail (another runtime took the chat).
	refuse bool
	// keep, when set, derives the held context (a lease that gets lost).
	keep func(ctx context.Context) context.Context
}

func (o *owner) Acquire(_ context.Context, c Chat) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acquires++
	if o.refuse || o.held[c] {
		return false, nil
	}
	o.held[c] = true
	return true, nil
}

func (o *owner) Keep(ctx context.Context, _ Chat) (context.Context, func(), error) {
	if o.keep != nil {
		return o.keep(ctx), func() {}, nil
	}
	return ctx, func() {}, nil
}

func (o *owner) Release(_ context.Context, c Chat) {
	o.mu.Lock()
	delete(o.held, c)
	o.releases++
	fn := o.onRelease
	o.onRelease = nil
	o.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (o *owner) counts() (acquires, releases int, held bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acquires, o.releases, len(o.held) > 0
}

// done is one outcome a Reporter saw.
type done struct {
	ID   string
	Out  protocol.Outcome
	Code string
	Err  string
}

// reporter is a test Reporter recording begins, events and outcomes.
type reporter struct {
	mu      sync.Mutex
	begun   chan string
	events  map[string][]turn.EventKind
	outcome chan done
}

func newReporter() *reporter {
	return &reporter{begun: make(chan string, 100), events: map[string][]turn.EventKind{}, outcome: make(chan done, 100)}
}

func (p *reporter) Begin(_ context.Context, _ Chat, id string) func() {
	p.begun <- id
	return func() {}
}

func (p *reporter) Event(_ context.Context, _ Chat, id string, e turn.Event) {
	p.mu.Lock()
	p.events[id] = append(p.events[id], e.Kind)
	p.mu.Unlock()
}

func (p *reporter) Done(_ context.Context, _ Chat, id string, out protocol.Outcome, err *protocol.CodedError) {
	d := done{ID: id, Out: out}
	if err != nil {
		d.Code, d.Err = err.Code, err.Error()
	}
	p.outcome <- d
}

type fixture struct {
	llm   *fakellm.Server
	bus   bus.Bus
	st    store.Store
	own   *owner
	rep   *reporter
	rt    *Runtime
	chat  Chat
	ctx   context.Context
	stopC context.CancelFunc
	// logs holds what the runtime logged, as JSON lines.
	logs *logbuf.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: s.URL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	b := membus.New(membus.Options{})
	t.Cleanup(func() { _ = b.Close() })
	m := session.NewManager(session.Config{Store: st, Loop: &agent.Loop{Provider: p}, Agent: "assistant",
		Timeline: session.StoreTimeline{Store: st}, Holder: "pod-a"})
	f := &fixture{llm: s, bus: b, st: st, own: &owner{held: map[Chat]bool{}}, rep: newReporter(),
		chat: Chat{Channel: protocol.ChannelWeb, Key: "assistant/u1"}, logs: &logbuf.Buffer{}}
	f.rt = New(Config{Tenant: "team-a", Agent: "assistant", Consumer: "pod-a", Bus: b, Store: st, Manager: m,
		Owner: f.own, Reporter: f.rep, IdleTimeout: 50 * time.Millisecond, Block: 10 * time.Millisecond,
		Log: slog.New(slog.NewJSONHandler(f.logs, nil))})
	f.ctx, f.stopC = context.WithCancel(store.WithTenant(context.Background(), "team-a"))
	t.Cleanup(f.stopC)
	return f
}

// queue publishes a message to the chat's stream as the gateway does.
func (f *fixture) queue(t *testing.T, id, text string) {
	t.Helper()
	payload, err := protocol.EncodeInbound(protocol.Inbound{ID: id, Channel: f.chat.Channel, ChatKey: f.chat.Key, Text: text})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	f.queueRaw(t, id, payload)
}

func (f *fixture) queueRaw(t *testing.T, id string, payload []byte) {
	t.Helper()
	NewWithT(t).Expect(f.bus.Publish(f.ctx, f.rt.Stream(f.chat), bus.Message{ID: id, Payload: payload})).To(Succeed())
}

// serve acquires the chat and serves it to the end.
func (f *fixture) serve(t *testing.T) bool {
	t.Helper()
	g := NewWithT(t)
	ok, err := f.own.Acquire(f.ctx, f.chat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	served, err := f.rt.Serve(f.ctx, f.chat)
	g.Expect(err).NotTo(HaveOccurred())
	return served
}

func (f *fixture) outcomes(t *testing.T, n int) []done {
	t.Helper()
	out := make([]done, 0, n)
	for range n {
		select {
		case d := <-f.rep.outcome:
			out = append(out, d)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d outcomes, want %d: %+v", len(out), n, out)
		}
	}
	return out
}

func (f *fixture) pending(t *testing.T) int {
	t.Helper()
	p, err := f.bus.Pending(f.ctx, f.rt.Stream(f.chat), protocol.ChatGroup, 100)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return len(p)
}

func TestServeRunsTheChatsMessagesInOrderAndAcksThem(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "first"}, fakellm.Turn{Text: "second"}, fakellm.Turn{Text: "third"})
	for i, text := range []string{"one", "two", "three"} {
		f.queue(t, fmt.Sprintf("assistant/u1/m%d", i+1), text)
	}
	g.Expect(f.serve(t)).To(BeTrue())
	got := f.outcomes(t, 3)
	g.Expect([]string{got[0].ID, got[1].ID, got[2].ID}).To(Equal([]string{"assistant/u1/m1", "assistant/u1/m2", "assistant/u1/m3"}))
	g.Expect([]string{got[0].Out.Text, got[1].Out.Text, got[2].Out.Text}).To(Equal([]string{"first", "second", "third"}))
	g.Expect(got[0].Out.SessionID).To(Equal("web:assistant/u1:default"))
	g.Expect(got[0].Code).To(BeEmpty())
	g.Expect(f.rep.events["assistant/u1/m1"]).To(ContainElement(turn.EventFinal))
	reqs := f.llm.Requests()
	g.Expect(reqs).To(HaveLen(3))
	last := reqs[2].Messages[len(reqs[2].Messages)-1]
	g.Expect(last.Content).To(Equal("three"), "the third turn sees the history of the first two")
	g.Expect(f.pending(t)).To(BeZero())
	acquires, releases, held := f.own.counts()
	g.Expect([]any{acquires, releases, held}).To(Equal([]any{1, 1, false}))
}

func TestServeReturnsAtOnceWhenNothingIsQueued(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	g.Expect(f.serve(t)).To(BeFalse())
	_, releases, held := f.own.counts()
	g.Expect(releases).To(Equal(1))
	g.Expect(held).To(BeFalse())
}

func TestServeTakesBackAMessageQueuedDuringTheRelease(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "first"}, fakellm.Turn{Text: "late"})
	f.queue(t, "assistant/u1/m1", "one")
	// The gateway saw the chat owned, so it queued without waking anyone.
	f.own.onRelease = func() { f.queue(t, "assistant/u1/m2", "two") }
	g.Expect(f.serve(t)).To(BeTrue())
	got := f.outcomes(t, 2)
	g.Expect(got[1].ID).To(Equal("assistant/u1/m2"))
	g.Expect(got[1].Out.Text).To(Equal("late"))
	g.Expect(f.pending(t)).To(BeZero())
	acquires, releases, _ := f.own.counts()
	g.Expect([]int{acquires, releases}).To(Equal([]int{2, 2}))
}

func TestALateMessageGoesToTheChatsNewOwner(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "first"}, fakellm.Turn{Text: "for the new owner"})
	f.queue(t, "assistant/u1/m1", "one")
	f.own.onRelease = func() {
		f.queue(t, "assistant/u1/m2", "two")
		f.own.mu.Lock()
		f.own.refuse = true // another runtime was woken and took the chat
		f.own.mu.Unlock()
	}
	g.Expect(f.serve(t)).To(BeTrue())
	g.Expect(f.outcomes(t, 1)[0].ID).To(Equal("assistant/u1/m1"))
	g.Expect(f.pending(t)).To(Equal(1), "the late message waits, fetched but not acked, for the chat's owner")
	// The new owner claims what is pending at start.
	f.own.refuse = false
	g.Expect(f.serve(t)).To(BeTrue())
	g.Expect(f.outcomes(t, 1)[0].Out.Text).To(Equal("for the new owner"))
	g.Expect(f.pending(t)).To(BeZero())
}

func TestStopDropsTheQueuedMessagesAndCancelsTheRunningTurn(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "a very slow answer that is stopped", Delay: 30 * time.Second})
	f.queue(t, "assistant/u1/m1", "slow")
	var wg sync.WaitGroup
	wg.Go(func() { f.serve(t) })
	g.Eventually(f.rep.begun).WithTimeout(10 * time.Second).Should(Receive(Equal("assistant/u1/m1")))
	g.Eventually(f.llm.Requests).WithTimeout(10 * time.Second).Should(HaveLen(1))
	f.queue(t, "assistant/u1/m2", "queued")
	f.queue(t, "assistant/u1/m3", "queued too")
	stopped, err := f.rt.Stop(f.ctx, f.chat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeTrue())
	got := f.outcomes(t, 3)
	byID := map[string]done{}
	for _, d := range got {
		byID[d.ID] = d
	}
	g.Expect(byID["assistant/u1/m1"].Code).To(Equal(protocol.CodeStopped))
	for _, id := range []string{"assistant/u1/m2", "assistant/u1/m3"} {
		g.Expect(byID[id].Out).To(Equal(protocol.Outcome{Command: "stop", Text: "Dropped by /stop before it ran."}), id)
	}
	wg.Wait()
	g.Expect(f.llm.Requests()).To(HaveLen(1), "the dropped messages never reached the model")
	g.Expect(f.pending(t)).To(BeZero())
	stopped, err = f.rt.Stop(f.ctx, f.chat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeFalse(), "nothing runs any more")
}

func TestMessagesThisRuntimeCannotReadAreAnsweredAndDropped(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "fine"})
	f.queueRaw(t, "assistant/u1/newer", []byte(`{"v":4,"id":"assistant/u1/newer","channel":"web","chat_key":"assistant/u1","text":"hi"}`))
	f.queueRaw(t, "assistant/u1/garbage", []byte(`{"v":1,`))
	// A message of the format before it was versioned (no "v") is read.
	f.queueRaw(t, "assistant/u1/old", []byte(`{"id":"assistant/u1/old","channel":"web","chat_key":"assistant/u1","text":"hi"}`))
	g.Expect(f.serve(t)).To(BeTrue())
	got := f.outcomes(t, 3)
	g.Expect(got[0].Code).To(Equal(protocol.CodeUnavailable))
	g.Expect(got[0].Err).To(ContainSubstring("unknown wire format version 4 (this build reads up to 3)"))
	g.Expect(got[1].Code).To(Equal(protocol.CodeBadRequest))
	g.Expect(got[1].Err).To(ContainSubstring("malformed queued message"))
	g.Expect(got[2].Code).To(BeEmpty())
	g.Expect(got[2].Out.Text).To(Equal("fine"))
	g.Expect(f.pending(t)).To(BeZero())
}

func TestALostChatLeavesTheRunningMessageForTheNextOwner(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "never finished", Delay: 30 * time.Second}, fakellm.Turn{Text: "finished by the next owner"})
	var lose context.CancelFunc
	f.own.keep = func(ctx context.Context) context.Context {
		ctx, lose = context.WithCancel(ctx)
		return ctx
	}
	f.queue(t, "assistant/u1/m1", "work")
	var wg sync.WaitGroup
	wg.Go(func() { f.serve(t) })
	g.Eventually(f.llm.Requests).WithTimeout(10 * time.Second).Should(HaveLen(1))
	lose() // the lease could not be renewed
	wg.Wait()
	g.Consistently(f.rep.outcome).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())
	g.Expect(f.pending(t)).To(Equal(1))
	f.own.keep = nil
	g.Expect(f.serve(t)).To(BeTrue())
	g.Expect(f.outcomes(t, 1)[0].Out.Text).To(Equal("finished by the next owner"))
}

// TestTurnLogLinesNameTheTurn: a turn that fails with an internal fault
// logs it as JSON with the tenant, agent, channel, chat, turn and session.
func TestTurnLogLinesNameTheTurn(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Status: http.StatusUnauthorized, ErrorBody: "bad key"})
	f.queue(t, "m-log", "hello")
	g.Expect(f.serve(t)).To(BeTrue())
	g.Expect(f.outcomes(t, 1)[0].Code).To(Equal(protocol.CodeInternal))
	var line map[string]any
	for l := range strings.SplitSeq(f.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"Turn failed"`) {
			g.Expect(json.Unmarshal([]byte(l), &line)).To(Succeed())
		}
	}
	g.Expect(line).To(And(HaveKeyWithValue("tenant", "team-a"), HaveKeyWithValue("agent", "assistant"),
		HaveKeyWithValue("channel", protocol.ChannelWeb), HaveKeyWithValue("chat", "assistant/u1"), HaveKeyWithValue("turn", "m-log"),
		HaveKeyWithValue("session", HavePrefix(protocol.ChannelWeb+":assistant/u1:"))), f.logs.String())
}

func TestCodedMapsTurnErrorsToProtocolCodes(t *testing.T) {
	r := New(Config{})
	cases := []struct {
		err      error
		code     string
		contains string
	}{
		{fmt.Errorf("building: %w", &protocol.CodedError{Code: protocol.CodeNoModel, Err: errors.New("agent a has no usable model")}),
			protocol.CodeNoModel, "building: agent a has no usable model"},
		{fmt.Errorf("turn: %w", session.ErrBusy), protocol.CodeBusy, "turn:"},
		{context.Canceled, protocol.CodeStopped, "stopped; what was done so far is kept"},
		{fmt.Errorf("load: %w", store.ErrNotFound), protocol.CodeUnknownSession, "load:"},
		{fmt.Errorf("title: %w", store.ErrInvalid), protocol.CodeBadRequest, "title:"},
		{store.ErrNoTenant, protocol.CodeForbidden, store.ErrNoTenant.Error()},
		{errors.New("disk on fire"), protocol.CodeInternal, "disk on fire"},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			g := NewWithT(t)
			got := r.coded(t.Context(), r.cfg.Log, tc.err)
			g.Expect(got.Code).To(Equal(tc.code))
			g.Expect(got.Error()).To(ContainSubstring(tc.contains))
		})
	}
	NewWithT(t).Expect(r.coded(t.Context(), r.cfg.Log, nil)).To(BeNil())
}

// A message whose turn killed its runtime on every delivery (a poison
// message) is not taken over for ever: past MaxDeliveries it is answered
// with one clear error and set aside on the tenant's dead-letter stream,
// where it can be queued again as it was, and the chat goes on.
func TestAPoisonMessageIsSetAside(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "next one answered"})
	f.queue(t, "assistant/u1/poison", "this crashes the pod")
	stream := f.rt.Stream(f.chat)
	// Five pods took it and died mid-turn (delivered 1 + 5 times).
	got, err := f.bus.Fetch(f.ctx, stream, protocol.ChatGroup, "dead-pod-0", bus.FetchOptions{Count: 1, Block: time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	for i := range DefaultMaxDeliveries {
		got, err = f.bus.Claim(f.ctx, stream, protocol.ChatGroup, fmt.Sprintf("dead-pod-%d", i+1), time.Nanosecond, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(HaveLen(1))
	}
	g.Expect(got[0].Deliveries).To(Equal(DefaultMaxDeliveries + 1))
	f.queue(t, "assistant/u1/next", "hello")

	g.Expect(f.serve(t)).To(BeTrue())
	out := f.outcomes(t, 2)
	g.Expect(out[0].ID).To(Equal("assistant/u1/poison"))
	g.Expect(out[0].Code).To(Equal(protocol.CodeDeadLetter))
	g.Expect(out[0].Err).To(ContainSubstring("set aside for an operator and will not be tried again"))
	g.Expect(out[1].ID).To(Equal("assistant/u1/next"))
	g.Expect(out[1].Out.Text).To(Equal("next one answered"))
	g.Expect(f.llm.Requests()).To(HaveLen(1), "the poison message never reached the model again")
	g.Expect(f.pending(t)).To(BeZero())

	dead, err := f.bus.Fetch(f.ctx, DeadLetterStream("team-a"), "ops", "me", bus.FetchOptions{Count: 10, Block: time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dead).To(HaveLen(1))
	var dl DeadLetter
	g.Expect(json.Unmarshal(dead[0].Payload, &dl)).To(Succeed())
	g.Expect(dl.Stream).To(Equal(stream))
	g.Expect(dl.MessageID).To(Equal("assistant/u1/poison"))
	g.Expect(dl.Deliveries).To(Equal(DefaultMaxDeliveries + 2))
	in, err := protocol.DecodeInbound(dl.Payload)
	g.Expect(err).NotTo(HaveOccurred(), "the payload is the message as it was")
	g.Expect(in.Text).To(Equal("this crashes the pod"))
}

func TestADrainingRuntimeFinishesItsTurnAndTakesNoMore(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	drain := make(chan struct{})
	cfg := f.rt.cfg
	cfg.Drain = drain
	f.rt = New(cfg)
	f.llm.Script(fakellm.Turn{Text: "first, finished while draining", Delay: 300 * time.Millisecond}, fakellm.Turn{Text: "second"})
	f.queue(t, "assistant/u1/m1", "one")
	served := make(chan bool, 1)
	go func() { served <- f.serve(t) }()
	g.Eventually(f.rep.begun).Should(Receive(Equal("assistant/u1/m1")))
	f.queue(t, "assistant/u1/m2", "two")
	close(drain)
	g.Eventually(served, 10*time.Second).Should(Receive(BeTrue()))
	got := f.outcomes(t, 1)
	g.Expect(got[0].ID).To(Equal("assistant/u1/m1"))
	g.Expect(got[0].Out.Text).To(Equal("first, finished while draining"))
	g.Expect(f.pending(t)).To(BeZero(), "the finished message is acked")
	g.Expect(f.llm.Requests()).To(HaveLen(1), "nothing new was taken")
	// The second message waits, untouched, for the chat's next owner.
	next, err := f.bus.Fetch(f.ctx, f.rt.Stream(f.chat), protocol.ChatGroup, "pod-b", bus.FetchOptions{Count: 10})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).To(HaveLen(1))
	g.Expect(next[0].ID).To(Equal("assistant/u1/m2"))
	_, _, held := f.own.counts()
	g.Expect(held).To(BeFalse())
}

func TestATurnStillRunningAtTheEndOfTheGraceIsLeftForTheNextOwner(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	drain := make(chan struct{})
	cfg := f.rt.cfg
	cfg.Drain = drain
	f.rt = New(cfg)
	f.llm.Script(fakellm.Turn{Text: "too slow", Delay: 5 * time.Second})
	f.queue(t, "assistant/u1/m1", "one")
	served := make(chan bool, 1)
	go func() { served <- f.serve(t) }()
	g.Eventually(f.rep.begun).Should(Receive(Equal("assistant/u1/m1")))
	close(drain)
	f.stopC() // the grace period ends
	g.Eventually(served, 10*time.Second).Should(Receive())
	g.Consistently(f.rep.outcome, 200*time.Millisecond).ShouldNot(Receive(), "no outcome: the message is not answered here")
	g.Expect(f.pending(t)).To(Equal(1), "left pending for the chat's next owner")
}

// TestDelegatedTasksRunOnTheirOwnManager: a message carrying a delegation
// runs on the manager Delegated returns (the sub-agent's), with the context
// it returns; serving ends once it is answered, however long the idle
// timeout; a delegation Delegated refuses is answered with its error, and
// without Delegated none runs on the agent's own manager.
func TestDelegatedTasksRunOnTheirOwnManager(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(fakellm.Turn{Text: "sub answer"})
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "sub-model", BaseURL: f.llm.URL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	type depthKey struct{}
	var depth any
	mainRan := false
	sub := session.NewManager(session.Config{Store: f.st, Loop: &agent.Loop{Provider: p}, Agent: "assistant", System: "You run a delegated task.",
		Timeline: session.StoreTimeline{Store: f.st}, Holder: "pod-a", Prompt: func(ctx context.Context, _ session.PromptInput) string {
			depth = ctx.Value(depthKey{})
			return ""
		}})
	var got []protocol.Delegation
	cfg := f.rt.cfg
	cfg.IdleTimeout = time.Hour
	cfg.Delegated = func(ctx context.Context, d protocol.Delegation) (context.Context, *session.Manager, error) {
		got = append(got, d)
		if d.RunID == "gone" {
			return nil, nil, &protocol.CodedError{Code: protocol.CodeStopped, Err: errors.New("run gone is cancelled")}
		}
		return context.WithValue(ctx, depthKey{}, d.Depth), sub, nil
	}
	cfg.Manager = session.NewManager(session.Config{Store: f.st, Loop: &agent.Loop{Provider: p}, Agent: "assistant",
		Timeline: session.StoreTimeline{Store: f.st}, Holder: "pod-a", Prompt: func(context.Context, session.PromptInput) string {
			mainRan = true
			return ""
		}})
	f.rt = New(cfg)
	queue := func(run string) {
		f.chat = Chat{Channel: protocol.ChannelDelegate, Key: run}
		payload, err := protocol.EncodeInbound(protocol.Inbound{ID: run, Channel: f.chat.Channel, ChatKey: run, Text: "the task",
			Delegation: &protocol.Delegation{RunID: run, ParentAgent: "lead", Depth: 2, Tools: []string{"calculator"}}})
		g.Expect(err).NotTo(HaveOccurred())
		f.queueRaw(t, run, payload)
	}

	queue("r1")
	g.Expect(f.serve(t)).To(BeTrue(), "served, and back at once: the run's chat has no other message")
	out := f.outcomes(t, 1)[0]
	g.Expect(out.Code).To(BeEmpty(), out.Err)
	g.Expect(out.Out.Text).To(Equal("sub answer"))
	g.Expect(out.Out.SessionID).To(Equal("delegate:r1:default"))
	g.Expect(got).To(Equal([]protocol.Delegation{{RunID: "r1", ParentAgent: "lead", Depth: 2, Tools: []string{"calculator"}}}))
	g.Expect(f.llm.Requests()).To(HaveLen(1))
	g.Expect(f.llm.Requests()[0].System).To(Equal("You run a delegated task."), "the sub-agent's manager, not the agent's")
	g.Expect(depth).To(Equal(2), "the turn ran with Delegated's context")

	queue("gone")
	g.Expect(f.serve(t)).To(BeTrue())
	out = f.outcomes(t, 1)[0]
	g.Expect(out.Code).To(Equal(protocol.CodeStopped))
	g.Expect(out.Err).To(ContainSubstring("run gone is cancelled"))

	cfg.Delegated = nil
	f.rt = New(cfg)
	queue("r3")
	g.Expect(f.serve(t)).To(BeTrue())
	out = f.outcomes(t, 1)[0]
	g.Expect(out.Code).To(Equal(protocol.CodeInternal))
	g.Expect(out.Err).To(ContainSubstring("cannot run delegated tasks"))
	g.Expect(f.llm.Requests()).To(HaveLen(1), "neither refused run reached a model")
	g.Expect(mainRan).To(BeFalse(), "no delegated task ran on the agent's own manager")
	g.Expect(f.pending(t)).To(BeZero())
}
