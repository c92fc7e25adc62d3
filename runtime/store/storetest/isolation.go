package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// seedTenant writes one of everything as tenant, with the same ids whatever
// the tenant, and returns the session.
func seedTenant(t *testing.T, st store.Store, tenant string) store.Session {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := ctxFor(t, tenant)
	s := newSession("web", "c1", "d1")
	s.Title = "title of " + tenant
	sess := mustCreateSession(ctx, t, st, s)
	mustAppend(ctx, t, st, sess.ID, userMsg("m1", "secret of "+tenant), userMsg("m2", "more of "+tenant))
	// The chat's current dialog is one only this tenant has.
	mustCreateSession(ctx, t, st, newSession("web", "c1", "d1-"+tenant))
	g.Expect(st.SetCurrentDialog(ctx, "web", "c1", "d1-"+tenant)).To(gomega.Succeed())
	ok, err := st.AcquireLease(ctx, sess.ID, "holder-"+tenant, time.Minute)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ok).To(gomega.BeTrue())
	_, err = st.PutMemory(ctx, store.Memory{Agent: "helper", Key: "k1", ID: "mem-1", Content: "memory of " + tenant,
		Category: store.MemoryKnowledge})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	ok, err = st.ClaimCronRun(ctx, store.CronRun{Job: "ns/job", RunID: "run-1", ScheduledTime: t0})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ok).To(gomega.BeTrue())
	_, err = st.CreateAgentRun(ctx, store.AgentRun{ID: "ar-1", Agent: "helper", SessionID: sess.ID, Input: "input of " + tenant})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateDelivery(ctx, store.Delivery{ID: "dl-1", Channel: "web", ChatID: "c1", SessionID: sess.ID})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CreateArtifact(ctx, store.Artifact{ID: "art-1", SessionID: sess.ID, Name: "file of " + tenant, BlobKey: tenant + "/art-1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return sess
}

// checkTenantIntact asserts tenant's records are as seedTenant left them.
func checkTenantIntact(t *testing.T, st store.Store, tenant string) {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := ctxFor(t, tenant)
	sess, err := st.GetSession(ctx, "web:c1:d1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(sess.Title).To(gomega.Equal("title of " + tenant))
	g.Expect(sess.ArchivedAt).To(gomega.BeNil())
	g.Expect(sess.DeletedAt).To(gomega.BeNil())
	msgs, err := st.LoadMessages(ctx, sess.ID, store.LoadOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ids(msgs)).To(gomega.Equal([]string{"m1", "m2"}))
	g.Expect(msgs[0].Content).To(gomega.Equal("secret of " + tenant))
	dialog, err := st.CurrentDialog(ctx, "web", "c1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(dialog).To(gomega.Equal("d1-" + tenant))
	g.Expect(st.RenewLease(ctx, sess.ID, "holder-"+tenant, time.Minute)).To(gomega.Succeed(), "lease still held")
	mem, err := st.GetMemory(ctx, "helper", "k1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(mem.Content).To(gomega.Equal("memory of " + tenant))
	run, err := st.GetCronRun(ctx, "run-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(run.State).To(gomega.Equal(store.CronClaimed))
	ar, err := st.GetAgentRun(ctx, "ar-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ar.Status).To(gomega.Equal(store.RunQueued))
	g.Expect(ar.Input).To(gomega.Equal("input of " + tenant))
	dl, err := st.GetDelivery(ctx, "dl-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(dl.Attempts).To(gomega.BeZero())
	art, err := st.GetArtifact(ctx, "art-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(art.Name).To(gomega.Equal("file of " + tenant))
}

func testTenantIsolation(t *testing.T, newStore NewStore) {
	t.Run("OtherTenantCannotReachAnything", func(t *testing.T) {
		st := newStore(t)
		sess := seedTenant(t, st, tenantA)
		b := ctxFor(t, tenantB)
		notFound := []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"GetSession", func(ctx context.Context) error { _, err := st.GetSession(ctx, sess.ID); return err }},
			{"UpdateSession", func(ctx context.Context) error {
				_, err := st.UpdateSession(ctx, sess.ID, store.SessionUpdate{Title: ptr("pwned"), Deleted: ptr(true)})
				return err
			}},
			{"AppendMessages", func(ctx context.Context) error {
				_, err := st.AppendMessages(ctx, sess.ID, userMsg("m3", "injected"))
				return err
			}},
			{"LoadMessages", func(ctx context.Context) error {
				_, err := st.LoadMessages(ctx, sess.ID, store.LoadOptions{})
				return err
			}},
			{"CountMessages", func(ctx context.Context) error { _, err := st.CountMessages(ctx, sess.ID); return err }},
			{"CurrentDialog", func(ctx context.Context) error { _, err := st.CurrentDialog(ctx, "web", "c1"); return err }},
			{"GetMemory", func(ctx context.Context) error { _, err := st.GetMemory(ctx, "helper", "k1"); return err }},
			{"DeleteMemory", func(ctx context.Context) error { return st.DeleteMemory(ctx, "helper", "k1") }},
			{"GetCronRun", func(ctx context.Context) error { _, err := st.GetCronRun(ctx, "run-1"); return err }},
			{"UpdateCronRun", func(ctx context.Context) error {
				_, err := st.UpdateCronRun(ctx, "run-1", store.CronRunUpdate{State: ptr(store.CronDone)})
				return err
			}},
			{"GetAgentRun", func(ctx context.Context) error { _, err := st.GetAgentRun(ctx, "ar-1"); return err }},
			{"UpdateAgentRun", func(ctx context.Context) error {
				_, err := st.UpdateAgentRun(ctx, "ar-1", store.AgentRunUpdate{Status: ptr(store.RunCancelled)})
				return err
			}},
			{"GetDelivery", func(ctx context.Context) error { _, err := st.GetDelivery(ctx, "dl-1"); return err }},
			{"UpdateDelivery", func(ctx context.Context) error {
				_, err := st.UpdateDelivery(ctx, "dl-1", store.DeliveryUpdate{AddAttempt: true})
				return err
			}},
			{"GetArtifact", func(ctx context.Context) error { _, err := st.GetArtifact(ctx, "art-1"); return err }},
			{"DeleteArtifact", func(ctx context.Context) error { return st.DeleteArtifact(ctx, "art-1") }},
		}
		for _, tt := range notFound {
			t.Run(tt.name, func(t *testing.T) {
				gomega.NewWithT(t).Expect(tt.call(b)).To(gomega.MatchError(store.ErrNotFound))
			})
		}

		t.Run("lists are empty", func(t *testing.T) {
			g := gomega.NewWithT(t)
			sessions, err := st.ListSessions(b, store.SessionFilter{IncludeArchived: true, IncludeDeleted: true})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(sessions).To(gomega.BeEmpty())
			runs, err := st.ListCronRuns(b, "ns/job", 0)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(runs).To(gomega.BeEmpty())
			agentRuns, err := st.ListAgentRuns(b, store.AgentRunFilter{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(agentRuns).To(gomega.BeEmpty())
			deliveries, err := st.ListDeliveries(b, store.DeliveryFilter{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(deliveries).To(gomega.BeEmpty())
			artifacts, err := st.ListArtifacts(b, sess.ID)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(artifacts).To(gomega.BeEmpty())
		})

		t.Run("lease cannot be renewed or released", func(t *testing.T) {
			g := gomega.NewWithT(t)
			g.Expect(st.RenewLease(b, sess.ID, "holder-"+tenantA, time.Minute)).To(gomega.MatchError(store.ErrLeaseLost))
			g.Expect(st.ReleaseLease(b, sess.ID, "holder-"+tenantA)).To(gomega.Succeed(), "a no-op")
		})

		checkTenantIntact(t, st, tenantA)
	})

	t.Run("SameIDsDoNotCollide", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		// Tenant B writes everything under the ids tenant A already uses: no
		// ErrExists, no duplicate-message short cut, no lost claim or lease.
		seedTenant(t, st, tenantA)
		seedTenant(t, st, tenantB)
		checkTenantIntact(t, st, tenantA)
		checkTenantIntact(t, st, tenantB)

		b := ctxFor(t, tenantB)
		out := mustAppend(b, t, st, "web:c1:d1", userMsg("m3", "third of b"))
		g.Expect(out[0].Seq).To(gomega.Equal(int64(3)), "each tenant's session counts on its own")
		n, err := st.CountMessages(ctxFor(t, tenantA), "web:c1:d1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.Equal(int64(2)))
	})
}
