// Package blobtest is the conformance suite every blob.Store implementation
// passes, so the local folder of embedded mode and the S3 bucket of cluster mode
// cannot drift apart. An implementation's test calls Run with a factory.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/blob"
)

// Option adapts the suite to a known defect of a test server. Each names the
// server and the defect; none relaxes what a production backend must do, so
// pass them only when the store under test talks to that server.
type Option func(*options)

type options struct {
	metadataMerged bool
}

// MetadataMergedOnOverwrite declares a server that keeps user metadata keys of
// the old object that an overwrite does not set. gofakes3 (v1.2.0) merges on every
// PutObject (johannesboyne/gofakes3#67); S3 replaces all user metadata, as do
// SeaweedFS and Ceph. The Overwrite test then checks only that the new keys
// and values win.
func MetadataMergedOnOverwrite() Option {
	return func(o *options) { o.metadataMerged = true }
}

// Run runs the suite. newStore returns an empty store of the test's own (a
// fresh folder, a fresh bucket) and registers its own clean-up with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		run  func(t *testing.T, s blob.Store)
	}{
		{"PutGetHeadRoundTrip", testRoundTrip},
		{"DefaultContentType", testDefaultContentType},
		{"ReturnedMetadataIsACopy", testReturnedMetadataIsACopy},
		{"BinaryData", testBinaryData},
		{"EmptyObject", testEmptyObject},
		{"Overwrite", func(t *testing.T, s blob.Store) { testOverwrite(t, s, o) }},
		{"Delete", testDelete},
		{"DeleteMissingKey", testDeleteMissingKey},
		{"NotFound", testNotFound},
		{"KeyAndFolderCoexist", testKeyAndFolderCoexist},
		{"ListSortedWithPrefixAndLimit", testList},
		{"ListAttributes", testListAttributes},
		{"SpecialCharactersInKeys", testSpecialKeys},
		{"InvalidKeysRejected", testInvalidKeys},
		{"InvalidOptionsRejected", testInvalidOptions},
		{"SizeMismatchStoresNothing", testSizeMismatch},
		{"UnknownSize", testUnknownSize},
		{"FailingReaderStoresNothing", testFailingReader},
		{"CanceledContext", testCanceledContext},
		{"TenantIsolation", testTenantIsolation},
		{"ConcurrentPutsOfDifferentKeys", testConcurrentPuts},
		{"ConcurrentOverwritesAreAtomic", testConcurrentOverwrites},
		{"LargeObject5MiB", testLargeObject},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newStore(t))
		})
	}
}

