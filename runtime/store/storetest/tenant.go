package storetest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testTenantRequired: every method refuses a context without a tenant (or
// with an empty one) instead of running unscoped.
func testTenantRequired(t *testing.T, newStore NewStore) {
	st := newStore(t)
	calls := map[string]func(ctx context.Context) error{
		"CreateSession": func(ctx context.Context) error {
			_, err := st.CreateSession(ctx, newSession("web", "c1", "d1"))
			return err
		},
		"GetSession": func(ctx context.Context) error { _, err := st.GetSession(ctx, "web:c1:d1"); return err },
		"ListSessions": func(ctx context.Context) error {
			_, err := st.ListSessions(ctx, store.SessionFilter{})
			return err
		},
		"UpdateSession": func(ctx context.Context) error {
			_, err := st.UpdateSession(ctx, "web:c1:d1", store.SessionUpdate{Title: ptr("x")})
			return err
		},
		"SetCurrentDialog": func(ctx context.Context) error { return st.SetCurrentDialog(ctx, "web", "c1", "d1") },
		"CurrentDialog":    func(ctx context.Context) error { _, err := st.CurrentDialog(ctx, "web", "c1"); return err },
		"AppendMessages": func(ctx context.Context) error {
			_, err := st.AppendMessages(ctx, "web:c1:d1", userMsg("m1", "hi"))
			return err
		},
		"LoadMessages": func(ctx context.Context) error {
			_, err := st.LoadMessages(ctx, "web:c1:d1", store.LoadOptions{})
			return err
		},
		"CountMessages": func(ctx context.Context) error { _, err := st.CountMessages(ctx, "web:c1:d1"); return err },
		"AcquireLease": func(ctx context.Context) error {
			_, err := st.AcquireLease(ctx, "web:c1:d1", "h", time.Minute)
			return err
		},
		"RenewLease":   func(ctx context.Context) error { return st.RenewLease(ctx, "web:c1:d1", "h", time.Minute) },
		"ReleaseLease": func(ctx context.Context) error { return st.ReleaseLease(ctx, "web:c1:d1", "h") },
		"PutMemory": func(ctx context.Context) error {
			_, err := st.PutMemory(ctx, store.Memory{Agent: "a", Key: "k", Content: "c", Category: store.MemoryKnowledge})
			return err
		},
		"GetMemory":    func(ctx context.Context) error { _, err := st.GetMemory(ctx, "a", "k"); return err },
		"DeleteMemory": func(ctx context.Context) error { return st.DeleteMemory(ctx, "a", "k") },
		"ListMemories": func(ctx context.Context) error {
			_, err := st.ListMemories(ctx, store.MemoryFilter{Agent: "a"})
			return err
		},
		"ClaimCronRun": func(ctx context.Context) error {
			_, err := st.ClaimCronRun(ctx, store.CronRun{Job: "ns/job", RunID: "r1", ScheduledTime: t0})
			return err
		},
		"GetCronRun": func(ctx context.Context) error { _, err := st.GetCronRun(ctx, "r1"); return err },
		"UpdateCronRun": func(ctx context.Context) error {
			_, err := st.UpdateCronRun(ctx, "r1", store.CronRunUpdate{State: ptr(store.CronDone)})
			return err
		},
		"ListCronRuns": func(ctx context.Context) error { _, err := st.ListCronRuns(ctx, "ns/job", 0); return err },
		"CreateAgentRun": func(ctx context.Context) error {
			_, err := st.CreateAgentRun(ctx, store.AgentRun{ID: "ar1", Agent: "a"})
			return err
		},
		"GetAgentRun": func(ctx context.Context) error { _, err := st.GetAgentRun(ctx, "ar1"); return err },
		"UpdateAgentRun": func(ctx context.Context) error {
			_, err := st.UpdateAgentRun(ctx, "ar1", store.AgentRunUpdate{Status: ptr(store.RunRunning)})
			return err
		},
		"ListAgentRuns": func(ctx context.Context) error {
			_, err := st.ListAgentRuns(ctx, store.AgentRunFilter{})
			return err
		},
		"CreateDelivery": func(ctx context.Context) error {
			_, err := st.CreateDelivery(ctx, store.Delivery{ID: "d1", Channel: "web", ChatID: "c1"})
			return err
		},
		"GetDelivery": func(ctx context.Context) error { _, err := st.GetDelivery(ctx, "d1"); return err },
		"UpdateDelivery": func(ctx context.Context) error {
			_, err := st.UpdateDelivery(ctx, "d1", store.DeliveryUpdate{AddAttempt: true})
			return err
		},
		"ListDeliveries": func(ctx context.Context) error {
			_, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
			return err
		},
		"CreateArtifact": func(ctx context.Context) error {
			_, err := st.CreateArtifact(ctx, store.Artifact{ID: "a1", Name: "n", BlobKey: "k"})
			return err
		},
		"GetArtifact":    func(ctx context.Context) error { _, err := st.GetArtifact(ctx, "a1"); return err },
		"ListArtifacts":  func(ctx context.Context) error { _, err := st.ListArtifacts(ctx, "web:c1:d1"); return err },
		"DeleteArtifact": func(ctx context.Context) error { return st.DeleteArtifact(ctx, "a1") },
	}
	contexts := map[string]context.Context{
		"no tenant":    t.Context(),
		"empty tenant": store.WithTenant(t.Context(), ""),
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		call := calls[name]
		for ctxName, ctx := range contexts {
			t.Run(name+"/"+ctxName, func(t *testing.T) {
				gomega.NewWithT(t).Expect(call(ctx)).To(gomega.MatchError(store.ErrNoTenant))
			})
		}
	}
}
