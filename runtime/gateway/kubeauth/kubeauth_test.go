package kubeauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/picobot/picobot/runtime/cluster/published"
	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/controlplane"
)

var (
	cs      kubernetes.Interface
	skipped string
)

func TestMain(m *testing.M) {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipped = reason
		os.Exit(m.Run())
	}
	cs = kubernetes.NewForConfigOrDie(env.Config)
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func needCluster(t *testing.T) {
	if skipped != "" {
		t.Skip(skipped)
	}
}

func namespace(t *testing.T, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) { // shared by the tests
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
	}
}

// gatewayNS is where the tests publish API-key indexes, as the operator
// does in the gateway's namespace.
const gatewayNS = "gw-system"

// publish writes tenant's index (keys: Secret name -> token, "" for none;
// limits: Secret name -> rate-limit annotation) in namespace ns, as the
// operator does.
func publish(t *testing.T, ns, tenant string, keys, limits map[string]string) {
	t.Helper()
	g := NewWithT(t)
	idx := map[string]published.Key{}
	for name, tok := range keys {
		k := published.Key{SHA256: published.HashToken([]byte(tok))}
		if l, ok := limits[name]; ok {
			k.RateLimit = &l
		}
		idx[name] = k
	}
	cm, err := published.KeyIndex(ns, tenant, idx)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	cur, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	if err == nil {
		cur.Data = cm.Data
		_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cur, metav1.UpdateOptions{})
	} else {
		_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	}
	g.Expect(err).NotTo(HaveOccurred())
}

// started returns a running, synced authenticator over gatewayNS.
func started(t *testing.T) *SecretKeys {
	t.Helper()
	g := NewWithT(t)
	keys, err := New(cs, gatewayNS, nil)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = keys.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	sync, stop := context.WithTimeout(ctx, time.Minute) // hang guard only
	defer stop()
	g.Expect(keys.WaitForSync(sync)).To(BeTrue())
	return keys
}

func auth(k *SecretKeys, token string) (gateway.Principal, error) {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	return k.Authenticate(r, token)
}

// TestPublishedKeys checks the authenticator against the real API server,
// over indexes as the operator publishes them (the operator's tests run the
// chain from labelled Secrets): rotation and deletion apply as soon as the
// watch delivers them, rate limits come from the annotation, a token of two
// Secrets is refused, and indexes outside the gateway's namespace, or that
// name a tenant they are not of, grant nothing.
func TestPublishedKeys(t *testing.T) {
	needCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	for _, ns := range []string{gatewayNS, "keys-a", "keys-b"} {
		namespace(t, ns)
	}
	publish(t, gatewayNS, "keys-a", map[string]string{"web": "token-a-1"}, map[string]string{"web": "120/m,burst=4"})
	publish(t, gatewayNS, "keys-b", map[string]string{"bad-limit": "token-b-1"}, map[string]string{"bad-limit": "lots"})
	// A tenant writes an index in its own namespace, naming another
	// tenant: the gateway does not watch there.
	publish(t, "keys-b", "keys-a", map[string]string{"forged": "token-forged"}, nil)
	// An index whose name is not its tenant's, and an entry that does not
	// decode, are ignored.
	misnamed, err := published.KeyIndex(gatewayNS, "keys-a", map[string]published.Key{"x": {SHA256: published.HashToken([]byte("token-misnamed"))}})
	g.Expect(err).NotTo(HaveOccurred())
	misnamed.Name = published.KeyIndexName("keys-b") + "-extra"
	_, err = cs.CoreV1().ConfigMaps(gatewayNS).Create(ctx, misnamed, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	k := started(t)
	p, err := auth(k, "token-a-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Tenant).To(Equal("keys-a"))
	g.Expect(p.KeyID).To(Equal("keys-a/web"))
	g.Expect(p.Limit).To(Equal(&gateway.RateLimit{Rate: 2, Burst: 4}))
	p, err = auth(k, "token-b-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Tenant).To(Equal("keys-b"))
	g.Expect(p.Limit).To(BeNil(), "an invalid annotation leaves the default")
	for _, tok := range []string{"token-forged", "token-misnamed", "", "token-a-", "token-a-1 "} {
		_, err = auth(k, tok)
		g.Expect(err).To(MatchError(gateway.ErrUnauthorized), tok)
	}
	cm, err := cs.CoreV1().ConfigMaps(gatewayNS).Get(ctx, published.KeyIndexName("keys-b"), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cm.Data["broken"] = "{"
	_, err = cs.CoreV1().ConfigMaps(gatewayNS).Update(ctx, cm, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// Rotation: the old token stops working, the new one starts.
	publish(t, gatewayNS, "keys-a", map[string]string{"web": "token-a-2"}, map[string]string{"web": "unlimited"})
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(Succeed())
	_, err = auth(k, "token-a-1")
	g.Expect(err).To(MatchError(gateway.ErrUnauthorized))
	p, _ = auth(k, "token-a-2")
	g.Expect(p.Limit).To(Equal(&gateway.Unlimited))
	_, err = auth(k, "token-b-1")
	g.Expect(err).NotTo(HaveOccurred(), "a broken entry leaves the tenant's others")

	// A token in two tenants' Secrets is refused, until one goes.
	publish(t, gatewayNS, "keys-b", map[string]string{"bad-limit": "token-b-1", "copy": "token-a-2"}, nil)
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("several Secrets")))
	publish(t, gatewayNS, "keys-b", map[string]string{"bad-limit": "token-b-1"}, nil)
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(Succeed())

	// Deleting a tenant's index revokes its keys, and only its.
	g.Expect(cs.CoreV1().ConfigMaps(gatewayNS).Delete(ctx, published.KeyIndexName("keys-a"), metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(MatchError(gateway.ErrUnauthorized))
	_, err = auth(k, "token-b-1")
	g.Expect(err).NotTo(HaveOccurred())
}

// TestIsolationWithSecretKeys runs the tenant-isolation suite through keys
// published for the gateway, against the embedded runtime serving both namespaces.
func TestIsolationWithSecretKeys(t *testing.T) {
	needCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	namespace(t, gatewayNS)
	for ns, tok := range map[string]string{"team-a": "secret-token-a", "team-b": "secret-token-b"} {
		publish(t, gatewayNS, ns, map[string]string{"gateway": tok}, map[string]string{"gateway": "unlimited"})
	}
	keys := started(t)

	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	agent := fmt.Sprintf(`apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
`, llm.URL())
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(agent), 0o600)).To(Succeed())
	rt, err := embedded.Open(ctx, embedded.Options{Dir: dir, Tenant: "team-a", Tenants: []string{"team-b"},
		Env: func(name string) string {
			if name == embedded.SecretEnvName("llm", "apiKey") {
				return "sk-test"
			}
			return ""
		}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)
	srv, err := gateway.NewServer(gateway.Config{Backend: rt, Auth: keys})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	gatewaytest.RunIsolation(t, gatewaytest.Target{URL: hs.URL, KeyA: "secret-token-a", KeyB: "secret-token-b", Agent: "assistant", LLM: llm})
}
