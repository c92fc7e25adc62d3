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
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	s := &Store{bucket: cfg.Bucket, region: cfg.Region, maxSize: cfg.MaxObjectSize, tempDir: cfg.TempDir, spoolMem: blob.DefaultSpoolMemory}
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
	body, err := blob.SpoolBody(ctx, r, size, s.maxSize, s.spoolMem, s.tempDir)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	defer func() { _ = body.Close() }()
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(body.Size),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(body.MD5)),
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
		Size:        body.Size,
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
	req, err := s.PresignGetRequest(ctx, key, ttl)
	return req.URL, err
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
