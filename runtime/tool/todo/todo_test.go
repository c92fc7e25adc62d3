package todo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/todo"
	"github.com/picobot/picobot/runtime/tool/todo/todotest"
)

// session calls todo in one session through a registry.
type session struct {
	reg *tool.Registry
	env tool.Env
}

func newSessions(t *testing.T, ids ...string) []session {
	t.Helper()
	reg, err := tool.NewRegistry(todo.New(todo.NewMemoryStore()))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]session, len(ids))
	for i, id := range ids {
		out[i] = session{reg: reg, env: tool.Env{Workspace: t.TempDir(), SessionID: id}}
	}
	return out
}

// do runs one call; args is raw JSON when a string.
func (s session) do(t testing.TB, args any) tool.Result {
	t.Helper()
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return s.reg.Execute(context.Background(), s.env, llm.ToolCall{ID: "1", Name: "todo", Arguments: raw})
}

type m = map[string]any

func TestLifecycle(t *testing.T) {
	s := newSessions(t, "s1")[0]
	steps := []struct {
		name    string
		args    any
		isError bool
		want    string // whole content when exact, else substring
		exact   bool
	}{
		{"view without a plan", m{"action": "view"}, false, "There is no active plan.", true},
		{"append without a plan", m{"action": "append", "items": []string{"x"}}, true, "no active plan to append. Create one first", false},
		{"update without a plan", m{"action": "update", "item_id": 1, "status": "done"}, true, "no active plan to update", false},
		{"close without a plan", m{"action": "close"}, true, "no active plan to close", false},
		{"create needs a title", m{"action": "create", "items": []string{"a"}}, true, "title is required", false},
		{"create rejects empty items", m{"action": "create", "title": "t", "items": []string{"a", " "}}, true, "items[1] is empty", false},
		{"create", m{"action": "create", "title": "Ship v2", "items": []string{"Write parser", "Add tests"}}, false,
			"Created the plan.\n\nPlan: Ship v2 (active, 0/2 done)\n  1. [pending] Write parser\n  2. [pending] Add tests", true},
		{"second create is refused", m{"action": "create", "title": "Other"}, true,
			`a plan is already active: "Ship v2" with 2 items. Use append to add items to it, or close it`, false},
		{"append", m{"action": "append", "items": []string{"Release"}}, false,
			"Added 1 item(s).\n\nPlan: Ship v2 (active, 0/3 done)\n  1. [pending] Write parser\n  2. [pending] Add tests\n  3. [pending] Release", true},
		{"append needs items", m{"action": "append"}, true, "items is required to append", false},
		{"update status", m{"action": "update", "item_id": 1, "status": "done"}, false, "Updated item 1 (status done).", false},
		{"update status and note", m{"action": "update", "item_id": 2, "status": "in_progress", "note": "flaky on CI"}, false,
			"Updated item 2 (status in_progress, note).\n\nPlan: Ship v2 (active, 1/3 done)\n  1. [done] Write parser\n  2. [in_progress] Add tests (note: flaky on CI)\n  3. [pending] Release", true},
		{"update unknown item", m{"action": "update", "item_id": 9, "status": "done"}, true, "item 9 does not exist; the plan has items 1, 2, 3", false},
		{"update needs item_id", m{"action": "update", "status": "done"}, true, "item_id is required", false},
		{"update needs a change", m{"action": "update", "item_id": 1}, true, "needs a status or a note", false},
		{"view", m{"action": "view"}, false,
			"Plan: Ship v2 (active, 1/3 done)\n  1. [done] Write parser\n  2. [in_progress] Add tests (note: flaky on CI)\n  3. [pending] Release", true},
		{"close with an item status", m{"action": "close", "status": "pending"}, true, "close takes status done or cancelled", false},
		{"close", m{"action": "close", "note": "released"}, false, `Closed the plan "Ship v2" as done (1/3 done).`, true},
		{"view after close", m{"action": "view"}, false, "There is no active plan.", true},
		{"update after close", m{"action": "update", "item_id": 1, "status": "done"}, true, "no active plan", false},
		{"create again, ids restart", m{"action": "create", "title": "Next"}, false,
			"Created the plan.\n\nPlan: Next (active, 0/0 done)\n  (no items yet; add them with append)", true},
		{"append to the new plan", m{"action": "append", "items": []string{"a", "b"}}, false, "  1. [pending] a\n  2. [pending] b", false},
		{"cancel", m{"action": "close", "status": "cancelled"}, false, `Closed the plan "Next" as cancelled (0/2 done).`, true},
	}
	for _, st := range steps {
		// Steps share the session, so they run in order and stop at the first failure.
		g := NewWithT(t)
		res := s.do(t, st.args)
		g.Expect(res.IsError).To(Equal(st.isError), "%s: %s", st.name, res.Content)
		if st.exact {
			g.Expect(res.Content).To(Equal(st.want), st.name)
		} else {
			g.Expect(res.Content).To(ContainSubstring(st.want), st.name)
		}
	}
}

