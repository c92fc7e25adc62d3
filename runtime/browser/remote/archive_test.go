package remote

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/browsertest"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tree lists a folder: file paths with their content, folders with "/".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.IsDir():
			out[rel+"/"] = ""
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		default:
			out[rel] = "<" + d.Type().String() + ">"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func testKey(t *testing.T) string {
	return fmt.Sprintf("tenants/test/browser-profiles/%s-%d.tar.gz", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

func TestSaveAndRestoreProfile(t *testing.T) {
	needS3(t)
	g := NewWithT(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "chrome")
	write(t, filepath.Join(src, "Local State"), `{"profile":{}}`)
	write(t, filepath.Join(src, "Default", "Cookies"), "cookie-db")
	write(t, filepath.Join(src, "Default", "Local Storage", "leveldb", "000003.log"), "local-storage")
	g.Expect(os.MkdirAll(filepath.Join(src, "Default", "IndexedDB"), 0o700)).To(Succeed())
	// Caches, crash reports and the running browser's locks stay behind.
	write(t, filepath.Join(src, "Default", "Cache", "Cache_Data", "f_000001"), strings.Repeat("x", 1<<16))
	write(t, filepath.Join(src, "Default", "Code Cache", "js", "index"), "compiled")
	write(t, filepath.Join(src, "GrShaderCache", "data_0"), "shader")
	write(t, filepath.Join(src, "Crashpad", "settings.dat"), "crash")
	write(t, filepath.Join(src, "DevToolsActivePort"), "9222\n/devtools/browser/x")
	g.Expect(os.Symlink("localhost-1234", filepath.Join(src, "SingletonLock"))).To(Succeed())
	g.Expect(os.Symlink("/etc/passwd", filepath.Join(src, "Default", "leak"))).To(Succeed())

	get, put := presigned(t, testKey(t))
	restored, err := RestoreProfile(ctx, nil, get, filepath.Join(t.TempDir(), "new"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restored).To(BeFalse(), "no archive yet: a new profile")

	g.Expect(SaveProfile(ctx, nil, put, src)).To(Succeed())
	g.Expect(tree(t, filepath.Dir(src))).NotTo(HaveKey(HavePrefix(".profile-")), "the staged archive is removed")

	// Restoring replaces whatever the folder held.
	dst := filepath.Join(t.TempDir(), "chrome")
	write(t, filepath.Join(dst, "stale"), "old")
	restored, err = RestoreProfile(ctx, nil, get, dst)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restored).To(BeTrue())
	g.Expect(tree(t, dst)).To(Equal(map[string]string{
		"Local State":                              `{"profile":{}}`,
		"Default/":                                 "",
		"Default/Cookies":                          "cookie-db",
		"Default/IndexedDB/":                       "",
		"Default/Local Storage/":                   "",
		"Default/Local Storage/leveldb/":           "",
		"Default/Local Storage/leveldb/000003.log": "local-storage",
	}))
	fi, err := os.Stat(filepath.Join(dst, "Default", "Cookies"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(fs.FileMode(0o600)))
	g.Expect(tree(t, filepath.Dir(dst))).To(HaveLen(len(tree(t, dst))+1), "no staging folder left beside it")
}

// archive builds a gzipped tar from entries.
func archive(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write(bytes.Repeat([]byte("a"), int(h.Size)))
		}
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

func TestRestoreRefusesHostileArchives(t *testing.T) {
	needS3(t)
	reg := func(name string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"climbs out", archive(t, reg("Default/../../escape")), "unsafe path"},
		{"absolute", archive(t, reg("/etc/cron.d/x")), "unsafe path"},
		{"symlink", archive(t, &tar.Header{Name: "Default/Cookies", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}), "not a file or folder"},
		{"hard link", archive(t, &tar.Header{Name: "Default/Cookies", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}), "not a file or folder"},
		{"device", archive(t, &tar.Header{Name: "dev", Typeflag: tar.TypeChar}), "not a file or folder"},
		{"duplicate file", archive(t, reg("Default/Cookies"), reg("Default/Cookies")), "file exists"},
		{"not gzip", []byte("PK\x03\x04 a zip"), "not gzip"},
		{"truncated", archive(t, reg("Default/Cookies"))[:20], "damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			key := testKey(t)
			_, err := bucket.Put(context.Background(), key, bytes.NewReader(tc.data), int64(len(tc.data)), blob.PutOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			get, _ := presigned(t, key)
			dst := filepath.Join(t.TempDir(), "chrome")
			write(t, filepath.Join(dst, "Default", "Cookies"), "mine")
			restored, err := RestoreProfile(context.Background(), nil, get, dst)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(restored).To(BeFalse())
			g.Expect(tree(t, dst)).To(Equal(map[string]string{"Default/": "", "Default/Cookies": "mine"}), "the profile is untouched")
			g.Expect(tree(t, filepath.Dir(dst))).To(HaveLen(3), "no staging folder left beside it")
		})
	}
}

func TestSaveProfileReportsStorageErrors(t *testing.T) {
	needS3(t)
	g := NewWithT(t)
	src := filepath.Join(t.TempDir(), "chrome")
	write(t, filepath.Join(src, "Default", "Cookies"), "c")
	_, put := presigned(t, testKey(t))
	put = strings.Replace(put, bucketName, "no-such-bucket-here", 1)
	err := SaveProfile(context.Background(), nil, put, src)
	g.Expect(err).To(MatchError(ContainSubstring("failed to upload the browser profile: storage answered 404")))
	g.Expect(err.Error()).NotTo(ContainSubstring("X-Amz-Signature"), "the presigned signature stays out of errors")
}

// TestProfileSurvivesBrowserRestart is what a BrowserProfile promises: a
// cookie set in one Chromium is there in the next one, started on a fresh
// folder restored from S3, as in a new browser pod.
func TestProfileSurvivesBrowserRestart(t *testing.T) {
	needS3(t)
	if err := browser.CheckExecutable(browser.DefaultBin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip("SKIPPED LOUDLY: " + err.Error())
	}
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	get, put := presigned(t, testKey(t))
	first := filepath.Join(t.TempDir(), "chrome")
	withChromium(ctx, t, first, func(b *rod.Browser) {
		g.Expect(browsertest.SetCookie(b, "shop.example.com", "session", "s3cr3t")).To(Succeed())
	})
	g.Expect(SaveProfile(ctx, nil, put, first)).To(Succeed())

	second := filepath.Join(t.TempDir(), "chrome")
	restored, err := RestoreProfile(ctx, nil, get, second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restored).To(BeTrue())
	withChromium(ctx, t, second, func(b *rod.Browser) {
		g.Expect(browsertest.Cookies(b)).To(ContainElement("shop.example.com session=s3cr3t"))
	})
}

// withChromium runs fn against a real headless Chromium on dir, then closes
// it gracefully (which writes the profile to disk).
func withChromium(ctx context.Context, t *testing.T, dir string, fn func(*rod.Browser)) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	proc, err := browser.Launch(ctx, browser.LaunchSpec{UserDataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	b := rod.New().Context(ctx).ControlURL(proc.WebSocketURL)
	if err := b.Connect(); err != nil {
		t.Fatal(err)
	}
	fn(b)
	_ = proto.BrowserClose{}.Call(b)
	select {
	case <-proc.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not exit after Browser.close")
	}
}

// BenchmarkProfileArchive saves a fresh Chromium profile to S3 and restores
// it, as a browser pod does on close and open, and reports the archive size.
func BenchmarkProfileArchive(b *testing.B) {
	needS3(b)
	if err := browser.CheckExecutable(browser.DefaultBin); err != nil {
		b.Skip("SKIPPED LOUDLY: " + err.Error())
	}
	ctx := context.Background()
	src := filepath.Join(b.TempDir(), "chrome")
	if err := os.MkdirAll(src, 0o700); err != nil {
		b.Fatal(err)
	}
	proc, err := browser.Launch(ctx, browser.LaunchSpec{UserDataDir: src})
	if err != nil {
		b.Fatal(err)
	}
	br := rod.New().Context(ctx).ControlURL(proc.WebSocketURL)
	if err := br.Connect(); err != nil {
		b.Fatal(err)
	}
	_ = proto.BrowserClose{}.Call(br)
	<-proc.Done()
	key := fmt.Sprintf("tenants/test/browser-profiles/bench-%d.tar.gz", time.Now().UnixNano())
	get, put := presigned(b, key)
	b.ResetTimer()
	for i := range b.N {
		if err := SaveProfile(ctx, nil, put, src); err != nil {
			b.Fatal(err)
		}
		if _, err := RestoreProfile(ctx, nil, get, filepath.Join(b.TempDir(), fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	obj, err := bucket.Head(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(obj.Size)/1024, "archive-KiB")
}
