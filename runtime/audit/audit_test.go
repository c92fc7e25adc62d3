package audit_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
)

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "picobot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestRecorderWritesOneRecordPerCall: the record carries the actor of the
// turn's context, the environment's agent and session, the tool, the
// digest of the arguments, the outcome and the call's duration on the
// injected clock; a call whose turn was cancelled is recorded too, and a
// context without a tenant falls back to the recorder's.
func TestRecorderWritesOneRecordPerCall(t *testing.T) {
	g := NewWithT(t)
	st := openStore(t)
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	rec := &audit.Recorder{Store: st, Tenant: "fallback", Clock: clk}
	env := tool.Env{Agent: "helper", SessionID: "web:c1:d1"}

	ctx := audit.WithActor(store.WithTenant(t.Context(), "tenant-a"), "key:ops")
	done := rec.ToolCall(ctx, env, llm.ToolCall{ID: "c1", Name: "exec", Arguments: `{"command":"rm -rf /tmp/x"}`})
	clk.SetTime(start.Add(1500 * time.Millisecond))
	done(false)

	cctx, cancel := context.WithCancel(ctx)
	done = rec.ToolCall(cctx, env, llm.ToolCall{ID: "c2", Name: "web_fetch", Arguments: `{}`})
	cancel()
	done(true)

	done = rec.ToolCall(audit.WithActor(t.Context(), "cron"), tool.Env{Agent: "helper"}, llm.ToolCall{Name: "memory_search", Arguments: `{"q":"x"}`})
	done(false)

	got, err := st.ListAudit(store.WithTenant(t.Context(), "tenant-a"), store.AuditFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(2))
	g.Expect(got).To(ContainElement(And(
		HaveField("Actor", "key:ops"), HaveField("Agent", "helper"), HaveField("SessionID", "web:c1:d1"), HaveField("Tool", "exec"),
		HaveField("ArgsDigest", audit.Digest(`{"command":"rm -rf /tmp/x"}`)), HaveField("Outcome", store.AuditOK),
		HaveField("Duration", 1500*time.Millisecond), HaveField("CreatedAt", start))))
	g.Expect(got).To(ContainElement(And(HaveField("Tool", "web_fetch"), HaveField("Outcome", store.AuditError))), "recorded after the turn was cancelled")
	g.Expect(audit.Digest(`{"command":"rm -rf /tmp/x"}`)).To(HavePrefix("sha256:"))
	g.Expect(audit.Digest(`{"command":"rm -rf /tmp/x"}`)).NotTo(ContainSubstring("rm -rf"))

	got, err = st.ListAudit(store.WithTenant(t.Context(), "fallback"), store.AuditFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(ConsistOf(And(HaveField("Tool", "memory_search"), HaveField("Actor", "cron"), HaveField("SessionID", ""))))
}

// TestSweeperKeepsTheRetention: records older than the retention go,
// younger ones and other tenants' stay.
func TestSweeperKeepsTheRetention(t *testing.T) {
	g := NewWithT(t)
	st := openStore(t)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	a, b := store.WithTenant(t.Context(), "tenant-a"), store.WithTenant(t.Context(), "tenant-b")
	for i, age := range []time.Duration{31 * 24 * time.Hour, 29 * 24 * time.Hour, time.Hour} {
		for _, ctx := range []context.Context{a, b} {
			g.Expect(st.AppendAudit(ctx, store.AuditRecord{ID: string(rune('a' + i)), Agent: "helper", Tool: "exec",
				ArgsDigest: audit.Digest("{}"), Outcome: store.AuditOK, CreatedAt: now.Add(-age)})).To(Succeed())
		}
	}
	sw := audit.Sweeper{Store: st, Clock: clocktesting.NewFakePassiveClock(now)}
	n, err := sw.Sweep(t.Context(), "tenant-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1), "the default retention is 30 days")
	left, err := st.ListAudit(a, store.AuditFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(HaveLen(2))
	left, err = st.ListAudit(b, store.AuditFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(HaveLen(3), "tenant B's are its own retention's business")

	sw.Retention = 2 * time.Hour
	n, err = sw.Sweep(t.Context(), "tenant-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	left, err = st.ListAudit(a, store.AuditFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(ConsistOf(HaveField("ID", "c")))
}