// BenchPutGet measures one Put and one Get of a size-byte object per
// iteration; each implementation's benchmark calls it.
func BenchPutGet(b *testing.B, s blob.Store, size int) {
	ctx := context.Background()
	data := randomBytes(size, 1)
	key := "tenants/bench/object.bin"
	b.SetBytes(int64(size))
	for b.Loop() {
		if _, err := s.Put(ctx, key, bytes.NewReader(data), int64(size), blob.PutOptions{}); err != nil {
			b.Fatal(err)
		}
		rc, _, err := s.Get(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		_ = rc.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
}

func put(t *testing.T, s blob.Store, key string, content []byte, opts blob.PutOptions) blob.Object {
	t.Helper()
	obj, err := s.Put(context.Background(), key, bytes.NewReader(content), int64(len(content)), opts)
	gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred(), "put %q", key)
	return obj
}

func get(t *testing.T, s blob.Store, key string) ([]byte, blob.Object) {
	t.Helper()
	g := gomega.NewWithT(t)
	rc, obj, err := s.Get(context.Background(), key)
	g.Expect(err).NotTo(gomega.HaveOccurred(), "get %q", key)
	defer func() { g.Expect(rc.Close()).To(gomega.Succeed()) }()
	data, err := io.ReadAll(rc)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return data, obj
}

func list(t *testing.T, s blob.Store, prefix string, limit int) []string {
	t.Helper()
	objs, err := s.List(context.Background(), prefix, limit)
	gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred(), "list %q", prefix)
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

func expectAbsent(t *testing.T, s blob.Store, key string) {
	t.Helper()
	_, err := s.Head(context.Background(), key)
	gomega.NewWithT(t).Expect(errors.Is(err, blob.ErrNotFound)).To(gomega.BeTrue(), "head %q: want ErrNotFound, got %v", key, err)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// recent accepts a modification time from a server clock on this machine.
func recent() gomega.OmegaMatcher {
	return gomega.BeTemporally("~", time.Now(), 10*time.Minute)
}

func testRoundTrip(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	key, err := blob.TenantKey("acme", "sessions", "web:42:1", "report.txt")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	content := []byte("hello, artifacts\n")
	opts := blob.PutOptions{
		ContentType: "text/plain; charset=utf-8",
		Metadata:    map[string]string{"Session-Id": "web:42:1", "origin": "upload"},
	}
	wantMeta := map[string]string{"session-id": "web:42:1", "origin": "upload"}

	putObj := put(t, s, key, content, opts)
	g.Expect(putObj.Key).To(gomega.Equal(key))
	g.Expect(putObj.Size).To(gomega.Equal(int64(len(content))))
	g.Expect(putObj.ContentType).To(gomega.Equal(opts.ContentType))
	g.Expect(putObj.Metadata).To(gomega.Equal(wantMeta))
	g.Expect(putObj.ETag).NotTo(gomega.BeEmpty())
	g.Expect(putObj.ETag).NotTo(gomega.ContainSubstring(`"`))
	g.Expect(putObj.ModTime).To(recent())

	head, err := s.Head(context.Background(), key)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	data, getObj := get(t, s, key)
	g.Expect(data).To(gomega.Equal(content))
	for _, obj := range []blob.Object{head, getObj} {
		g.Expect(obj.Key).To(gomega.Equal(key))
		g.Expect(obj.Size).To(gomega.Equal(putObj.Size))
		g.Expect(obj.ContentType).To(gomega.Equal(putObj.ContentType))
		g.Expect(obj.Metadata).To(gomega.Equal(wantMeta))
		g.Expect(obj.ETag).To(gomega.Equal(putObj.ETag))
		// S3 reports whole seconds; the Put's time comes from the same server.
		g.Expect(obj.ModTime).To(gomega.BeTemporally("~", putObj.ModTime, 2*time.Second))
	}
	g.Expect(getObj).To(gomega.Equal(head))
}

func testDefaultContentType(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	obj := put(t, s, "tenants/acme/untyped", []byte("x"), blob.PutOptions{})
	g.Expect(obj.ContentType).To(gomega.Equal(blob.DefaultContentType))
	head, err := s.Head(context.Background(), "tenants/acme/untyped")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(head.ContentType).To(gomega.Equal(blob.DefaultContentType))
	g.Expect(head.Metadata).To(gomega.BeEmpty())
}

func testReturnedMetadataIsACopy(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	meta := map[string]string{"k": "v"}
	obj := put(t, s, "tenants/acme/m", []byte("x"), blob.PutOptions{Metadata: meta})
	meta["k"] = "changed by caller"
	obj.Metadata["k"] = "changed too"
	head, err := s.Head(context.Background(), "tenants/acme/m")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(head.Metadata).To(gomega.Equal(map[string]string{"k": "v"}))
}

func testBinaryData(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	content := make([]byte, 0, 256*4+64<<10)
	for range 4 {
		for b := range 256 {
			content = append(content, byte(b))
		}
	}
	content = append(content, randomBytes(64<<10, 2)...)
	put(t, s, "tenants/acme/binary.bin", content, blob.PutOptions{ContentType: "application/octet-stream"})
	data, obj := get(t, s, "tenants/acme/binary.bin")
	g.Expect(bytes.Equal(data, content)).To(gomega.BeTrue(), "binary content differs")
	g.Expect(obj.Size).To(gomega.Equal(int64(len(content))))
}

func testEmptyObject(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	obj := put(t, s, "tenants/acme/empty", nil, blob.PutOptions{ContentType: "text/plain"})
	g.Expect(obj.Size).To(gomega.BeZero())
	data, got := get(t, s, "tenants/acme/empty")
	g.Expect(data).To(gomega.BeEmpty())
	g.Expect(got.Size).To(gomega.BeZero())
	g.Expect(got.ContentType).To(gomega.Equal("text/plain"))
	objs, err := s.List(context.Background(), "tenants/acme/", 0)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(objs).To(gomega.HaveLen(1))
	g.Expect(objs[0].Size).To(gomega.BeZero())
}

func testOverwrite(t *testing.T, s blob.Store, o options) {
	g := gomega.NewWithT(t)
	key := "tenants/acme/doc.json"
	v1 := put(t, s, key, []byte("version one, longer"), blob.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"a": "1"}})
	v2 := put(t, s, key, []byte(`{"v":2}`), blob.PutOptions{ContentType: "application/json", Metadata: map[string]string{"b": "2"}})
	g.Expect(v2.ETag).NotTo(gomega.Equal(v1.ETag))
	data, obj := get(t, s, key)
	g.Expect(string(data)).To(gomega.Equal(`{"v":2}`))
	g.Expect(obj.ContentType).To(gomega.Equal("application/json"))
	if o.metadataMerged {
		g.Expect(obj.Metadata).To(gomega.HaveKeyWithValue("b", "2"))
	} else {
		g.Expect(obj.Metadata).To(gomega.Equal(map[string]string{"b": "2"}), "old metadata must not survive")
	}
	g.Expect(obj.ETag).To(gomega.Equal(v2.ETag))
	objs, err := s.List(context.Background(), "tenants/acme/", 0)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(objs).To(gomega.HaveLen(1))
	g.Expect(objs[0].Size).To(gomega.Equal(int64(7)))
	g.Expect(objs[0].ETag).To(gomega.Equal(v2.ETag))
}

