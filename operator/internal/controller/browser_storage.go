package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/picobot/picobot/runtime/blob"
)

// ProfileStorage keeps the archives of BrowserProfiles stored in S3. The
// browser pod itself restores and saves its profile through presigned URLs,
// so it holds no S3 credentials; the operator only signs and deletes.
type ProfileStorage interface {
	// PresignGet returns a URL the archive can be downloaded from until ttl.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
	// PresignPut returns a URL the archive can be uploaded to until ttl.
	PresignPut(ctx context.Context, key string, ttl time.Duration) (string, error)
	// Delete removes the archive; a missing one is not an error.
	Delete(ctx context.Context, key string) error
}

// maxPresignTTL is SigV4's limit for presigned URLs. A browser pod of an S3
// profile is replaced before its URLs expire.
const maxPresignTTL = 7 * 24 * time.Hour

// profileArchiveKey is where an S3 profile's archive lives.
func profileArchiveKey(namespace, profile string) (string, error) {
	return blob.TenantKey(namespace, "browser-profiles", profile+".tar.gz")
}

// s3ProfileStorage is ProfileStorage on an S3 bucket.
type s3ProfileStorage struct {
	client *s3.Client
	bucket string
}

// NewS3ProfileStorage builds the profile storage from the connection
// settings the operator hands to session pods (PICOBOT_S3_ENDPOINT,
// PICOBOT_S3_BUCKET, PICOBOT_S3_REGION, PICOBOT_S3_PATH_STYLE,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Without a bucket it returns
// nil: profiles stored in S3 then cannot run, and say so in their status.
func NewS3ProfileStorage(ctx context.Context, conn map[string]string) (ProfileStorage, error) {
	bucket := conn["PICOBOT_S3_BUCKET"]
	if bucket == "" {
		return nil, nil
	}
	region := conn["PICOBOT_S3_REGION"]
	if region == "" {
		region = "us-east-1"
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(region),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired)}
	if id := conn["AWS_ACCESS_KEY_ID"]; id != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, conn["AWS_SECRET_ACCESS_KEY"], "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("failed to load the S3 configuration of browser profiles: %w", err)
	}
	endpoint, pathStyle := conn["PICOBOT_S3_ENDPOINT"], strings.EqualFold(conn["PICOBOT_S3_PATH_STYLE"], "true")
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = pathStyle
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return &s3ProfileStorage{client: c, bucket: bucket}, nil
}

func (s *s3ProfileStorage) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	req, err := s3.NewPresignClient(s.client).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("failed to presign the download of %q: %w", key, err)
	}
	return req.URL, nil
}

func (s *s3ProfileStorage) PresignPut(ctx context.Context, key string, ttl time.Duration) (string, error) {
	req, err := s3.NewPresignClient(s.client).PresignPutObject(ctx,
		&s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("failed to presign the upload of %q: %w", key, err)
	}
	return req.URL, nil
}

func (s *s3ProfileStorage) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err == nil {
		return nil
	}
	// S3 answers 204 for a missing key; some compatible servers 404.
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound") {
		return nil
	}
	return fmt.Errorf("failed to delete browser profile archive %q: %w", key, err)
}
