// Package localblob is the embedded-mode artifact store: objects are files in a
// local folder, so `picobot serve` needs no S3 server.
//
// Writes are atomic: content and sidecar are written to tmp/ and renamed into
// place, so a reader sees the old object or the new one and a crash leaves at
// worst a stray file in tmp/ (removed at the next Open once an hour old).
// Content type, metadata and ETag live in a JSON sidecar beside the content.
//
// Every file operation goes through an os.Root, so no key and no symbolic link
// can make the store read or write outside its folder. Inside it, the store
// never creates symbolic links and refuses to follow any it finds, so a link
// planted in one tenant's folder cannot expose another tenant's objects.
//
// Known limits: on case-insensitive file systems (macOS and Windows defaults)
// keys that differ only in case name the same object, and macOS may normalise
// Unicode in names; S3 does neither.
package localblob

import (
	"context"
	"crypto/md5" //nolint:gosec // S3-compatible ETag, not a security boundary.
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/blob"
)

// staleTempAge is how old a file in tmp/ must be before Open removes it: old
// enough that no Put of a live process is still writing it.
const staleTempAge = time.Hour

// Options configure a Store.
type Options struct {
	// MaxObjectSize refuses larger objects with blob.ErrTooLarge; 0 means
	// blob.DefaultMaxObjectSize, the S3 limit, so embedded mode accepts nothing
	// a cluster would refuse.
	MaxObjectSize int64
}

// Store keeps objects in a local folder. It implements blob.Store.
type Store struct {
	root    *os.Root
	maxSize int64
	// mu orders the renames and folder clean-ups of Put and Delete against
	// readers, so a reader never pairs new content with an old sidecar and a
	// Delete never removes a folder a Put is about to rename into. Content is
	// written outside the lock.
	mu sync.RWMutex
}

var _ blob.Store = (*Store)(nil)

