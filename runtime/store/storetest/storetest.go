// Package storetest is the conformance suite every store.Store implementation
// passes: one set of tests, run against PostgreSQL and SQLite alike, so the
// two modes of PicoBot keep identical semantics.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// NewStore returns a fresh, empty store for one test and registers its
// cleanup with t.Cleanup.
type NewStore func(t *testing.T) store.Store

// Tenants the suite writes as.
const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// t0 is a fixed time with microsecond precision (what both stores keep).
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

// Run runs the conformance suite; newStore is called once per subtest.
func Run(t *testing.T, newStore NewStore) {
	suites := []struct {
		name string
		run  func(t *testing.T, newStore NewStore)
	}{
		{"TenantRequired", testTenantRequired},
		{"Sessions", testSessions},
		{"CurrentDialog", testCurrentDialog},
		{"Messages", testMessages},
		{"Leases", testLeases},
		{"Memories", testMemories},
		{"MemorySearch", testMemorySearch},
		{"CronRuns", testCronRuns},
		{"CronJobs", testCronJobs},
		{"Tasks", testTasks},
		{"AgentRuns", testAgentRuns},
		{"BackgroundRuns", testBackgroundRuns},
		{"AgentSignals", testAgentSignals},
		{"SessionPlans", testSessionPlans},
		{"TurnErrors", testTurnErrors},
		{"MessageSearch", testMessageSearch},
		{"Usage", testUsage},
		{"Notices", testNotices},
		{"Audit", testAudit},
		{"Nodes", testNodes},
		{"Deliveries", testDeliveries},
		{"Artifacts", testArtifacts},
		{"TenantIsolation", testTenantIsolation},
	}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) { s.run(t, newStore) })
	}
}

func ctxFor(t *testing.T, tenant string) context.Context {
	return store.WithTenant(t.Context(), tenant)
}

func newSession(channel, chatID, dialogID string) store.Session {
	return store.Session{Channel: channel, ChatID: chatID, DialogID: dialogID, Agent: "helper", Title: "New chat",
		TitleIsDefault: true}
}

func mustCreateSession(ctx context.Context, t *testing.T, st store.Store, s store.Session) store.Session {
	t.Helper()
	out, err := st.CreateSession(ctx, s)
	gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred())
	return out
}

func userMsg(id, content string) store.Message {
	return store.Message{ID: id, Role: llm.RoleUser, Content: content}
}

func mustAppend(ctx context.Context, t *testing.T, st store.Store, sessionID string, msgs ...store.Message) []store.Message {
	t.Helper()
	out, err := st.AppendMessages(ctx, sessionID, msgs...)
	gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred())
	return out
}

func seqs(msgs []store.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

func ids(msgs []store.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func ptr[T any](v T) *T { return &v }
