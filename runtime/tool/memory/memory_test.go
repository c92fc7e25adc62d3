package memory_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/memory/longterm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	memtool "github.com/picobot/picobot/runtime/tool/memory"
)

var t0 = time.Date(2026, 5, 4, 9, 30, 0, 0, time.UTC)

// fixture is the memory tools of agent "helper" on a real SQLite store whose
// clock (and the memory's) is clk.
type fixture struct {
	reg *tool.Registry
	st  *sqlite.Store
	mem *longterm.Memory
	clk *clocktesting.FakeClock
	env tool.Env
}

func newFixture(t *testing.T, allow ...longterm.Sensitive) *fixture {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), sqlite.FileName), sqlite.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	mem := longterm.New(longterm.Config{Store: st, Agent: "helper", AllowSensitive: allow, Clock: clk})
	reg, err := tool.NewRegistry(memtool.New(mem, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{reg: reg, st: st, mem: mem, clk: clk, env: tool.Env{SessionID: "web:c1:d1", Agent: "helper"}}
}

type m = map[string]any

// call runs one tool call; args is raw JSON when a string.
func (f *fixture) call(t *testing.T, name string, args any) tool.Result {
	t.Helper()
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	ctx := store.WithTenant(t.Context(), "t1")
	return f.reg.Execute(ctx, f.env, llm.ToolCall{ID: "1", Name: name, Arguments: raw})
}

func (f *fixture) ok(t *testing.T, name string, args any) string {
	t.Helper()
	res := f.call(t, name, args)
	NewWithT(t).Expect(res.IsError).To(BeFalse(), res.Content)
	return res.Content
}

func hits(t *testing.T, content string) []longterm.Hit {
	t.Helper()
	var out []longterm.Hit
	NewWithT(t).Expect(json.Unmarshal([]byte(content), &out)).To(Succeed(), content)
	return out
}

func TestStoreRecallForget(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	g.Expect(f.ok(t, "memory_store", m{"key": "favourite_food", "content": "用户最喜欢四川火锅", "importance": 0.8})).
		To(Equal(`Stored memory "favourite_food" (importance 0.8).`))
	g.Expect(f.ok(t, "memory_store", m{"key": "favourite_food", "content": "用户最喜欢重庆火锅，微辣"})).
		To(Equal(`Replaced memory "favourite_food" (importance 0.5).`))
	f.ok(t, "memory_store", m{"key": "editor", "content": "Prefers Neovim with a dark theme"})

	f.clk.Step(3 * 24 * time.Hour)
	got := hits(t, f.ok(t, "memory_recall", m{"query": "火锅 推荐"}))
	g.Expect(got).To(Equal([]longterm.Hit{{Key: "favourite_food", Content: "用户最喜欢重庆火锅，微辣", Category: store.MemoryKnowledge,
		Source: store.SourceAgent, SessionID: "web:c1:d1", Importance: 0.5, Date: "2026-05-04", AgeDays: 3}}))
	raw := f.ok(t, "memory_recall", m{"query": "neovim"})
	g.Expect(raw).To(ContainSubstring(`"ageDays":3`))
	g.Expect(raw).To(ContainSubstring(`"stale":false`))
	g.Expect(raw).To(ContainSubstring(`"source":"agent"`))
	g.Expect(f.ok(t, "memory_recall", m{"query": "vim", "since": t0.Add(-time.Hour).UnixMilli(), "until": t0.Add(time.Hour).UnixMilli()})).
		To(ContainSubstring(`"key":"editor"`), "substring fallback within the time range")
	g.Expect(f.ok(t, "memory_recall", m{"query": "neovim", "since": t0.Add(time.Hour).UnixMilli()})).To(Equal("No matching memories."))

	g.Expect(f.ok(t, "memory_forget", m{"key": "editor"})).To(Equal(`Forgot memory "editor".`))
	res := f.call(t, "memory_forget", m{"key": "editor"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring(`there is no memory with key "editor"`))
	g.Expect(f.ok(t, "memory_recall", m{"query": "neovim"})).To(Equal("No matching memories."))
}

func TestBadInputIsAToolError(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, tool string
		args       any
		want       string
	}{
		{"empty key", "memory_store", m{"key": "  ", "content": "x"}, "key is empty"},
		{"empty content", "memory_store", m{"key": "k", "content": ""}, "content is empty"},
		{"huge content", "memory_store", m{"key": "k", "content": strings.Repeat("长", longterm.MaxContentRunes+1)}, "more than 4000"},
		{"huge key", "memory_store", m{"key": strings.Repeat("k", 201), "content": "x"}, "more than 200"},
		{"importance out of range", "memory_store", m{"key": "k", "content": "x", "importance": 2}, "invalid arguments"},
		{"missing content", "memory_store", m{"key": "k"}, "invalid arguments"},
		{"malformed JSON", "memory_store", `{"key": "k", "content": `, "not valid JSON"},
		{"unknown kind", "bot_remember", m{"text": "x", "kind": "gossip"}, "invalid arguments"},
		{"unknown source", "bot_remember", m{"text": "x", "source": "rumour"}, "invalid arguments"},
		{"unknown kind filter", "bot_recall", m{"query": "x", "kinds": []string{"gossip"}}, "invalid arguments"},
		{"empty remember", "bot_remember", m{"text": " "}, "content is empty"},
		{"empty query", "memory_recall", m{"query": ""}, "query is empty"},
		{"punctuation query", "memory_recall", m{"query": "?!。，…"}, "no searchable words"},
		{"stop-word query", "bot_recall", m{"query": "the of and 的 了"}, "no searchable words"},
		{"huge query", "timeline_recall", m{"query": strings.Repeat("word ", 300)}, "more than 1000"},
		{"until before since", "memory_recall", m{"query": "x1", "since": 2000, "until": 1000}, "is before since"},
		{"negative since", "memory_recall", m{"query": "x1", "since": -5}, "invalid arguments"},
		{"limit too big", "memory_recall", m{"query": "x1", "limit": 500}, "invalid arguments"},
		{"unknown argument", "memory_forget", m{"key": "k", "force": true}, "invalid arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := f.call(t, c.tool, c.args)
			NewWithT(t).Expect(res.IsError).To(BeTrue(), res.Content)
			NewWithT(t).Expect(res.Content).To(ContainSubstring(c.want))
		})
	}
	// FTS and SQL syntax in a query is just text.
	for _, q := range []string{`"unbalanced`, `NEAR(a b)`, `a* OR b:*`, `'; DROP TABLE memories; --`, `\`, `&|!`} {
		res := f.call(t, "memory_recall", m{"query": q + " x1"})
		NewWithT(t).Expect(res.IsError).To(BeFalse(), q+": "+res.Content)
	}
}

func TestSensitiveWritesAreRefused(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	for _, c := range []struct {
		tool string
		args m
		want string
	}{
		{"memory_store", m{"key": "card", "content": "用户的银行卡号 6222 0212 3456 7890 128"}, "bank card number"},
		{"memory_store", m{"key": "id", "content": "身份证 11010519491231002X"}, "identity number"},
		{"bot_remember", m{"text": "The staging password is Tr0ub4dor&3", "kind": "fact"}, "a password"},
		{"bot_remember", m{"text": "API key sk-abcdefghijklmnopqrstuvwxyz123456", "kind": "fact"}, "an API key"},
		{"bot_remember", m{"text": "The user was diagnosed with asthma as a child", "kind": "fact"}, "health matters"},
		{"memory_store", m{"key": "money", "content": "用户每月工资两万"}, "finance matters"},
	} {
		res := f.call(t, c.tool, c.args)
		g.Expect(res.IsError).To(BeTrue(), res.Content)
		g.Expect(res.Content).To(ContainSubstring("refused"))
		g.Expect(res.Content).To(ContainSubstring(c.want))
	}
	g.Expect(f.ok(t, "memory_recall", m{"query": "6222 银行卡 身份证 工资"})).To(Equal("No matching memories."), "nothing was written")

	allowed := newFixture(t, longterm.Health)
	allowed.ok(t, "bot_remember", m{"text": "The user was diagnosed with asthma as a child", "kind": "fact", "source": "user"})
	res := allowed.call(t, "bot_remember", m{"text": "Card 4111 1111 1111 1111", "kind": "fact"})
	g.Expect(res.IsError).To(BeTrue(), "hard refusals ignore the setting")
}

func TestBotRememberRoutesByKind(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	for _, c := range []struct {
		args  m
		place string
		key   string
	}{
		{m{"text": "The user cares most about shipping PicoBot 1.0 by 2026-06-30", "kind": "focus", "source": "user"}, "the user profile", "profile/"},
		{m{"text": "On 2026-05-04 we chose PostgreSQL for cluster mode", "kind": "decision"}, "core memory", "core/"},
		{m{"text": "The user lives in Hangzhou", "kind": "fact", "source": "user"}, "core memory", "core/"},
		{m{"text": "A web page claimed the API is deprecated", "source": "tool"}, "the notes of 2026-05", "notes/2026-05/"},
	} {
		out := f.ok(t, "bot_remember", c.args)
		g.Expect(out).To(HavePrefix("Remembered in " + c.place))
		g.Expect(out).To(ContainSubstring(`(key "` + c.key))
	}
	// The same text again replaces itself instead of piling up.
	f.ok(t, "bot_remember", m{"text": "The user lives in  Hangzhou", "kind": "fact", "source": "user"})
	got := hits(t, f.ok(t, "bot_recall", m{"query": "Hangzhou 杭州"}))
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].Source).To(Equal(store.SourceUser))
	g.Expect(got[0].Kind).To(Equal(store.MemoryFact))

	notes := hits(t, f.ok(t, "bot_recall", m{"query": "deprecated API", "kinds": []string{"note"}}))
	g.Expect(notes).To(HaveLen(1))
	g.Expect(notes[0].Source).To(Equal(store.SourceTool), "a claim keeps its label")
	g.Expect(f.ok(t, "bot_recall", m{"query": "deprecated API", "kinds": []string{"fact", "decision"}})).To(Equal("No matching memories."))

	f.clk.Step(200 * 24 * time.Hour)
	old := hits(t, f.ok(t, "bot_recall", m{"query": "PostgreSQL cluster"}))
	g.Expect(old[0].AgeDays).To(Equal(200))
	g.Expect(old[0].Stale).To(BeTrue())
	g.Expect(old[0].Date).To(Equal("2026-05-04"))

	for _, rel := range []string{"today", "yesterday", "next week", "3 days ago", "上周", "明天", "三天前"} {
		res := f.call(t, "bot_remember", m{"text": fmt.Sprintf("We met the client %s", rel), "kind": "fact"})
		g.Expect(res.IsError).To(BeTrue(), rel)
		g.Expect(res.Content).To(ContainSubstring(fmt.Sprintf("%q is a relative date", rel)))
		g.Expect(res.Content).To(ContainSubstring("today is 2026-11-20"))
	}
}

