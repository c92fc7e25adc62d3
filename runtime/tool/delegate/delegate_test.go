package delegate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// agents stands for the sub-agents at the Runner boundary (the embedded
// runtime's real runner is tested in runtime/embedded): "writer" exists,
// "ghost" is an edge to an Agent that does not.
type agents struct {
	mu   sync.Mutex
	reqs []delegate.Request
}

func (a *agents) Tools(_ context.Context, agent string) ([]string, error) {
	if agent != "writer" {
		return nil, fmt.Errorf("no agent %q: %w", agent, delegate.ErrUnknownAgent)
	}
	return []string{"calculator", "file_write"}, nil
}

func (a *agents) Run(_ context.Context, req delegate.Request) (string, string, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	if req.Agent != "writer" {
		return "", "", fmt.Errorf("no agent %q: %w", req.Agent, delegate.ErrUnknownAgent)
	}
	return "wrote it", "delegate:" + req.RunID + ":default", nil
}

func TestBatchDefaultsAndMissingAgents(t *testing.T) {
	g := NewWithT(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	runner := &agents{}
	reg, err := tool.NewRegistry(delegate.New(delegate.Config{Agent: "lead", Runner: runner, Runs: st, Edges: []picobotv1alpha1.Delegate{
		{Name: "writer", AgentRef: corev1.LocalObjectReference{Name: "writer"}},
		{Name: "ghost", AgentRef: corev1.LocalObjectReference{Name: "gone"}}}}))
	g.Expect(err).NotTo(HaveOccurred())
	ctx := store.WithTenant(context.Background(), "team")
	run := func(args string) tool.Result {
		return reg.Execute(ctx, tool.Env{SessionID: "web:lead/c:default", Agent: "lead"}, llm.ToolCall{ID: "c", Name: delegate.Name, Arguments: args})
	}

	// Items take the call's target, context and allowed_tools unless they
	// name their own.
	res := run(`{"target":"writer","context":"shared facts","allowed_tools":["calculator"],
		"tasks":[{"task":"one","plan_item_id":"a"},{"task":"two","context":"own facts","allowed_tools":["file_write"]}]}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	var out []delegate.Result
	g.Expect(json.Unmarshal([]byte(res.Content), &out)).To(Succeed())
	g.Expect(out).To(HaveLen(2))
	g.Expect(out[0].PlanItemID).To(Equal("a"))
	byTask := map[string]delegate.Request{}
	for _, r := range runner.reqs {
		byTask[r.Text] = r
	}
	g.Expect(byTask).To(HaveKeyWithValue("[Task delegated by agent lead]\n\none\n\nContext:\nshared facts",
		HaveField("Tools", Equal([]string{"calculator"}))))
	g.Expect(byTask).To(HaveKeyWithValue("[Task delegated by agent lead]\n\ntwo\n\nContext:\nown facts",
		HaveField("Tools", Equal([]string{"file_write"}))))

	// An edge to a missing Agent: refused up front with allowed_tools, a
	// failed (recorded) run without.
	g.Expect(run(`{"target":"ghost","task":"x","allowed_tools":["calculator"]}`)).To(Equal(
		tool.Errorf(`error: sub-agent ghost names Agent "gone", which does not exist here`)))
	res = run(`{"target":"ghost","task":"x"}`)
	g.Expect(res.IsError).To(BeTrue())
	var one delegate.Result
	g.Expect(json.Unmarshal([]byte(res.Content), &one)).To(Succeed())
	g.Expect(one.Status).To(Equal("failed"))
	g.Expect(one.Error).To(Equal(`no agent "gone": unknown agent`))
	rec, err := st.GetAgentRun(ctx, one.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rec.Status).To(Equal(store.RunFailed))
	g.Expect(rec.SessionID).To(Equal("web:lead/c:default"))

	// Bad input names what is wrong.
	g.Expect(run(`{"target":"writer"}`).Content).To(Equal("error: give a task (or tasks[] for a batch)"))
	g.Expect(run(`{"target":"writer","task":"a","tasks":[{"task":"b"}]}`).Content).To(Equal("error: give either task or tasks[], not both"))
	g.Expect(run(`{"tasks":[{"task":"b"},{"target":"writer","task":"c"}]}`).Content).To(Equal("error: tasks[0]: name a target: one of writer, ghost"))
	g.Expect(run(`{"target":"writer","task":"a","mode":"later"}`).IsError).To(BeTrue(), "the schema allows foreground and background only")
}
