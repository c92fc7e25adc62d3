package remote

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

const token = "pod-token-0123456789abcdef"

func namespace(t *testing.T) string {
	t.Helper()
	needKube(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "remote-"}}
	if err := kube.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newProvider(t *testing.T, ns string, mut ...func(*ProviderConfig)) *Provider {
	t.Helper()
	cfg := ProviderConfig{Client: kube, Namespace: ns, Agent: "helper", Holder: "helper-pod-1",
		Heartbeat: 100 * time.Millisecond, ReadyTimeout: 20 * time.Second, Poll: 20 * time.Millisecond}
	for _, m := range mut {
		m(&cfg)
	}
	p, err := NewProvider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// browserPod serves the real DevTools proxy of `picobot browser` with
// token in front of a stub browser.
func browserPod(t *testing.T, tok string) string {
	t.Helper()
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, `{"Browser":"Chrome/156.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/stub"}`, r.Host)
	}))
	t.Cleanup(stub.Close)
	proxy, err := browser.NewDevToolsProxy(stub.URL, tok)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

// publish plays the operator: it writes keys of the agent's endpoints Secret.
func publish(t *testing.T, ns string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wire.EndpointsSecret("helper")}, StringData: data}
	err := kube.Create(context.Background(), s)
	if apierrors.IsAlreadyExists(err) {
		err = kube.Update(context.Background(), s)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func lease(g Gomega, ns, name string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	g.Expect(kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, l)).To(Succeed())
	return l
}

type result struct {
	ep  browser.Endpoint
	err error
}

func ask(p *Provider, key browser.Key) <-chan result {
	out := make(chan result, 1)
	go func() {
		ep, err := p.Endpoint(context.Background(), key)
		out <- result{ep, err}
	}()
	return out
}

func TestNewProviderChecksItsConfig(t *testing.T) {
	g := NewWithT(t)
	_, err := NewProvider(ProviderConfig{Namespace: "a", Agent: "b"})
	g.Expect(err).To(MatchError("a browser provider needs a Kubernetes client"))
	_, err = NewProvider(ProviderConfig{Client: kube, Agent: "b"})
	g.Expect(err).To(MatchError("a browser provider needs the namespace and the agent"))
}

func TestEphemeralBrowserRequest(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	p := newProvider(t, ns, func(c *ProviderConfig) { c.AgentUID = "agent-uid"; c.EphemeralIdle = 90 * time.Second })
	key := browser.DialogKey("web:alice:1")
	name := wire.DialogName("helper", "web:alice:1")
	res := ask(p, key)

	// The request the operator acts on.
	var l *coordinationv1.Lease
	g.Eventually(func(g Gomega) { l = lease(g, ns, name) }).Should(Succeed())
	g.Expect(l.Labels).To(Equal(map[string]string{wire.LabelName: "picobot", wire.LabelComponent: "browser",
		wire.LabelAgent: "helper", wire.LabelBrowser: name}))
	g.Expect(l.Annotations).To(Equal(map[string]string{wire.AnnotationDialog: "web:alice:1"}))
	g.Expect(*l.Spec.LeaseDurationSeconds).To(Equal(int32(90)))
	g.Expect(*l.Spec.HolderIdentity).To(Equal("helper-pod-1"))
	g.Expect(l.OwnerReferences).To(Equal([]metav1.OwnerReference{{APIVersion: "agents.picobot.io/v1alpha1", Kind: "Agent", Name: "helper", UID: "agent-uid"}}))

	// An error about an earlier request is not this one's; a wrong token
	// (a pod being replaced) keeps it waiting; the right one ends the wait.
	url := browserPod(t, token)
	publish(t, ns, map[string]string{wire.ErrorKey(name): wire.FormatError(time.Now().Add(-time.Hour), "an old failure"),
		wire.URLKey(name): url, wire.TokenKey(name): "a-token-of-the-pod-before"})
	g.Consistently(res).WithTimeout(300 * time.Millisecond).ShouldNot(Receive())
	publish(t, ns, map[string]string{wire.URLKey(name): url, wire.TokenKey(name): token})
	var r result
	g.Eventually(res).WithTimeout(10 * time.Second).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.ep).To(Equal(browser.Endpoint{URL: url, Token: token}))

	// Asked again (the driver reconnects): the same Lease is renewed.
	before := lease(g, ns, name).Spec.RenewTime.Time
	time.Sleep(10 * time.Millisecond)
	ep, err := p.Endpoint(context.Background(), key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ep.Token).To(Equal(token))
	g.Expect(lease(g, ns, name).Spec.RenewTime.After(before)).To(BeTrue())
}