func testDelete(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	put(t, s, "tenants/acme/a/b/gone", []byte("x"), blob.PutOptions{})
	put(t, s, "tenants/acme/kept", []byte("y"), blob.PutOptions{})
	g.Expect(s.Delete(ctx, "tenants/acme/a/b/gone")).To(gomega.Succeed())
	expectAbsent(t, s, "tenants/acme/a/b/gone")
	_, _, err := s.Get(ctx, "tenants/acme/a/b/gone")
	g.Expect(errors.Is(err, blob.ErrNotFound)).To(gomega.BeTrue(), "get after delete: %v", err)
	g.Expect(list(t, s, "tenants/acme/", 0)).To(gomega.Equal([]string{"tenants/acme/kept"}))
	g.Expect(s.Delete(ctx, "tenants/acme/a/b/gone")).To(gomega.Succeed(), "deleting twice")
	// The key can be used again after its folders were cleaned up.
	put(t, s, "tenants/acme/a/b/gone", []byte("back"), blob.PutOptions{})
	data, _ := get(t, s, "tenants/acme/a/b/gone")
	g.Expect(string(data)).To(gomega.Equal("back"))
}

func testDeleteMissingKey(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	g.Expect(s.Delete(ctx, "tenants/acme/never-existed")).To(gomega.Succeed())
	g.Expect(s.Delete(ctx, "tenants/nobody/deep/folder/never-existed")).To(gomega.Succeed())
	put(t, s, "tenants/acme/dir/file", []byte("x"), blob.PutOptions{})
	// A "folder" of another key is not an object: deleting it deletes nothing.
	g.Expect(s.Delete(ctx, "tenants/acme/dir")).To(gomega.Succeed())
	g.Expect(list(t, s, "", 0)).To(gomega.Equal([]string{"tenants/acme/dir/file"}))
}

func testNotFound(t *testing.T, s blob.Store) {
	ctx := context.Background()
	put(t, s, "tenants/acme/a/b/c", []byte("x"), blob.PutOptions{})
	for _, key := range []string{
		"tenants/acme/missing",
		"tenants/acme/a/b",     // a folder of an existing key
		"tenants/acme/a/b/c/d", // below an existing key
		"tenants/other/a/b/c",  // the same path in another tenant
	} {
		t.Run(key, func(t *testing.T) {
			g := gomega.NewWithT(t)
			_, err := s.Head(ctx, key)
			g.Expect(errors.Is(err, blob.ErrNotFound)).To(gomega.BeTrue(), "head: %v", err)
			rc, _, err := s.Get(ctx, key)
			g.Expect(errors.Is(err, blob.ErrNotFound)).To(gomega.BeTrue(), "get: %v", err)
			g.Expect(rc).To(gomega.BeNil())
		})
	}
}

