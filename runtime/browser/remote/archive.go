package remote

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Limits of a profile archive: a profile is cookies, logins and local
// storage, not a cache; these keep a hostile or runaway profile from filling
// the pod or the bucket.
const (
	// MaxArchiveBytes caps the compressed archive, up and down.
	MaxArchiveBytes = 512 << 20
	// MaxProfileBytes caps the unpacked profile.
	MaxProfileBytes = 2 << 30
	// MaxProfileEntries caps files and folders in an archive.
	MaxProfileEntries = 100_000
)

// skipDirs are Chromium folders that are caches or crash reports: rebuilt
// on demand, often large, and not part of an identity.
var skipDirs = map[string]bool{
	"Cache": true, "Code Cache": true, "GPUCache": true, "GrShaderCache": true, "ShaderCache": true,
	"GraphiteDawnCache": true, "DawnCache": true, "DawnGraphiteCache": true, "DawnWebGPUCache": true,
	"Crashpad": true, "Crash Reports": true, "component_crx_cache": true, "optimization_guide_model_store": true,
	"CacheStorage": true, "ScriptCache": true, "BrowserMetrics": true,
}

// skipFiles belong to a running browser, not to the profile.
var skipFiles = map[string]bool{
	"SingletonLock": true, "SingletonSocket": true, "SingletonCookie": true, "DevToolsActivePort": true,
	"RunningChromeVersion": true, "BrowserMetrics-spare.pma": true,
}

// ErrProfileTooLarge is returned when a profile exceeds the archive limits.
var ErrProfileTooLarge = errors.New("browser profile too large")

