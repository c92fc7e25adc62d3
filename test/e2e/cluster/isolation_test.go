package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
)

// TestTenantIsolation runs the gateway's isolation suite against cluster
// mode: two namespaces with their own API-key Secrets and an agent of the
// same name, served by session pods over shared PostgreSQL, Redis and S3.
// Tenant B's key must not reach tenant A's sessions, messages or artifacts
// through any endpoint.
func TestTenantIsolation(t *testing.T) {
	needStack(t)
	st.apply(t, fmt.Sprintf(tenantManifest, "iso-a", "iso-a-key", st.llm.URL(), "2m", 1))
	st.apply(t, fmt.Sprintf(tenantManifest, "iso-b", "iso-b-key", st.llm.URL(), "2m", 1))
	st.waitReady(t, "iso-a", "helper")
	st.waitReady(t, "iso-b", "helper")
	gatewaytest.RunIsolation(t, gatewaytest.Target{URL: st.gatewayURL, KeyA: "iso-a-key", KeyB: "iso-b-key", Agent: "helper", LLM: st.llm})

	// The session pods stored their /dump artifacts (read back above through
	// the gateway) with presigned requests from the blob grant service: the
	// namespaces hold no S3 setting, let alone a credential.
	for _, ns := range []string{"iso-a", "iso-b"} {
		sec, err := st.cs.CoreV1().Secrets(ns).Get(context.Background(), "picobot-runtime-connection", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range sec.Data {
			if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "PICOBOT_S3_") {
				t.Errorf("the connection Secret of %s holds %s", ns, k)
			}
		}
		if len(sec.Data["PICOBOT_BLOB_URL"]) == 0 {
			t.Errorf("the connection Secret of %s has no PICOBOT_BLOB_URL: %v", ns, sec.Data)
		}
	}
}
