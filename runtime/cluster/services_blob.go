package cluster

import (
	"context"
	"io"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/remoteblob"
	"github.com/picobot/picobot/runtime/blob/s3blob"
)

// openBlobs opens the artifact store env describes. A process that has a
// bucket and no grant service URL (gateway, operator, migrate) reaches S3
// with its own credentials. A session pod has the grant service's URL
// (PICOBOT_BLOB_URL, from its namespace's connection Secret) and no S3
// credential: it asks the service for presigned requests of its tenant's
// keys, with its projected token (PICOBOT_BLOB_TOKEN_FILE). With neither
// there is no store (nil).
func openBlobs(ctx context.Context, env func(string) string) (blob.Store, *s3blob.Store, error) {
	if env(EnvS3Bucket) == "" && env(remoteblob.EnvURL) == "" {
		return nil, nil, nil
	}
	if u := env(remoteblob.EnvURL); u != "" && env(EnvS3AccessKey) == "" {
		s, err := remoteblob.New(remoteblob.Config{URL: u, TokenFile: env(remoteblob.EnvTokenFile)})
		return s, nil, err
	}
	s, err := s3blob.New(ctx, s3blob.Config{Bucket: env(EnvS3Bucket), Region: env(EnvS3Region), Endpoint: env(EnvS3Endpoint),
		UsePathStyle: env(EnvS3PathStyle) == "true", AccessKeyID: env(EnvS3AccessKey), SecretAccessKey: env(EnvS3SecretKey)})
	if err != nil {
		return nil, nil, err
	}
	return s, s, nil
}

// closeBlobs releases the store's connections.
func closeBlobs(s blob.Store) error {
	if c, ok := s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
