package blob

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // Content-MD5 is S3's integrity check, not a security boundary.
	"fmt"
	"io"
	"os"
)

// DefaultSpoolMemory is how much of a body that is not seekable
// SpoolBody buffers in memory before it spills to a temporary file.
const DefaultSpoolMemory = 8 << 20

// Body is an object's content ready to send over HTTP: seekable (so a
// signed request can be retried), with its exact size and MD5 (S3's
// Content-MD5). Close releases its spool file.
type Body struct {
	io.ReadSeeker
	Size    int64
	MD5     []byte
	cleanup func()
}

// Close removes the spool file, if any.
func (b Body) Close() error {
	if b.cleanup != nil {
		b.cleanup()
	}
	return nil
}

// SpoolBody checks r against the declared size (-1: unknown) and maxSize and
// returns it as a Body. A reader that is already random-access
// (bytes.Reader, strings.Reader, os.File) is used in place; any other is
// buffered in memory up to spoolMem bytes and in a temporary file in tempDir
// ("" means os.TempDir) beyond. Errors wrap ErrSizeMismatch or ErrTooLarge.
func SpoolBody(ctx context.Context, r io.Reader, size, maxSize, spoolMem int64, tempDir string) (Body, error) {
	if b, ok, err := sectionBody(r, size); ok || err != nil {
		return b, err
	}
	limit := maxSize
	if size >= 0 {
		limit = size
	}
	src := io.LimitReader(ctxReader{ctx: ctx, r: r}, limit+1)
	sum := md5.New() //nolint:gosec // see import
	var mem bytes.Buffer
	if size >= 0 && size <= spoolMem {
		mem.Grow(int(size))
	}
	n, err := io.Copy(io.MultiWriter(&mem, sum), io.LimitReader(src, spoolMem+1))
	if err != nil {
		return Body{}, fmt.Errorf("failed to read object content: %w", err)
	}
	body := Body{ReadSeeker: bytes.NewReader(mem.Bytes())}
	if n > spoolMem {
		f, err := os.CreateTemp(tempDir, "picobot-blob-*")
		if err != nil {
			return Body{}, fmt.Errorf("failed to create spool file: %w", err)
		}
		body = Body{ReadSeeker: f, cleanup: func() { _ = f.Close(); _ = os.Remove(f.Name()) }}
		if _, err := f.Write(mem.Bytes()); err != nil {
			_ = body.Close()
			return Body{}, fmt.Errorf("failed to write spool file: %w", err)
		}
		more, err := io.Copy(io.MultiWriter(f, sum), src)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			_ = body.Close()
			return Body{}, fmt.Errorf("failed to spool object content: %w", err)
		}
		n += more
	}
	switch {
	case size >= 0 && n != size:
		_ = body.Close()
		return Body{}, fmt.Errorf("%w: got %s bytes, declared %d", ErrSizeMismatch, countOf(n, size), size)
	case n > maxSize:
		_ = body.Close()
		return Body{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxSize)
	}
	body.Size, body.MD5 = n, sum.Sum(nil)
	return body, nil
}

// sectionBody uses a random-access reader in place: the size bytes from its
// current offset, checked to be exactly that many.
func sectionBody(r io.Reader, size int64) (Body, bool, error) {
	ra, okAt := r.(io.ReaderAt)
	seeker, okSeek := r.(io.Seeker)
	if !okAt || !okSeek || size < 0 {
		return Body{}, false, nil
	}
	off, err := seeker.Seek(0, io.SeekCurrent)
	if err != nil {
		return Body{}, false, nil //nolint:nilerr // not seekable after all: spool it
	}
	section := io.NewSectionReader(ra, off, size)
	sum := md5.New() //nolint:gosec // see import
	n, err := io.Copy(sum, section)
	if err != nil {
		return Body{}, true, fmt.Errorf("failed to read object content: %w", err)
	}
	var extra [1]byte
	if m, _ := ra.ReadAt(extra[:], off+size); n != size || m > 0 {
		return Body{}, true, fmt.Errorf("%w: got %s bytes, declared %d", ErrSizeMismatch, countOf(n+int64(m), size), size)
	}
	if _, err := section.Seek(0, io.SeekStart); err != nil {
		return Body{}, true, fmt.Errorf("failed to rewind object content: %w", err)
	}
	return Body{ReadSeeker: section, Size: size, MD5: sum.Sum(nil)}, true, nil
}

// countOf reports a read count; when the reader had more than declared only
// size+1 bytes were read, so say "more than".
func countOf(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than %d", size)
	}
	return fmt.Sprint(n)
}

// ctxReader stops spooling a long body when the context ends.
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