func testKeyAndFolderCoexist(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	// S3 allows an object "x/a" beside objects under "x/a/"; so must every
	// implementation.
	put(t, s, "tenants/acme/x/a", []byte("leaf"), blob.PutOptions{})
	put(t, s, "tenants/acme/x/a/b", []byte("child"), blob.PutOptions{})
	leaf, _ := get(t, s, "tenants/acme/x/a")
	child, _ := get(t, s, "tenants/acme/x/a/b")
	g.Expect(string(leaf)).To(gomega.Equal("leaf"))
	g.Expect(string(child)).To(gomega.Equal("child"))
	g.Expect(list(t, s, "tenants/acme/x/", 0)).To(gomega.Equal([]string{"tenants/acme/x/a", "tenants/acme/x/a/b"}))
	g.Expect(s.Delete(ctx, "tenants/acme/x/a")).To(gomega.Succeed())
	g.Expect(list(t, s, "tenants/acme/x/", 0)).To(gomega.Equal([]string{"tenants/acme/x/a/b"}))
	g.Expect(s.Delete(ctx, "tenants/acme/x/a/b")).To(gomega.Succeed())
	g.Expect(list(t, s, "tenants/acme/", 0)).To(gomega.BeEmpty())
}

func testList(t *testing.T, s blob.Store) {
	// Put in shuffled order; '-' (0x2d) < '.' (0x2e) < '/' (0x2f) < 'b'.
	keys := []string{
		"list/b", "other/z", "list/a/c", "lis", "list/ab", "list/a.d",
		"list/c/d/e", "lister/x", "list/a", "list/a-b",
	}
	for _, k := range keys {
		put(t, s, "tenants/acme/"+k, []byte(k), blob.PutOptions{})
	}
	full := func(ks ...string) []string {
		out := make([]string, len(ks))
		for i, k := range ks {
			out[i] = "tenants/acme/" + k
		}
		return out
	}
	underList := full("list/a", "list/a-b", "list/a.d", "list/a/c", "list/ab", "list/b", "list/c/d/e")
	all := full(keys...)
	slices.Sort(all)
	tests := []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"tenants/acme/list/", 0, underList},
		{"tenants/acme/list/", -1, underList},
		{"tenants/acme/list/", 100, underList},
		{"tenants/acme/list/", 3, underList[:3]},
		{"tenants/acme/list/", 1, underList[:1]},
		{"tenants/acme/list/a", 0, full("list/a", "list/a-b", "list/a.d", "list/a/c", "list/ab")},
		{"tenants/acme/list/a/", 0, full("list/a/c")},
		{"tenants/acme/list/c/d/", 0, full("list/c/d/e")},
		{"tenants/acme/list", 0, append(slices.Clone(underList), full("lister/x")...)},
		{"tenants/acme/li", 2, full("lis", "list/a")},
		{"tenants/acme/", 0, all},
		{"", 0, all},
		{"", 4, all[:4]},
		{"tenants/acme/nothing/", 0, nil},
		{"tenants/acme/list/zzz", 0, nil},
		{"tenants/acme/list/a/c/", 0, nil}, // under an object, not a folder
		{"zzz", 0, nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/limit=%d", tc.prefix, tc.limit), func(t *testing.T) {
			got := list(t, s, tc.prefix, tc.limit)
			if tc.want == nil {
				gomega.NewWithT(t).Expect(got).To(gomega.BeEmpty())
				return
			}
			gomega.NewWithT(t).Expect(got).To(gomega.Equal(tc.want))
		})
	}
}

