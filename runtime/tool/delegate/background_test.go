package delegate_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// readyLog records the continuations a host would queue (the
// delegate.Completions boundary; the embedded host's is tested in
// runtime/embedded).
type readyLog struct {
	mu   sync.Mutex
	runs []store.AgentRun
	got  chan struct{}
}

func (r *readyLog) Ready(_ context.Context, run store.AgentRun) error {
	r.mu.Lock()
	r.runs = append(r.runs, run)
	r.mu.Unlock()
	r.got <- struct{}{}
	return nil
}

// TestBackgroundRunsLife: a background call records each run with a
// reserved slot and returns; the run ends with its slot ready and one
// continuation queued; Recover runs again what was left running and
// queues again what was left ready; Sweep deletes ended, delivered runs
// once they are past the retention on the injected clock.
func TestBackgroundRunsLife(t *testing.T) {
	g := NewWithT(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	ctx := store.WithTenant(context.Background(), "team")
	clk := testingclock.NewFakeClock(time.Now())
	log := &readyLog{got: make(chan struct{}, 10)}
	runner := &agents{}
	bctx, stop := context.WithCancel(context.Background())
	bg := delegate.NewBackgroundRuns(bctx, delegate.BackgroundConfig{Runner: runner, Store: st, Completions: log, Clock: clk})
	t.Cleanup(func() { stop(); bg.Wait() })
	edges := []picobotv1alpha1.Delegate{{Name: "writer", AgentRef: corev1.LocalObjectReference{Name: "writer"}}}
	reg, err := tool.NewRegistry(delegate.New(delegate.Config{Agent: "lead", Runner: runner, Runs: st, Edges: edges, Background: bg}))
	g.Expect(err).NotTo(HaveOccurred())
	run := func(session, args string) tool.Result {
		return reg.Execute(ctx, tool.Env{SessionID: session, Agent: "lead"}, llm.ToolCall{ID: "c", Name: delegate.Name, Arguments: args})
	}

	res := run("web:lead/c:default", `{"target":"writer","task":"write it","mode":"background"}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	var started delegate.Result
	g.Expect(json.Unmarshal([]byte(res.Content), &started)).To(Succeed())
	g.Expect(started.Status).To(Equal("running"))
	g.Eventually(log.got).WithTimeout(30 * time.Second).Should(Receive())
	done, err := st.GetAgentRun(ctx, started.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(And(HaveField("Status", store.RunSucceeded), HaveField("Result", "wrote it"),
		HaveField("Completion", store.CompletionReady), HaveField("Mode", store.RunBackground)))
	g.Expect(runner.reqs[0].Mode).To(Equal(delegate.ModeBackground))

	// A stateless turn has no chat to continue in.
	g.Expect(run("stateless:abc:default", `{"target":"writer","task":"x","mode":"background"}`).Content).To(
		ContainSubstring("this turn has no stored chat"))
	// Without a Background, mode background says it is not available.
	plain, err := tool.NewRegistry(delegate.New(delegate.Config{Agent: "lead", Runner: runner, Runs: st, Edges: edges}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plain.Execute(ctx, tool.Env{SessionID: "web:lead/c:default"}, llm.ToolCall{ID: "c", Name: delegate.Name,
		Arguments: `{"target":"writer","task":"x","mode":"background"}`}).Content).To(ContainSubstring("background runs are not available here"))

	// What a dead process left: a run still running, a completion ready.
	input := `{"mode":"background","parent_agent":"lead","target":"writer","task":"again","tools":null,"depth":1,"text":"[Task delegated by agent lead]\n\nagain"}`
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "left-running", Agent: "writer", SessionID: "web:lead/c:default", ParentAgent: "lead",
		Mode: store.RunBackground, Status: store.RunRunning, Completion: store.CompletionReserved, Input: input})
	g.Expect(err).NotTo(HaveOccurred())
	rerun, requeued, err := bg.Recover(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rerun).To(Equal(1))
	g.Expect(requeued).To(Equal(1), "the first run's completion is still ready")
	for range 2 {
		g.Eventually(log.got).WithTimeout(30 * time.Second).Should(Receive())
	}
	again, err := st.GetAgentRun(ctx, "left-running")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Completion).To(Equal(store.CompletionReady))
	g.Expect(runner.reqs[len(runner.reqs)-1]).To(And(HaveField("RunID", "left-running"), HaveField("Text", "[Task delegated by agent lead]\n\nagain")))

	// Delivered twice is delivered once.
	g.Expect(delegate.MarkDelivered(ctx, st, started.RunID)).To(Succeed())
	g.Expect(delegate.MarkDelivered(ctx, st, started.RunID)).To(Succeed())

	// Retention: nothing is old yet; a day later the delivered run goes,
	// the one whose completion still waits stays.
	n, err := bg.Sweep(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero())
	clk.Step(delegate.DefaultRetention + time.Minute)
	n, err = bg.Sweep(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	_, err = st.GetAgentRun(ctx, started.RunID)
	g.Expect(err).To(MatchError(store.ErrNotFound))
	_, err = st.GetAgentRun(ctx, "left-running")
	g.Expect(err).NotTo(HaveOccurred())
}
