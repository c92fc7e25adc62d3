package sessions_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	gtypes "github.com/onsi/gomega/types"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// sessionStore is a real SQLite store with the contexts of two tenants,
// team and other, and mk, which creates a web session of agent for chat in
// the tenant of ctx and returns its id.
func sessionStore(t *testing.T) (st store.Store, team, other context.Context, mk func(ctx context.Context, agent, chat string) string) {
	t.Helper()
	g := NewWithT(t)
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close() })
	mk = func(ctx context.Context, agent, chat string) string {
		sess, err := s.CreateSession(ctx, store.Session{Channel: "web", ChatID: chat, DialogID: "default", Agent: agent, Title: chat})
		g.Expect(err).NotTo(HaveOccurred())
		return sess.ID
	}
	return s, store.WithTenant(context.Background(), "team"), store.WithTenant(context.Background(), "other"), mk
}

// TestSessionStatus runs session_status on a real SQLite store: the current
// session by default, another of the same agent by sessionKey or sessionId,
// never another agent's or another tenant's, and model overrides refused
// while model=default (clearing) is accepted.
func TestSessionStatus(t *testing.T) {
	g := NewWithT(t)
	st, team, other, mk := sessionStore(t)
	cur, sibling, foreign := mk(team, "assistant", "a/1"), mk(team, "assistant", "a/2"), mk(team, "helper", "h/1")
	stranger := mk(other, "assistant", "a/9")
	_, err := st.AppendMessages(team, cur, store.Message{ID: "m1", Role: llm.RoleUser, Content: "hi"}, store.Message{ID: "m2", Role: llm.RoleAssistant, Content: "hello"})
	g.Expect(err).NotTo(HaveOccurred())

	reg, err := tool.NewRegistry(sessions.NewStatus(st, "openai/gpt-5.2"))
	g.Expect(err).NotTo(HaveOccurred())
	env := tool.Env{SessionID: cur, Agent: "assistant"}
	run := func(ctx context.Context, args string) tool.Result {
		return reg.Execute(ctx, env, llm.ToolCall{ID: "c1", Name: sessions.NameStatus, Arguments: args})
	}
	fields := func(id string, current bool, messages int64) gtypes.GomegaMatcher {
		return gstruct.MatchFields(gstruct.IgnoreExtras, gstruct.Fields{"Session": Equal(id), "Current": Equal(current),
			"Agent": Equal("assistant"), "Model": Equal("openai/gpt-5.2"), "Messages": Equal(messages)})
	}

	res := run(team, `{}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	var s sessions.Status
	g.Expect(json.Unmarshal([]byte(res.Content), &s)).To(Succeed())
	g.Expect(s).To(fields(cur, true, 2))

	for _, args := range []string{`{"sessionKey":"` + sibling + `"}`, `{"sessionId":"` + sibling + `"}`} {
		res = run(team, args)
		g.Expect(json.Unmarshal([]byte(res.Content), &s)).To(Succeed(), res.Content)
		g.Expect(s).To(fields(sibling, false, 0))
	}
	g.Expect(run(team, `{"sessionKey":"`+foreign+`"}`)).To(Equal(tool.Errorf(`error: no session %q of agent assistant`, foreign)), "another agent's")
	g.Expect(run(team, `{"sessionKey":"`+stranger+`"}`)).To(Equal(tool.Errorf(`error: no session %q of agent assistant`, stranger)), "another tenant's")
	g.Expect(run(team, `{"model":"default"}`).IsError).To(BeFalse())
	g.Expect(run(team, `{"model":"anthropic/claude"}`).Content).To(Equal(
		"error: per-session model overrides are not available yet; the session keeps openai/gpt-5.2 (use model=default to clear an override)"))
}