func testListAttributes(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	obj := put(t, s, "tenants/acme/one", []byte("12345"), blob.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"a": "b"}})
	objs, err := s.List(context.Background(), "tenants/acme/", 0)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(objs).To(gomega.HaveLen(1))
	g.Expect(objs[0].Key).To(gomega.Equal("tenants/acme/one"))
	g.Expect(objs[0].Size).To(gomega.Equal(int64(5)))
	g.Expect(objs[0].ETag).To(gomega.Equal(obj.ETag))
	g.Expect(objs[0].ModTime).To(gomega.BeTemporally("~", obj.ModTime, 2*time.Second))
	// List carries no content type or metadata on any implementation.
	g.Expect(objs[0].ContentType).To(gomega.BeEmpty())
	g.Expect(objs[0].Metadata).To(gomega.BeNil())
}

func testSpecialKeys(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	keys := []string{
		"tenants/acme/报告 2026.pdf",
		"tenants/acme/a+b=c&d;e,f@g$h!'()*.txt",
		"tenants/acme/100% done [final] {v2}.txt",
		"tenants/acme/~tilde~~x~",
		"tenants/acme/.hidden",
		"tenants/acme/..dots",
		"tenants/acme/x~blob",
		"tenants/acme/y~meta.json",
		"tenants/acme/q?x=1#frag",
		"tenants/acme/sp ace/ leading and trailing ",
		"tenants/acme/" + strings.Repeat("s", blob.MaxSegmentLength),
	}
	for i, k := range keys {
		put(t, s, k, []byte(fmt.Sprint(i)), blob.PutOptions{})
	}
	for i, k := range keys {
		data, obj := get(t, s, k)
		g.Expect(string(data)).To(gomega.Equal(fmt.Sprint(i)), "key %q", k)
		g.Expect(obj.Key).To(gomega.Equal(k))
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	g.Expect(list(t, s, "tenants/acme/", 0)).To(gomega.Equal(want))
	g.Expect(list(t, s, "tenants/acme/报", 0)).To(gomega.Equal([]string{"tenants/acme/报告 2026.pdf"}))
	for _, k := range keys {
		g.Expect(s.Delete(context.Background(), k)).To(gomega.Succeed())
	}
	g.Expect(list(t, s, "", 0)).To(gomega.BeEmpty())
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	ctx := context.Background()
	keys := map[string]string{
		"empty":              "",
		"absolute":           "/tenants/acme/x",
		"dot-dot":            "tenants/acme/../other/x",
		"only dot-dot":       "..",
		"trailing dot-dot":   "tenants/acme/..",
		"dot":                "tenants/./acme/x",
		"empty segment":      "tenants//acme/x",
		"trailing slash":     "tenants/acme/x/",
		"backslash":          `tenants\acme\x`,
		"backslash dot-dot":  `tenants/acme/..\b\x`,
		"NUL":                "tenants/acme/x\x00.txt",
		"newline":            "tenants/acme/x\ny",
		"DEL":                "tenants/acme/x\x7f",
		"invalid UTF-8":      "tenants/acme/\xff\xfe",
		"too long":           "tenants/acme/" + strings.Repeat("a/", blob.MaxKeyLength/2),
		"segment too long":   "tenants/acme/" + strings.Repeat("s", blob.MaxSegmentLength+1),
		"C1 control":         "tenants/acme/x\u0085y",
		"absolute dot-dot":   "/../../etc/passwd",
		"many dot-dot":       "tenants/acme/../../../../etc/passwd",
		"dot-dot then slash": "../tenants/acme/x",
	}
	for name, key := range keys {
		t.Run(name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			_, err := s.Put(ctx, key, strings.NewReader("x"), 1, blob.PutOptions{})
			g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "put: %v", err)
			_, _, err = s.Get(ctx, key)
			g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "get: %v", err)
			_, err = s.Head(ctx, key)
			g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "head: %v", err)
			err = s.Delete(ctx, key)
			g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "delete: %v", err)
		})
	}
	for _, prefix := range []string{"/tenants/", "tenants/../", "tenants//a", `tenants\a`, "tenants/a\x00", "../"} {
		t.Run("list "+prefix, func(t *testing.T) {
			_, err := s.List(ctx, prefix, 0)
			gomega.NewWithT(t).Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "list: %v", err)
		})
	}
	gomega.NewWithT(t).Expect(list(t, s, "", 0)).To(gomega.BeEmpty(), "nothing was stored")
}

