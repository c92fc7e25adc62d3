package storetest

import (
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testBackgroundRuns covers what background delegate runs need: the
// completion slot, conditional updates (a run finishes once), keyset paging
// and retention.
func testBackgroundRuns(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	ctx := ctxFor(t, tenantA)

	bg, err := st.CreateAgentRun(ctx, store.AgentRun{ID: "bg-1", Agent: "researcher", SessionID: "web:c1:d1", ParentAgent: "lead",
		Mode: store.RunBackground, Status: store.RunRunning, Completion: store.CompletionReserved, Input: "{}"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(bg.Mode).To(gomega.Equal(store.RunBackground))
	g.Expect(bg.ParentAgent).To(gomega.Equal("lead"))
	g.Expect(bg.Completion).To(gomega.Equal(store.CompletionReserved))
	fg, err := st.CreateAgentRun(ctx, store.AgentRun{ID: "fg-1", Agent: "researcher", SessionID: "web:c1:d1", Status: store.RunRunning})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(fg.Mode).To(gomega.Equal(store.RunForeground), "mode defaults to foreground")
	g.Expect(fg.Completion).To(gomega.Equal(store.CompletionNone))
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "bad", Agent: "x", Mode: "sideways"})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "bad", Agent: "x", Completion: "lost"})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))

	ids := func(f store.AgentRunFilter) []string {
		runs, err := st.ListAgentRuns(ctx, f)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		out := []string{}
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	g.Expect(ids(store.AgentRunFilter{Mode: store.RunBackground})).To(gomega.Equal([]string{"bg-1"}))
	g.Expect(ids(store.AgentRunFilter{Completion: store.CompletionReserved})).To(gomega.Equal([]string{"bg-1"}))
	g.Expect(ids(store.AgentRunFilter{Active: true})).To(gomega.ConsistOf("bg-1", "fg-1"))

	// The run ends: terminal status and a ready slot in one update.
	done, err := st.UpdateAgentRun(ctx, "bg-1", store.AgentRunUpdate{Status: ptr(store.RunSucceeded), Result: ptr("found it"),
		Completion: ptr(store.CompletionReady), IfActive: true})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(done.Completion).To(gomega.Equal(store.CompletionReady))
	// A cancel that comes after loses, and says so.
	_, err = st.UpdateAgentRun(ctx, "bg-1", store.AgentRunUpdate{Status: ptr(store.RunCancelled), IfActive: true})
	g.Expect(err).To(gomega.MatchError(store.ErrRunFinished))
	_, err = st.UpdateAgentRun(ctx, "none", store.AgentRunUpdate{Status: ptr(store.RunCancelled), IfActive: true})
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	got, err := st.GetAgentRun(ctx, "bg-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got.Status).To(gomega.Equal(store.RunSucceeded))
	g.Expect(ids(store.AgentRunFilter{Active: true})).To(gomega.Equal([]string{"fg-1"}))

	// The slot is delivered once: the second taker is told it is gone.
	_, err = st.UpdateAgentRun(ctx, "bg-1", store.AgentRunUpdate{Completion: ptr(store.CompletionDelivered), IfCompletion: store.CompletionReady})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.UpdateAgentRun(ctx, "bg-1", store.AgentRunUpdate{Completion: ptr(store.CompletionDelivered), IfCompletion: store.CompletionReady})
	g.Expect(err).To(gomega.MatchError(store.ErrRunFinished))

	// Keyset paging: pages of two, each after the last one's (created_at, id).
	for _, id := range []string{"p-1", "p-2", "p-3", "p-4", "p-5"} {
		_, err := st.CreateAgentRun(ctx, store.AgentRun{ID: id, Agent: "researcher", SessionID: "web:c2:d1"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	var paged []string
	f := store.AgentRunFilter{SessionID: "web:c2:d1", Limit: 2}
	for range 4 {
		runs, err := st.ListAgentRuns(ctx, f)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		if len(runs) == 0 {
			break
		}
		for _, r := range runs {
			paged = append(paged, r.ID)
		}
		last := runs[len(runs)-1]
		f.CursorCreatedAt, f.CursorID = last.CreatedAt, last.ID
	}
	g.Expect(paged).To(gomega.ConsistOf("p-1", "p-2", "p-3", "p-4", "p-5"))
	g.Expect(paged).To(gomega.HaveLen(5), "no run twice")

	// Retention removes ended runs with nothing left to deliver, never an
	// active run or a completion still waiting.
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "bg-2", Agent: "researcher", SessionID: "web:c1:d1", Mode: store.RunBackground,
		Status: store.RunFailed, Completion: store.CompletionReady})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-old", RunID: "bg-1", SessionID: "web:c1:d1", Delivery: store.SignalQueue, Body: "x"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	n, err := st.DeleteAgentRuns(ctx, time.Now().Add(-time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.BeZero(), "nothing is older than an hour")
	n, err = st.DeleteAgentRuns(ctxFor(t, tenantB), time.Now().Add(time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.BeZero(), "another tenant's retention removes nothing of this one")
	n, err = st.DeleteAgentRuns(ctx, time.Now().Add(time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.Equal(1), "bg-1 only")
	g.Expect(ids(store.AgentRunFilter{})).To(gomega.ConsistOf("fg-1", "bg-2", "p-1", "p-2", "p-3", "p-4", "p-5"))
	sigs, err := st.ListAgentSignals(ctx, store.AgentSignalFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(sigs).To(gomega.BeEmpty(), "signals go with their run")
}

func testAgentSignals(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	ctx := ctxFor(t, tenantA)

	s1, err := st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-1", RunID: "r-1", SessionID: "web:c1:d1", Delivery: store.SignalQueue,
		Kind: "progress", Body: "half way"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(s1.State).To(gomega.Equal(store.SignalPending), "state defaults to pending")
	g.Expect(s1.Tenant).To(gomega.Equal(tenantA))
	_, err = st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-2", RunID: "r-1", SessionID: "web:c1:d1", Delivery: store.SignalSteer, Body: "stop, wrong city"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-3", RunID: "r-2", SessionID: "web:c1:d1", Delivery: store.SignalQueue, Body: "other run"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-1", RunID: "r-1", SessionID: "web:c1:d1", Delivery: store.SignalQueue, Body: "again"})
	g.Expect(err).To(gomega.MatchError(store.ErrExists))
	_, err = st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-4", RunID: "r-1", SessionID: "web:c1:d1", Delivery: "shout", Body: "x"})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	_, err = st.CreateAgentSignal(ctx, store.AgentSignal{ID: "s-4", RunID: "r-1", SessionID: "web:c1:d1", Delivery: store.SignalQueue})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "a signal says something")

	list := func(f store.AgentSignalFilter) []string {
		sigs, err := st.ListAgentSignals(ctx, f)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		out := []string{}
		for _, s := range sigs {
			out = append(out, s.ID)
		}
		return out
	}
	g.Expect(list(store.AgentSignalFilter{SessionID: "web:c1:d1"})).To(gomega.Equal([]string{"s-1", "s-2", "s-3"}), "oldest first")
	g.Expect(list(store.AgentSignalFilter{Delivery: store.SignalSteer})).To(gomega.Equal([]string{"s-2"}))
	other, err := st.ListAgentSignals(ctxFor(t, tenantB), store.AgentSignalFilter{SessionID: "web:c1:d1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(other).To(gomega.BeEmpty(), "another tenant sees none of them")

	n, err := st.MarkAgentSignals(ctx, []string{"s-2"}, "", store.SignalConsumed)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.Equal(1))
	n, err = st.MarkAgentSignals(ctx, []string{"s-2"}, "", store.SignalConsumed)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.BeZero(), "only pending signals move")
	n, err = st.MarkAgentSignals(ctxFor(t, tenantB), nil, "r-1", store.SignalSuperseded)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.BeZero(), "another tenant's run id reaches nothing here")
	n, err = st.MarkAgentSignals(ctx, nil, "r-1", store.SignalSuperseded)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.Equal(1), "s-1; s-2 was consumed")
	g.Expect(list(store.AgentSignalFilter{State: store.SignalPending})).To(gomega.Equal([]string{"s-3"}))
	g.Expect(list(store.AgentSignalFilter{State: store.SignalSuperseded})).To(gomega.Equal([]string{"s-1"}))
	_, err = st.MarkAgentSignals(ctx, nil, "r-2", "lost")
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
}
