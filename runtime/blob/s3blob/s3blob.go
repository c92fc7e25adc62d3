// Package s3blob is the cluster-mode artifact store: objects in one S3 bucket
// (AWS or any S3-compatible server: SeaweedFS, Ceph RGW, Cloudflare R2, ...),
// with every tenant's keys under "tenants/<tenant>/".
//
// Objects are uploaded with a single PutObject call. The SDK's multipart upload
// manager (feature/s3/manager) is not a dependency of this module, so objects
// are limited to S3's single-PUT maximum of 5 GiB (blob.DefaultMaxObjectSize),
// and Put refuses larger ones with blob.ErrTooLarge before sending anything.
// Artifacts (documents, screenshots, exports) are far below it.
package s3blob

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // Content-MD5 is S3's integrity check, not a security boundary.
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/picobot/picobot/runtime/blob"
)

const (
	// DefaultRegion is used when Config.Region is empty. Self-hosted servers
	// ignore the region but SigV4 signs it, so it must be something.
	DefaultRegion = "us-east-1"
	// defaultSpoolMemory is how much of a body that is not seekable is
	// buffered in memory before Put spills it to a temporary file. The SDK
	// needs a seekable body to sign the payload and to retry.
	defaultSpoolMemory = 8 << 20
	// maxPresignTTL is SigV4's limit for presigned URLs.
	maxPresignTTL = 7 * 24 * time.Hour
	// listPageSize is S3's maximum page of ListObjectsV2.
	listPageSize = 1000
)

// Config selects the bucket and how to reach it.
type Config struct {
	// Bucket holds the objects of every tenant (keys carry the tenant).
	Bucket string
	// Region of the bucket; DefaultRegion when empty.
	Region string
	// Endpoint is the base URL of an S3-compatible server, e.g.
	// "http://seaweedfs.storage:8333"; empty means AWS's regional endpoint.
	Endpoint string
	// UsePathStyle puts the bucket in the path (http://host/bucket/key)
	// rather than in the host name (http://bucket.host/key). Most self-hosted
	// servers need path style, since bucket host names need wildcard DNS; AWS
	// prefers virtual-host style.
	UsePathStyle bool
	// AccessKeyID and SecretAccessKey (and SessionToken, for temporary keys)
	// are static credentials. When AccessKeyID is empty the SDK's default chain
	// is used: environment, shared files, web identity (IRSA), ECS, EC2 IMDS.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// MaxObjectSize refuses larger objects with blob.ErrTooLarge; 0 or more
	// than blob.DefaultMaxObjectSize means blob.DefaultMaxObjectSize.
	MaxObjectSize int64
	// HTTPClient replaces the HTTP client, e.g. to capture requests in tests.
	// When nil the store makes its own, and Close releases its connections.
	HTTPClient aws.HTTPClient
	// TempDir is where Put spools large bodies that are not seekable; empty
	// means os.TempDir.
	TempDir string
}

// String describes the configuration without its secrets, so logging a
// Config (or an error that prints one) never leaks the secret key or token.
func (c Config) String() string {
	creds := "default chain"
	if c.AccessKeyID != "" {
		creds = "static key " + c.AccessKeyID
	}
	return fmt.Sprintf("s3blob.Config{Bucket: %q, Region: %q, Endpoint: %q, UsePathStyle: %t, Credentials: %s}",
		c.Bucket, c.Region, c.Endpoint, c.UsePathStyle, creds)
}

// GoString keeps %#v from printing the secrets too.
func (c Config) GoString() string { return c.String() }

// Store keeps objects in an S3 bucket. It implements blob.Store.
type Store struct {
	client    *s3.Client
	bucket    string
	region    string
	maxSize   int64
	tempDir   string
	spoolMem  int64
	transport *http.Transport // ours to close; nil with Config.HTTPClient
}

var _ blob.Store = (*Store)(nil)

// New builds a Store from cfg. It does not contact the server; use
// EnsureBucket at first start to check access and create the bucket.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := validateBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("failed to configure S3 store: %w", err)
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("failed to configure S3 store: endpoint %q is not an http(s) URL", cfg.Endpoint)
		}
	}
	if cfg.AccessKeyID == "" && cfg.SecretAccessKey != "" {
		return nil, errors.New("failed to configure S3 store: a secret access key without an access key id")
	}
	s := &Store{bucket: cfg.Bucket, region: cfg.Region, maxSize: cfg.MaxObjectSize, tempDir: cfg.TempDir, spoolMem: defaultSpoolMemory}
	if s.region == "" {
		s.region = DefaultRegion
	}
	if s.maxSize <= 0 || s.maxSize > blob.DefaultMaxObjectSize {
		s.maxSize = blob.DefaultMaxObjectSize
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(s.region),
		// Checksums only where S3 requires them: S3-compatible servers lag
		// behind AWS's default CRC trailers. Put sends Content-MD5 instead.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("failed to load AWS configuration: %w", err)
	}
	if cfg.HTTPClient != nil {
		awsCfg.HTTPClient = cfg.HTTPClient
	} else {
		// A copy of the transport the SDK resolved (with AWS_CA_BUNDLE and
		// proxy settings applied), in a client of our own so Close can
		// release its connections.
		bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient)
		if !ok {
			bc = awshttp.NewBuildableClient()
		}
		s.transport = bc.GetTransport()
		awsCfg.HTTPClient = &http.Client{
			Transport: s.transport,
			// Like the SDK's own client: S3 redirects (wrong region) are
			// errors to report, not requests to replay with the signature.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	s.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = cfg.UsePathStyle
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return s, nil
}

