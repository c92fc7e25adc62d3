package kubeauth

import (
	"bytes"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

func apiKey(ns, name, token string, annotations map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelAPIKey: "true"}, Annotations: annotations},
		Data:       map[string][]byte{TokenKey: []byte(token)},
	}
}

// started returns a running, synced authenticator.
func started(t *testing.T) *SecretKeys {
	t.Helper()
	g := NewWithT(t)
	keys, err := New(cs, nil)
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

// TestSecretKeys checks keys against the real API server: only labelled
// Secrets count, rotation and deletion apply as soon as the watch delivers
// them, annotations set rate limits, and only hashes are cached.
func TestSecretKeys(t *testing.T) {
	needCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	namespace(t, "keys-a")
	namespace(t, "keys-b")
	secrets := cs.CoreV1().Secrets
	_, err := secrets("keys-a").Create(ctx, apiKey("keys-a", "web", "token-a-1", map[string]string{AnnotationRateLimit: "120/m,burst=4"}), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	unlabelled := apiKey("keys-b", "other", "token-unlabelled", nil)
	unlabelled.Labels = nil
	_, err = secrets("keys-b").Create(ctx, unlabelled, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	empty := apiKey("keys-b", "empty", "", nil)
	_, err = secrets("keys-b").Create(ctx, empty, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	bad := apiKey("keys-b", "bad-limit", "token-b-1", map[string]string{AnnotationRateLimit: "lots"})
	_, err = secrets("keys-b").Create(ctx, bad, metav1.CreateOptions{})
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
	for _, tok := range []string{"token-unlabelled", "", "token-a-", "token-a-1 "} {
		_, err = auth(k, tok)
		g.Expect(err).To(MatchError(gateway.ErrUnauthorized), tok)
	}

	// The cache holds hashes only.
	for _, obj := range k.informer.GetStore().List() {
		s := obj.(*corev1.Secret)
		g.Expect(s.Data).NotTo(HaveKey(TokenKey))
		for _, v := range s.Data {
			g.Expect(bytes.Contains(v, []byte("token-"))).To(BeFalse())
		}
	}

	// Rotation: the old token stops working, the new one starts.
	sec, err := secrets("keys-a").Get(ctx, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	sec.Data[TokenKey] = []byte("token-a-2")
	sec.Annotations[AnnotationRateLimit] = "unlimited"
	_, err = secrets("keys-a").Update(ctx, sec, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(Succeed())
	_, err = auth(k, "token-a-1")
	g.Expect(err).To(MatchError(gateway.ErrUnauthorized))
	p, _ = auth(k, "token-a-2")
	g.Expect(p.Limit).To(Equal(&gateway.Unlimited))

	// A token in two tenants' Secrets is refused, until one goes.
	_, err = secrets("keys-b").Create(ctx, apiKey("keys-b", "copy", "token-a-2", nil), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("several Secrets")))
	g.Expect(secrets("keys-b").Delete(ctx, "copy", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(Succeed())

	// Removing the label or deleting the Secret revokes the key.
	sec, err = secrets("keys-b").Get(ctx, "bad-limit", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	delete(sec.Labels, LabelAPIKey)
	_, err = secrets("keys-b").Update(ctx, sec, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secrets("keys-a").Delete(ctx, "web", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() error { _, err := auth(k, "token-a-2"); return err }).WithTimeout(30 * time.Second).Should(MatchError(gateway.ErrUnauthorized))
	g.Eventually(func() error { _, err := auth(k, "token-b-1"); return err }).WithTimeout(30 * time.Second).Should(MatchError(gateway.ErrUnauthorized))
}

// TestIsolationWithSecretKeys runs the tenant-isolation suite through keys
// kept as Secrets, against the embedded runtime serving both namespaces.
func TestIsolationWithSecretKeys(t *testing.T) {
	needCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	namespace(t, "team-a")
	namespace(t, "team-b")
	for ns, tok := range map[string]string{"team-a": "secret-token-a", "team-b": "secret-token-b"} {
		_, err := cs.CoreV1().Secrets(ns).Create(ctx, apiKey(ns, "gateway", tok, map[string]string{AnnotationRateLimit: "unlimited"}), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
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
