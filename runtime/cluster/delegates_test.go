package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// TestSubAgentRunsRunOnlyRunsSomeoneWaitsFor: a delegated task runs at its
// run's depth on a sub-agent config given the run's narrowed tools, only
// while its agent_runs record is running and names this agent.
func TestSubAgentRunsRunOnlyRunsSomeoneWaitsFor(t *testing.T) {
	g := NewWithT(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	ctx := store.WithTenant(context.Background(), "team-a")
	for _, r := range []store.AgentRun{{ID: "live", Agent: "researcher", Status: store.RunRunning},
		{ID: "bg", Agent: "researcher", Status: store.RunRunning, Mode: store.RunBackground, Completion: store.CompletionReserved},
		{ID: "given-up", Agent: "researcher", Status: store.RunCancelled}, {ID: "other", Agent: "writer", Status: store.RunRunning}} {
		_, err := st.CreateAgentRun(ctx, r)
		g.Expect(err).NotTo(HaveOccurred())
	}
	var tools [][]string
	var modes []bool
	turns := SubAgentRuns(st, "researcher", func(t []string, background bool) (session.Config, error) {
		tools = append(tools, t)
		modes = append(modes, background)
		return session.Config{Store: st}, nil
	})

	tctx, m, err := turns(ctx, protocol.Delegation{RunID: "live", Depth: 2, Tools: []string{"calculator"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).NotTo(BeNil())
	g.Expect(delegate.Depth(tctx)).To(Equal(2), "the sub-agent's own delegations count from the run's depth")
	g.Expect(tools).To(Equal([][]string{{"calculator"}}))
	_, _, err = turns(ctx, protocol.Delegation{RunID: "bg", Depth: 1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(modes).To(Equal([]bool{false, true}), "a background run's session gets the background config (emit_signal)")

	for run, code := range map[string]string{"given-up": protocol.CodeStopped, "other": protocol.CodeBadRequest, "missing": protocol.CodeBadRequest} {
		_, _, err := turns(ctx, protocol.Delegation{RunID: run, Depth: 1})
		var ce *protocol.CodedError
		g.Expect(errors.As(err, &ce)).To(BeTrue(), "%s: %v", run, err)
		g.Expect(ce.Code).To(Equal(code), run)
	}
	g.Expect(tools).To(HaveLen(2), "no config was built for a refused run")
}
