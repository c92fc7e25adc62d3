package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// digestOf is a well-formed argument digest distinct per n.
func digestOf(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// testAudit: audit records are listed newest first, filtered, paged with a
// cursor that never repeats or skips a record, stay within their tenant,
// and go once past the retention; malformed ones are refused.
func testAudit(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)

	// 12 calls a second apart, the last two at the same instant (the id
	// breaks the tie), of two agents, sessions and tools.
	var want []store.AuditRecord
	for i := range 12 {
		at := t0.Add(time.Duration(min(i, 10)) * time.Second)
		r := store.AuditRecord{ID: fmt.Sprintf("r%02d", i), Actor: "key:ops", Agent: []string{"helper", "coder"}[i%2],
			SessionID: []string{"web:c1:d1", "web:c2:d1", ""}[i%3], Tool: []string{"exec", "read_file", "web_fetch", "exec"}[i%4],
			ArgsDigest: digestOf(i), Outcome: []string{store.AuditOK, store.AuditError}[i%2], Duration: time.Duration(i) * 1500 * time.Microsecond,
			CreatedAt: at}
		g.Expect(st.AppendAudit(a, r)).To(gomega.Succeed())
		want = append([]store.AuditRecord{r}, want...) // newest first
	}
	g.Expect(st.AppendAudit(b, store.AuditRecord{ID: "rb", Agent: "helper", Tool: "exec", ArgsDigest: digestOf(99),
		Outcome: store.AuditOK, CreatedAt: t0})).To(gomega.Succeed())

	all, err := st.ListAudit(a, store.AuditFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(all).To(gomega.Equal(want))

	// Pages of 5 with the cursor of each page's last record.
	var paged []store.AuditRecord
	var after *store.AuditCursor
	for range 4 {
		page, err := st.ListAudit(a, store.AuditFilter{Limit: 5, After: after})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(len(page)).To(gomega.BeNumerically("<=", 5))
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		last := page[len(page)-1]
		after = &store.AuditCursor{At: last.CreatedAt, ID: last.ID}
	}
	g.Expect(paged).To(gomega.Equal(want), "pages join up to the whole log")

	for name, c := range map[string]struct {
		f    store.AuditFilter
		want []string
	}{
		"agent":   {store.AuditFilter{Agent: "coder"}, []string{"r11", "r09", "r07", "r05", "r03", "r01"}},
		"session": {store.AuditFilter{SessionID: "web:c2:d1"}, []string{"r10", "r07", "r04", "r01"}},
		"tool":    {store.AuditFilter{Tool: "exec", Agent: "helper"}, []string{"r08", "r04", "r00"}},
		"since":   {store.AuditFilter{Since: t0.Add(9 * time.Second)}, []string{"r11", "r10", "r09"}},
		"limit":   {store.AuditFilter{Limit: 2}, []string{"r11", "r10"}},
	} {
		got, err := st.ListAudit(a, c.f)
		g.Expect(err).NotTo(gomega.HaveOccurred(), name)
		ids := make([]string, len(got))
		for i, r := range got {
			ids[i] = r.ID
		}
		g.Expect(ids).To(gomega.Equal(c.want), name)
	}

	// Tenant B sees its own record only, and cannot delete A's.
	got, err := st.ListAudit(b, store.AuditFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.HaveLen(1))
	g.Expect(got[0].ID).To(gomega.Equal("rb"))
	n, err := st.DeleteAudit(b, t0.Add(time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.Equal(1))

	// Retention: the records before t0+5s go, once.
	n, err = st.DeleteAudit(a, t0.Add(5*time.Second))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.Equal(5))
	n, err = st.DeleteAudit(a, t0.Add(5*time.Second))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.BeZero())
	all, err = st.ListAudit(a, store.AuditFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(all).To(gomega.Equal(want[:7]))

	// A record without a time gets the store's clock; without an id, one.
	g.Expect(st.AppendAudit(a, store.AuditRecord{Agent: "helper", Tool: "exec", ArgsDigest: digestOf(1), Outcome: store.AuditOK})).To(gomega.Succeed())
	all, err = st.ListAudit(a, store.AuditFilter{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(all).To(gomega.HaveLen(8))
	var stamped store.AuditRecord
	for _, r := range all {
		if r.ArgsDigest == digestOf(1) {
			stamped = r
		}
	}
	g.Expect(stamped.ID).NotTo(gomega.BeEmpty())
	g.Expect(stamped.CreatedAt.IsZero()).To(gomega.BeFalse())

	ok := store.AuditRecord{Agent: "helper", Tool: "exec", ArgsDigest: digestOf(1), Outcome: store.AuditOK}
	bad := map[string]func(r *store.AuditRecord){
		"no agent":        func(r *store.AuditRecord) { r.Agent = "" },
		"no tool":         func(r *store.AuditRecord) { r.Tool = "" },
		"unknown outcome": func(r *store.AuditRecord) { r.Outcome = "maybe" },
		"raw arguments":   func(r *store.AuditRecord) { r.ArgsDigest = `{"command":"ls"}` },
		"negative time":   func(r *store.AuditRecord) { r.Duration = -time.Second },
		"NUL in actor":    func(r *store.AuditRecord) { r.Actor = "a\x00b" },
	}
	for name, mutate := range bad {
		r := ok
		mutate(&r)
		g.Expect(st.AppendAudit(a, r)).To(gomega.MatchError(store.ErrInvalid), name)
	}
	_, err = st.ListAudit(a, store.AuditFilter{Limit: store.MaxAuditLimit + 1})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	_, err = st.ListAudit(a, store.AuditFilter{After: &store.AuditCursor{ID: "x"}})
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	g.Expect(st.AppendAudit(t.Context(), ok)).To(gomega.MatchError(store.ErrNoTenant))
	_, err = st.ListAudit(t.Context(), store.AuditFilter{})
	g.Expect(err).To(gomega.MatchError(store.ErrNoTenant))
	_, err = st.DeleteAudit(t.Context(), t0)
	g.Expect(err).To(gomega.MatchError(store.ErrNoTenant))
}
