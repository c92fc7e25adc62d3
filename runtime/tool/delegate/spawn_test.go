package delegate_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// stuck is a sub-agent that never answers: its run ends only when its
// context does.
type stuck struct{ agents }

func (s *stuck) Run(ctx context.Context, req delegate.Request) (string, string, error) {
	<-ctx.Done()
	return "", "delegate:" + req.RunID + ":default", ctx.Err()
}

// TestSpawnTimeoutAndRefusals: a spawned run past runTimeoutSeconds is
// stopped and ends failed, with its completion delivered once like any
// background run's; the record keeps the spawn's label; a sub-agent, a
// stateless turn and a host without background runs are refused.
func TestSpawnTimeoutAndRefusals(t *testing.T) {
	g := NewWithT(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	ctx := store.WithTenant(context.Background(), "team")
	log := &readyLog{got: make(chan struct{}, 10)}
	runner := &stuck{}
	bctx, stop := context.WithCancel(context.Background())
	bg := delegate.NewBackgroundRuns(bctx, delegate.BackgroundConfig{Runner: runner, Store: st, Completions: log})
	t.Cleanup(func() { stop(); bg.Wait() })
	edges := []picobotv1alpha1.Delegate{{Name: "writer", AgentRef: corev1.LocalObjectReference{Name: "writer"}}}
	cfg := delegate.Config{Agent: "lead", Runner: runner, Runs: st, Edges: edges, Background: bg}
	reg, err := tool.NewRegistry(delegate.NewSpawn(cfg))
	g.Expect(err).NotTo(HaveOccurred())
	run := func(ctx context.Context, session, args string) tool.Result {
		return reg.Execute(ctx, tool.Env{SessionID: session, Agent: "lead"}, llm.ToolCall{ID: "c", Name: delegate.SpawnName, Arguments: args})
	}

	// The only edge is the default agentId.
	res := run(ctx, "web:lead/c:default", `{"task":"never ends","label":"slow one","runTimeoutSeconds":1}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	var spawned delegate.Spawned
	g.Expect(json.Unmarshal([]byte(res.Content), &spawned)).To(Succeed())
	g.Expect(spawned).To(And(HaveField("Status", "accepted"), HaveField("AgentID", "writer")))
	g.Eventually(log.got).WithTimeout(30 * time.Second).Should(Receive())
	done, err := st.GetAgentRun(ctx, spawned.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(And(HaveField("Status", store.RunFailed), HaveField("Completion", store.CompletionReady),
		HaveField("Result", "timed out: the run did not finish within runTimeoutSeconds (1 s) and was stopped")))
	text := delegate.ContinuationText(done)
	g.Expect(text).To(ContainSubstring("Label: slow one"))
	g.Expect(text).To(ContainSubstring("reply exactly ANNOUNCE_SKIP to stay silent"))
	g.Consistently(log.got).WithTimeout(200*time.Millisecond).ShouldNot(Receive(), "ready once")

	g.Expect(run(delegate.WithDepth(ctx, 1), "delegate:r1:default", `{"task":"x"}`).Content).To(
		Equal("error: a sub-agent cannot use sessions_spawn; do the task yourself or delegate in the foreground"))
	g.Expect(run(ctx, "stateless:abc:default", `{"task":"x"}`).Content).To(ContainSubstring("this turn has no stored chat"))
	cfg.Background = nil
	plain, err := tool.NewRegistry(delegate.NewSpawn(cfg))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plain.Execute(ctx, tool.Env{SessionID: "web:lead/c:default"}, llm.ToolCall{ID: "c", Name: delegate.SpawnName,
		Arguments: `{"task":"x"}`}).Content).To(ContainSubstring("sessions_spawn is not available here"))
	runs, err := st.ListAgentRuns(ctx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(1), "refused calls start no run")
}
