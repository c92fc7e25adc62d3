package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/s3blob"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/store/postgres"
)

// Environment variables of cluster-mode processes (gateway, session pods,
// operator). The operator passes its own values on to the pods it creates.
const (
	EnvPostgresURL = "PICOBOT_POSTGRES_URL"
	EnvRedisURL    = "PICOBOT_REDIS_URL"
	EnvS3Endpoint  = "PICOBOT_S3_ENDPOINT"
	EnvS3Bucket    = "PICOBOT_S3_BUCKET"
	EnvS3Region    = "PICOBOT_S3_REGION"
	EnvS3PathStyle = "PICOBOT_S3_PATH_STYLE"
	EnvS3AccessKey = "AWS_ACCESS_KEY_ID"
	EnvS3SecretKey = "AWS_SECRET_ACCESS_KEY"
)

// ServiceEnv lists the connection variables, in the order they are passed on.
var ServiceEnv = []string{EnvPostgresURL, EnvRedisURL, EnvS3Endpoint, EnvS3Bucket, EnvS3Region, EnvS3PathStyle, EnvS3AccessKey, EnvS3SecretKey}

// Services are the shared backends of cluster mode.
type Services struct {
	Store *postgres.Store
	Bus   *redisbus.Bus
	Redis *redis.Client
	// Blobs is the artifact store: S3 itself, or (in a session pod, which
	// holds no S3 credential) presigned requests from the blob grant
	// service; nil when neither is configured.
	Blobs blob.Store
	// S3 is the bucket reached with this process's own credentials; nil
	// when Blobs goes through the grant service.
	S3        *s3blob.Store
	Artifacts artifact.Store
}

// OpenServices connects to PostgreSQL, Redis and S3 as env describes. A
// missing variable is named in the error. Without S3 (no bucket, no blob
// grant service) Blobs is nil and artifacts fail with
// artifact.ErrNotConfigured.
func OpenServices(ctx context.Context, env func(string) string) (*Services, error) {
	var missing []string
	for _, k := range []string{EnvPostgresURL, EnvRedisURL} {
		if env(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("cluster mode needs %s (set by the Helm chart or the operator)", strings.Join(missing, ", "))
	}
	st, err := postgres.Open(ctx, env(EnvPostgresURL))
	if err != nil {
		return nil, err
	}
	b, err := redisbus.Open(env(EnvRedisURL), redisbus.Options{})
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("failed to connect to Redis: %w", err)
	}
	blobs, s3, err := openBlobs(ctx, env)
	if err != nil {
		_ = b.Close()
		_ = st.Close()
		return nil, err
	}
	return &Services{Store: st, Bus: b, Redis: b.Client(), Blobs: blobs, S3: s3, Artifacts: artifact.Store{Blobs: blobs, State: st}}, nil
}

// Close releases the connections.
func (s *Services) Close() error {
	return errors.Join(s.Bus.Close(), closeBlobs(s.Blobs), s.Store.Close())
}
