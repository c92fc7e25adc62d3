package patch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/tool"
)

// failingFS fails the n-th call of one operation, to drive commit into its
// rollback path (permissions cannot, since tests may run as root).
type failingFS struct {
	fileSystem
	op    string // "rename" or "remove"
	n     int
	calls int
}

var errInjected = errors.New("injected failure")

func (f *failingFS) hit(op string) bool {
	if op != f.op {
		return false
	}
	f.calls++
	return f.calls == f.n
}

func (f *failingFS) Rename(oldname, newname string) error {
	if f.hit("rename") {
		return errInjected
	}
	return f.fileSystem.Rename(oldname, newname)
}

func (f *failingFS) Remove(name string) error {
	// Only removals of real files count, not of temporary files or folders.
	if !strings.Contains(filepath.Base(name), ".patch-") && strings.HasSuffix(name, ".txt") && f.hit("remove") {
		return errInjected
	}
	return f.fileSystem.Remove(name)
}

func TestCommitRollsBack(t *testing.T) {
	const patchText = `*** Begin Patch
*** Update File: a.txt
@@
-a
+A
*** Add File: new/dir/b.txt
+b
*** Update File: m.txt
*** Move to: moved.txt
@@
-m
+M
*** Delete File: c.txt
*** End Patch`
	for _, tc := range []struct{ op string }{
		{"rename"}, // first rename works, second fails
		{"remove"}, // every write done, the first deletion fails
	} {
		t.Run(tc.op, func(t *testing.T) {
			g := NewWithT(t)
			ws := t.TempDir()
			orig := map[string]string{"a.txt": "a\n", "c.txt": "c\n", "m.txt": "m\n"}
			for p, c := range orig {
				g.Expect(os.WriteFile(filepath.Join(ws, p), []byte(c), 0o644)).To(Succeed())
			}
			ops, err := parse(patchText)
			g.Expect(err).NotTo(HaveOccurred())
			fsys := &failingFS{fileSystem: hostFS{}, op: tc.op, n: 2}
			if tc.op == "remove" {
				fsys.n = 1
			}
			p := &planner{env: tool.Env{Workspace: ws}, fsys: fsys, workspaceOnly: true, files: map[string]*fileState{}}
			for _, op := range ops {
				g.Expect(p.apply(op)).To(Succeed())
			}
			err = p.commit()
			g.Expect(err).To(MatchError(ContainSubstring("no file was changed")))
			g.Expect(errors.Is(err, errInjected)).To(BeTrue())

			var found []string
			g.Expect(filepath.WalkDir(ws, func(path string, d os.DirEntry, err error) error {
				if err == nil && path != ws {
					rel, _ := filepath.Rel(ws, path)
					found = append(found, rel)
				}
				return err
			})).To(Succeed())
			g.Expect(found).To(ConsistOf("a.txt", "c.txt", "m.txt"), "new files, folders and temporary files are removed")
			for p, c := range orig {
				data, err := os.ReadFile(filepath.Join(ws, p))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(data)).To(Equal(c), p)
			}
		})
	}
}

func TestSeekPrefersStricterMatches(t *testing.T) {
	g := NewWithT(t)
	lines := []string{"  x", "x ", "x"}
	g.Expect(seek(lines, []string{"x"}, 0, false)).To(Equal(2))
	g.Expect(seek([]string{"  x", "x "}, []string{"x"}, 0, false)).To(Equal(1))
	g.Expect(seek([]string{"  x", "y"}, []string{"x"}, 0, false)).To(Equal(0))
	g.Expect(seek([]string{"x", "x"}, []string{"x"}, 0, true)).To(Equal(1))
	g.Expect(seek([]string{"x"}, []string{"x", "y"}, 0, false)).To(Equal(-1))
	g.Expect(seek([]string{"x", "y"}, []string{"x"}, 1, false)).To(Equal(-1))
}

// BenchmarkApplyHunks measures matching and splicing alone (no disk): ten
// hunks, each anchored, against a 2,000-line file.
func BenchmarkApplyHunks(b *testing.B) {
	var src strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&src, "line %d: some ordinary content\n", i)
	}
	text := []string{"*** Begin Patch", "*** Update File: f.txt"}
	for k := range 10 {
		i := 100 + k*190
		text = append(text, fmt.Sprintf("@@ line %d: some ordinary content", i-3),
			fmt.Sprintf(" line %d: some ordinary content", i-2),
			fmt.Sprintf(" line %d: some ordinary content", i-1),
			fmt.Sprintf("-line %d: some ordinary content", i),
			fmt.Sprintf("+line %d: changed", i))
	}
	text = append(text, "*** End Patch")
	input, content := strings.Join(text, "\n"), src.String()
	for b.Loop() {
		ops, err := parse(input)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := applyHunks(content, ops[0].hunks); err != nil {
			b.Fatal(err)
		}
	}
}
