package memory_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/memory"
	"github.com/picobot/picobot/runtime/memory/longterm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

func TestMain(m *testing.M) {
	// Idle keep-alive connections of the model clients outlive a test.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

const tenant = "t1"

var t0 = time.Date(2026, 5, 4, 9, 30, 0, 0, time.UTC)

func tenantCtx(t *testing.T) context.Context {
	return store.WithTenant(t.Context(), tenant)
}

func openStore(t *testing.T, clk *clocktesting.FakeClock) *sqlite.Store {
	t.Helper()
	var opts []sqlite.Option
	if clk != nil {
		opts = append(opts, sqlite.WithClock(clk))
	}
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), sqlite.FileName), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func agentSpec(baseURL string, mem *picobotv1alpha1.MemorySpec) *picobotv1alpha1.Agent {
	return &picobotv1alpha1.Agent{
		ObjectMeta: metav1.ObjectMeta{Name: "assistant", Namespace: tenant},
		Spec: picobotv1alpha1.AgentSpec{
			Instructions: "You are a test assistant.",
			Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "test-model",
				BaseURL: baseURL, APIKeySecretRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "apiKey"}}},
			Tools:  &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:memory", "routine_maintenance"}}},
			Memory: mem,
		},
	}
}

func build(t *testing.T, st store.Store, spec *picobotv1alpha1.Agent, f feature.Feature) *agenthost.Built {
	t.Helper()
	host := &agenthost.Host{Mode: feature.ModeEmbedded, Tenant: tenant, Store: st, StateDir: t.TempDir(), Holder: "test",
		Secrets: func(string) *corev1.Secret {
			return &corev1.Secret{Data: map[string][]byte{"apiKey": []byte("sk-test")}}
		},
		Features: []feature.Feature{f}}
	b, err := host.Build(tenantCtx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestFeatureEndToEnd runs real turns through the session manager: the model
// stores a memory with memory_store, and the next turn about the same thing
// gets it in its system prompt; an unrelated turn gets no memory section.
func TestFeatureEndToEnd(t *testing.T) {
	g := NewWithT(t)
	llmServer := fakellm.New()
	t.Cleanup(llmServer.Close)
	st := openStore(t, nil)
	b := build(t, st, agentSpec(llmServer.URL(), nil), memory.NewFeature(memory.Options{}))
	g.Expect(b.Info.Tools).To(ContainElements("memory_store", "memory_recall", "timeline_recall", "memory_forget",
		"routine_maintenance", "bot_remember", "bot_recall"))

	ctx := tenantCtx(t)
	llmServer.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "memory_store", Args: `{"key":"favourite_food","content":"用户最喜欢四川火锅，尤其是麻辣锅底","importance":0.8}`}}},
		fakellm.Turn{Text: "记住了。"},
	)
	reply, err := b.Manager.Handle(ctx, session.Inbound{Channel: "web", ChatID: "c1", Text: "记住：我最喜欢四川火锅"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("记住了。"))
	reqs := llmServer.Requests()
	g.Expect(reqs[1].Messages[len(reqs[1].Messages)-1].ToolResults[0].Content).To(ContainSubstring(`Stored memory "favourite_food"`))

	llmServer.Script(fakellm.Turn{Text: "去吃火锅吧。"})
	_, err = b.Manager.Handle(ctx, session.Inbound{Channel: "web", ChatID: "c1", Text: "今晚想吃火锅，有什么建议？"})
	g.Expect(err).NotTo(HaveOccurred())
	system := llmServer.Requests()[2].System
	g.Expect(system).To(HavePrefix("You are a test assistant."))
	g.Expect(system).To(ContainSubstring("## Memory\n"))
	g.Expect(system).To(ContainSubstring("\n- favourite_food: 用户最喜欢四川火锅，尤其是麻辣锅底"))

	llmServer.Script(fakellm.Turn{Text: "Sunny."})
	_, err = b.Manager.Handle(ctx, session.Inbound{Channel: "web", ChatID: "c1", Text: "What's the weather like?"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(llmServer.Requests()[3].System).NotTo(ContainSubstring("## Memory"))
}

func TestFeatureOffWhenDisabled(t *testing.T) {
	off := false
	b := build(t, openStore(t, nil), agentSpec("http://127.0.0.1:1/v1", &picobotv1alpha1.MemorySpec{Enabled: &off}),
		memory.NewFeature(memory.Options{}))
	NewWithT(t).Expect(b.Info.Tools).NotTo(ContainElement(HavePrefix("memory_")))
	NewWithT(t).Expect(b.Info.Tools).NotTo(ContainElement("bot_remember"))
}

// TestFeatureRunsIdleConsolidation: with idleConsolidationMinutes set, the
// feature's consolidator summarises an idle session into the timeline using
// the agent's model, and stops when the agent is closed.
func TestFeatureRunsIdleConsolidation(t *testing.T) {
	g := NewWithT(t)
	llmServer := fakellm.New()
	t.Cleanup(llmServer.Close)
	storeClock := clocktesting.NewFakeClock(t0)
	st := openStore(t, storeClock)
	clk := clocktesting.NewFakeClock(t0)
	minutes := int32(30)
	b := build(t, st, agentSpec(llmServer.URL(), &picobotv1alpha1.MemorySpec{IdleConsolidationMinutes: &minutes}),
		memory.NewFeature(memory.Options{Clock: clk}))
	ctx := tenantCtx(t)
	llmServer.Script(fakellm.Turn{Text: "Hangzhou it is."})
	_, err := b.Manager.Handle(ctx, session.Inbound{Channel: "web", ChatID: "c1", Text: "Plan a weekend in Hangzhou"})
	g.Expect(err).NotTo(HaveOccurred())

	llmServer.Script(fakellm.Turn{Text: "The user planned a weekend trip to Hangzhou."})
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the consolidator is waiting for its ticker")
	clk.Step(31 * time.Minute)
	g.Eventually(func() ([]store.Memory, error) {
		return st.ListMemories(ctx, store.MemoryFilter{Agent: "assistant", Category: store.MemoryTimeline})
	}).WithTimeout(10 * time.Second).Should(ContainElement(HaveField("Content", "The user planned a weekend trip to Hangzhou.")))
	g.Expect(llmServer.Requests()[1].System).To(ContainSubstring("Summarise the conversation"))
	b.Close() // waits for the consolidator to stop; TestMain's goleak check fails otherwise
}

func TestFeatureRemovesExpiredTimeline(t *testing.T) {
	g := NewWithT(t)
	st := openStore(t, clocktesting.NewFakeClock(t0))
	ctx := tenantCtx(t)
	_, err := st.ImportMemories(ctx, []store.Memory{
		{Agent: "assistant", Key: "timeline/old", Content: "old summary", Category: store.MemoryTimeline, UpdatedAt: t0.AddDate(0, 0, -31)},
		{Agent: "assistant", Key: "timeline/new", Content: "new summary", Category: store.MemoryTimeline, UpdatedAt: t0.AddDate(0, 0, -29)},
		{Agent: "assistant", Key: "fact", Content: "old fact", Category: store.MemoryKnowledge, UpdatedAt: t0.AddDate(-2, 0, 0)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	days := int32(30)
	build(t, st, agentSpec("http://127.0.0.1:1/v1", &picobotv1alpha1.MemorySpec{TimelineRetentionDays: &days}),
		memory.NewFeature(memory.Options{Clock: clocktesting.NewFakeClock(t0)}))
	g.Eventually(func() ([]store.Memory, error) {
		return st.ListMemories(ctx, store.MemoryFilter{Agent: "assistant"})
	}).WithTimeout(10 * time.Second).Should(ConsistOf(HaveField("Key", "timeline/new"), HaveField("Key", "fact")))
}

func TestSectionRanksAndBounds(t *testing.T) {
	g := NewWithT(t)
	st := openStore(t, nil)
	mem := longterm.New(longterm.Config{Store: st, Agent: "assistant"})
	ctx := tenantCtx(t)
	put := func(key, content string, kind store.MemoryKind, importance float64) {
		_, _, err := mem.Remember(ctx, longterm.Entry{Key: key, Content: content, Kind: kind, Importance: &importance})
		g.Expect(err).NotTo(HaveOccurred())
	}
	for i := range 6 {
		put(fmt.Sprintf("coffee-%d", i), "The user drinks coffee", "", float64(i)/10)
	}
	put("coffee-best", "The user drinks coffee, flat white, every morning", store.MemoryFocus, 0.1)
	put("notes/2026-05/x", "Coffee notes: the user drinks coffee", store.MemoryNote, 1)
	put("long", "coffee "+strings.Repeat("很长的内容", 100), store.MemoryFact, 0)

	got := memory.Section(ctx, mem, "Which coffee does the user drink in the morning?", nil)
	lines := strings.Split(got, "\n")
	g.Expect(lines[0]).To(Equal("## Memory"))
	g.Expect(lines[2:]).To(HaveLen(memory.PromptMemories))
	g.Expect(lines[2]).To(Equal("- coffee-best: The user drinks coffee, flat white, every morning"), "most relevant first")
	g.Expect(lines[3:]).To(Equal([]string{"- coffee-5: The user drinks coffee", "- coffee-4: The user drinks coffee",
		"- coffee-3: The user drinks coffee", "- coffee-2: The user drinks coffee"}), "then by importance")
	g.Expect(got).NotTo(ContainSubstring("notes/"), "monthly notes are recalled on demand only")

	g.Expect(memory.Section(ctx, mem, "", nil)).To(BeEmpty())
	g.Expect(memory.Section(ctx, mem, "?!", nil)).To(BeEmpty())
	g.Expect(memory.Section(ctx, mem, "cof", nil)).To(BeEmpty(), "no substring fallback for whole messages")
	long := memory.Section(ctx, mem, strings.Repeat("很长的内容 ", 2000), nil)
	g.Expect(long).To(ContainSubstring("- long: coffee 很长的内容"))
	g.Expect(len([]rune(long))).To(BeNumerically("<", 400), "each memory is clipped")
	g.Expect(memory.Section(t.Context(), mem, "coffee", nil)).To(BeEmpty(), "no tenant: nothing, and no panic")
}

// consolidation is a Consolidator on a SQLite store with fake clocks and the
// fake model behind the real OpenAI client.
type consolidation struct {
	c   *memory.Consolidator
	st  *sqlite.Store
	llm *fakellm.Server
	clk *clocktesting.FakeClock
}

func newConsolidation(t *testing.T) *consolidation {
	t.Helper()
	llmServer := fakellm.New()
	t.Cleanup(llmServer.Close)
	clk := clocktesting.NewFakeClock(t0)
	st := openStore(t, clk)
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "test-model", BaseURL: llmServer.URL(), APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	mem := longterm.New(longterm.Config{Store: st, Agent: "assistant", Clock: clk})
	return &consolidation{c: &memory.Consolidator{Store: st, Memory: mem, Provider: p, Idle: 30 * time.Minute, Clock: clk},
		st: st, llm: llmServer, clk: clk}
}

func (c *consolidation) say(t *testing.T, sid string, texts ...string) {
	t.Helper()
	ctx := tenantCtx(t)
	if _, err := c.st.GetSession(ctx, sid); err != nil {
		ch, chat, dialog, _ := store.ParseSessionID(sid)
		agent := "assistant"
		if strings.Contains(chat, "other") {
			agent = "other"
		}
		if _, err := c.st.CreateSession(ctx, store.Session{ID: sid, Channel: ch, ChatID: chat, DialogID: dialog, Agent: agent}); err != nil {
			t.Fatal(err)
		}
	}
	for i, text := range texts {
		role := llm.RoleUser
		if i%2 == 1 {
			role = llm.RoleAssistant
		}
		id := fmt.Sprintf("m%d-%d", c.clk.Now().UnixNano(), i)
		if _, err := c.st.AppendMessages(ctx, sid, store.Message{ID: id, Role: role, Content: text}); err != nil {
			t.Fatal(err)
		}
	}
}

func (c *consolidation) timeline(t *testing.T, sid string) []store.Memory {
	t.Helper()
	ms, err := c.st.ListMemories(tenantCtx(t), store.MemoryFilter{Agent: "assistant", Category: store.MemoryTimeline, SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestConsolidatorSummarisesOncePerIdlePeriod(t *testing.T) {
	g := NewWithT(t)
	c := newConsolidation(t)
	ctx := tenantCtx(t)
	c.say(t, "web:c1:d1", "Help me plan a weekend in Hangzhou", "Sure: West Lake on Saturday, tea fields on Sunday.")
	c.say(t, "web:other:d1", "I belong to another agent")

	c.clk.Step(10 * time.Minute)
	n, err := c.c.RunOnce(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero(), "not idle yet")
	g.Expect(c.llm.Requests()).To(BeEmpty())

	c.clk.Step(21 * time.Minute)
	c.llm.Script(fakellm.Turn{Text: "The user planned a Hangzhou weekend: West Lake, then tea fields. Card 4111 1111 1111 1111 came up."})
	n, err = c.c.RunOnce(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	req := c.llm.Requests()[0]
	g.Expect(req.System).To(ContainSubstring("Summarise the conversation"))
	g.Expect(req.Messages[len(req.Messages)-1].Content).To(Equal("user: Help me plan a weekend in Hangzhou\n" +
		"assistant: Sure: West Lake on Saturday, tea fields on Sunday."))
	tl := c.timeline(t, "web:c1:d1")
	g.Expect(tl).To(HaveLen(1))
	g.Expect(tl[0].Key).To(HavePrefix("timeline/web:c1:d1/idle/"))
	g.Expect(tl[0].Content).To(Equal("The user planned a Hangzhou weekend: West Lake, then tea fields. Card [redacted] came up."))
	g.Expect(tl[0].Importance).To(Equal(longterm.TimelineImportance))
	g.Expect(tl[0].Source).To(Equal(store.SourceAgent))

	// Still the same idle period: nothing more, however often it runs.
	c.clk.Step(time.Hour)
	for range 3 {
		n, err = c.c.RunOnce(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeZero())
	}
	g.Expect(c.llm.Requests()).To(HaveLen(1))

	// A new message starts a new period, summarised on its own.
	c.say(t, "web:c1:d1", "Add a boat ride on Saturday", "Added.")
	c.clk.Step(31 * time.Minute)
	c.llm.Script(fakellm.Turn{Text: "Added a boat ride to the Hangzhou plan."})
	n, err = c.c.RunOnce(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	second := c.llm.Requests()[1].Messages
	g.Expect(second[len(second)-1].Content).To(Equal("user: Add a boat ride on Saturday\nassistant: Added."),
		"only what the previous summary did not cover")
	g.Expect(c.timeline(t, "web:c1:d1")).To(HaveLen(2))
	g.Expect(c.timeline(t, "web:other:d1")).To(BeEmpty())

	hits, err := c.st.SearchMemories(ctx, store.MemoryQuery{Agent: "assistant", Text: "boat ride", Category: store.MemoryTimeline})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hits).To(HaveLen(1), "timeline_recall finds it")
}

func TestConsolidatorRetriesAfterAModelFailure(t *testing.T) {
	g := NewWithT(t)
	c := newConsolidation(t)
	ctx := tenantCtx(t)
	c.say(t, "web:c1:d1", "Remind me what we decided", "We chose PostgreSQL.")
	c.clk.Step(time.Hour)

	c.llm.Script(fakellm.Turn{Status: 500, ErrorBody: "overloaded"})
	n, err := c.c.RunOnce(ctx)
	g.Expect(err).To(MatchError(ContainSubstring(`session "web:c1:d1": failed to summarise`)))
	g.Expect(n).To(BeZero())
	g.Expect(c.timeline(t, "web:c1:d1")).To(BeEmpty())

	c.llm.Script(fakellm.Turn{Text: "   "})
	_, err = c.c.RunOnce(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("empty summary")))

	c.llm.Script(fakellm.Turn{Text: "The team chose PostgreSQL."})
	n, err = c.c.RunOnce(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
}

func TestConsolidatorSkipsSessionsWithoutUserMessages(t *testing.T) {
	g := NewWithT(t)
	c := newConsolidation(t)
	ctx := tenantCtx(t)
	_, err := c.st.CreateSession(ctx, store.Session{Channel: "web", ChatID: "c9", DialogID: "d1", Agent: "assistant"})
	g.Expect(err).NotTo(HaveOccurred())
	c.clk.Step(time.Hour)
	n, err := c.c.RunOnce(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero())
	g.Expect(c.llm.Requests()).To(BeEmpty())
}
