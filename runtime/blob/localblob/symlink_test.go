package localblob_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/localblob"
)

// symlinkFixture is a store with a folder outside it that holds what an
// attacker would like to read ("secret") or overwrite.
type symlinkFixture struct {
	root, outside string
	s             *localblob.Store
}

func newSymlinkFixture(t *testing.T) symlinkFixture {
	t.Helper()
	g := NewWithT(t)
	base := t.TempDir()
	f := symlinkFixture{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	g.Expect(os.MkdirAll(f.outside, 0o750)).To(Succeed())
	// Shaped like the store's own files, so a followed link would "work".
	g.Expect(os.WriteFile(filepath.Join(f.outside, "secret~blob"), []byte("outside secret"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(f.outside, "secret.txt"), []byte("outside secret"), 0o600)).To(Succeed())
	f.s = open(t, f.root, localblob.Options{})
	putString(t, f.s, "tenants/b/notes.txt", "b's notes", blob.PutOptions{})
	putString(t, f.s, "tenants/acme/real", "real", blob.PutOptions{})
	return f
}

func (f symlinkFixture) link(t *testing.T, target, name string) {
	t.Helper()
	p := filepath.Join(f.root, "objects", name)
	NewWithT(t).Expect(os.MkdirAll(filepath.Dir(p), 0o750)).To(Succeed())
	NewWithT(t).Expect(os.Symlink(target, p)).To(Succeed())
}

// expectOutsideUntouched checks that nothing outside the root was read into a
// result or written.
func (f symlinkFixture) expectOutsideUntouched(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	entries, err := os.ReadDir(f.outside)
	g.Expect(err).NotTo(HaveOccurred())
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	g.Expect(names).To(ConsistOf("secret~blob", "secret.txt"))
	data, err := os.ReadFile(filepath.Join(f.outside, "secret.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("outside secret"))
}

// expectNoRead checks that Get and Head of key fail without returning content.
func (f symlinkFixture) expectNoRead(t *testing.T, key string) {
	t.Helper()
	g := NewWithT(t)
	rc, _, err := f.s.Get(context.Background(), key)
	if err == nil {
		data, _ := io.ReadAll(rc)
		_ = rc.Close()
		t.Fatalf("get %q through a symbolic link returned %q", key, data)
	}
	_, err = f.s.Head(context.Background(), key)
	g.Expect(err).To(HaveOccurred(), "head %q", key)
}

func TestSymlinks(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, f symlinkFixture)
	}{
		{"folder linked outside (absolute)", func(t *testing.T, f symlinkFixture) {
			f.link(t, f.outside, "tenants/evil")
			f.expectNoRead(t, "tenants/evil/secret")
			_, err := f.s.Put(context.Background(), "tenants/evil/planted", strings.NewReader("x"), 1, blob.PutOptions{})
			NewWithT(t).Expect(err).To(HaveOccurred())
			_, err = f.s.List(context.Background(), "tenants/evil/", 0)
			NewWithT(t).Expect(err).To(HaveOccurred())
			NewWithT(t).Expect(keys(t, f.s, "tenants/")).To(Equal([]string{"tenants/acme/real", "tenants/b/notes.txt"}))
		}},
		{"folder linked outside (relative)", func(t *testing.T, f symlinkFixture) {
			f.link(t, "../../../outside", "tenants/up")
			f.expectNoRead(t, "tenants/up/secret")
			_, err := f.s.Put(context.Background(), "tenants/up/planted", strings.NewReader("x"), 1, blob.PutOptions{})
			NewWithT(t).Expect(err).To(HaveOccurred())
		}},
		{"tenant folder linked to another tenant", func(t *testing.T, f symlinkFixture) {
			f.link(t, "b", "tenants/a")
			f.expectNoRead(t, "tenants/a/notes.txt")
			_, err := f.s.List(context.Background(), "tenants/a/", 0)
			NewWithT(t).Expect(err).To(HaveOccurred(), "listing a must not show b's objects")
			_, err = f.s.Put(context.Background(), "tenants/a/notes.txt", strings.NewReader("x"), 1, blob.PutOptions{})
			NewWithT(t).Expect(err).To(HaveOccurred(), "writing a must not overwrite b's objects")
			rc, _, err := f.s.Get(context.Background(), "tenants/b/notes.txt")
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			data, _ := io.ReadAll(rc)
			_ = rc.Close()
			NewWithT(t).Expect(string(data)).To(Equal("b's notes"))
		}},
		{"content file linked outside", func(t *testing.T, f symlinkFixture) {
			f.link(t, filepath.Join(f.outside, "secret.txt"), "tenants/acme/passwd~blob")
			f.expectNoRead(t, "tenants/acme/passwd")
			NewWithT(t).Expect(keys(t, f.s, "tenants/acme/")).To(Equal([]string{"tenants/acme/real"}))
			// Overwriting replaces the link itself, never its target.
			putString(t, f.s, "tenants/acme/passwd", "mine", blob.PutOptions{})
			info, err := os.Lstat(filepath.Join(f.root, "objects/tenants/acme/passwd~blob"))
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			NewWithT(t).Expect(info.Mode().IsRegular()).To(BeTrue())
			NewWithT(t).Expect(f.s.Delete(context.Background(), "tenants/acme/passwd")).To(Succeed())
		}},
		{"content file linked to another tenant's", func(t *testing.T, f symlinkFixture) {
			f.link(t, "../b/notes.txt~blob", "tenants/acme/stolen~blob")
			f.expectNoRead(t, "tenants/acme/stolen")
		}},
		{"sidecar linked outside", func(t *testing.T, f symlinkFixture) {
			forged := filepath.Join(f.outside, "forged.json")
			NewWithT(t).Expect(os.WriteFile(forged, []byte(`{"version":1,"contentType":"text/html","metadata":{"forged":"yes"}}`), 0o600)).To(Succeed())
			NewWithT(t).Expect(os.Remove(filepath.Join(f.root, "objects/tenants/acme/real~meta.json"))).To(Succeed())
			f.link(t, forged, "tenants/acme/real~meta.json")
			obj, err := f.s.Head(context.Background(), "tenants/acme/real")
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			NewWithT(t).Expect(obj.Metadata).To(BeNil())
			NewWithT(t).Expect(obj.ContentType).To(Equal(blob.DefaultContentType))
			NewWithT(t).Expect(os.Remove(forged)).To(Succeed())
		}},
		{"deleting through a linked folder", func(t *testing.T, f symlinkFixture) {
			f.link(t, f.outside, "tenants/evil")
			err := f.s.Delete(context.Background(), "tenants/evil/secret")
			NewWithT(t).Expect(err).To(HaveOccurred())
			NewWithT(t).Expect(errors.Is(err, blob.ErrNotFound)).To(BeFalse())
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSymlinkFixture(t)
			tc.run(t, f)
			f.expectOutsideUntouched(t)
		})
	}
}

func TestOpenRefusesLinkedInternalFolders(t *testing.T) {
	for _, sub := range []string{"objects", "tmp"} {
		t.Run(sub, func(t *testing.T) {
			g := NewWithT(t)
			base := t.TempDir()
			root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
			g.Expect(os.MkdirAll(root, 0o750)).To(Succeed())
			g.Expect(os.MkdirAll(outside, 0o750)).To(Succeed())
			g.Expect(os.Symlink(outside, filepath.Join(root, sub))).To(Succeed())
			_, err := localblob.Open(root, localblob.Options{})
			g.Expect(err).To(MatchError(ContainSubstring("symbolic link")))
		})
	}
}

func TestRootMayBeALink(t *testing.T) {
	g := NewWithT(t)
	base := t.TempDir()
	realDir := filepath.Join(base, "real")
	g.Expect(os.MkdirAll(realDir, 0o750)).To(Succeed())
	g.Expect(os.Symlink(realDir, filepath.Join(base, "link"))).To(Succeed())
	s := open(t, filepath.Join(base, "link"), localblob.Options{})
	putString(t, s, "tenants/acme/x", "x", blob.PutOptions{})
	g.Expect(filepath.Join(realDir, "objects/tenants/acme/x~blob")).To(BeARegularFile())
}

func keys(t *testing.T, s *localblob.Store, prefix string) []string {
	t.Helper()
	objs, err := s.List(context.Background(), prefix, 0)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}
