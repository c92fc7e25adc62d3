package controller

import (
	"context"

	"github.com/picobot/picobot/runtime/blob/remoteblob"
	"github.com/picobot/picobot/runtime/cluster"
)

// s3Settings are the connection settings of S3. None reaches a tenant
// namespace: session pods hold no S3 credential, and need no bucket or
// endpoint either, since the blob grant service hands them whole presigned
// requests.
var s3Settings = []string{cluster.EnvS3Endpoint, cluster.EnvS3Bucket, cluster.EnvS3Region, cluster.EnvS3PathStyle,
	cluster.EnvS3AccessKey, cluster.EnvS3SecretKey, "AWS_SESSION_TOKEN"}

// grantedBlobs gives a tenant's connection Secret the blob grant service's
// URL in place of the S3 settings, whatever TenantConnection it wraps.
type grantedBlobs struct {
	TenantConnection
	// url is the grant service's URL (remoteblob.EnvURL); "" leaves session
	// pods without an artifact store.
	url string
}

// SecretData implements TenantConnection.
func (g grantedBlobs) SecretData(ctx context.Context, namespace string) (map[string][]byte, error) {
	d, err := g.TenantConnection.SecretData(ctx, namespace)
	if err != nil {
		return nil, err
	}
	for _, k := range s3Settings {
		delete(d, k)
	}
	if g.url != "" {
		d[remoteblob.EnvURL] = []byte(g.url)
	}
	return d, nil
}