func testInvalidOptions(t *testing.T, s blob.Store) {
	ctx := context.Background()
	tests := map[string]blob.PutOptions{
		"header injection in content type": {ContentType: "text/plain\r\nX-Injected: 1"},
		"unparseable content type":         {ContentType: "text/plain; charset"},
		"non-ASCII content type":           {ContentType: "text/plaın"},
		"space in metadata key":            {Metadata: map[string]string{"bad key": "v"}},
		"underscore in metadata key":       {Metadata: map[string]string{"bad_key": "v"}},
		"empty metadata key":               {Metadata: map[string]string{"": "v"}},
		"non-ASCII metadata value":         {Metadata: map[string]string{"k": "naïve"}},
		"newline in metadata value":        {Metadata: map[string]string{"k": "a\r\nX-Injected: 1"}},
		"padded metadata value":            {Metadata: map[string]string{"k": " v "}},
		"duplicate metadata key":           {Metadata: map[string]string{"Key": "1", "key": "2"}},
		"metadata too large":               {Metadata: map[string]string{"big": strings.Repeat("v", blob.MaxMetadataSize)}},
	}
	for name, opts := range tests {
		t.Run(name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			_, err := s.Put(ctx, "tenants/acme/opts", strings.NewReader("x"), 1, opts)
			g.Expect(errors.Is(err, blob.ErrInvalidOptions)).To(gomega.BeTrue(), "put: %v", err)
			expectAbsent(t, s, "tenants/acme/opts")
		})
	}
}

// plainReader hides the ReaderAt and Seeker of a reader, so implementations
// that use those take their streaming path.
type plainReader struct{ r io.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

func testSizeMismatch(t *testing.T, s blob.Store) {
	ctx := context.Background()
	key := "tenants/acme/sized"
	put(t, s, key, []byte("original"), blob.PutOptions{})
	tests := []struct {
		name string
		r    func() io.Reader
		size int64
	}{
		{"short random-access reader", func() io.Reader { return strings.NewReader("12345") }, 10},
		{"long random-access reader", func() io.Reader { return strings.NewReader("12345") }, 3},
		{"short stream", func() io.Reader { return plainReader{strings.NewReader("12345")} }, 10},
		{"long stream", func() io.Reader { return plainReader{strings.NewReader("12345")} }, 3},
		{"empty stream declared non-empty", func() io.Reader { return plainReader{strings.NewReader("")} }, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			_, err := s.Put(ctx, key, tc.r(), tc.size, blob.PutOptions{})
			g.Expect(errors.Is(err, blob.ErrSizeMismatch)).To(gomega.BeTrue(), "put: %v", err)
			data, _ := get(t, s, key)
			g.Expect(string(data)).To(gomega.Equal("original"), "the old object must survive")
			_, err = s.Put(ctx, "tenants/acme/new", tc.r(), tc.size, blob.PutOptions{})
			g.Expect(errors.Is(err, blob.ErrSizeMismatch)).To(gomega.BeTrue(), "put: %v", err)
			expectAbsent(t, s, "tenants/acme/new")
		})
	}
}

func testUnknownSize(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	content := randomBytes(100<<10, 3)
	obj, err := s.Put(context.Background(), "tenants/acme/stream", plainReader{bytes.NewReader(content)}, -1, blob.PutOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(obj.Size).To(gomega.Equal(int64(len(content))))
	data, got := get(t, s, "tenants/acme/stream")
	g.Expect(bytes.Equal(data, content)).To(gomega.BeTrue())
	g.Expect(got.Size).To(gomega.Equal(int64(len(content))))
	g.Expect(got.ETag).To(gomega.Equal(obj.ETag))
}

// failingReader yields some bytes, then an error.
type failingReader struct{ n int }

var errReader = errors.New("reader broke")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errReader
	}
	n := min(len(p), f.n)
	for i := range n {
		p[i] = 'x'
	}
	f.n -= n
	return n, nil
}

