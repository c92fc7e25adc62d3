package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// cronStore returns the store's CronStore side; every implementation has one.
func cronStore(t *testing.T, st store.Store) store.CronStore {
	t.Helper()
	cs, ok := st.(store.CronStore)
	if !ok {
		t.Fatalf("%T does not implement store.CronStore", st)
	}
	return cs
}

func testCronJobs(t *testing.T, newStore NewStore) {
	spec := json.RawMessage(`{"schedule":{"cron":"0 0 9 * * *"},"prompt":"Summarise the inbox"}`)

	t.Run("CreateGetListUpdateDelete", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cs := cronStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)

		origin := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		created, err := cs.CreateCronJob(ctx, store.CronJob{Name: "inbox", DisplayName: "Inbox digest", Agent: "helper",
			Spec: spec, CreatedAt: t0, Origin: origin})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(created.Tenant).To(gomega.Equal(tenantA))
		g.Expect(created.Version).To(gomega.Equal(int64(1)))
		g.Expect(created.CreatedAt).To(gomega.Equal(t0))
		g.Expect(created.Spec).To(gomega.MatchJSON(spec))

		_, err = cs.CreateCronJob(ctx, store.CronJob{Name: "inbox", Spec: spec})
		g.Expect(err).To(gomega.MatchError(store.ErrExists))
		_, err = cs.CreateCronJob(ctx, store.CronJob{Name: "other", Agent: "ops", Spec: spec})
		g.Expect(err).NotTo(gomega.HaveOccurred())

		got, err := cs.GetCronJob(ctx, "inbox")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got.DisplayName).To(gomega.Equal("Inbox digest"))
		g.Expect(got.Agent).To(gomega.Equal("helper"))
		g.Expect(got.Origin).To(gomega.Equal(origin), "the trace context of the turn that made it")

		all, err := cs.ListCronJobs(ctx, store.CronJobFilter{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(jobNames(all)).To(gomega.Equal([]string{"inbox", "other"}))
		mine, err := cs.ListCronJobs(ctx, store.CronJobFilter{Agent: "ops"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(jobNames(mine)).To(gomega.Equal([]string{"other"}))
		one, err := cs.ListCronJobs(ctx, store.CronJobFilter{Limit: 1})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(one).To(gomega.HaveLen(1))

		newSpec := json.RawMessage(`{"schedule":{"every":3600000},"prompt":"Check","suspend":true}`)
		updated, err := cs.UpdateCronJob(ctx, "inbox", store.CronJobUpdate{Spec: newSpec, IfVersion: 1})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(updated.Version).To(gomega.Equal(int64(2)))
		g.Expect(updated.Spec).To(gomega.MatchJSON(newSpec))
		g.Expect(updated.DisplayName).To(gomega.Equal("Inbox digest"), "nil fields stay")
		g.Expect(updated.CreatedAt).To(gomega.Equal(t0))

		_, err = cs.UpdateCronJob(ctx, "inbox", store.CronJobUpdate{DisplayName: ptr("stale"), IfVersion: 1})
		g.Expect(err).To(gomega.MatchError(store.ErrVersionConflict))
		renamed, err := cs.UpdateCronJob(ctx, "inbox", store.CronJobUpdate{DisplayName: ptr("Renamed")})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(renamed.Version).To(gomega.Equal(int64(3)))
		g.Expect(renamed.Spec).To(gomega.MatchJSON(newSpec))
		g.Expect(renamed.Origin).To(gomega.Equal(origin), "updates keep where the job came from")
		_, err = cs.UpdateCronJob(ctx, "missing", store.CronJobUpdate{DisplayName: ptr("x"), IfVersion: 1})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

		g.Expect(cs.DeleteCronJob(ctx, "inbox")).To(gomega.Succeed())
		g.Expect(cs.DeleteCronJob(ctx, "inbox")).To(gomega.MatchError(store.ErrNotFound))
		_, err = cs.GetCronJob(ctx, "inbox")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	})

	t.Run("RejectsBadInput", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cs := cronStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		for _, j := range []store.CronJob{
			{Name: "", Spec: spec},
			{Name: "x", Spec: json.RawMessage(`not json`)},
			{Name: "x", Spec: json.RawMessage(`[1]`)},
			{Name: "x", Spec: nil},
			{Name: "x", DisplayName: "a\x00b", Spec: spec},
			{Name: "x", Origin: strings.Repeat("0", 300), Spec: spec},
		} {
			_, err := cs.CreateCronJob(ctx, j)
			g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "%+v", j)
		}
		_, err := cs.UpdateCronJob(ctx, "x", store.CronJobUpdate{Spec: json.RawMessage(`"str"`)})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = cs.ClaimCronRuns(ctx, []store.CronClaim{{Run: store.CronRun{Job: "a/b", RunID: "r", ScheduledTime: t0,
			State: store.CronRunning}}})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "a claim is claimed or done")
	})

	t.Run("BatchClaimsAndDetail", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cs := cronStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		started := t0.Add(time.Second)
		won, err := cs.ClaimCronRuns(ctx, []store.CronClaim{
			{Run: store.CronRun{Job: "a/daily", RunID: "r1", ScheduledTime: t0, StartedAt: &started},
				Detail: store.CronRunDetail{Agent: "root", Channel: "telegram", ChatID: "42"}},
			{Run: store.CronRun{Job: "a/daily", RunID: "r0", ScheduledTime: t0.Add(-time.Hour), State: store.CronDone,
				Outcome: store.OutcomeSkipped, Message: "missed", FinishedAt: &started, Delivery: store.CronDeliverySuppressed}},
			{Run: store.CronRun{Job: "a/daily", RunID: "r1-again", ScheduledTime: t0}},
		})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(won).To(gomega.Equal([]bool{true, true, false}), "the third claims a taken tick")

		r1, err := cs.GetDetailedCronRun(ctx, "r1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(r1.State).To(gomega.Equal(store.CronClaimed))
		g.Expect(r1.StartedAt).To(gomega.Equal(&started))
		g.Expect(r1.Detail).To(gomega.Equal(store.CronRunDetail{Agent: "root", Channel: "telegram", ChatID: "42"}))
		r0, err := cs.GetDetailedCronRun(ctx, "r0")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(r0.State).To(gomega.Equal(store.CronDone))
		g.Expect(r0.Outcome).To(gomega.Equal(store.OutcomeSkipped))

		// The plain Store sees the same records.
		plain, err := newStoreOf(cs).GetCronRun(ctx, "r1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(plain).To(gomega.Equal(r1.CronRun))

		done, outcome, delivery := store.CronDone, store.OutcomeAlert, store.CronDeliveryFailed
		finished := t0.Add(time.Minute)
		updated, err := cs.UpdateCronRunDetail(ctx, "r1", store.CronRunUpdate{State: &done, Outcome: &outcome,
			Message: ptr("disk at 95%"), FinishedAt: &finished, Delivery: &delivery},
			store.CronRunDetailUpdate{SessionID: ptr("cron:a/daily/r1:default"), DeliveryError: ptr("telegram: 403 Forbidden")})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(updated.Outcome).To(gomega.Equal(store.OutcomeAlert))
		g.Expect(updated.Detail).To(gomega.Equal(store.CronRunDetail{Agent: "root", SessionID: "cron:a/daily/r1:default",
			Channel: "telegram", ChatID: "42", DeliveryError: "telegram: 403 Forbidden"}))
		_, err = cs.UpdateCronRunDetail(ctx, "nope", store.CronRunUpdate{State: &done}, store.CronRunDetailUpdate{})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

		list, err := cs.ListDetailedCronRuns(ctx, "a/daily", 0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(runIDs(list)).To(gomega.Equal([]string{"r1", "r0"}), "latest tick first")
	})

	t.Run("LastRunTimesAndUnfinished", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cs := cronStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		var claims []store.CronClaim
		for i := range 3 {
			claims = append(claims, store.CronClaim{Run: store.CronRun{Job: "a/x", RunID: fmt.Sprint("x", i),
				ScheduledTime: t0.Add(time.Duration(i) * time.Minute)}})
		}
		claims = append(claims, store.CronClaim{Run: store.CronRun{Job: "a/y", RunID: "y0", ScheduledTime: t0}})
		_, err := cs.ClaimCronRuns(ctx, claims)
		g.Expect(err).NotTo(gomega.HaveOccurred())

		far := t0.Add(time.Hour)
		last, err := cs.LastCronRunTimes(ctx, map[string]time.Time{"a/x": far, "a/y": far, "a/none": far})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(last).To(gomega.Equal(map[string]time.Time{"a/x": t0.Add(2 * time.Minute), "a/y": t0}))
		bounded, err := cs.LastCronRunTimes(ctx, map[string]time.Time{"a/x": t0.Add(90 * time.Second), "a/y": t0.Add(-time.Second)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(bounded).To(gomega.Equal(map[string]time.Time{"a/x": t0.Add(time.Minute)}),
			"runs after a job's bound are left out; a job with none up to it is absent")
		atBound, err := cs.LastCronRunTimes(ctx, map[string]time.Time{"a/x": t0.Add(time.Minute)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(atBound).To(gomega.Equal(map[string]time.Time{"a/x": t0.Add(time.Minute)}), "the bound is inclusive")
		empty, err := cs.LastCronRunTimes(ctx, nil)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(empty).To(gomega.BeEmpty())

		done, pending, delivered := store.CronDone, store.CronDeliveryPending, store.CronDeliveryDelivered
		_, err = cs.UpdateCronRunDetail(ctx, "x0", store.CronRunUpdate{State: &done, Delivery: &delivered}, store.CronRunDetailUpdate{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = cs.UpdateCronRunDetail(ctx, "x1", store.CronRunUpdate{State: &done, Delivery: &pending}, store.CronRunDetailUpdate{})
		g.Expect(err).NotTo(gomega.HaveOccurred())

		open, err := cs.ListUnfinishedCronRuns(ctx, "", 0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(runIDs(open)).To(gomega.ConsistOf("x1", "x2", "y0"), "x1's delivery is pending; x2 and y0 never finished")
		g.Expect(open[0].ScheduledTime).To(gomega.Equal(t0), "oldest first")
		ofX, err := cs.ListUnfinishedCronRuns(ctx, "a/x", 1)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(runIDs(ofX)).To(gomega.Equal([]string{"x1"}))
	})

	t.Run("ConcurrentBatchClaimersOneWinsEachTick", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cs := cronStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		const claimers, ticks = 4, 20
		wins := make([][]bool, claimers)
		errs := make([]error, claimers)
		var wg sync.WaitGroup
		for c := range claimers {
			wg.Go(func() {
				var batch []store.CronClaim
				for i := range ticks {
					batch = append(batch, store.CronClaim{Run: store.CronRun{Job: "a/every", RunID: fmt.Sprintf("c%d-t%d", c, i),
						ScheduledTime: t0.Add(time.Duration(i) * time.Minute)}})
				}
				wins[c], errs[c] = cs.ClaimCronRuns(ctx, batch)
			})
		}
		wg.Wait()
		for i := range ticks {
			n := 0
			for c := range claimers {
				g.Expect(errs[c]).NotTo(gomega.HaveOccurred())
				if wins[c][i] {
					n++
				}
			}
			g.Expect(n).To(gomega.Equal(1), "tick %d", i)
		}
	})

	t.Run("TenantIsolation", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cs := cronStore(t, newStore(t))
		a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)
		_, err := cs.CreateCronJob(a, store.CronJob{Name: "secret-job", Spec: spec})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = cs.ClaimCronRuns(a, []store.CronClaim{{Run: store.CronRun{Job: "a/secret-job", RunID: "ra", ScheduledTime: t0}}})
		g.Expect(err).NotTo(gomega.HaveOccurred())

		_, err = cs.GetCronJob(b, "secret-job")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		list, err := cs.ListCronJobs(b, store.CronJobFilter{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(list).To(gomega.BeEmpty())
		_, err = cs.UpdateCronJob(b, "secret-job", store.CronJobUpdate{DisplayName: ptr("mine")})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		g.Expect(cs.DeleteCronJob(b, "secret-job")).To(gomega.MatchError(store.ErrNotFound))
		_, err = cs.GetDetailedCronRun(b, "ra")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		runs, err := cs.ListDetailedCronRuns(b, "a/secret-job", 0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(runs).To(gomega.BeEmpty())
		last, err := cs.LastCronRunTimes(b, map[string]time.Time{"a/secret-job": time.Now().Add(time.Hour)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(last).To(gomega.BeEmpty())
		open, err := cs.ListUnfinishedCronRuns(b, "", 0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(open).To(gomega.BeEmpty())
		done := store.CronDone
		_, err = cs.UpdateCronRunDetail(b, "ra", store.CronRunUpdate{State: &done}, store.CronRunDetailUpdate{})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		// The same tick is free in tenant B: ticks are per tenant.
		won, err := cs.ClaimCronRuns(b, []store.CronClaim{{Run: store.CronRun{Job: "a/secret-job", RunID: "rb", ScheduledTime: t0}}})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(won).To(gomega.Equal([]bool{true}))

		_, err = cs.CreateCronJob(t.Context(), store.CronJob{Name: "x", Spec: spec})
		g.Expect(err).To(gomega.MatchError(store.ErrNoTenant))
		_, err = cs.ClaimCronRuns(t.Context(), []store.CronClaim{{Run: store.CronRun{Job: "a/x", RunID: "rx", ScheduledTime: t0}}})
		g.Expect(err).To(gomega.MatchError(store.ErrNoTenant))
	})
}

// newStoreOf returns the CronStore as the Store it is.
func newStoreOf(cs store.CronStore) store.Store {
	return cs.(store.Store)
}

func jobNames(js []store.CronJob) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.Name
	}
	return out
}

func runIDs(rs []store.DetailedCronRun) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.RunID
	}
	return out
}
