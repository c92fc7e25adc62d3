package cluster

import (
	"fmt"
	"testing"

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
}