// Close releases idle connections of the store's own HTTP client.
func (s *Store) Close() error {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// EnsureBucket creates the bucket unless it exists, for first start and tests.
// An existing bucket is left as it is.
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	if !hasCode(err, "NotFound", "NoSuchBucket") {
		return fmt.Errorf("failed to check bucket %q: %w", s.bucket, err)
	}
	in := &s3.CreateBucketInput{Bucket: aws.String(s.bucket)}
	if s.region != DefaultRegion {
		// us-east-1 is the one region that rejects an explicit constraint.
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(s.region),
		}
	}
	if _, err := s.client.CreateBucket(ctx, in); err != nil && !hasCode(err, "BucketAlreadyOwnedByYou") {
		return fmt.Errorf("failed to create bucket %q: %w", s.bucket, err)
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
	body, err := s.prepareBody(ctx, r, size)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	defer body.cleanup()
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          body.r,
		ContentLength: aws.Int64(body.size),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(body.md5)),
		ContentType:   aws.String(opts.ContentType),
		Metadata:      opts.Metadata,
	})
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	// PutObject returns no Last-Modified; the response's Date is the server's
	// clock at the write, the closest thing to it.
	modTime, ok := awsmiddleware.GetServerTime(out.ResultMetadata)
	if !ok {
		modTime = time.Now()
	}
	return blob.Object{
		Key:         key,
		Size:        body.size,
		ContentType: opts.ContentType,
		ModTime:     modTime,
		ETag:        unquote(out.ETag),
		Metadata:    blob.CloneMetadata(opts.Metadata),
	}, nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, blob.Object{}, fmt.Errorf("failed to get object %q: %w", key, err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return nil, blob.Object{}, fmt.Errorf("failed to get object %q: %w", key, mapError(err))
	}
	return out.Body, object(key, out.ContentLength, out.ContentType, out.LastModified, out.ETag, out.Metadata), nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, key string) (blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Object{}, fmt.Errorf("failed to head object %q: %w", key, err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to head object %q: %w", key, mapError(err))
	}
	return object(key, out.ContentLength, out.ContentType, out.LastModified, out.ETag, out.Metadata), nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	// S3 answers 204 for a missing key; some compatible servers answer 404.
	if err != nil && !errors.Is(mapError(err), blob.ErrNotFound) {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	return nil
}

// List implements blob.Store. Keys that blob.ValidateKey refuses (folder
// markers such as "docs/" made by S3 consoles) are not objects of this store
// and are skipped.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]blob.Object, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	if limit > 0 && limit < listPageSize {
		in.MaxKeys = aws.Int32(int32(limit))
	}
	var out []blob.Object
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() && (limit <= 0 || len(out) < limit) {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if blob.ValidateKey(key) != nil {
				continue
			}
			out = append(out, blob.Object{Key: key, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified), ETag: unquote(o.ETag)})
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	// S3 lists in UTF-8 byte order, which is Go's string order; sorting again
	// only guards against compatible servers that do not.
	slices.SortFunc(out, func(a, b blob.Object) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// PresignGet returns a URL that downloads the object without credentials until
// ttl passes (at most 7 days), so a browser or a chat channel can fetch an
// artifact straight from S3 instead of through the gateway. It does not check
// that the object exists.
func (s *Store) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := blob.ValidateKey(key); err != nil {
		return "", fmt.Errorf("failed to presign object %q: %w", key, err)
	}
	if ttl <= 0 || ttl > maxPresignTTL {
		return "", fmt.Errorf("failed to presign object %q: ttl %s is not between 0 and %s", key, ttl, maxPresignTTL)
	}
	req, err := s3.NewPresignClient(s.client).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)},
		s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("failed to presign object %q: %w", key, err)
	}
	return req.URL, nil
}

// putBody is a request body the SDK can sign, checksum and replay.
type putBody struct {
	r       io.ReadSeeker
	size    int64
	md5     []byte
	cleanup func()
}

