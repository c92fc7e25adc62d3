package controller

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/published"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/kubeauth"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// startPublishManager runs, until the test ends, a namespaced operator (as
// main runs it with --watch-namespaces and --gateway-namespace) watching
// tenants and publishing into gatewayNS.
func startPublishManager(t *testing.T, gatewayNS string, tenants ...string) {
	t.Helper()
	needAPIServer(t)
	opts := ctrl.Options{Scheme: testScheme, Cache: CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)}}
	opts.Cache.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range tenants {
		opts.Cache.DefaultNamespaces[ns] = cache.Config{}
	}
	WatchGatewayNamespace(&opts.Cache, tenants, gatewayNS)
	mgr, err := ctrl.NewManager(restConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := Setup(ctx, mgr, Config{Catalog: policy.DefaultCatalog(), Concurrency: 4, GatewayNamespace: gatewayNS}); err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("publishing manager stopped: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// startKeys runs the gateway's authenticator over gatewayNS until the test
// ends.
func startKeys(t *testing.T, gatewayNS string) *kubeauth.SecretKeys {
	t.Helper()
	g := NewWithT(t)
	keys, err := kubeauth.New(kubernetes.NewForConfigOrDie(restConfig), gatewayNS, nil)
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

func apiKeySecret(ns, name, token string, annotations map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{published.LabelAPIKey: "true"}, Annotations: annotations},
		Data:       map[string][]byte{published.TokenKey: []byte(token)},
	}
}

func authWith(k *kubeauth.SecretKeys, token string) (gateway.Principal, error) {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	return k.Authenticate(r, token)
}

// TestGatewayKeysFromPublishedIndex runs API keys end to end without the
// gateway reading a Secret: tenants label Secrets, the operator publishes
// their hashes into the gateway's namespace, the gateway's authenticator
// watches that namespace only. Only labelled Secrets count, rotation and
// deletion apply once republished, annotations set rate limits, a token in
// two Secrets is refused, and no token reaches the gateway's namespace.
func TestGatewayKeysFromPublishedIndex(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	gw, a, b := newRuntimeNamespace(t), newRuntimeNamespace(t), newRuntimeNamespace(t)
	g.Expect(k8s.Create(ctx, apiKeySecret(a, "web", "token-a-1", map[string]string{published.AnnotationRateLimit: "120/m,burst=4"}))).To(Succeed())
	unlabelled := apiKeySecret(b, "other", "token-unlabelled", nil)
	unlabelled.Labels = nil
	g.Expect(k8s.Create(ctx, unlabelled)).To(Succeed())
	g.Expect(k8s.Create(ctx, apiKeySecret(b, "empty", "", nil))).To(Succeed())
	g.Expect(k8s.Create(ctx, apiKeySecret(b, "bad-limit", "token-b-1", map[string]string{published.AnnotationRateLimit: "lots"}))).To(Succeed())
	startPublishManager(t, gw, a, b)
	k := startKeys(t, gw)

	eventually := func(token string) AsyncAssertion {
		return g.Eventually(func() error { _, err := authWith(k, token); return err }).WithTimeout(30 * time.Second)
	}
	eventually("token-a-1").Should(Succeed())
	eventually("token-b-1").Should(Succeed())
	p, err := authWith(k, "token-a-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Tenant).To(Equal(a))
	g.Expect(p.KeyID).To(Equal(a + "/web"))
	g.Expect(p.Limit).To(Equal(&gateway.RateLimit{Rate: 2, Burst: 4}))
	p, err = authWith(k, "token-b-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Tenant).To(Equal(b))
	g.Expect(p.Limit).To(BeNil(), "an invalid annotation leaves the default")
	for _, tok := range []string{"token-unlabelled", "", "token-a-", "token-a-1 "} {
		_, err = authWith(k, tok)
		g.Expect(err).To(MatchError(gateway.ErrUnauthorized), tok)
	}

	// What is published holds hashes only.
	var cms corev1.ConfigMapList
	g.Expect(k8s.List(ctx, &cms, client.InNamespace(gw))).To(Succeed())
	g.Expect(cms.Items).To(HaveLen(2))
	for _, cm := range cms.Items {
		for _, v := range cm.Data {
			g.Expect(v).NotTo(ContainSubstring("token-"))
		}
	}

	// Rotation: the old token stops working, the new one starts.
	sec := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: "web"}, sec)).To(Succeed())
	sec.Data[published.TokenKey] = []byte("token-a-2")
	sec.Annotations[published.AnnotationRateLimit] = "unlimited"
	g.Expect(k8s.Update(ctx, sec)).To(Succeed())
	eventually("token-a-2").Should(Succeed())
	_, err = authWith(k, "token-a-1")
	g.Expect(err).To(MatchError(gateway.ErrUnauthorized))
	p, _ = authWith(k, "token-a-2")
	g.Expect(p.Limit).To(Equal(&gateway.Unlimited))

	// A token in two tenants' Secrets is refused, until one goes.
	g.Expect(k8s.Create(ctx, apiKeySecret(b, "copy", "token-a-2", nil))).To(Succeed())
	eventually("token-a-2").Should(MatchError(ContainSubstring("several Secrets")))
	g.Expect(k8s.Delete(ctx, apiKeySecret(b, "copy", "", nil))).To(Succeed())
	eventually("token-a-2").Should(Succeed())

	// A deleted or edited index is published again.
	idx := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: gw, Name: published.KeyIndexName(a)}}
	g.Expect(k8s.Delete(ctx, idx)).To(Succeed())
	g.Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(idx), idx) }).WithTimeout(30 * time.Second).Should(Succeed())
	idx.Data = map[string]string{"web": `{"sha256":"` + published.HashToken([]byte("attacker")) + `"}`}
	g.Expect(k8s.Update(ctx, idx)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(idx), idx)).To(Succeed())
		g.Expect(idx.Data["web"]).To(ContainSubstring(published.HashToken([]byte("token-a-2"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	eventually("token-a-2").Should(Succeed())

	// Removing the label or deleting the Secret revokes the key; a tenant
	// with no key left has no index.
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: b, Name: "bad-limit"}, sec)).To(Succeed())
	delete(sec.Labels, published.LabelAPIKey)
	g.Expect(k8s.Update(ctx, sec)).To(Succeed())
	g.Expect(k8s.Delete(ctx, apiKeySecret(a, "web", "", nil))).To(Succeed())
	eventually("token-a-2").Should(MatchError(gateway.ErrUnauthorized))
	eventually("token-b-1").Should(MatchError(gateway.ErrUnauthorized))
	g.Eventually(func() ([]corev1.ConfigMap, error) {
		err := k8s.List(ctx, &cms, client.InNamespace(gw), client.HasLabels{published.LabelKeyIndex})
		return cms.Items, err
	}).WithTimeout(30 * time.Second).Should(BeEmpty())
}

