package storetest

import (
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// leaseWait bounds how long the suite waits for a short lease to expire.
const leaseWait = 10 * time.Second

func testLeases(t *testing.T, newStore NewStore) {
	t.Run("AcquireRenewRelease", func(t *testing.T) {
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		const sid = "web:c1:d1"
		// Each step either acquires (for holder, expecting wantOK) or runs do
		// (expecting wantErr).
		steps := []struct {
			name    string
			acquire bool
			holder  string
			wantOK  bool
			do      func() error
			wantErr error
		}{
			{name: "free lease is taken", acquire: true, holder: "pod-a", wantOK: true},
			{name: "held lease is refused", acquire: true, holder: "pod-b", wantOK: false},
			{name: "holder re-acquiring renews", acquire: true, holder: "pod-a", wantOK: true},
			{name: "holder renews", do: func() error { return st.RenewLease(ctx, sid, "pod-a", time.Minute) }},
			{name: "non-holder cannot renew", do: func() error { return st.RenewLease(ctx, sid, "pod-b", time.Minute) },
				wantErr: store.ErrLeaseLost},
			{name: "non-holder release is a no-op", do: func() error { return st.ReleaseLease(ctx, sid, "pod-b") }},
			{name: "still held after the no-op", acquire: true, holder: "pod-b", wantOK: false},
			{name: "holder releases", do: func() error { return st.ReleaseLease(ctx, sid, "pod-a") }},
			{name: "released lease is taken", acquire: true, holder: "pod-b", wantOK: true},
			{name: "old holder lost it", do: func() error { return st.RenewLease(ctx, sid, "pod-a", time.Minute) },
				wantErr: store.ErrLeaseLost},
			{name: "releasing twice is fine", do: func() error { return st.ReleaseLease(ctx, sid, "pod-a") }},
			{name: "renewing a released lease fails", do: func() error {
				if err := st.ReleaseLease(ctx, sid, "pod-b"); err != nil {
					return err
				}
				return st.RenewLease(ctx, sid, "pod-b", time.Minute)
			}, wantErr: store.ErrLeaseLost},
			{name: "zero ttl is invalid", do: func() error { _, err := st.AcquireLease(ctx, sid, "pod-c", 0); return err },
				wantErr: store.ErrInvalid},
		}
		for _, step := range steps {
			g := gomega.NewWithT(t)
			if step.acquire {
				ok, err := st.AcquireLease(ctx, sid, step.holder, time.Minute)
				g.Expect(err).NotTo(gomega.HaveOccurred(), step.name)
				g.Expect(ok).To(gomega.Equal(step.wantOK), step.name)
				continue
			}
			err := step.do()
			if step.wantErr != nil {
				g.Expect(err).To(gomega.MatchError(step.wantErr), step.name)
			} else {
				g.Expect(err).NotTo(gomega.HaveOccurred(), step.name)
			}
		}
	})

	t.Run("StealAfterExpiry", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		const sid = "web:c1:d2"
		ok, err := st.AcquireLease(ctx, sid, "pod-a", time.Second)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeTrue())
		ok, err = st.AcquireLease(ctx, sid, "pod-b", time.Minute)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeFalse(), "not expired yet")

		g.Eventually(func() (bool, error) {
			return st.AcquireLease(ctx, sid, "pod-b", time.Minute)
		}).WithTimeout(leaseWait).WithPolling(50 * time.Millisecond).Should(gomega.BeTrue())
		g.Expect(st.RenewLease(ctx, sid, "pod-a", time.Minute)).To(gomega.MatchError(store.ErrLeaseLost))
		g.Expect(st.RenewLease(ctx, sid, "pod-b", time.Minute)).To(gomega.Succeed())
	})

	t.Run("RenewExpiredButUntaken", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		const sid = "web:c1:d3"
		ok, err := st.AcquireLease(ctx, sid, "pod-a", 50*time.Millisecond)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeTrue())
		time.Sleep(100 * time.Millisecond) // let it expire; nobody takes it
		g.Expect(st.RenewLease(ctx, sid, "pod-a", time.Minute)).To(gomega.Succeed(), "no one else holds it")
		ok, err = st.AcquireLease(ctx, sid, "pod-b", time.Minute)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeFalse(), "the renewal extended it")
	})
}
