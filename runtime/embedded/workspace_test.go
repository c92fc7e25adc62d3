package embedded

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/session"
)

// Chats whose ids read alike work in folders of their own, and a folder of
// the earlier naming (which they shared) moves to the first session that
// works after the upgrade, files included.
func TestWorkspacesAreNeverSharedAndSurviveTheRenaming(t *testing.T) {
	g := NewWithT(t)
	state := t.TempDir()
	ws := workspaceFunc(state, "team-a", "helper")
	alice := session.ID{Channel: "web", ChatID: "helper/alice smith", DialogID: "default"}
	other := session.ID{Channel: "web", ChatID: "helper/alice_smith", DialogID: "default"}

	legacy := filepath.Join(state, "workspaces", "team-a", "helper", "web_helper_alice_smith_default")
	g.Expect(os.MkdirAll(legacy, 0o700)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(legacy, "notes.txt"), []byte("kept"), 0o600)).To(Succeed())

	a := ws(alice)
	b := ws(other)
	g.Expect(a).NotTo(Equal(b))
	g.Expect(filepath.Join(a, "notes.txt")).To(BeARegularFile(), "the old folder moved to the new name")
	g.Expect(legacy).NotTo(BeADirectory())
	entries, err := os.ReadDir(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty(), "the other chat does not see the first one's files")
	g.Expect(ws(alice)).To(Equal(a))
}
