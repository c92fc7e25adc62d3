package s3blob

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/picobot/picobot/runtime/blob"
)

// Presigned is one request S3 accepts without credentials until it
// expires: the method, the URL (the key and the signature are in it) and
// the headers the request must carry exactly, since they are signed too.
type Presigned struct {
	Method string
	URL    string
	// Header holds the signed headers, Host excepted (the URL gives it).
	Header http.Header
}

// PresignPut returns a PUT of exactly this content: its size, MD5, content
// type and metadata are signed, so the URL stores nothing else, under no
// other key. Used to let a client without credentials (a session pod)
// upload one object.
func (s *Store) PresignPut(ctx context.Context, key string, size int64, md5 []byte, opts blob.PutOptions, ttl time.Duration) (Presigned, error) {
	if err := s.presignable(key, ttl); err != nil {
		return Presigned{}, err
	}
	opts, err := opts.Normalize()
	if err != nil {
		return Presigned{}, fmt.Errorf("failed to presign object %q: %w", key, err)
	}
	switch {
	case size < 0:
		return Presigned{}, fmt.Errorf("failed to presign object %q: %w: size %d is not known", key, blob.ErrInvalidOptions, size)
	case size > s.maxSize:
		return Presigned{}, fmt.Errorf("failed to presign object %q: %w: %d bytes, limit %d", key, blob.ErrTooLarge, size, s.maxSize)
	case len(md5) != 16:
		return Presigned{}, fmt.Errorf("failed to presign object %q: %w: an MD5 is 16 bytes, not %d", key, blob.ErrInvalidOptions, len(md5))
	}
	req, err := s3.NewPresignClient(s.client).PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		ContentLength: aws.Int64(size),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(md5)),
		ContentType:   aws.String(opts.ContentType),
		Metadata:      opts.Metadata,
	}, s3.WithPresignExpires(ttl))
	return presigned(key, req, err)
}

// PresignGetRequest is PresignGet as a Presigned.
func (s *Store) PresignGetRequest(ctx context.Context, key string, ttl time.Duration) (Presigned, error) {
	if err := s.presignable(key, ttl); err != nil {
		return Presigned{}, err
	}
	req, err := s3.NewPresignClient(s.client).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, s3.WithPresignExpires(ttl))
	return presigned(key, req, err)
}

// PresignHead returns a HEAD of the object.
func (s *Store) PresignHead(ctx context.Context, key string, ttl time.Duration) (Presigned, error) {
	if err := s.presignable(key, ttl); err != nil {
		return Presigned{}, err
	}
	req, err := s3.NewPresignClient(s.client).PresignHeadObject(ctx,
		&s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, s3.WithPresignExpires(ttl))
	return presigned(key, req, err)
}

// PresignDelete returns a DELETE of the object.
func (s *Store) PresignDelete(ctx context.Context, key string, ttl time.Duration) (Presigned, error) {
	if err := s.presignable(key, ttl); err != nil {
		return Presigned{}, err
	}
	req, err := s3.NewPresignClient(s.client).PresignDeleteObject(ctx,
		&s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, s3.WithPresignExpires(ttl))
	return presigned(key, req, err)
}

func (s *Store) presignable(key string, ttl time.Duration) error {
	if err := blob.ValidateKey(key); err != nil {
		return fmt.Errorf("failed to presign object %q: %w", key, err)
	}
	if ttl <= 0 || ttl > maxPresignTTL {
		return fmt.Errorf("failed to presign object %q: ttl %s is not between 0 and %s", key, ttl, maxPresignTTL)
	}
	return nil
}

func presigned(key string, req *v4.PresignedHTTPRequest, err error) (Presigned, error) {
	if err != nil {
		return Presigned{}, fmt.Errorf("failed to presign object %q: %w", key, err)
	}
	h := req.SignedHeader.Clone()
	h.Del("Host")
	return Presigned{Method: req.Method, URL: req.URL, Header: h}, nil
}