func testFailingReader(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	put(t, s, "tenants/acme/f", []byte("original"), blob.PutOptions{})
	for _, size := range []int64{100 << 10, -1} {
		_, err := s.Put(ctx, "tenants/acme/f", &failingReader{n: 50 << 10}, size, blob.PutOptions{})
		g.Expect(errors.Is(err, errReader)).To(gomega.BeTrue(), "size %d: %v", size, err)
		_, err = s.Put(ctx, "tenants/acme/g", &failingReader{n: 50 << 10}, size, blob.PutOptions{})
		g.Expect(errors.Is(err, errReader)).To(gomega.BeTrue(), "size %d: %v", size, err)
	}
	data, _ := get(t, s, "tenants/acme/f")
	g.Expect(string(data)).To(gomega.Equal("original"))
	expectAbsent(t, s, "tenants/acme/g")
}

func testCanceledContext(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	put(t, s, "tenants/acme/c", []byte("original"), blob.PutOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Put(ctx, "tenants/acme/c", strings.NewReader("new"), 3, blob.PutOptions{})
	g.Expect(errors.Is(err, context.Canceled)).To(gomega.BeTrue(), "put: %v", err)
	_, err = s.Put(ctx, "tenants/acme/d", plainReader{strings.NewReader("new")}, -1, blob.PutOptions{})
	g.Expect(errors.Is(err, context.Canceled)).To(gomega.BeTrue(), "put: %v", err)
	_, _, err = s.Get(ctx, "tenants/acme/c")
	g.Expect(errors.Is(err, context.Canceled)).To(gomega.BeTrue(), "get: %v", err)
	_, err = s.Head(ctx, "tenants/acme/c")
	g.Expect(errors.Is(err, context.Canceled)).To(gomega.BeTrue(), "head: %v", err)
	_, err = s.List(ctx, "", 0)
	g.Expect(errors.Is(err, context.Canceled)).To(gomega.BeTrue(), "list: %v", err)
	err = s.Delete(ctx, "tenants/acme/c")
	g.Expect(errors.Is(err, context.Canceled)).To(gomega.BeTrue(), "delete: %v", err)

	data, _ := get(t, s, "tenants/acme/c")
	g.Expect(string(data)).To(gomega.Equal("original"))
	expectAbsent(t, s, "tenants/acme/d")
}

func testTenantIsolation(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	// "a" is a prefix of "ab": a prefix without the trailing "/" would leak.
	for _, tenant := range []string{"a", "ab", "b"} {
		for _, part := range []string{"notes.txt", "sessions/s1/out.png"} {
			key, err := blob.TenantKey(tenant, part)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			put(t, s, key, []byte(tenant+":"+part), blob.PutOptions{})
		}
	}
	prefixA, err := blob.TenantPrefix("a")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	objs, err := s.List(ctx, prefixA, 0)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(objs).To(gomega.HaveLen(2))
	for _, o := range objs {
		tenant, ok := blob.TenantOf(o.Key)
		g.Expect(ok).To(gomega.BeTrue())
		g.Expect(tenant).To(gomega.Equal("a"), "tenant a's listing shows %q", o.Key)
	}

	// Tenant a cannot build a key that reaches b, however it tries.
	escapes := [][]string{
		{"../b/notes.txt"},
		{"x/../../b/notes.txt"},
		{"..", "b", "notes.txt"},
		{"/tenants/b/notes.txt"},
		{`..\b\notes.txt`},
		{"x/", "/../b"},
		{"./notes.txt"},
		{"notes.txt\x00"},
		{""},
		{},
	}
	for _, parts := range escapes {
		key, err := blob.TenantKey("a", parts...)
		g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "TenantKey(a, %q) = %q, %v", parts, key, err)
	}
	for _, tenant := range []string{"", "..", "a/../b", "A", "a/b", "-a", "a_b", strings.Repeat("a", 64)} {
		key, err := blob.TenantKey(tenant, "x")
		g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "TenantKey(%q, x) = %q, %v", tenant, key, err)
	}
	// Raw keys with the same tricks are refused by the store itself.
	for _, key := range []string{"tenants/a/../b/notes.txt", "tenants/a/./../b/notes.txt", `tenants/a/..\b\notes.txt`} {
		_, _, err := s.Get(ctx, key)
		g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(gomega.BeTrue(), "get %q: %v", key, err)
	}
	// b's objects are intact.
	data, _ := get(t, s, "tenants/b/notes.txt")
	g.Expect(string(data)).To(gomega.Equal("b:notes.txt"))
}

