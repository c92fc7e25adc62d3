package embedded

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestTenantIsolation runs the gateway's isolation suite against one
// embedded runtime serving two tenants over one SQLite file.
func TestTenantIsolation(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, agentYAML, s.URL()), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())
	rt, err := Open(context.Background(), Options{Dir: dir, Tenant: "tenant-a", Tenants: []string{"tenant-b"}, Env: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)
	g.Expect(rt.Tenants()).To(Equal([]string{"tenant-a", "tenant-b"}))
	auth := gateway.MustStaticKeys(
		gateway.StaticKey{ID: "a", Token: "key-a", Tenant: "tenant-a"},
		gateway.StaticKey{ID: "b", Token: "key-b", Tenant: "tenant-b"},
		gateway.StaticKey{ID: "c", Token: "key-c", Tenant: "tenant-c"}, // not served by the runtime
	)
	srv, err := gateway.NewServer(gateway.Config{Backend: rt, Auth: auth, DefaultLimit: gateway.Unlimited})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	gatewaytest.RunIsolation(t, gatewaytest.Target{URL: hs.URL, KeyA: "key-a", KeyB: "key-b", Agent: "assistant", LLM: s})

	// Workspaces are per tenant.
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		entries, err := os.ReadDir(filepath.Join(dir, ".picobot", "workspaces", tenant, "assistant"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(entries).NotTo(BeEmpty(), "tenant %s has session workspaces", tenant)
	}
	// A key of a tenant the runtime does not serve reaches nothing.
	c := gatewaytest.Client{URL: hs.URL, Key: "key-c"}
	status, body := c.Do(t, http.MethodGet, "/api/v1/agents", nil)
	g.Expect(status).To(Equal(http.StatusForbidden), "%v", body)
	status, _ = c.Do(t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": "x", "agent": "assistant", "chat_id": "shared-chat", "text": "hi"})
	g.Expect(status).To(Equal(http.StatusForbidden))
	// A request without a tenant in its context is refused, never unscoped.
	_, err = rt.Handle(context.Background(), gateway.Send{ID: "x", Agent: "assistant", ChatID: "c", Text: "hi"})
	g.Expect(err).To(MatchError(ContainSubstring("carries no tenant")))
}

func TestTenantNamesAreChecked(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, agentYAML, s.URL()), 0o600)).To(Succeed())
	for _, bad := range []string{"Tenant_B", "../b", "-b", ""} {
		_, err := Open(context.Background(), Options{Dir: dir, Tenants: []string{bad}, Env: func(string) string { return "" }})
		g.Expect(err).To(MatchError(ContainSubstring("is not a namespace name")), bad)
	}
}
