package localblob_test

import (
	"context"
	"crypto/md5" //nolint:gosec // checks the ETag, which is an MD5
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/blobtest"
	"github.com/picobot/picobot/runtime/blob/localblob"
)

// TestMain checks that the conformance suite's concurrent tests leave no
// goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, dir string, opts localblob.Options) *localblob.Store {
	t.Helper()
	s, err := localblob.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		return open(t, t.TempDir(), localblob.Options{})
	})
}

func BenchmarkPutGet64KiB(b *testing.B) {
	blobtest.BenchPutGet(b, open(b, b.TempDir(), localblob.Options{}), 64<<10)
}

func putString(t *testing.T, s *localblob.Store, key, content string, opts blob.PutOptions) blob.Object {
	t.Helper()
	obj, err := s.Put(context.Background(), key, strings.NewReader(content), int64(len(content)), opts)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return obj
}

func TestLayoutIsReadable(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s := open(t, dir, localblob.Options{})
	putString(t, s, "tenants/acme/docs/report.pdf", "pdf", blob.PutOptions{ContentType: "application/pdf", Metadata: map[string]string{"a": "b"}})
	putString(t, s, "tenants/acme/docs", "a key that is also a folder", blob.PutOptions{})
	putString(t, s, "tenants/acme/x~y", "tilde", blob.PutOptions{})

	data, err := os.ReadFile(filepath.Join(dir, "objects/tenants/acme/docs/report.pdf~blob"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("pdf"))
	var sc map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, "objects/tenants/acme/docs/report.pdf~meta.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(raw, &sc)).To(Succeed())
	g.Expect(sc).To(HaveKeyWithValue("contentType", "application/pdf"))
	g.Expect(sc).To(HaveKeyWithValue("metadata", map[string]any{"a": "b"}))
	g.Expect(filepath.Join(dir, "objects/tenants/acme/docs~blob")).To(BeARegularFile())
	g.Expect(filepath.Join(dir, "objects/tenants/acme/x~~y~blob")).To(BeARegularFile())
	entries, err := os.ReadDir(filepath.Join(dir, "tmp"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty(), "no temporary file is left behind")
}

func TestSegmentTooLongOnceEscaped(t *testing.T) {
	g := NewWithT(t)
	s := open(t, t.TempDir(), localblob.Options{})
	key := "tenants/acme/" + strings.Repeat("~", blob.MaxSegmentLength)
	g.Expect(blob.ValidateKey(key)).To(Succeed())
	_, err := s.Put(context.Background(), key, strings.NewReader("x"), 1, blob.PutOptions{})
	g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(BeTrue(), "put: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("too long for a file name"))
}

func TestMaxObjectSize(t *testing.T) {
	s := open(t, t.TempDir(), localblob.Options{MaxObjectSize: 10})
	tests := []struct {
		name    string
		content string
		size    int64
		wantErr error
	}{
		{"at the limit", "0123456789", 10, nil},
		{"declared over the limit", "0123456789a", 11, blob.ErrTooLarge},
		{"stream over the limit", "0123456789a", -1, blob.ErrTooLarge},
		{"stream at the limit", "0123456789", -1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := s.Put(context.Background(), "tenants/acme/sized", struct{ *strings.Reader }{strings.NewReader(tc.content)}, tc.size, blob.PutOptions{})
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(errors.Is(err, tc.wantErr)).To(BeTrue(), "put: %v", err)
		})
	}
}

func TestReopenKeepsObjects(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s, err := localblob.Open(dir, localblob.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	want := putString(t, s, "tenants/acme/kept", "still here", blob.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"k": "v"}})
	g.Expect(s.Close()).To(Succeed())

	s = open(t, dir, localblob.Options{})
	got, err := s.Head(context.Background(), "tenants/acme/kept")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want))
}