func testConcurrentPuts(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	const writers, perWriter = 8, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				key := fmt.Sprintf("tenants/acme/c/w%d/%d", w, i)
				content := bytes.Repeat([]byte(key), 100+w*10+i)
				_, err := s.Put(context.Background(), key, bytes.NewReader(content), int64(len(content)), blob.PutOptions{Metadata: map[string]string{"writer": fmt.Sprint(w)}})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	keys := list(t, s, "tenants/acme/c/", 0)
	g.Expect(keys).To(gomega.HaveLen(writers * perWriter))
	g.Expect(slices.IsSorted(keys)).To(gomega.BeTrue())
	for w := range writers {
		for i := range perWriter {
			key := fmt.Sprintf("tenants/acme/c/w%d/%d", w, i)
			data, obj := get(t, s, key)
			g.Expect(data).To(gomega.Equal(bytes.Repeat([]byte(key), 100+w*10+i)))
			g.Expect(obj.Metadata).To(gomega.Equal(map[string]string{"writer": fmt.Sprint(w)}))
		}
	}
}

func testConcurrentOverwrites(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	key := "tenants/acme/contended"
	version := func(w, r int) string { return fmt.Sprintf("w%d-r%d", w, r) }
	body := func(v string) []byte { return bytes.Repeat([]byte(v+";"), 500+len(v)*37) }
	put(t, s, key, body("initial"), blob.PutOptions{Metadata: map[string]string{"version": "initial"}})

	const writers, rounds, readers = 4, 5, 3
	var wg sync.WaitGroup
	var writing sync.WaitGroup
	errs := make(chan error, writers*rounds+readers*1000)
	for w := range writers {
		writing.Go(func() {
			for r := range rounds {
				v := version(w, r)
				b := body(v)
				_, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), blob.PutOptions{Metadata: map[string]string{"version": v}})
				errs <- err
			}
		})
	}
	done := make(chan struct{})
	for range readers {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				rc, obj, err := s.Get(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				data, err := io.ReadAll(rc)
				_ = rc.Close()
				switch {
				case err != nil:
					errs <- err
					return
				case !bytes.Equal(data, body(obj.Metadata["version"])):
					errs <- fmt.Errorf("content does not match metadata version %q", obj.Metadata["version"])
					return
				case int64(len(data)) != obj.Size:
					errs <- fmt.Errorf("read %d bytes, object says %d", len(data), obj.Size)
					return
				}
			}
		})
	}
	writing.Wait()
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	data, obj := get(t, s, key)
	g.Expect(obj.Metadata["version"]).To(gomega.MatchRegexp(`^w\d-r4$`), "the last write of some writer wins")
	g.Expect(data).To(gomega.Equal(body(obj.Metadata["version"])))
}

func testLargeObject(t *testing.T, s blob.Store) {
	g := gomega.NewWithT(t)
	content := randomBytes(5<<20, 4)
	want := sha256.Sum256(content)
	obj := put(t, s, "tenants/acme/large.bin", content, blob.PutOptions{ContentType: "application/zip"})
	g.Expect(obj.Size).To(gomega.Equal(int64(5 << 20)))
	rc, got, err := s.Get(context.Background(), "tenants/acme/large.bin")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(n).To(gomega.Equal(int64(5 << 20)))
	g.Expect(h.Sum(nil)).To(gomega.Equal(want[:]))
	g.Expect(got.Size).To(gomega.Equal(int64(5 << 20)))
	g.Expect(got.ETag).To(gomega.Equal(obj.ETag))
}