func TestSessionsAreIsolated(t *testing.T) {
	g := NewWithT(t)
	ss := newSessions(t, "alice", "bob")
	g.Expect(ss[0].do(t, m{"action": "create", "title": "Alice's plan", "items": []string{"a"}}).IsError).To(BeFalse())
	g.Expect(ss[1].do(t, m{"action": "view"}).Content).To(Equal("There is no active plan."))
	res := ss[1].do(t, m{"action": "create", "title": "Bob's plan"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(ss[1].do(t, m{"action": "close"}).IsError).To(BeFalse())
	g.Expect(ss[0].do(t, m{"action": "view"}).Content).To(HavePrefix("Plan: Alice's plan (active"))
}

func TestNoSession(t *testing.T) {
	g := NewWithT(t)
	s := newSessions(t, "")[0]
	res := s.do(t, m{"action": "view"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("needs a session"))
}

func TestTooManyItems(t *testing.T) {
	g := NewWithT(t)
	s := newSessions(t, "s")[0]
	items := make([]string, 100)
	for i := range items {
		items[i] = fmt.Sprint("step ", i)
	}
	g.Expect(s.do(t, m{"action": "create", "title": "big", "items": items}).IsError).To(BeFalse())
	res := s.do(t, m{"action": "append", "items": []string{"one more"}})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("at most 100 items"))
}

func TestConcurrentCalls(t *testing.T) {
	g := NewWithT(t)
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprint("session-", i)
	}
	ss := newSessions(t, ids...)
	for _, s := range ss {
		g.Expect(s.do(t, m{"action": "create", "title": s.env.SessionID}).IsError).To(BeFalse())
	}
	// Every session gets 25 appends and 25 views at once; no append may be lost.
	var wg sync.WaitGroup
	for _, s := range ss {
		for i := range 25 {
			wg.Go(func() {
				if res := s.do(t, m{"action": "append", "items": []string{fmt.Sprint("item ", i)}}); res.IsError {
					t.Error(res.Content)
				}
			})
			wg.Go(func() { s.do(t, m{"action": "view"}) })
		}
	}
	wg.Wait()
	for _, s := range ss {
		res := s.do(t, m{"action": "view"})
		g.Expect(res.Content).To(HavePrefix(fmt.Sprintf("Plan: %s (active, 0/25 done)", s.env.SessionID)))
		for id := 1; id <= 25; id++ {
			g.Expect(res.Content).To(ContainSubstring(fmt.Sprintf("\n  %d. [pending] item ", id)))
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	s := newSessions(t, "s")[0]
	for name, args := range map[string]string{
		"malformed JSON":    `{"action": `,
		"missing action":    `{"title": "x"}`,
		"unknown action":    `{"action": "delete"}`,
		"action wrong type": `{"action": 3}`,
		"items wrong type":  `{"action": "append", "items": "a, b"}`,
		"item_id string":    `{"action": "update", "item_id": "1", "status": "done"}`,
		"item_id zero":      `{"action": "update", "item_id": 0, "status": "done"}`,
		"unknown status":    `{"action": "update", "item_id": 1, "status": "finished"}`,
		"unknown property":  `{"action": "view", "plan_id": 1}`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			res := s.do(t, args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring("invalid arguments"))
		})
	}
}

func TestDescription(t *testing.T) {
	g := NewWithT(t)
	tl := todo.New(todo.NewMemoryStore())
	g.Expect(tl.Name()).To(Equal("todo"))
	g.Expect(tl.Description()).To(ContainSubstring("only for complex, multi-step or parallel tasks"))
	g.Expect(tl.Description()).To(ContainSubstring("never for chit-chat or single-step requests"))
	g.Expect(tl.Traits().ReadOnly).To(BeFalse())
}

func TestMemoryStore(t *testing.T) {
	todotest.StoreConformance(context.Background(), t, func(*testing.T) todo.Store { return todo.NewMemoryStore() })
}

// TestPersistentStore: plans kept in the SQLite store pass the same suite
// and survive the store being closed and opened again (a restart); the
// PostgreSQL store's session plans pass the store's conformance suite.
func TestPersistentStore(t *testing.T) {
	ctx := store.WithTenant(context.Background(), "team")
	todotest.StoreConformance(ctx, t, func(t *testing.T) todo.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return todo.Persistent(st)
	})

	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "picobot.db")
	st, err := sqlite.Open(context.Background(), path)
	g.Expect(err).NotTo(HaveOccurred())
	r, err := tool.NewRegistry(todo.New(todo.Persistent(st)))
	g.Expect(err).NotTo(HaveOccurred())
	env := tool.Env{SessionID: "web:c1:d1"}
	res := r.Execute(ctx, env, llm.ToolCall{Name: "todo", Arguments: `{"action":"create","title":"ship","items":["build","release"]}`})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	res = r.Execute(ctx, env, llm.ToolCall{Name: "todo", Arguments: `{"action":"update","item_id":1,"status":"done"}`})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(st.Close()).To(Succeed())

	st, err = sqlite.Open(context.Background(), path)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	r, err = tool.NewRegistry(todo.New(todo.Persistent(st)))
	g.Expect(err).NotTo(HaveOccurred())
	res = r.Execute(ctx, env, llm.ToolCall{Name: "todo", Arguments: `{"action":"view"}`})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("ship"))
	g.Expect(res.Content).To(ContainSubstring("[done] build"))
	// Another tenant's session of the same id has no plan.
	res = r.Execute(store.WithTenant(context.Background(), "other"), env, llm.ToolCall{Name: "todo", Arguments: `{"action":"view"}`})
	g.Expect(res.Content).NotTo(ContainSubstring("ship"))
}