func TestTimelineRecallAndMaintenance(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	ctx := store.WithTenant(t.Context(), "t1")
	for i, s := range []struct{ session, text string }{
		{"web:c1:d1", "讨论了杭州的旅行路线，决定先去西湖"},
		{"web:c2:d1", "Planned the Hangzhou trip budget"},
	} {
		_, _, err := f.mem.Remember(ctx, longterm.Entry{Key: fmt.Sprintf("timeline/%s/%d", s.session, i), Content: s.text,
			Category: store.MemoryTimeline, Kind: store.MemoryNote, Source: store.SourceAgent, SessionID: s.session})
		g.Expect(err).NotTo(HaveOccurred())
	}
	f.ok(t, "memory_store", m{"key": "home", "content": "The user lives in Hangzhou"})

	all := hits(t, f.ok(t, "timeline_recall", m{"query": "杭州 Hangzhou"}))
	g.Expect(all).To(HaveLen(2), "timeline only, not knowledge")
	one := hits(t, f.ok(t, "timeline_recall", m{"query": "杭州 Hangzhou", "session_id": "web:c2:d1"}))
	g.Expect(one).To(HaveLen(1))
	g.Expect(one[0].Importance).To(Equal(longterm.TimelineImportance))
	g.Expect(hits(t, f.ok(t, "memory_recall", m{"query": "Hangzhou"}))).To(HaveLen(1), "knowledge only")

	g.Expect(f.ok(t, "routine_maintenance", m{})).To(Equal("Removed 0 timeline memories older than 90 days; knowledge was not touched."))
	f.clk.Step(91 * 24 * time.Hour)
	g.Expect(f.ok(t, "routine_maintenance", "")).To(Equal("Removed 2 timeline memories older than 90 days; knowledge was not touched."))
	g.Expect(f.ok(t, "timeline_recall", m{"query": "杭州 Hangzhou"})).To(Equal("No matching memories."))
	g.Expect(hits(t, f.ok(t, "memory_recall", m{"query": "Hangzhou"}))).To(HaveLen(1))
}

func TestStoreFailureIsReportedWithoutDetail(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	g.Expect(f.st.Close()).To(Succeed())
	for _, c := range []struct {
		tool string
		args m
	}{
		{"memory_recall", m{"query": "anything"}},
		{"memory_store", m{"key": "k", "content": "v"}},
		{"routine_maintenance", m{}},
	} {
		res := f.call(t, c.tool, c.args)
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(res.Content).To(Equal(fmt.Sprintf("error: %s could not reach the memory store; nothing was changed. Try again later.", c.tool)))
	}
}

func TestSchemasAreSmall(t *testing.T) {
	f := newFixture(t)
	total := 0
	for _, d := range f.reg.Definitions() {
		total += len(d.Description) + len(d.Parameters)
	}
	// Sent with every request: keep the seven tools under 3 KB together.
	NewWithT(t).Expect(total).To(BeNumerically("<", 3000))
	NewWithT(t).Expect(f.reg.Names()).To(Equal([]string{"bot_recall", "bot_remember", "memory_forget", "memory_recall",
		"memory_store", "routine_maintenance", "timeline_recall"}))
}
