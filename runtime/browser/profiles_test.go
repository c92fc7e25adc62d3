package browser

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/test/controlplane"
)

// testProfileStore is the behaviour every ProfileStore shares.
func testProfileStore(t *testing.T, s ProfileStore, storage string) {
	g := NewWithT(t)
	ctx := context.Background()
	list, err := s.List(ctx, "alice")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty())

	work, err := s.Create(ctx, "alice", "Work mail")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ValidProfileID(work.ID)).To(BeTrue(), work.ID)
	g.Expect(work.Label).To(Equal("Work mail"))
	g.Expect(work.Storage).To(Equal(storage))
	plain, err := s.Create(ctx, "alice", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plain.ID).NotTo(Equal(work.ID))
	_, err = s.Create(ctx, "bob", "Bob's")
	g.Expect(err).NotTo(HaveOccurred())

	for _, bad := range []string{"   ", strings.Repeat("é", 81), "tab\there"} {
		_, err := s.Create(ctx, "alice", bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
	_, err = s.Create(ctx, "alice", strings.Repeat("é", 80))
	g.Expect(err).NotTo(HaveOccurred(), "80 characters are allowed")

	list, err = s.List(ctx, "alice")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(3))
	ids := []string{list[0].ID, list[1].ID, list[2].ID}
	g.Expect(ids).To(ContainElements(work.ID, plain.ID))

	p, err := s.SetLabel(ctx, "alice", work.ID, "Personal")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Label).To(Equal("Personal"))
	got, err := s.Get(ctx, "alice", work.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Label).To(Equal("Personal"))
	_, err = s.SetLabel(ctx, "alice", work.ID, "")
	g.Expect(err).To(MatchError(ContainSubstring("blank")))

	// Exact ids only, and only the agent's own.
	for _, id := range []string{"Personal", "bp-zzzzzzzzzz", "../" + work.ID, strings.ToUpper(work.ID)} {
		_, err := s.Get(ctx, "alice", id)
		g.Expect(err).To(MatchError(ErrProfileNotFound), id)
		g.Expect(s.Delete(ctx, "alice", id)).To(MatchError(ErrProfileNotFound), id)
	}
	_, err = s.Get(ctx, "bob", work.ID)
	g.Expect(err).To(MatchError(ErrProfileNotFound))
	g.Expect(s.Delete(ctx, "bob", work.ID)).To(MatchError(ErrProfileNotFound))

	g.Expect(s.Delete(ctx, "alice", work.ID)).To(Succeed())
	_, err = s.Get(ctx, "alice", work.ID)
	g.Expect(err).To(MatchError(ErrProfileNotFound))
	list, _ = s.List(ctx, "alice")
	g.Expect(list).To(HaveLen(2))
}

func TestDirProfiles(t *testing.T) {
	root := t.TempDir()
	s := &DirProfiles{Root: root}
	testProfileStore(t, s, "local")

	g := NewWithT(t)
	p, err := s.Create(context.Background(), "alice", "x")
	g.Expect(err).NotTo(HaveOccurred())
	dir := s.UserDataDir("alice", p.ID)
	g.Expect(dir).To(HavePrefix(root))
	g.Expect(dir).To(BeADirectory())
	g.Expect(os.WriteFile(dir+"/Cookies", []byte("c"), 0o600)).To(Succeed())
	g.Expect(s.Delete(context.Background(), "alice", p.ID)).To(Succeed())
	g.Expect(dir).NotTo(BeADirectory(), "delete removes the Chrome profile")
	g.Expect(s.UserDataDir("alice", "../../etc")).To(BeEmpty())
}

func TestKubeProfiles(t *testing.T) {
	env, c, reason, err := controlplane.Connect()
	if err != nil {
		t.Fatal(err)
	}
	if reason != "" {
		t.Skip(reason)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ns := fmt.Sprintf("tenant-%d", os.Getpid())
	NewWithT(t).Expect(c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

	s := &KubeProfiles{Client: c, Namespace: ns}
	testProfileStore(t, s, "s3")

	// The resources are labelled as agent-made, with the agent, so GitOps
	// and kubectl see what agents created.
	g := NewWithT(t)
	var list picobotv1alpha1.BrowserProfileList
	g.Expect(c.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(3))
	for _, bp := range list.Items {
		g.Expect(bp.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgentMade, "true"))
		g.Expect(bp.Labels).To(HaveKey(picobotv1alpha1.LabelAgent))
	}
	// A profile made with persistence in GitOps reports its storage.
	pvc := &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Name: "bp-gitops0001", Namespace: ns,
		Labels: map[string]string{picobotv1alpha1.LabelAgent: "carol"}},
		Spec: picobotv1alpha1.BrowserProfileSpec{Label: "Shared", Persistence: &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StoragePVC}}}
	g.Expect(c.Create(context.Background(), pvc)).To(Succeed())
	got, err := s.Get(context.Background(), "carol", "bp-gitops0001")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Storage).To(Equal("pvc"))
	g.Expect(s.UserDataDir("carol", got.ID)).To(BeEmpty(), "browser pods hold the data in cluster mode")
}
