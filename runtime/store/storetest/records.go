package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

func testMemories(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	ctx := ctxFor(t, tenantA)

	first, err := st.PutMemory(ctx, store.Memory{Agent: "helper", Key: "favourite_city", Content: "Kyoto",
		Category: store.MemoryKnowledge, Kind: store.MemoryFact, Source: store.SourceUser, SessionID: "web:c1:d1",
		Importance: 0.8})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(first.ID).NotTo(gomega.BeEmpty(), "an id is generated")
	g.Expect(first.Tenant).To(gomega.Equal(tenantA))
	g.Expect(first.CreatedAt).NotTo(gomega.BeZero())
	g.Expect(first.UpdatedAt).To(gomega.Equal(first.CreatedAt))

	got, err := st.GetMemory(ctx, "helper", "favourite_city")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal(first))

	// Listing filters by category and session, newest first, and never shows
	// another tenant's memories.
	for i, sid := range []string{"web:c1:d1", "web:c1:d1", "web:c2:d1"} {
		_, err := st.PutMemory(ctx, store.Memory{Agent: "helper", Key: fmt.Sprintf("timeline-%d", i), Content: fmt.Sprintf("summary %d", i),
			Category: store.MemoryTimeline, SessionID: sid, Importance: 0.3})
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	_, err = st.PutMemory(ctxFor(t, tenantB), store.Memory{Agent: "helper", Key: "timeline-x", Content: "other tenant",
		Category: store.MemoryTimeline, SessionID: "web:c1:d1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	tl, err := st.ListMemories(ctx, store.MemoryFilter{Agent: "helper", Category: store.MemoryTimeline, SessionID: "web:c1:d1", Limit: 5})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var contents []string
	for _, m := range tl {
		contents = append(contents, m.Content)
	}
	g.Expect(contents).To(gomega.Equal([]string{"summary 1", "summary 0"}))
	all, err := st.ListMemories(ctx, store.MemoryFilter{Agent: "helper"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(all).To(gomega.HaveLen(4))
	none, err := st.ListMemories(ctx, store.MemoryFilter{Agent: "nobody"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(none).To(gomega.BeEmpty())
	for _, key := range []string{"timeline-0", "timeline-1", "timeline-2"} {
		g.Expect(st.DeleteMemory(ctx, "helper", key)).To(gomega.Succeed())
	}

	// Writing the same key replaces the memory but keeps its identity.
	second, err := st.PutMemory(ctx, store.Memory{Agent: "helper", Key: "favourite_city", Content: "Osaka",
		Category: store.MemoryKnowledge, Importance: 0.9, ID: "ignored-on-update"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(second.ID).To(gomega.Equal(first.ID))
	g.Expect(second.CreatedAt).To(gomega.Equal(first.CreatedAt))
	g.Expect(second.UpdatedAt).To(gomega.BeTemporally(">=", first.UpdatedAt))
	g.Expect(second.Content).To(gomega.Equal("Osaka"))
	g.Expect(second.Kind).To(gomega.BeEmpty())
	g.Expect(second.Importance).To(gomega.Equal(0.9))

	// Keys are per agent.
	other, err := st.PutMemory(ctx, store.Memory{Agent: "coder", Key: "favourite_city", Content: "Berlin",
		Category: store.MemoryTimeline, Importance: 0.3, ID: "mem-coder-1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(other.ID).To(gomega.Equal("mem-coder-1"))
	got, err = st.GetMemory(ctx, "helper", "favourite_city")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got.Content).To(gomega.Equal("Osaka"))

	invalid := []store.Memory{
		{Agent: "helper", Key: "k", Content: "c", Category: "gossip"},
		{Agent: "helper", Key: "k", Content: "c", Category: store.MemoryKnowledge, Kind: "rumour"},
		{Agent: "helper", Key: "k", Content: "c", Category: store.MemoryKnowledge, Importance: 1.5},
		{Agent: "helper", Content: "c", Category: store.MemoryKnowledge},
	}
	for _, m := range invalid {
		_, err := st.PutMemory(ctx, m)
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "%+v", m)
	}

	g.Expect(st.DeleteMemory(ctx, "helper", "favourite_city")).To(gomega.Succeed())
	_, err = st.GetMemory(ctx, "helper", "favourite_city")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	g.Expect(st.DeleteMemory(ctx, "helper", "favourite_city")).To(gomega.MatchError(store.ErrNotFound))
	_, err = st.GetMemory(ctx, "coder", "favourite_city")
	g.Expect(err).NotTo(gomega.HaveOccurred(), "deleting one agent's key leaves the other's")
}

func testCronRuns(t *testing.T, newStore NewStore) {
	t.Run("ClaimOnce", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		run := store.CronRun{Job: "team/standup", RunID: "run-1", ScheduledTime: t0}

		ok, err := st.ClaimCronRun(ctx, run)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeTrue())
		got, err := st.GetCronRun(ctx, "run-1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(store.CronRun{Tenant: tenantA, Job: "team/standup", RunID: "run-1", ScheduledTime: t0,
			State: store.CronClaimed}))

		ok, err = st.ClaimCronRun(ctx, store.CronRun{Job: "team/standup", RunID: "run-2", ScheduledTime: t0})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeFalse(), "the tick is taken")
		_, err = st.GetCronRun(ctx, "run-2")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

		ok, err = st.ClaimCronRun(ctx, store.CronRun{Job: "team/other", RunID: "run-3", ScheduledTime: t0})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeTrue(), "another job's tick is free")

		_, err = st.ClaimCronRun(ctx, store.CronRun{Job: "team/standup", RunID: "run-1", ScheduledTime: t0.Add(time.Hour)})
		g.Expect(err).To(gomega.MatchError(store.ErrExists), "run ids are unique")
		_, err = st.ClaimCronRun(ctx, store.CronRun{Job: "team/standup", RunID: "run-9"})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "a tick needs a time")
	})

	t.Run("ConcurrentClaimersOneWins", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		const claimers = 8
		for tick := range 5 {
			scheduled := t0.Add(time.Duration(tick) * time.Minute)
			won := make([]bool, claimers)
			errs := make([]error, claimers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for c := range claimers {
				wg.Go(func() {
					<-start
					won[c], errs[c] = st.ClaimCronRun(ctx, store.CronRun{Job: "team/standup",
						RunID: fmt.Sprintf("tick%d-claimer%d", tick, c), ScheduledTime: scheduled})
				})
			}
			close(start)
			wg.Wait()
			winners := 0
			for c := range claimers {
				g.Expect(errs[c]).NotTo(gomega.HaveOccurred())
				if won[c] {
					winners++
				}
			}
			g.Expect(winners).To(gomega.Equal(1), "tick %d", tick)
		}
		runs, err := st.ListCronRuns(ctx, "team/standup", 0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(runs).To(gomega.HaveLen(5))
	})

	t.Run("UpdateAndList", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		for i := range 3 {
			ok, err := st.ClaimCronRun(ctx, store.CronRun{Job: "team/standup", RunID: fmt.Sprintf("run-%d", i),
				ScheduledTime: t0.Add(time.Duration(i) * time.Hour)})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(ok).To(gomega.BeTrue())
		}
		started := t0.Add(time.Second)
		running, err := st.UpdateCronRun(ctx, "run-0", store.CronRunUpdate{State: ptr(store.CronRunning), StartedAt: &started})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(running.State).To(gomega.Equal(store.CronRunning))
		g.Expect(running.StartedAt).To(gomega.Equal(&started))

		finished := t0.Add(time.Minute)
		done, err := st.UpdateCronRun(ctx, "run-0", store.CronRunUpdate{State: ptr(store.CronDone),
			Outcome: ptr(store.OutcomeAlert), Message: ptr("disk 95% full"), FinishedAt: &finished,
			Delivery: ptr(store.CronDeliveryDelivered)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(done).To(gomega.Equal(store.CronRun{Tenant: tenantA, Job: "team/standup", RunID: "run-0", ScheduledTime: t0,
			State: store.CronDone, Outcome: store.OutcomeAlert, Message: "disk 95% full", StartedAt: &started,
			FinishedAt: &finished, Delivery: store.CronDeliveryDelivered}))
		got, err := st.GetCronRun(ctx, "run-0")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(done))

		_, err = st.UpdateCronRun(ctx, "run-0", store.CronRunUpdate{State: ptr(store.CronRunState("exploded"))})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = st.UpdateCronRun(ctx, "run-none", store.CronRunUpdate{State: ptr(store.CronDone)})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

		runs, err := st.ListCronRuns(ctx, "team/standup", 2)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect([]string{runs[0].RunID, runs[1].RunID}).To(gomega.Equal([]string{"run-2", "run-1"}), "latest tick first")
		runs, err = st.ListCronRuns(ctx, "team/none", 0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(runs).To(gomega.BeEmpty())
	})
}

func testAgentRuns(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	ctx := ctxFor(t, tenantA)

	parent, err := st.CreateAgentRun(ctx, store.AgentRun{ID: "run-p", Agent: "helper", SessionID: "web:c1:d1",
		Input: "plan a trip"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(parent.Status).To(gomega.Equal(store.RunQueued), "status defaults to queued")
	g.Expect(parent.Tenant).To(gomega.Equal(tenantA))
	g.Expect(parent.CreatedAt).NotTo(gomega.BeZero())

	child, err := st.CreateAgentRun(ctx, store.AgentRun{ID: "run-c", Agent: "researcher", SessionID: "web:c1:d1",
		ParentRunID: "run-p", Status: store.RunRunning, Input: "find flights"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "run-c", Agent: "researcher"})
	g.Expect(err).To(gomega.MatchError(store.ErrExists))
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "run-x", Agent: "researcher", Status: "paused"})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))

	got, err := st.GetAgentRun(ctx, "run-c")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal(child))

	updated, err := st.UpdateAgentRun(ctx, "run-c", store.AgentRunUpdate{Status: ptr(store.RunSucceeded),
		Result: ptr("3 flights found")})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(updated.Status).To(gomega.Equal(store.RunSucceeded))
	g.Expect(updated.Result).To(gomega.Equal("3 flights found"))
	g.Expect(updated.Input).To(gomega.Equal("find flights"))
	g.Expect(updated.UpdatedAt).To(gomega.BeTemporally(">=", child.UpdatedAt))
	_, err = st.UpdateAgentRun(ctx, "run-none", store.AgentRunUpdate{Status: ptr(store.RunFailed)})
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	_, err = st.GetAgentRun(ctx, "run-none")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

	tests := []struct {
		filter store.AgentRunFilter
		want   []string
	}{
		{store.AgentRunFilter{}, []string{"run-c", "run-p"}},
		{store.AgentRunFilter{ParentRunID: "run-p"}, []string{"run-c"}},
		{store.AgentRunFilter{Agent: "helper"}, []string{"run-p"}},
		{store.AgentRunFilter{SessionID: "web:c1:d1", Status: store.RunSucceeded}, []string{"run-c"}},
		{store.AgentRunFilter{Status: store.RunCancelled}, []string{}},
		{store.AgentRunFilter{Limit: 1}, []string{"run-c"}},
	}
	for _, tt := range tests {
		runs, err := st.ListAgentRuns(ctx, tt.filter)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		got := []string{}
		for _, r := range runs {
			got = append(got, r.ID)
		}
		g.Expect(got).To(gomega.Equal(tt.want), "%+v", tt.filter)
	}
}