func TestOperatorErrorsEndTheWait(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	p := newProvider(t, ns)
	name := wire.DialogName("helper", "web:bob:1")
	res := ask(p, browser.DialogKey("web:bob:1"))
	g.Eventually(func(g Gomega) { lease(g, ns, name) }).Should(Succeed())
	publish(t, ns, map[string]string{wire.ErrorKey(name): wire.FormatError(time.Now().Add(time.Second), "browser pod x cannot pull its image: not found")})
	var r result
	g.Eventually(res).WithTimeout(10 * time.Second).Should(Receive(&r))
	g.Expect(r.err).To(MatchError("the browser of dialog web:bob:1 cannot run: browser pod x cannot pull its image: not found"))
}

func TestWaitTimesOutSayingWhy(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	p := newProvider(t, ns, func(c *ProviderConfig) { c.ReadyTimeout = 2 * time.Second })
	name := wire.DialogName("helper", "web:carol:1")
	publish(t, ns, map[string]string{wire.URLKey(name): browserPod(t, token), wire.TokenKey(name): "not-the-pods-token-at-all"})
	_, err := p.Endpoint(context.Background(), browser.DialogKey("web:carol:1"))
	g.Expect(err).To(MatchError(And(ContainSubstring("the browser pod of dialog web:carol:1 did not serve within 2s"),
		ContainSubstring("answered 401 Unauthorized"))))
}

func TestProfileRequest(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	p := newProvider(t, ns)
	_, err := p.Endpoint(context.Background(), browser.ProfileKey("bp-absent0000"))
	g.Expect(err).To(MatchError(browser.ErrProfileNotFound))

	bp := &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bp-0123456789"}}
	g.Expect(kube.Create(context.Background(), bp)).To(Succeed())
	name := wire.ProfileName(bp.Name)
	publish(t, ns, map[string]string{wire.URLKey(name): browserPod(t, token), wire.TokenKey(name): token})
	_, err = p.Endpoint(context.Background(), browser.ProfileKey(bp.Name))
	g.Expect(err).NotTo(HaveOccurred())
	l := lease(g, ns, name)
	g.Expect(l.Annotations).To(Equal(map[string]string{wire.AnnotationProfile: bp.Name}))
	g.Expect(l.Spec.LeaseDurationSeconds).To(BeNil(), "the profile's idleTimeout applies")
	g.Expect(l.OwnerReferences[0].UID).To(Equal(bp.UID))

	// Another agent's session renews the same Lease and becomes the one
	// asking (the operator tells it, not the first, when it may not).
	other := newProvider(t, ns, func(c *ProviderConfig) { c.Agent = "other" })
	_, err = other.request(context.Background(), browser.ProfileKey(bp.Name), name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lease(g, ns, name).Labels).To(HaveKeyWithValue(wire.LabelAgent, "other"))
}

// A browser still starting (its pod not serving yet) is not released for
// the driver not having it open, and its Lease is renewed so a slow cold
// start does not idle out; its grace as "just handed out" starts when the
// endpoint comes.
func TestHeartbeatKeepsABrowserBeingWaitedFor(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	clk := testingclock.NewFakeClock(time.Now())
	p := newProvider(t, ns, func(c *ProviderConfig) { c.Clock = clk; c.Heartbeat = time.Minute })
	key, name := browser.DialogKey("web:erin:1"), wire.DialogName("helper", "web:erin:1")
	never := func(browser.Key) bool { return false }
	res := ask(p, key)
	var asked time.Time
	g.Eventually(func(g Gomega) { asked = lease(g, ns, name).Spec.RenewTime.Time }).Should(Succeed())

	clk.Step(2 * time.Minute)
	p.Beat(ctx, never)
	g.Expect(lease(g, ns, name).Spec.RenewTime.Time).To(BeTemporally("==", asked.Add(2*time.Minute)))

	publish(t, ns, map[string]string{wire.URLKey(name): browserPod(t, token), wire.TokenKey(name): token})
	var r result
	g.Eventually(res).WithTimeout(10 * time.Second).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	p.Beat(ctx, never)
	g.Expect(lease(g, ns, name)).NotTo(BeNil())

	clk.Step(time.Minute)
	p.Beat(ctx, never)
	err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
}