// TestGatewayChannelCredentialsPublished checks the copies of channel
// Secrets the gateway reads instead of the tenant's: made for the Secrets
// channels name (and no other), following their changes, set back when
// tampered with, and gone when no channel names them.
func TestGatewayChannelCredentialsPublished(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	gw, a := newRuntimeNamespace(t), newRuntimeNamespace(t)
	startPublishManager(t, gw, a)
	g.Expect(k8s.Create(ctx, secret(a, "openai", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, secret(a, "telegram", "botToken"))).To(Succeed())
	agent := openAIAgent(a, "helper", "openai")
	agent.Spec.Channels = []picobotv1alpha1.Channel{{Type: "telegram", SecretRef: &corev1.LocalObjectReference{Name: "telegram"}}}
	g.Expect(k8s.Create(ctx, agent)).To(Succeed())

	key := client.ObjectKey{Namespace: gw, Name: published.ChannelCredentialsName(a, "telegram")}
	copyHas := func(token string) func(Gomega) {
		return func(g Gomega) {
			c := &corev1.Secret{}
			g.Expect(k8s.Get(ctx, key, c)).To(Succeed())
			g.Expect(published.IsChannelCredentials(c, a, "telegram")).To(BeTrue())
			g.Expect(c.Data).To(Equal(map[string][]byte{"botToken": []byte(token)}))
		}
	}
	g.Eventually(copyHas("sk-test-botToken")).WithTimeout(30 * time.Second).Should(Succeed())
	var all corev1.SecretList
	g.Expect(k8s.List(ctx, &all, client.InNamespace(gw))).To(Succeed())
	g.Expect(all.Items).To(HaveLen(1), "the model's API key Secret is not the gateway's business")

	// The tenant rotates the token.
	src := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: a, Name: "telegram"}, src)).To(Succeed())
	src.Data["botToken"] = []byte("rotated")
	g.Expect(k8s.Update(ctx, src)).To(Succeed())
	g.Eventually(copyHas("rotated")).WithTimeout(30 * time.Second).Should(Succeed())

	// Someone edits the copy and takes its labels off; then deletes it.
	c := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, key, c)).To(Succeed())
	c.Labels, c.Data = nil, map[string][]byte{"botToken": []byte("attacker")}
	g.Expect(k8s.Update(ctx, c)).To(Succeed())
	g.Eventually(copyHas("rotated")).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(k8s.Delete(ctx, c)).To(Succeed())
	g.Eventually(copyHas("rotated")).WithTimeout(30 * time.Second).Should(Succeed())

	// No channel names it any more: the copy goes.
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
	agent.Spec.Channels = nil
	g.Expect(k8s.Update(ctx, agent)).To(Succeed())
	g.Eventually(func() ([]corev1.Secret, error) {
		err := k8s.List(ctx, &all, client.InNamespace(gw))
		return all.Items, err
	}).WithTimeout(30 * time.Second).Should(BeEmpty())
}