func TestOpenRemovesStaleTemporaryFiles(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(open(t, dir, localblob.Options{}).Close()).To(Succeed())
	old, fresh := filepath.Join(dir, "tmp", "old"), filepath.Join(dir, "tmp", "fresh")
	g.Expect(os.WriteFile(old, []byte("crashed put"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(fresh, []byte("put in progress"), 0o600)).To(Succeed())
	twoHoursAgo := time.Now().Add(-2 * time.Hour)
	g.Expect(os.Chtimes(old, twoHoursAgo, twoHoursAgo)).To(Succeed())

	open(t, dir, localblob.Options{})
	g.Expect(old).NotTo(BeAnExistingFile())
	g.Expect(fresh).To(BeAnExistingFile())
}

// TestStaleSidecarIsIgnored simulates a crash between the two renames of an
// overwrite: new content beside the old sidecar.
func TestStaleSidecarIsIgnored(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s := open(t, dir, localblob.Options{})
	putString(t, s, "tenants/acme/doc", "old content", blob.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"v": "1"}})
	content := filepath.Join(dir, "objects/tenants/acme/doc~blob")
	tmp := filepath.Join(dir, "tmp", "replacement")
	g.Expect(os.WriteFile(tmp, []byte("new content!"), 0o600)).To(Succeed())
	g.Expect(os.Rename(tmp, content)).To(Succeed())

	obj, err := s.Head(context.Background(), "tenants/acme/doc")
	g.Expect(err).NotTo(HaveOccurred())
	sum := md5.Sum([]byte("new content!")) //nolint:gosec // see import
	g.Expect(obj.ETag).To(Equal(hex.EncodeToString(sum[:])))
	g.Expect(obj.Size).To(Equal(int64(len("new content!"))))
	g.Expect(obj.ContentType).To(Equal(blob.DefaultContentType))
	g.Expect(obj.Metadata).To(BeNil(), "metadata of the old content must not be served")

	rc, got, err := s.Get(context.Background(), "tenants/acme/doc")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = rc.Close() }()
	data := make([]byte, 64)
	n, _ := rc.Read(data)
	g.Expect(string(data[:n])).To(Equal("new content!"), "content is rewound after hashing")
	g.Expect(got).To(Equal(obj))
}

func TestDeletePrunesEmptyFolders(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s := open(t, dir, localblob.Options{})
	ctx := context.Background()
	putString(t, s, "tenants/acme/a/b/c/deep", "x", blob.PutOptions{})
	putString(t, s, "tenants/acme/a/sibling", "y", blob.PutOptions{})
	g.Expect(s.Delete(ctx, "tenants/acme/a/b/c/deep")).To(Succeed())
	g.Expect(filepath.Join(dir, "objects/tenants/acme/a/b")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(dir, "objects/tenants/acme/a")).To(BeADirectory(), "a folder that still holds an object stays")
	g.Expect(s.Delete(ctx, "tenants/acme/a/sibling")).To(Succeed())
	g.Expect(filepath.Join(dir, "objects/tenants")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(dir, "objects")).To(BeADirectory())
}

func TestListIgnoresForeignFiles(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s := open(t, dir, localblob.Options{})
	putString(t, s, "tenants/acme/real", "x", blob.PutOptions{})
	acme := filepath.Join(dir, "objects/tenants/acme")
	for name, content := range map[string]string{
		"readme.txt":          "not written by the store",
		"orphan~meta.json":    `{"version":1}`,
		"unknown~marker":      "x",
		`back\slash~blob`:     "a key the store refuses",
		"ctrl\x01char~blob":   "a key the store refuses",
		"notes.txt~blob.orig": "x",
	} {
		g.Expect(os.WriteFile(filepath.Join(acme, name), []byte(content), 0o600)).To(Succeed())
	}
	g.Expect(os.Mkdir(filepath.Join(acme, "junk~dir"), 0o750)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(acme, "junk~dir", "hidden~blob"), []byte("x"), 0o600)).To(Succeed())

	objs, err := s.List(context.Background(), "", 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(1))
	g.Expect(objs[0].Key).To(Equal("tenants/acme/real"))
}

func TestOpenRejectsBadFolders(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	NewWithT(t).Expect(os.WriteFile(file, nil, 0o600)).To(Succeed())
	tests := map[string]string{
		"no folder":     "",
		"a file":        file,
		"below a file":  filepath.Join(file, "sub"),
		"nul in a name": "bad\x00name",
	}
	for name, dir := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := localblob.Open(dir, localblob.Options{})
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring("failed to")))
		})
	}
}