func testDeliveries(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	ctx := ctxFor(t, tenantA)

	d1, err := st.CreateDelivery(ctx, store.Delivery{ID: "out-1", Channel: "telegram", ChatID: "42", SessionID: "telegram:42:d1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(d1.Status).To(gomega.Equal(store.DeliveryPending), "status defaults to pending")
	g.Expect(d1.Attempts).To(gomega.BeZero())
	g.Expect(d1.DeliveredAt).To(gomega.BeNil())
	_, err = st.CreateDelivery(ctx, store.Delivery{ID: "out-2", Channel: "telegram", ChatID: "42"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateDelivery(ctx, store.Delivery{ID: "out-1", Channel: "telegram", ChatID: "42"})
	g.Expect(err).To(gomega.MatchError(store.ErrExists))
	_, err = st.CreateDelivery(ctx, store.Delivery{ID: "out-3", Channel: "telegram"})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))

	failed, err := st.UpdateDelivery(ctx, "out-1", store.DeliveryUpdate{Status: ptr(store.DeliveryFailed),
		LastError: ptr("HTTP 502"), AddAttempt: true})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(failed.Status).To(gomega.Equal(store.DeliveryFailed))
	g.Expect(failed.Attempts).To(gomega.Equal(1))
	g.Expect(failed.LastError).To(gomega.Equal("HTTP 502"))
	g.Expect(failed.DeliveredAt).To(gomega.BeNil())

	delivered, err := st.UpdateDelivery(ctx, "out-1", store.DeliveryUpdate{Status: ptr(store.DeliveryDelivered), AddAttempt: true})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(delivered.Attempts).To(gomega.Equal(2))
	g.Expect(delivered.DeliveredAt).NotTo(gomega.BeNil())
	g.Expect(delivered.LastError).To(gomega.Equal("HTTP 502"), "the last error is kept for the record")
	got, err := st.GetDelivery(ctx, "out-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal(delivered))

	_, err = st.UpdateDelivery(ctx, "out-none", store.DeliveryUpdate{AddAttempt: true})
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	_, err = st.GetDelivery(ctx, "out-none")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

	pending, err := st.ListDeliveries(ctx, store.DeliveryFilter{Status: store.DeliveryPending})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(pending).To(gomega.HaveLen(1))
	g.Expect(pending[0].ID).To(gomega.Equal("out-2"))
	all, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect([]string{all[0].ID, all[1].ID}).To(gomega.Equal([]string{"out-1", "out-2"}), "oldest first")
	bySession, err := st.ListDeliveries(ctx, store.DeliveryFilter{SessionID: "telegram:42:d1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(bySession).To(gomega.HaveLen(1))
}

func testArtifacts(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	ctx := ctxFor(t, tenantA)

	a1, err := st.CreateArtifact(ctx, store.Artifact{ID: "art-1", SessionID: "web:c1:d1", Name: "report.pdf",
		MediaType: "application/pdf", BlobKey: "tenant-a/art-1", Size: 12345})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(a1.Tenant).To(gomega.Equal(tenantA))
	g.Expect(a1.CreatedAt).NotTo(gomega.BeZero())
	_, err = st.CreateArtifact(ctx, store.Artifact{ID: "art-2", SessionID: "web:c1:d1", Name: "chart.png", BlobKey: "tenant-a/art-2"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateArtifact(ctx, store.Artifact{ID: "art-1", Name: "again", BlobKey: "k"})
	g.Expect(err).To(gomega.MatchError(store.ErrExists))
	_, err = st.CreateArtifact(ctx, store.Artifact{ID: "art-3", Name: "x"})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))

	got, err := st.GetArtifact(ctx, "art-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal(a1))
	list, err := st.ListArtifacts(ctx, "web:c1:d1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(list).To(gomega.HaveLen(2))
	g.Expect(list[0]).To(gomega.Equal(a1))

	g.Expect(st.DeleteArtifact(ctx, "art-1")).To(gomega.Succeed())
	_, err = st.GetArtifact(ctx, "art-1")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	g.Expect(st.DeleteArtifact(ctx, "art-1")).To(gomega.MatchError(store.ErrNotFound))
	list, err = st.ListArtifacts(ctx, "web:c1:d1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(list).To(gomega.HaveLen(1))
}