func TestHeartbeat(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	g.Expect(kube.Create(ctx, &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"}})).To(Succeed())
	clk := testingclock.NewFakeClock(time.Now())
	p := newProvider(t, ns, func(c *ProviderConfig) { c.Clock = clk; c.Heartbeat = time.Minute })
	url := browserPod(t, token)
	dialog, profile := browser.DialogKey("web:dan:1"), browser.ProfileKey("shop")
	dialogName, profileName := wire.DialogName("helper", "web:dan:1"), wire.ProfileName("shop")
	publish(t, ns, map[string]string{wire.URLKey(dialogName): url, wire.TokenKey(dialogName): token,
		wire.URLKey(profileName): url, wire.TokenKey(profileName): token})
	for _, k := range []browser.Key{dialog, profile} {
		_, err := p.Endpoint(ctx, k)
		g.Expect(err).NotTo(HaveOccurred())
	}
	open := map[browser.Key]bool{}
	var mu sync.Mutex
	active := func(k browser.Key) bool { mu.Lock(); defer mu.Unlock(); return open[k] }
	set := func(k browser.Key, v bool) { mu.Lock(); defer mu.Unlock(); open[k] = v }
	renewedAt := func(name string) time.Time { return lease(g, ns, name).Spec.RenewTime.Time }

	// Just handed out: the driver may still be connecting; nothing is released.
	p.Beat(ctx, active)
	g.Expect(lease(g, ns, dialogName)).NotTo(BeNil())

	// Open browsers are renewed.
	set(dialog, true)
	set(profile, true)
	before := renewedAt(profileName)
	clk.Step(time.Second)
	p.Beat(ctx, active)
	g.Expect(renewedAt(profileName)).To(BeTemporally("==", before.Add(time.Second)))

	// A Lease deleted under a held browser is asked for again.
	g.Expect(kube.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dialogName}})).To(Succeed())
	p.Beat(ctx, active)
	g.Expect(lease(g, ns, dialogName)).NotTo(BeNil())

	// Closed by the driver: the dialog's browser is released at once, the
	// profile's is left to idle out (other dialogs may use it).
	set(dialog, false)
	set(profile, false)
	clk.Step(2 * time.Minute)
	p.Beat(ctx, active)
	err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: dialogName}, &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	g.Expect(lease(g, ns, profileName)).NotTo(BeNil())

	// Run renews on every heartbeat until its context ends; Close releases
	// the dialogs still held.
	_, err = p.Endpoint(ctx, dialog)
	g.Expect(err).NotTo(HaveOccurred())
	set(dialog, true)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { p.Run(rctx, active); close(done) }()
	before = renewedAt(dialogName)
	g.Eventually(func(g Gomega) {
		clk.Step(time.Minute)
		g.Expect(lease(g, ns, dialogName).Spec.RenewTime.After(before)).To(BeTrue())
	}).WithTimeout(10 * time.Second).Should(Succeed())
	cancel()
	<-done
	g.Expect(p.Close(ctx)).To(Succeed())
	err = kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: dialogName}, &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
}

func TestErrorStamps(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)
	v := wire.FormatError(at, "browser pod x failed: exit code 1")
	got, msg := wire.ParseError(v)
	g.Expect(got.Equal(at)).To(BeTrue())
	g.Expect(msg).To(Equal("browser pod x failed: exit code 1"))
	got, msg = wire.ParseError("no stamp here")
	g.Expect(got.IsZero()).To(BeTrue())
	g.Expect(msg).To(Equal("no stamp here"))
	g.Expect(strings.HasPrefix(v, "2026-05-01T12:00:00.123456Z ")).To(BeTrue())
}
