package artifact

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

func TestSaveOpenAndTenantIsolation(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	blobs, err := localblob.Open(filepath.Join(dir, "blobs"), localblob.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = blobs.Close() }()
	s := Store{Blobs: blobs, State: st}
	a := store.WithTenant(context.Background(), "team-a")
	b := store.WithTenant(context.Background(), "team-b")

	art, err := s.Save(a, "web:u:default", "../../etc/report.md", "text/markdown", []byte("# hi"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(art.Name).To(Equal("report.md"), "a name cannot carry a path")
	g.Expect(art.BlobKey).To(HavePrefix("tenants/team-a/artifacts/"))
	g.Expect(art.Size).To(Equal(int64(4)))

	rc, got, err := s.Open(a, art.ID)
	g.Expect(err).NotTo(HaveOccurred())
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	g.Expect(string(data)).To(Equal("# hi"))
	g.Expect(got.MediaType).To(Equal("text/markdown"))

	_, _, err = s.Open(b, art.ID)
	g.Expect(errors.Is(err, store.ErrNotFound)).To(BeTrue(), "another tenant cannot open it: %v", err)
	_, err = s.Save(context.Background(), "x", "a.txt", "text/plain", []byte("x"))
	g.Expect(errors.Is(err, store.ErrNoTenant)).To(BeTrue())
	_, err = s.Save(a, "x", strings.Repeat("n", 300), "text/plain", []byte("x"))
	g.Expect(err).To(HaveOccurred(), "over-long names are refused by the blob key rules")
}