// sidecar is the JSON stored beside each object's content.
type sidecar struct {
	Version     int               `json:"version"`
	ContentType string            `json:"contentType"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	ETag        string            `json:"etag"`
	// Size and ModTimeUnixNano describe the content file the sidecar was
	// written for. A crash between the two renames of a Put can leave a sidecar
	// beside content it does not describe; these detect that, and the object is
	// then served with default attributes and a recomputed ETag.
	Size            int64 `json:"size"`
	ModTimeUnixNano int64 `json:"modTimeUnixNano"`
}

const sidecarVersion = 1

// Open opens (creating it if needed) the store in dir.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("failed to open blob folder: no folder given")
	}
	if opts.MaxObjectSize < 0 {
		return nil, fmt.Errorf("failed to open blob folder %q: negative MaxObjectSize", dir)
	}
	if opts.MaxObjectSize == 0 {
		opts.MaxObjectSize = blob.DefaultMaxObjectSize
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create blob folder %q: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to open blob folder %q: %w", dir, err)
	}
	s := &Store{root: root, maxSize: opts.MaxObjectSize}
	for _, sub := range []string{objectsDir, tmpDir} {
		if err := s.mkdir(sub); err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("failed to open blob folder %q: %w", dir, err)
		}
	}
	if err := s.removeStaleTemps(); err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("failed to open blob folder %q: %w", dir, err)
	}
	return s, nil
}

// Close releases the folder handle.
func (s *Store) Close() error {
	if err := s.root.Close(); err != nil {
		return fmt.Errorf("failed to close blob folder: %w", err)
	}
	return nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts blob.PutOptions) (blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	opts, err := opts.Normalize()
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	if size > s.maxSize {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w: %d bytes, limit %d", key, blob.ErrTooLarge, size, s.maxSize)
	}
	p, err := pathOf(key)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}

	content, info, etag, err := s.writeContent(ctx, r, size)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	defer func() { _ = s.root.Remove(content) }() // a no-op once renamed
	meta, err := json.Marshal(sidecar{
		Version:         sidecarVersion,
		ContentType:     opts.ContentType,
		Metadata:        opts.Metadata,
		ETag:            etag,
		Size:            info.Size(),
		ModTimeUnixNano: info.ModTime().UnixNano(),
	})
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to encode sidecar of %q: %w", key, err)
	}
	metaTmp, err := s.writeTemp(func(w io.Writer) error {
		_, err := w.Write(meta)
		return err
	})
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to write sidecar of %q: %w", key, err)
	}
	defer func() { _ = s.root.Remove(metaTmp) }()

	if err := s.commit(p, content, metaTmp); err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	return blob.Object{
		Key:         key,
		Size:        info.Size(),
		ContentType: opts.ContentType,
		ModTime:     info.ModTime(),
		ETag:        etag,
		Metadata:    blob.CloneMetadata(opts.Metadata),
	}, nil
}

// commit renames the written files into place under the write lock.
func (s *Store) commit(p objectPath, content, meta string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range p.dirs {
		if err := s.mkdir(filepath.Join(p.dirs[:i+1]...)); err != nil {
			return err
		}
	}
	if err := s.root.Rename(content, p.content); err != nil {
		return fmt.Errorf("failed to rename content into place: %w", err)
	}
	if err := s.root.Rename(meta, p.sidecar); err != nil {
		return fmt.Errorf("failed to rename sidecar into place: %w", err)
	}
	// Make the renames durable: the state store may record the artifact as
	// soon as Put returns.
	return s.syncDir(p.dir)
}

// writeContent copies r into a new file in tmp/, enforcing the declared size
// and the size limit, and returns its path, its final stat and its MD5.
func (s *Store) writeContent(ctx context.Context, r io.Reader, size int64) (string, fs.FileInfo, string, error) {
	limit := s.maxSize
	if size >= 0 {
		limit = size
	}
	var (
		n   int64
		sum hash.Hash
	)
	name, err := s.writeTemp(func(w io.Writer) error {
		sum = md5.New() //nolint:gosec // see import
		var err error
		n, err = io.Copy(io.MultiWriter(w, sum), io.LimitReader(ctxReader{ctx: ctx, r: r}, limit+1))
		switch {
		case err != nil:
			return fmt.Errorf("failed to read object content: %w", err)
		case size >= 0 && n != size:
			return fmt.Errorf("%w: got %s bytes, declared %d", blob.ErrSizeMismatch, countOf(n, size), size)
		case n > s.maxSize:
			return fmt.Errorf("%w: more than %d bytes", blob.ErrTooLarge, s.maxSize)
		}
		return nil
	})
	if err != nil {
		return "", nil, "", err
	}
	info, err := s.root.Lstat(name)
	if err != nil {
		_ = s.root.Remove(name)
		return "", nil, "", fmt.Errorf("failed to stat written content: %w", err)
	}
	return name, info, hex.EncodeToString(sum.Sum(nil)), nil
}

// countOf reports a read count; when the reader had more than declared only
// size+1 bytes were read, so say "more than".
func countOf(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than %d", size)
	}
	return fmt.Sprint(n)
}

// writeTemp creates a new file in tmp/, fills it with write, flushes it to
// disk and returns its path. On failure the file is removed.
func (s *Store) writeTemp(write func(io.Writer) error) (name string, err error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	name = filepath.Join(tmpDir, hex.EncodeToString(rnd[:]))
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return "", fmt.Errorf("failed to create temporary file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("failed to close temporary file: %w", cerr)
		}
		if err != nil {
			_ = s.root.Remove(name)
		}
	}()
	if err := write(f); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("failed to sync temporary file: %w", err)
	}
	return name, nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Object, error) {
	f, obj, err := s.open(ctx, key, true)
	if err != nil {
		return nil, blob.Object{}, fmt.Errorf("failed to get object %q: %w", key, err)
	}
	return f, obj, nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, key string) (blob.Object, error) {
	_, obj, err := s.open(ctx, key, false)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to head object %q: %w", key, err)
	}
	return obj, nil
}

// open finds an object and reads its sidecar; with keep it returns the open
// content file, else it closes it.
func (s *Store) open(ctx context.Context, key string, keep bool) (*os.File, blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, blob.Object{}, err
	}
	p, err := pathOf(key)
	if err != nil {
		return nil, blob.Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, blob.Object{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ok, err := s.checkDirs(p.dirs); err != nil || !ok {
		if err == nil {
			err = blob.ErrNotFound
		}
		return nil, blob.Object{}, err
	}
	f, info, err := s.openRegular(p.content)
	if err != nil {
		return nil, blob.Object{}, err
	}
	obj, err := s.describe(key, p.sidecar, info, f)
	if err != nil || !keep {
		_ = f.Close()
	}
	if err != nil {
		return nil, blob.Object{}, err
	}
	if !keep {
		f = nil
	}
	return f, obj, nil
}

// openRegular opens a content file, refusing anything but a regular file (a
// symbolic link in particular) and making sure the file opened is the one
// checked.
func (s *Store) openRegular(name string) (*os.File, fs.FileInfo, error) {
	checked, err := s.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, blob.ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("failed to stat content: %w", err)
	}
	if !checked.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("refusing to read %q: not a regular file (%s)", name, checked.Mode().Type())
	}
	f, err := s.root.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open content: %w", err)
	}
	info, err := f.Stat()
	if err != nil || !os.SameFile(checked, info) {
		_ = f.Close()
		return nil, nil, fmt.Errorf("refusing to read %q: it changed while being opened", name)
	}
	return f, info, nil
}

// describe builds an object's attributes from its content file and sidecar.
// content is read (to recompute the ETag) only when the sidecar is missing or
// stale, and then rewound.
func (s *Store) describe(key, sidecarPath string, info fs.FileInfo, content io.ReadSeeker) (blob.Object, error) {
	obj := blob.Object{Key: key, Size: info.Size(), ModTime: info.ModTime()}
	if sc, ok := s.readSidecar(sidecarPath, info); ok {
		obj.ContentType, obj.Metadata, obj.ETag = sc.ContentType, blob.CloneMetadata(sc.Metadata), sc.ETag
		return obj, nil
	}
	obj.ContentType = blob.DefaultContentType
	sum := md5.New() //nolint:gosec // see import
	if _, err := io.Copy(sum, content); err != nil {
		return blob.Object{}, fmt.Errorf("failed to hash content: %w", err)
	}
	if _, err := content.Seek(0, io.SeekStart); err != nil {
		return blob.Object{}, fmt.Errorf("failed to rewind content: %w", err)
	}
	obj.ETag = hex.EncodeToString(sum.Sum(nil))
	return obj, nil
}

// readSidecar returns the sidecar when it exists, is a regular file, parses
// and describes the content file info.
func (s *Store) readSidecar(name string, info fs.FileInfo) (sidecar, bool) {
	st, err := s.root.Lstat(name)
	if err != nil || !st.Mode().IsRegular() {
		return sidecar{}, false
	}
	data, err := s.root.ReadFile(name)
	if err != nil {
		return sidecar{}, false
	}
	var sc sidecar
	if json.Unmarshal(data, &sc) != nil || sc.Version != sidecarVersion {
		return sidecar{}, false
	}
	if sc.Size != info.Size() || sc.ModTimeUnixNano != info.ModTime().UnixNano() {
		return sidecar{}, false
	}
	return sc, true
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	p, err := pathOf(key)
	if err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ok, err := s.checkDirs(p.dirs)
	if err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	if !ok {
		return nil
	}
	// Content first: without it the object is gone even if removing the
	// sidecar fails, and a leftover sidecar is never listed.
	for _, name := range []string{p.content, p.sidecar} {
		if err := s.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to delete object %q: %w", key, err)
		}
	}
	// Remove folders left empty, so List does not walk a growing tree of
	// dead folders. Removal stops at the first folder that is not empty.
	for i := len(p.dirs); i > 1; i-- {
		if s.root.Remove(filepath.Join(p.dirs[:i]...)) != nil {
			break
		}
	}
	return nil
}

// List implements blob.Store.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]blob.Object, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	// Walk only the folder the prefix names; its partial last segment filters
	// that folder's entries.
	dirs, base, partial := []string{objectsDir}, "", prefix
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base, partial = prefix[:i+1], prefix[i+1:]
		for _, seg := range strings.Split(prefix[:i], "/") {
			dirs = append(dirs, escapeSegment(seg))
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ok, err := s.checkDirs(dirs)
	if err != nil {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	if !ok {
		return nil, nil
	}
	w := lister{s: s, ctx: ctx, limit: limit}
	if err := w.walk(filepath.Join(dirs...), base, partial); err != nil && !errors.Is(err, errListFull) {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	return w.out, nil
}

var errListFull = errors.New("list limit reached")

// lister walks the object tree in key order.
type lister struct {
	s     *Store
	ctx   context.Context
	limit int
	out   []blob.Object
}

// walk appends the objects under dir, whose keys start with base, in key order.
// Sorting each folder's entries by segment, with "/" appended to folders,
// yields global key order without collecting and sorting every key: a file
// "a-b" (0x2d) sorts before the folder "a/" (0x2f) and every key in it.
func (w *lister) walk(dir, base, partial string) error {
	f, err := w.s.root.Open(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("failed to open folder: %w", err)
	}
	entries, err := f.ReadDir(-1)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("failed to read folder: %w", err)
	}
	type item struct {
		sortKey, seg string
		entry        fs.DirEntry
	}
	items := make([]item, 0, len(entries))
	for _, e := range entries {
		seg, k := decodeName(e.Name())
		if partial != "" && !strings.HasPrefix(seg, partial) {
			continue
		}
		switch {
		case k == kindDir && e.Type().IsDir(): // symbolic links are never followed
			items = append(items, item{sortKey: seg + "/", seg: seg, entry: e})
		case k == kindContent && e.Type().IsRegular():
			items = append(items, item{sortKey: seg, seg: seg, entry: e})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.sortKey, b.sortKey) })
	for _, it := range items {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		name := filepath.Join(dir, it.entry.Name())
		if it.entry.IsDir() {
			if err := w.walk(name, base+it.seg+"/", ""); err != nil {
				return err
			}
			continue
		}
		key := base + it.seg
		if blob.ValidateKey(key) != nil {
			continue // a file someone put there by hand
		}
		if err := w.add(key, name, strings.TrimSuffix(name, markerContent)+markerSidecar); err != nil {
			return err
		}
		if w.limit > 0 && len(w.out) >= w.limit {
			return errListFull
		}
	}
	return nil
}

// add appends one object; List promises only Key, Size, ModTime and ETag.
func (w *lister) add(key, content, sidecarPath string) error {
	f, info, err := w.s.openRegular(content)
	if errors.Is(err, blob.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	obj, err := w.s.describe(key, sidecarPath, info, f)
	if err != nil {
		return err
	}
	w.out = append(w.out, blob.Object{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime, ETag: obj.ETag})
	return nil
}

// mkdir creates a folder unless it exists, refusing a symbolic link or a file
// in its place.
func (s *Store) mkdir(name string) error {
	err := s.root.Mkdir(name, 0o750)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("failed to create folder %q: %w", name, err)
	}
	return s.checkDir(name)
}

// checkDirs reports whether the folders exist, as real folders. It checks
// each with Lstat, outermost first, so a symbolic link anywhere on the path
// is refused rather than followed.
func (s *Store) checkDirs(dirs []string) (bool, error) {
	for i := range dirs {
		err := s.checkDir(filepath.Join(dirs[:i+1]...))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

func (s *Store) checkDir(name string) error {
	info, err := s.root.Lstat(name)
	switch {
	case err != nil:
		return err
	case info.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("refusing to follow %q: a symbolic link, which this store never creates", name)
	case !info.IsDir():
		return fmt.Errorf("refusing to use %q: not a folder", name)
	}
	return nil
}

func (s *Store) syncDir(name string) error {
	d, err := s.root.Open(name)
	if err != nil {
		return fmt.Errorf("failed to open folder %q: %w", name, err)
	}
	defer func() { _ = d.Close() }()
	// Some platforms (Windows) cannot sync a folder; the rename is still done.
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("failed to sync folder %q: %w", name, err)
	}
	return nil
}

func (s *Store) removeStaleTemps() error {
	d, err := s.root.Open(tmpDir)
	if err != nil {
		return fmt.Errorf("failed to open %s folder: %w", tmpDir, err)
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		return fmt.Errorf("failed to read %s folder: %w", tmpDir, err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleTempAge {
			continue
		}
		_ = s.root.Remove(filepath.Join(tmpDir, e.Name()))
	}
	return nil
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
