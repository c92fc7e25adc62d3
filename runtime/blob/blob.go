// Package blob defines PicoBot's artifact store: files that agents produce or
// receive (uploads, screenshots, generated documents, exported transcripts) and
// that are too large or too opaque for the state store.
//
// Cluster mode keeps them in S3 (blob/s3blob); embedded mode in a local folder
// (blob/localblob). Both pass the conformance suite in blob/blobtest, so code
// written against Store behaves the same on a laptop and in a cluster.
//
// Tenancy: every tenant's objects live under "tenants/<tenant>/" (TenantKey,
// TenantPrefix). Keys are validated by every implementation with the same rules
// (ValidateKey), so a key that works in embedded mode works in S3 and a key
// crafted to escape a prefix or a folder is refused everywhere.
package blob

import (
	"context"
	"errors"
	"io"
	"time"
)

// Sentinel errors; implementations wrap them with context, so match them with
// errors.Is.
var (
	// ErrNotFound: no object under that key.
	ErrNotFound = errors.New("object not found")
	// ErrInvalidKey: the key or prefix breaks the key rules (see ValidateKey).
	// Nothing was read or written.
	ErrInvalidKey = errors.New("invalid object key")
	// ErrInvalidOptions: the content type or metadata of a Put cannot be stored
	// faithfully by every implementation (see PutOptions.Normalize).
	ErrInvalidOptions = errors.New("invalid put options")
	// ErrSizeMismatch: the reader given to Put yielded more or fewer bytes than
	// the declared size. Nothing was stored.
	ErrSizeMismatch = errors.New("object size does not match the declared size")
	// ErrTooLarge: the object exceeds the implementation's size limit.
	ErrTooLarge = errors.New("object too large")
)

// DefaultMaxObjectSize is S3's limit for a single PUT (5 GiB). The S3
// implementation uploads with one PutObject call (the multipart upload manager is
// not a dependency), so no implementation accepts more by default: an object
// that fits in embedded mode then also fits in a cluster.
const DefaultMaxObjectSize int64 = 5 << 30

// Object describes a stored object.
type Object struct {
	// Key is the full key, e.g. "tenants/acme/sessions/web:42:1/report.pdf".
	Key string
	// Size in bytes.
	Size int64
	// ContentType is the MIME type given to Put, DefaultContentType when none was.
	ContentType string
	// ModTime is when the object was last written, as the backend records it
	// (S3 has one-second resolution in HEAD/GET responses).
	ModTime time.Time
	// ETag identifies the content version; it changes when the content does.
	// Unquoted. For single-part uploads it is the hex MD5 of the content, but
	// callers must not rely on that (S3 with SSE-KMS differs).
	ETag string
	// Metadata holds user metadata with lower-case keys; nil when there is none.
	Metadata map[string]string
}

// PutOptions are the attributes stored with an object.
type PutOptions struct {
	// ContentType is the MIME type; empty means DefaultContentType.
	ContentType string
	// Metadata is user metadata. Keys are case-insensitive and come back
	// lower-cased (S3 carries them as HTTP headers).
	Metadata map[string]string
}

// Store is PicoBot's artifact store. Implementations are safe for concurrent
// use. Keys are validated with ValidateKey and prefixes with ValidatePrefix;
// invalid ones fail with ErrInvalidKey before any I/O.
type Store interface {
	// Put stores r under key, replacing any existing object atomically: readers
	// see the old object or the new one, never a mix. size is the exact number
	// of bytes r yields (ErrSizeMismatch otherwise), or -1 when unknown.
	Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (Object, error)
	// Get returns the object's content and attributes; the caller closes the
	// reader. ErrNotFound when there is no such object.
	Get(ctx context.Context, key string) (io.ReadCloser, Object, error)
	// Head returns the object's attributes. ErrNotFound when there is none.
	Head(ctx context.Context, key string) (Object, error)
	// Delete removes the object. Deleting a missing key is not an error, so
	// retries and clean-ups are idempotent.
	Delete(ctx context.Context, key string) error
	// List returns the objects whose key starts with prefix, sorted by key
	// (byte order), at most limit of them (limit <= 0: all). Only Key, Size,
	// ModTime and ETag are set: S3 listings carry nothing more, and the folder
	// implementation keeps to the same contract. To list one tenant, use
	// TenantPrefix, which ends in "/" so tenant "a" never sees tenant "ab".
	List(ctx context.Context, prefix string, limit int) ([]Object, error)
}
