package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/operator/internal/podspec"
)

// operatorS3 are S3 settings as the operator holds them (it presigns
// browser profile archives with them).
var operatorS3 = map[string]string{"PICOBOT_S3_ENDPOINT": "http://s3.picobot-system:8333", "PICOBOT_S3_BUCKET": "picobot",
	"PICOBOT_S3_REGION": "us-east-1", "PICOBOT_S3_PATH_STYLE": "true",
	"AWS_ACCESS_KEY_ID": "AKIAOPERATOR", "AWS_SECRET_ACCESS_KEY": "operator-secret", "AWS_SESSION_TOKEN": "operator-session"}

// tenantSecret is a TenantConnection that (wrongly) hands out S3
// credentials too, as one built on the operator's settings would.
type tenantSecret map[string]string

func (t tenantSecret) SecretData(context.Context, string) (map[string][]byte, error) {
	return SharedConnection(t).SecretData(context.Background(), "")
}

func (t tenantSecret) Drop(context.Context, string) error { return nil }

// TestConnectionSecretHoldsNoS3Credential: whatever the operator holds and
// whatever TenantConnection is chosen, a tenant namespace's connection
// Secret, read back from the API server, has no S3 setting, only the blob
// grant service's URL.
func TestConnectionSecretHoldsNoS3Credential(t *testing.T) {
	for name, tenants := range map[string]TenantConnection{"shared connection": nil, "tenant connection": tenantSecret(operatorS3)} {
		t.Run(name, func(t *testing.T) {
			ns := newRuntimeNamespace(t)
			var redisURL string
			rc := startRuntimeManager(t, ns, func(rc *RuntimeConfig) {
				redisURL = rc.Connection["PICOBOT_REDIS_URL"]
				for k, v := range operatorS3 {
					rc.Connection[k] = v
				}
				rc.Tenants, rc.BlobURL = tenants, "http://picobot-gateway.picobot-system.svc:8090"
			})
			g := NewWithT(t)
			ctx := context.Background()
			g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
			g.Expect(k8s.Create(ctx, openAIAgent(ns, "helper", "openai"))).To(Succeed())
			s := &corev1.Secret{}
			g.Eventually(func() error {
				return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.ConnectionSecret}, s)
			}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
			for k := range operatorS3 {
				g.Expect(s.Data).NotTo(HaveKey(k))
			}
			g.Expect(s.Data).To(HaveKeyWithValue("PICOBOT_BLOB_URL", []byte("http://picobot-gateway.picobot-system.svc:8090")))
			if tenants == nil {
				g.Expect(s.Data).To(HaveKeyWithValue("PICOBOT_REDIS_URL", []byte(redisURL)))
			}
			// The operator keeps its own, for browser profile archives.
			g.Expect(rc.Connection).To(HaveKeyWithValue("AWS_SECRET_ACCESS_KEY", "operator-secret"))
		})
	}
}
