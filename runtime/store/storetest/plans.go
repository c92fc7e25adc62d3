package storetest

import (
	"strings"
	"testing"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testSessionPlans: a session's todo plan is stored, replaced, kept per
// tenant and session, and bad input is refused.
func testSessionPlans(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)

	_, err := st.GetSessionPlan(a, "web:c1:d1")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

	g.Expect(st.PutSessionPlan(a, "web:c1:d1", []byte(`{"title":"ship","items":[]}`))).To(gomega.Succeed())
	g.Expect(st.PutSessionPlan(a, "web:c1:d1", []byte(`{"title":"ship it","items":[{"id":1}]}`))).To(gomega.Succeed())
	g.Expect(st.PutSessionPlan(a, "web:c2:d1", []byte(`{"title":"other"}`))).To(gomega.Succeed())
	plan, err := st.GetSessionPlan(a, "web:c1:d1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(plan).To(gomega.MatchJSON(`{"title":"ship it","items":[{"id":1}]}`))
	plan, err = st.GetSessionPlan(a, "web:c2:d1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(plan).To(gomega.MatchJSON(`{"title":"other"}`))

	// Another tenant has its own plan under the same session id and
	// cannot read or replace tenant A's.
	_, err = st.GetSessionPlan(b, "web:c1:d1")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	g.Expect(st.PutSessionPlan(b, "web:c1:d1", []byte(`{"title":"b"}`))).To(gomega.Succeed())
	plan, err = st.GetSessionPlan(a, "web:c1:d1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(plan).To(gomega.MatchJSON(`{"title":"ship it","items":[{"id":1}]}`))

	for name, put := range map[string]func() error{
		"empty session id": func() error { return st.PutSessionPlan(a, "", []byte(`{}`)) },
		"not JSON":         func() error { return st.PutSessionPlan(a, "web:c1:d1", []byte(`{"title":`)) },
		"too big": func() error {
			return st.PutSessionPlan(a, "web:c1:d1", []byte(`"`+strings.Repeat("x", store.MaxPlanBytes)+`"`))
		},
	} {
		g.Expect(put()).To(gomega.MatchError(store.ErrInvalid), name)
	}
	_, err = st.GetSessionPlan(t.Context(), "web:c1:d1")
	g.Expect(err).To(gomega.HaveOccurred(), "no tenant, no plan")
}
