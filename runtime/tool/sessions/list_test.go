package sessions_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// TestSessionsListAndHistory runs sessions_list and sessions_history on a
// real SQLite store: the calling agent's sessions in its tenant only, newest
// first, filtered by kind (channel) and activity, with their last messages;
// a transcript without or with tool steps; bad arguments are tool errors.
func TestSessionsListAndHistory(t *testing.T) {
	g := NewWithT(t)
	base := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(base)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"), sqlite.WithClock(clk))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	team := store.WithTenant(context.Background(), "team")
	other := store.WithTenant(context.Background(), "other")
	// Each session is made and written ago before base (the store stamps
	// its activity with its clock).
	mk := func(ctx context.Context, agent, channel, chat string, ago time.Duration, msgs ...store.Message) string {
		clk.SetTime(base.Add(-ago))
		s, err := st.CreateSession(ctx, store.Session{Channel: channel, ChatID: chat, DialogID: "default", Agent: agent, Title: chat})
		g.Expect(err).NotTo(HaveOccurred())
		for i := range msgs {
			msgs[i].CreatedAt = base.Add(-ago).Add(time.Duration(i) * time.Second)
		}
		_, err = st.AppendMessages(ctx, s.ID, msgs...)
		g.Expect(err).NotTo(HaveOccurred())
		return s.ID
	}
	cur := mk(team, "assistant", "web", "a/1", time.Minute,
		store.Message{ID: "u1", Role: llm.RoleUser, Content: "what is 6*7?"},
		store.Message{ID: "a1", Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		store.Message{ID: "t1", Role: llm.RoleTool, ToolCallID: "c1", Name: "calculator", Content: "42"},
		store.Message{ID: "a2", Role: llm.RoleAssistant, Content: "It is 42."})
	tg := mk(team, "assistant", "telegram", "42", 3*time.Hour,
		store.Message{ID: "u1", Role: llm.RoleUser, Content: "remind me of " + strings.Repeat("é", 3000)})
	mk(team, "helper", "web", "h/1", 2*time.Minute, store.Message{ID: "u1", Role: llm.RoleUser, Content: "not yours"})
	stranger := mk(other, "assistant", "web", "a/9", time.Second, store.Message{ID: "u1", Role: llm.RoleUser, Content: "other tenant"})

	env := tool.Env{Agent: "assistant", SessionID: cur}
	reg, err := tool.NewRegistry(sessions.NewList(st, func() time.Time { return base }), sessions.NewHistory(st))
	g.Expect(err).NotTo(HaveOccurred())
	run := func(name string, ctx context.Context, args string) tool.Result {
		return reg.Execute(ctx, env, llm.ToolCall{ID: "c1", Name: name, Arguments: args})
	}
	type listed struct {
		Sessions []sessions.Listed `json:"sessions"`
		Count    int               `json:"count"`
	}
	parse := func(res tool.Result) listed {
		var l listed
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		g.Expect(json.Unmarshal([]byte(res.Content), &l)).To(Succeed(), res.Content)
		return l
	}
	ids := func(l listed) []string {
		var out []string
		for _, s := range l.Sessions {
			out = append(out, s.Session)
		}
		return out
	}
	list := sessions.NameList
	g.Expect(ids(parse(run(list, team, `{}`)))).To(Equal([]string{cur, tg}), "this agent's, newest first; not helper's, not another tenant's")
	g.Expect(ids(parse(run(list, team, `{"kinds":["telegram"]}`)))).To(Equal([]string{tg}))
	g.Expect(ids(parse(run(list, team, `{"activeMinutes":60}`)))).To(Equal([]string{cur}))
	g.Expect(ids(parse(run(list, team, `{"limit":1}`)))).To(Equal([]string{cur}))
	with := parse(run(list, team, `{"messageLimit":2}`))
	g.Expect(with.Sessions[0].Current).To(BeTrue())
	g.Expect(with.Sessions[0].Messages).To(HaveLen(2))
	g.Expect(with.Sessions[0].Messages[0].Content).To(Equal("what is 6*7?"), "tool steps left out")
	g.Expect(with.Sessions[0].Messages[1].Content).To(Equal("It is 42."))
	long := with.Sessions[1].Messages[0].Content
	g.Expect(long).To(HaveSuffix(" …"), "a long message is shortened")
	g.Expect(strings.ToValidUTF8(long, "?")).To(Equal(long), "between characters")
	for _, bad := range []string{`{"limit":101}`, `{"activeMinutes":-1}`, `{"messageLimit":21}`} {
		g.Expect(run(list, team, bad).IsError).To(BeTrue(), bad)
	}

	history := sessions.NameHistory
	var h struct {
		Session  string                `json:"session"`
		Messages []sessions.ShownEntry `json:"messages"`
	}
	res := run(history, team, `{}`)
	g.Expect(json.Unmarshal([]byte(res.Content), &h)).To(Succeed(), res.Content)
	g.Expect(h.Session).To(Equal(cur))
	g.Expect(h.Messages).To(HaveLen(2))
	res = run(history, team, `{"includeTools":true,"limit":3}`)
	g.Expect(json.Unmarshal([]byte(res.Content), &h)).To(Succeed())
	g.Expect(h.Messages).To(HaveLen(3))
	g.Expect(h.Messages[0].Role).To(Equal("tool_call"))
	g.Expect(h.Messages[0].Content).To(Equal(`calculator {"expression":"6*7"}`))
	g.Expect(h.Messages[1]).To(And(HaveField("Role", "tool"), HaveField("Tool", "calculator"), HaveField("Content", "42")))
	res = run(history, team, `{"sessionId":"`+tg+`"}`)
	g.Expect(json.Unmarshal([]byte(res.Content), &h)).To(Succeed())
	g.Expect(h.Messages[0].Content).To(HavePrefix("remind me of é"), "history shows a message whole")
	g.Expect(h.Messages[0].Content).NotTo(HaveSuffix(" …"))
	for _, key := range []string{stranger, "web:helper/h/1:default", "nope"} {
		res = run(history, team, `{"sessionKey":"`+key+`"}`)
		g.Expect(res.IsError).To(BeTrue(), key)
		g.Expect(res.Content).To(ContainSubstring("no session"))
	}
	g.Expect(run(history, team, `{"limit":500}`).IsError).To(BeTrue())
}
