package session

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestTitleTextLeavesTheFilesOut(t *testing.T) {
	g := NewWithT(t)
	g.Expect(titleText("what is this?\n\n![cat.png](/api/v1/artifacts/a1) (in the workspace: uploads/cat.png)")).To(Equal("what is this?"))
	g.Expect(titleText("![cat.png](/api/v1/artifacts/a1) (in the workspace: uploads/cat.png)\n[n.md](/api/v1/artifacts/a2) (in the workspace: uploads/n.md)")).
		To(Equal("cat.png, n.md"))
	g.Expect(titleText("see [the docs](https://example.com)")).To(Equal("see [the docs](https://example.com)"))
	g.Expect(titleText("a\n[x](https://example.com)")).To(Equal("a\n[x](https://example.com)"), "a link the user typed after their text stays")
}

func TestSaveUploadKeepsEveryFile(t *testing.T) {
	g := NewWithT(t)
	ws := t.TempDir()
	for _, c := range []struct{ name, data, want string }{
		{"notes.md", "one", "uploads/notes.md"},
		{"notes.md", "one", "uploads/notes.md"}, // the same message delivered again
		{"notes.md", "two", "uploads/notes-2.md"},
		{"notes.md", "three", "uploads/notes-3.md"},
	} {
		rel, err := saveUpload(ws, c.name, []byte(c.data))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rel).To(Equal(c.want))
		data, _ := os.ReadFile(filepath.Join(ws, rel))
		g.Expect(string(data)).To(Equal(c.data))
	}
	_, err := saveUpload("", "a.txt", []byte("x"))
	g.Expect(err).To(MatchError("this runtime has no workspace"))
	g.Expect(cleanUploadName("../../etc/pass[wd]")).To(Equal("pass_wd_"))
	g.Expect(cleanUploadName("..")).To(Equal("file"))
}
