// Package todotest holds the conformance suite every todo.Store must pass, so
// the in-memory store and later persistent ones behave the same.
package todotest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/tool/todo"
)

// StoreConformance runs the conformance suite against stores made by newStore; each
// subtest gets a fresh, empty store. ctx is what the tool's calls carry (a
// persistent store needs the tenant in it).
func StoreConformance(ctx context.Context, t *testing.T, newStore func(t *testing.T) todo.Store) {
	plan := todo.Plan{Title: "ship", Status: todo.PlanActive, Items: []todo.Item{
		{ID: 1, Text: "build", Status: todo.ItemDone, Note: "ok"},
		{ID: 2, Text: "release", Status: todo.ItemPending},
	}}

	t.Run("get of an unknown session", func(t *testing.T) {
		g := gomega.NewWithT(t)
		_, ok, err := newStore(t).Get(ctx, "nobody")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeFalse())
	})

	t.Run("put then get round-trips", func(t *testing.T) {
		g := gomega.NewWithT(t)
		s := newStore(t)
		g.Expect(s.Put(ctx, "s1", plan)).To(gomega.Succeed())
		got, ok, err := s.Get(ctx, "s1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeTrue())
		g.Expect(got).To(gomega.Equal(plan))
	})

	t.Run("put replaces", func(t *testing.T) {
		g := gomega.NewWithT(t)
		s := newStore(t)
		g.Expect(s.Put(ctx, "s1", plan)).To(gomega.Succeed())
		closed := plan
		closed.Status, closed.Note = todo.PlanCancelled, "dropped"
		g.Expect(s.Put(ctx, "s1", closed)).To(gomega.Succeed())
		got, _, err := s.Get(ctx, "s1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(closed))
	})

	t.Run("sessions are isolated", func(t *testing.T) {
		g := gomega.NewWithT(t)
		s := newStore(t)
		g.Expect(s.Put(ctx, "s1", plan)).To(gomega.Succeed())
		_, ok, err := s.Get(ctx, "s2")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ok).To(gomega.BeFalse())
	})

	t.Run("stored plans do not alias the caller's", func(t *testing.T) {
		g := gomega.NewWithT(t)
		s := newStore(t)
		mine := plan
		mine.Items = append([]todo.Item(nil), plan.Items...)
		g.Expect(s.Put(ctx, "s1", mine)).To(gomega.Succeed())
		mine.Items[0].Text = "changed after put"
		got, _, err := s.Get(ctx, "s1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		got.Items[1].Text = "changed after get"
		again, _, err := s.Get(ctx, "s1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(again).To(gomega.Equal(plan))
	})

	t.Run("concurrent use", func(t *testing.T) {
		g := gomega.NewWithT(t)
		s := newStore(t)
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() {
				id := fmt.Sprintf("s%d", i%8)
				_ = s.Put(ctx, id, plan)
				_, _, _ = s.Get(ctx, id)
			})
		}
		wg.Wait()
		for i := range 8 {
			got, ok, err := s.Get(ctx, fmt.Sprintf("s%d", i))
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(ok).To(gomega.BeTrue())
			g.Expect(got).To(gomega.Equal(plan))
		}
	})
}