// prepareBody checks r against the declared size and the limit and returns it
// as a seekable body with its MD5. A reader that is already random-access
// (bytes.Reader, strings.Reader, os.File) is used in place; any other is
// buffered in memory up to defaultSpoolMemory and in a temporary file beyond.
func (s *Store) prepareBody(ctx context.Context, r io.Reader, size int64) (putBody, error) {
	if b, ok, err := sectionBody(r, size); ok || err != nil {
		return b, err
	}
	limit := s.maxSize
	if size >= 0 {
		limit = size
	}
	src := io.LimitReader(ctxReader{ctx: ctx, r: r}, limit+1)
	sum := md5.New() //nolint:gosec // see import
	var mem bytes.Buffer
	if size >= 0 && size <= s.spoolMem {
		mem.Grow(int(size))
	}
	n, err := io.Copy(io.MultiWriter(&mem, sum), io.LimitReader(src, s.spoolMem+1))
	if err != nil {
		return putBody{}, fmt.Errorf("failed to read object content: %w", err)
	}
	body := putBody{r: bytes.NewReader(mem.Bytes()), cleanup: func() {}}
	if n > s.spoolMem {
		f, err := os.CreateTemp(s.tempDir, "picobot-s3blob-*")
		if err != nil {
			return putBody{}, fmt.Errorf("failed to create spool file: %w", err)
		}
		body = putBody{r: f, cleanup: func() { _ = f.Close(); _ = os.Remove(f.Name()) }}
		if _, err := f.Write(mem.Bytes()); err != nil {
			body.cleanup()
			return putBody{}, fmt.Errorf("failed to write spool file: %w", err)
		}
		more, err := io.Copy(io.MultiWriter(f, sum), src)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			body.cleanup()
			return putBody{}, fmt.Errorf("failed to spool object content: %w", err)
		}
		n += more
	}
	switch {
	case size >= 0 && n != size:
		body.cleanup()
		return putBody{}, fmt.Errorf("%w: got %s bytes, declared %d", blob.ErrSizeMismatch, countOf(n, size), size)
	case n > s.maxSize:
		body.cleanup()
		return putBody{}, fmt.Errorf("%w: more than %d bytes", blob.ErrTooLarge, s.maxSize)
	}
	body.size, body.md5 = n, sum.Sum(nil)
	return body, nil
}

// sectionBody uses a random-access reader in place: the size bytes from its
// current offset, checked to be exactly that many.
func sectionBody(r io.Reader, size int64) (putBody, bool, error) {
	ra, okAt := r.(io.ReaderAt)
	seeker, okSeek := r.(io.Seeker)
	if !okAt || !okSeek || size < 0 {
		return putBody{}, false, nil
	}
	off, err := seeker.Seek(0, io.SeekCurrent)
	if err != nil {
		return putBody{}, false, nil //nolint:nilerr // not seekable after all: spool it
	}
	section := io.NewSectionReader(ra, off, size)
	sum := md5.New() //nolint:gosec // see import
	n, err := io.Copy(sum, section)
	if err != nil {
		return putBody{}, true, fmt.Errorf("failed to read object content: %w", err)
	}
	var extra [1]byte
	if m, _ := ra.ReadAt(extra[:], off+size); n != size || m > 0 {
		return putBody{}, true, fmt.Errorf("%w: got %s bytes, declared %d", blob.ErrSizeMismatch, countOf(n+int64(m), size), size)
	}
	if _, err := section.Seek(0, io.SeekStart); err != nil {
		return putBody{}, true, fmt.Errorf("failed to rewind object content: %w", err)
	}
	return putBody{r: section, size: size, md5: sum.Sum(nil), cleanup: func() {}}, true, nil
}

// countOf reports a read count; when the reader had more than declared only
// size+1 bytes were read, so say "more than".
func countOf(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than %d", size)
	}
	return fmt.Sprint(n)
}

func object(key string, size *int64, contentType *string, modTime *time.Time, etag *string, meta map[string]string) blob.Object {
	obj := blob.Object{
		Key:         key,
		Size:        aws.ToInt64(size),
		ContentType: aws.ToString(contentType),
		ModTime:     aws.ToTime(modTime),
		ETag:        unquote(etag),
		Metadata:    blob.CloneMetadata(meta),
	}
	if obj.ContentType == "" {
		obj.ContentType = blob.DefaultContentType
	}
	return obj
}

// mapError turns S3's "no such key" answers into blob.ErrNotFound: GetObject
// reports NoSuchKey, HeadObject (no body) NotFound.
func mapError(err error) error {
	if hasCode(err, "NoSuchKey", "NotFound") {
		return blob.ErrNotFound
	}
	return err
}

func hasCode(err error, codes ...string) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && slices.Contains(codes, apiErr.ErrorCode())
}

func unquote(etag *string) string {
	return strings.Trim(aws.ToString(etag), `"`)
}

// validateBucketName applies S3's bucket naming rules, so a typo fails at start
// with a clear message rather than as a signature or DNS error later.
func validateBucketName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		edge := i == 0 || i == len(name)-1
		if !alnum && (edge || (c != '-' && c != '.')) {
			return fmt.Errorf("bucket name %q must be lower-case letters, digits, '-' and '.', starting and ending with a letter or digit", name)
		}
	}
	if strings.Contains(name, "..") {
		return fmt.Errorf("bucket name %q must not contain \"..\"", name)
	}
	return nil
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
