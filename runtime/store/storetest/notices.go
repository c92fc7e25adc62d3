package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testNotices: of many concurrent claims of a notice exactly one wins; it
// is not won again before it expires, is won again after, and belongs to
// its tenant.
func testNotices(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)
	now := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	midnight := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)

	var won atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			ok, err := st.ClaimNotice(a, "soft/day-tokens", now, midnight)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	g.Expect(won.Load()).To(gomega.Equal(int32(1)), "one of 16 concurrent claims wins")

	ok, err := st.ClaimNotice(a, "soft/day-tokens", now.Add(time.Hour), midnight.Add(24*time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ok).To(gomega.BeFalse(), "still in force")
	ok, err = st.ClaimNotice(b, "soft/day-tokens", now, midnight)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ok).To(gomega.BeTrue(), "another tenant's notice is its own")
	ok, err = st.ClaimNotice(a, "soft/day-tokens", midnight, midnight.Add(24*time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ok).To(gomega.BeTrue(), "expired at midnight: claimed again")
	ok, err = st.ClaimNotice(a, "soft/day-tokens", midnight.Add(time.Hour), midnight.Add(48*time.Hour))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(ok).To(gomega.BeFalse(), "the renewed claim is in force")

	for name, c := range map[string]struct {
		key          string
		now, expires time.Time
	}{
		"empty key":       {"", now, midnight},
		"long key":        {string(make([]byte, store.MaxNoticeKeyBytes+1)), now, midnight},
		"expires already": {"k", now, now},
		"no now":          {"k", time.Time{}, midnight},
	} {
		_, err := st.ClaimNotice(a, c.key, c.now, c.expires)
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), name)
	}
}
