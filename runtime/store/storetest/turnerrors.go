package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testTurnErrors: a turn's failure is recorded per user message, replaced
// when the same message fails again, read back only for the ids asked
// about, kept per tenant, and bad input is refused.
func testTurnErrors(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)

	got, err := st.TurnErrors(a, "web:c1:d1", []string{"m1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.BeEmpty())

	g.Expect(st.PutTurnError(a, store.TurnError{SessionID: "web:c1:d1", MessageID: "m1", Code: "internal", Message: "internal error", CreatedAt: at})).To(gomega.Succeed())
	g.Expect(st.PutTurnError(a, store.TurnError{SessionID: "web:c1:d1", MessageID: "m1", Code: "model_rejected",
		Message: "the model refused the request (HTTP 400): too long", CreatedAt: at.Add(time.Second)})).To(gomega.Succeed())
	g.Expect(st.PutTurnError(a, store.TurnError{SessionID: "web:c1:d1", MessageID: "m2", Code: "rate_limited", Message: "slow down", CreatedAt: at.Add(2 * time.Second)})).To(gomega.Succeed())
	g.Expect(st.PutTurnError(a, store.TurnError{SessionID: "web:c2:d1", MessageID: "m3", Code: "internal", Message: "internal error"})).To(gomega.Succeed())

	got, err = st.TurnErrors(a, "web:c1:d1", []string{"m1", "m2", "m3", "absent"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal([]store.TurnError{
		{SessionID: "web:c1:d1", MessageID: "m1", Code: "model_rejected", Message: "the model refused the request (HTTP 400): too long", CreatedAt: at.Add(time.Second)},
		{SessionID: "web:c1:d1", MessageID: "m2", Code: "rate_limited", Message: "slow down", CreatedAt: at.Add(2 * time.Second)},
	}), "the newer failure of m1 replaced the first; m3 is another session's")
	got, err = st.TurnErrors(a, "web:c1:d1", []string{"m2"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.HaveLen(1))
	got, err = st.TurnErrors(a, "web:c2:d1", []string{"m3"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.HaveLen(1))
	g.Expect(got[0].CreatedAt).NotTo(gomega.BeZero(), "the store's clock")

	// Another tenant sees none of tenant A's and keeps its own.
	got, err = st.TurnErrors(b, "web:c1:d1", []string{"m1", "m2"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.BeEmpty())
	g.Expect(st.PutTurnError(b, store.TurnError{SessionID: "web:c1:d1", MessageID: "m1", Code: "internal", Message: "b"})).To(gomega.Succeed())
	got, err = st.TurnErrors(a, "web:c1:d1", []string{"m1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got[0].Code).To(gomega.Equal("model_rejected"))

	for name, put := range map[string]store.TurnError{
		"no session": {MessageID: "m1", Code: "internal"},
		"no message": {SessionID: "web:c1:d1", Code: "internal"},
		"no code":    {SessionID: "web:c1:d1", MessageID: "m1"},
		"too long":   {SessionID: "web:c1:d1", MessageID: "m1", Code: "internal", Message: strings.Repeat("x", store.MaxTurnErrorBytes+1)},
	} {
		g.Expect(st.PutTurnError(a, put)).To(gomega.MatchError(store.ErrInvalid), name)
	}
	_, err = st.TurnErrors(a, "web:c1:d1", make([]string, store.MaxTurnErrorIDs+1))
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	_, err = st.TurnErrors(t.Context(), "web:c1:d1", []string{"m1"})
	g.Expect(err).To(gomega.HaveOccurred(), "no tenant, no errors")
}