// SaveProfile packs the Chrome profile in dir (regular files and folders;
// no caches, locks, sockets or links) as a gzipped tar and uploads it with
// a PUT to rawURL (a presigned S3 URL). Call it after Chromium has exited, so
// the profile is complete. The archive is staged next to dir, not in /tmp,
// which may be small.
func SaveProfile(ctx context.Context, hc *http.Client, rawURL, dir string) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("failed to resolve profile folder %s: %w", dir, err)
	}
	f, err := os.CreateTemp(filepath.Dir(abs), ".profile-*.tar.gz")
	if err != nil {
		return fmt.Errorf("failed to stage the profile archive: %w", err)
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	if err := pack(abs, f); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("failed to stage the profile archive: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("failed to stage the profile archive: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rawURL, io.NopCloser(f))
	if err != nil {
		return fmt.Errorf("invalid profile upload URL: %w", err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("failed to upload the browser profile: %w", redactURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("failed to upload the browser profile: storage answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// countingWriter fails once more than limit bytes are written.
type countingWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, fmt.Errorf("%w: the archive exceeds %d MiB", ErrProfileTooLarge, c.limit>>20)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func pack(dir string, out io.Writer) error {
	zw := gzip.NewWriter(&countingWriter{w: out, limit: MaxArchiveBytes})
	tw := tar.NewWriter(zw)
	var total int64
	entries := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && skipDirs[d.Name()]:
			return filepath.SkipDir
		case !d.IsDir() && (skipFiles[d.Name()] || !d.Type().IsRegular()):
			return nil // caches' siblings, sockets, links, devices
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if entries++; entries > MaxProfileEntries {
			return fmt.Errorf("%w: more than %d files", ErrProfileTooLarge, MaxProfileEntries)
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: info.ModTime(), Typeflag: tar.TypeDir, Mode: 0o700}
		if !d.IsDir() {
			if total += info.Size(); total > MaxProfileBytes {
				return fmt.Errorf("%w: more than %d MiB", ErrProfileTooLarge, MaxProfileBytes>>20)
			}
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o600, info.Size()
		} else {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		return copyFile(tw, path, info.Size())
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return fmt.Errorf("failed to pack the browser profile in %s: %w", dir, err)
	}
	return nil
}

// copyFile copies exactly size bytes of path (a file that shrank meanwhile
// is padded, one that grew is cut), as the tar header promised.
func copyFile(w io.Writer, path string, size int64) error {
	f, err := os.Open(path) //nolint:gosec // a file of the profile being packed
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	if n < size {
		_, err = io.CopyN(w, zeroReader{}, size-n)
	}
	return err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// RestoreProfile downloads the archive at rawURL (a presigned S3 URL) and
// unpacks it as the Chrome profile in dir, replacing what dir held. A
// missing archive (404) is a new profile: it reports false and leaves dir
// alone. Entries that are not plain files or folders, or that would land
// outside dir, are refused, as are archives beyond the limits.
func RestoreProfile(ctx context.Context, hc *http.Client, rawURL, dir string) (restored bool, err error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, fmt.Errorf("failed to resolve profile folder %s: %w", dir, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return false, fmt.Errorf("invalid profile download URL: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("failed to download the browser profile: %w", redactURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode == http.StatusForbidden:
		return false, errors.New("failed to download the browser profile: storage answered 403 Forbidden (for a new profile, the operator's S3 identity needs s3:ListBucket so that a missing archive reads as 404)")
	case resp.StatusCode/100 != 2:
		return false, fmt.Errorf("failed to download the browser profile: storage answered %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return false, fmt.Errorf("failed to create the folder of %s: %w", abs, err)
	}
	stage, err := os.MkdirTemp(filepath.Dir(abs), ".profile-restore-*")
	if err != nil {
		return false, fmt.Errorf("failed to stage the browser profile: %w", err)
	}
	defer func() { _ = os.RemoveAll(stage) }()
	if err := unpack(io.LimitReader(resp.Body, MaxArchiveBytes+1), stage); err != nil {
		return false, err
	}
	if err := os.RemoveAll(abs); err != nil {
		return false, fmt.Errorf("failed to replace the browser profile in %s: %w", abs, err)
	}
	if err := os.Rename(stage, abs); err != nil {
		return false, fmt.Errorf("failed to replace the browser profile in %s: %w", abs, err)
	}
	return true, nil
}

func unpack(r io.Reader, dir string) error {
	counted := &countingReader{r: r, limit: MaxArchiveBytes}
	zr, err := gzip.NewReader(counted)
	if err != nil {
		return fmt.Errorf("the browser profile archive is not gzip: %w", err)
	}
	tr := tar.NewReader(zr)
	var total int64
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the browser profile archive is damaged: %w", err)
		}
		if entries >= MaxProfileEntries {
			return fmt.Errorf("%w: more than %d files", ErrProfileTooLarge, MaxProfileEntries)
		}
		name := filepath.FromSlash(strings.TrimSuffix(hdr.Name, "/"))
		if name == "" || filepath.IsAbs(name) || !filepath.IsLocal(name) {
			return fmt.Errorf("the browser profile archive holds an unsafe path %q", hdr.Name)
		}
		path := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				return fmt.Errorf("failed to restore %s: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			if total += hdr.Size; hdr.Size < 0 || total > MaxProfileBytes {
				return fmt.Errorf("%w: more than %d MiB unpacked", ErrProfileTooLarge, MaxProfileBytes>>20)
			}
			if err := writeFile(path, tr, hdr.Size); err != nil {
				return fmt.Errorf("failed to restore %s: %w", hdr.Name, err)
			}
		default:
			return fmt.Errorf("the browser profile archive holds %q, which is not a file or folder", hdr.Name)
		}
	}
}

func writeFile(path string, r io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // path is checked to stay in the folder
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// countingReader fails once more than limit bytes are read.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return n, fmt.Errorf("%w: the archive exceeds %d MiB", ErrProfileTooLarge, c.limit>>20)
	}
	return n, err
}

// redactURL drops the query of the URL in an HTTP error: it holds the
// presigned signature.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if i := strings.IndexByte(ue.URL, '?'); i >= 0 {
			ue.URL = ue.URL[:i] + "?…"
		}
	}
	return err
}
