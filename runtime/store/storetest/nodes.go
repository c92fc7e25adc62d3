package storetest

import (
	"strings"
	"testing"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// testNodes: a node's first hello stores it pending; a later hello
// refreshes what it reports and keeps its state; states move as set, are
// listed by state, stay within their tenant, survive a reopen of the store
// (they are rows like any other), and malformed hellos are refused.
func testNodes(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)

	n, err := st.RegisterNode(a, store.Node{ID: "laptop-1", Name: "Ada's laptop", Platform: "linux/amd64", Version: "v1",
		Capabilities: []string{"run", "notify"}})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n.State).To(gomega.Equal(store.NodePending))
	g.Expect(n.Capabilities).To(gomega.Equal([]string{"run", "notify"}))
	g.Expect(n.CreatedAt.IsZero()).To(gomega.BeFalse())

	_, err = st.RegisterNode(a, store.Node{ID: "phone", Name: "Phone", Platform: "darwin/arm64"})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	approved, err := st.SetNodeState(a, "laptop-1", store.NodeApproved)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(approved.State).To(gomega.Equal(store.NodeApproved))

	// A reconnect refreshes the hello and keeps the approval.
	again, err := st.RegisterNode(a, store.Node{ID: "laptop-1", Name: "Ada's laptop", Platform: "linux/amd64", Version: "v2",
		Capabilities: []string{"run"}})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(again.State).To(gomega.Equal(store.NodeApproved))
	g.Expect(again.Version).To(gomega.Equal("v2"))
	g.Expect(again.Capabilities).To(gomega.Equal([]string{"run"}))
	g.Expect(again.CreatedAt).To(gomega.Equal(n.CreatedAt))

	got, err := st.GetNode(a, "laptop-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got).To(gomega.Equal(again))

	pending, err := st.ListNodes(a, store.NodePending)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(nodeIDs(pending)).To(gomega.Equal([]string{"phone"}))
	all, err := st.ListNodes(a, "")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(nodeIDs(all)).To(gomega.ConsistOf("laptop-1", "phone"))
	g.Expect(all[0].Capabilities).NotTo(gomega.BeNil())

	revoked, err := st.SetNodeState(a, "laptop-1", store.NodeRevoked)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(revoked.State).To(gomega.Equal(store.NodeRevoked))

	// Another tenant sees none of them, and cannot change them.
	other, err := st.ListNodes(b, "")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(other).To(gomega.BeEmpty())
	_, err = st.GetNode(b, "laptop-1")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	_, err = st.SetNodeState(b, "laptop-1", store.NodeApproved)
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	// The same id in another tenant is another node.
	bn, err := st.RegisterNode(b, store.Node{ID: "laptop-1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(bn.State).To(gomega.Equal(store.NodePending))
	got, err = st.GetNode(a, "laptop-1")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got.State).To(gomega.Equal(store.NodeRevoked))

	for name, bad := range map[string]store.Node{
		"empty id":      {},
		"id with slash": {ID: "a/b"},
		"long id":       {ID: strings.Repeat("x", 65)},
		"control char":  {ID: "ok", Name: "a\nb"},
		"long name":     {ID: "ok", Name: strings.Repeat("n", store.MaxNodeField+1)},
		"many caps":     {ID: "ok", Capabilities: make([]string, store.MaxNodeCapabilities+1)},
	} {
		_, err := st.RegisterNode(a, bad)
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), name)
	}
	_, err = st.SetNodeState(a, "phone", "lost")
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	_, err = st.ListNodes(a, "lost")
	g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	_, err = st.GetNode(a, "nope")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
}

func nodeIDs(ns []store.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}
