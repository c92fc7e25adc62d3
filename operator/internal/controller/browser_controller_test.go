package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/s3blob"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/remote"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

const browserImage = "registry.example/picobot:test"

// browserEnv is a control plane of its own with a manager that runs the
// browser reconcilers with browser pods on. The suite's shared manager runs
// the status-only BrowserProfile reconciler, which would contend for the
// same profiles; a kube-apiserver without a kubelet also lets the tests play
// the node (fakeKubelet) and decide what each pod does.
type browserEnv struct {
	c    client.Client
	cfg  *rest.Config
	pods BrowserPods
	// reg holds the browser metrics.
	reg   *prometheus.Registry
	port  int
	store *s3blob.Store
	// clock is the time of this cluster: the operator decides idleness by
	// it, sessions stamp their Leases and run their heartbeat by it, and
	// fakeKubelet-style status the tests write uses it. Tests step it
	// instead of sleeping.
	clock *clocktesting.FakeClock
	// stopKubelet stops the last pod fakeKubelet serves (the port is one).
	stopKubelet func()
}

func startBrowserEnv(t *testing.T) *browserEnv {
	t.Helper()
	needAPIServer(t)
	env, err := controlplane.Start()
	if err != nil {
		t.Fatalf("failed to start a control plane for browser pods: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	endpoint, stopS3, err := services.S3()
	if err != nil {
		if reason, fatal := services.Unavailable("S3", err); !fatal {
			t.Skip(reason)
		}
		t.Fatal(err)
	}
	t.Cleanup(stopS3)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	key, secretKey := "test", "test-secret"
	if u.User != nil {
		key = u.User.Username()
		secretKey, _ = u.User.Password()
		u.User = nil
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	conn := map[string]string{"PICOBOT_S3_ENDPOINT": u.String(), "PICOBOT_S3_BUCKET": "browsertest-" + hex.EncodeToString(rnd[:]),
		"PICOBOT_S3_REGION": "us-east-1", "PICOBOT_S3_PATH_STYLE": "true", "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secretKey}
	ctx, cancel := context.WithCancel(context.Background())
	store, err := s3blob.New(ctx, s3blob.Config{Bucket: conn["PICOBOT_S3_BUCKET"], Endpoint: u.String(), UsePathStyle: true, AccessKeyID: key, SecretAccessKey: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	port, err := services.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: testScheme, Cache: CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, Controller: config.Controller{SkipNameValidation: ptr(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := SetupIndexes(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	om, err := opmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	rc := &RuntimeConfig{BrowserImage: browserImage, Connection: conn, APIReader: mgr.GetAPIReader(), Metrics: om}
	pods, err := BrowserPodsFromRuntime(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	pods.Port = int32(port)
	clk := clocktesting.NewFakeClock(time.Now())
	if err := setupBrowsers(mgr, Config{Concurrency: 2, Clock: clk}, pods); err != nil {
		t.Fatal(err)
	}
	if err := (&TenantQuotaReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); _ = store.Close() })
	return &browserEnv{c: c, cfg: env.Config, pods: *pods, reg: reg, port: port, store: store, clock: clk}
}

func (e *browserEnv) namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "browsers-"}}
	if err := e.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func (e *browserEnv) agent(t *testing.T, ns, name string, mut ...func(*picobotv1alpha1.Agent)) *picobotv1alpha1.Agent {
	t.Helper()
	a := openAIAgent(ns, name, "k")
	for _, m := range mut {
		m(a)
	}
	if err := e.c.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (e *browserEnv) profile(t *testing.T, ns, name, agent string, mut ...func(*picobotv1alpha1.BrowserProfile)) *picobotv1alpha1.BrowserProfile {
	t.Helper()
	bp := &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if agent != "" {
		bp.Labels = map[string]string{picobotv1alpha1.LabelAgent: agent, picobotv1alpha1.LabelAgentMade: "true"}
	}
	for _, m := range mut {
		m(bp)
	}
	if err := e.c.Create(context.Background(), bp); err != nil {
		t.Fatal(err)
	}
	return bp
}

func (e *browserEnv) provider(t *testing.T, ns, agent string, mut ...func(*remote.ProviderConfig)) *remote.Provider {
	t.Helper()
	cfg := remote.ProviderConfig{Client: e.c, Namespace: ns, Agent: agent, Holder: agent + "-session-1",
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 30 * time.Second, Poll: 50 * time.Millisecond, Clock: e.clock}
	for _, m := range mut {
		m(&cfg)
	}
	p, err := remote.NewProvider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// endpointResult is what a session's Endpoint call returned.
type endpointResult struct {
	ep  browser.Endpoint
	err error
}

// ask calls Endpoint in the background, as the driver does, while the test
// plays the node.
func ask(p *remote.Provider, key browser.Key) <-chan endpointResult {
	out := make(chan endpointResult, 1)
	go func() {
		ep, err := p.Endpoint(context.Background(), key)
		out <- endpointResult{ep, err}
	}()
	return out
}

// livePod waits for the one live pod of a browser.
func (e *browserEnv) livePod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	NewWithT(t).Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels(podspec.BrowserSelector(name)))).To(Succeed())
		var live []corev1.Pod
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				live = append(live, p)
			}
		}
		g.Expect(live).To(HaveLen(1))
		pod = &live[0]
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return pod
}

func (e *browserEnv) noPods(t *testing.T, ns, name string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels(podspec.BrowserSelector(name)))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

func (e *browserEnv) setPodStatus(t *testing.T, pod *corev1.Pod, st corev1.PodStatus) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		cur := &corev1.Pod{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Status = st
		return e.c.Status().Update(context.Background(), cur)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// fakeKubelet plays the node for a browser's pod: it serves the real
// DevTools proxy of `picobot browser` with the pod's token (from the pod's
// Secret, as the kubelet would put it in the environment) in front of a
// stub browser, and reports the pod running and ready at 127.0.0.1.
func (e *browserEnv) fakeKubelet(t *testing.T, ns, name string) (*corev1.Pod, string) {
	t.Helper()
	pod := e.livePod(t, ns, name)
	sec := &corev1.Secret{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
		t.Fatal(err)
	}
	token := string(sec.Data[wire.SecretKeyToken])
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"Browser":"Chrome/156.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/stub"}`, r.Host)
	}))
	t.Cleanup(stub.Close)
	proxy, err := browser.NewDevToolsProxy(stub.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", e.port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.stopKubelet = func() { _ = srv.Close() }
	t.Cleanup(e.stopKubelet)
	now := metav1.Now()
	e.setPodStatus(t, pod, corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}})
	return pod, token
}

// heartbeat runs the provider's heartbeat (Run) with active until the
// returned stop is called, as a session pod does while its driver runs.
func heartbeat(t *testing.T, p *remote.Provider, active func(browser.Key) bool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, active)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// serve asks for key's browser as a session and plays the node for its
// pod, returning the pod and what the session got.
func (e *browserEnv) serve(t *testing.T, p *remote.Provider, ns string, key browser.Key, name string) (*corev1.Pod, browser.Endpoint) {
	t.Helper()
	res := ask(p, key)
	// A session that gets its answer before any pod exists was refused:
	// say why instead of waiting for a pod that will not come.
	NewWithT(t).Eventually(func(g Gomega) {
		select {
		case r := <-res:
			t.Fatalf("the session got %+v, %v before its browser pod existed", r.ep, r.err)
		default:
		}
		var list corev1.PodList
		g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels(podspec.BrowserSelector(name)))).To(Succeed())
		g.Expect(list.Items).NotTo(BeEmpty())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "browser pod %s/%s", ns, name)
	pod, token := e.fakeKubelet(t, ns, name)
	var r endpointResult
	NewWithT(t).Eventually(res).WithTimeout(eventually).Should(Receive(&r))
	if r.err != nil || r.ep.Token != token {
		t.Fatalf("the session got %+v, %v; the pod's token is %q", r.ep, r.err, token)
	}
	return pod, r.ep
}

// fail asks for key's browser as a session, puts its pod in status st and
// returns the pod and the error the session got.
func (e *browserEnv) fail(t *testing.T, p *remote.Provider, ns string, key browser.Key, name string, st corev1.PodStatus) (*corev1.Pod, error) {
	t.Helper()
	res := ask(p, key)
	pod := e.livePod(t, ns, name)
	e.setPodStatus(t, pod, st)
	var r endpointResult
	NewWithT(t).Eventually(res).WithTimeout(eventually).Should(Receive(&r))
	return pod, r.err
}

func (e *browserEnv) waitProfile(t *testing.T, ns, name string, check func(g Gomega, bp *picobotv1alpha1.BrowserProfile)) *picobotv1alpha1.BrowserProfile {
	t.Helper()
	bp := &picobotv1alpha1.BrowserProfile{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, bp)).To(Succeed())
		check(g, bp)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return bp
}

func readyOf(bp *picobotv1alpha1.BrowserProfile) metav1.Condition {
	if c := meta.FindStatusCondition(bp.Status.Conditions, picobotv1alpha1.ConditionReady); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func (e *browserEnv) endpoints(g Gomega, ns, agent string) map[string][]byte {
	s := &corev1.Secret{}
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: wire.EndpointsSecret(agent)}, s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	g.Expect(err).NotTo(HaveOccurred())
	return s.Data
}

func TestBrowserPods(t *testing.T) {
	e := startBrowserEnv(t)
	t.Run("ProfileLifecycle", func(t *testing.T) { testProfileLifecycle(t, e) })
	t.Run("EphemeralBrowser", func(t *testing.T) { testEphemeralBrowser(t, e) })
	t.Run("AgentNotYetCached", func(t *testing.T) { testAgentNotYetCached(t, e) })
	t.Run("ErrorsReachTheSession", func(t *testing.T) { testBrowserErrors(t, e) })
	t.Run("FailedPodWaitsForTheNextRequest", func(t *testing.T) { testFailedBrowserPod(t, e) })
	t.Run("PVCProfile", func(t *testing.T) { testPVCProfile(t, e) })
	t.Run("DeletingAProfileRemovesItsData", func(t *testing.T) { testProfileDeletion(t, e) })
	t.Run("NoOpResyncWritesNothing", func(t *testing.T) { testBrowserResync(t, e) })
	t.Run("GitOpsHealth", func(t *testing.T) { testBrowserHealth(t, e) })
	t.Run("BrowserPodCap", func(t *testing.T) { testBrowserPodCap(t, e) })
	t.Run("Metrics", func(t *testing.T) { testBrowserMetrics(t, e) })
}

// testBrowserMetrics: a profile's browser started for one session pod and
// then asked for by a second is one start and one reuse; its pod counts as
// ready while it runs, its start latency is observed once, and it leaves
// the gauge with its profile.
func testBrowserMetrics(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	bp := e.profile(t, ns, "shop", "helper")
	name := wire.ProfileName("shop")
	profile := map[string]string{"namespace": ns, "kind": "profile"}
	e.serve(t, e.provider(t, ns, "helper"), ns, browser.ProfileKey("shop"), name)
	g.Eventually(func() float64 { return gathered(t, e.reg, "picobot_browser_pods", profile, "state", "ready") }).
		WithTimeout(eventually).WithPolling(poll).Should(Equal(1.0))
	g.Expect(gathered(t, e.reg, "picobot_browser_requests_total", profile, "outcome", "started")).To(Equal(1.0))
	g.Expect(gathered(t, e.reg, "picobot_browser_pod_start_seconds", profile)).To(Equal(1.0))

	second := e.provider(t, ns, "helper", func(c *remote.ProviderConfig) { c.Holder = "helper-session-2" })
	ep, err := second.Endpoint(ctx, browser.ProfileKey("shop"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ep.Token).NotTo(BeEmpty())
	g.Eventually(func() float64 {
		return gathered(t, e.reg, "picobot_browser_requests_total", profile, "outcome", "reused")
	}).
		WithTimeout(eventually).WithPolling(poll).Should(Equal(1.0))
	g.Expect(gathered(t, e.reg, "picobot_browser_requests_total", profile, "outcome", "started")).To(Equal(1.0))
	g.Expect(gathered(t, e.reg, "picobot_browser_pod_start_seconds", profile)).To(Equal(1.0), "one pod, one start")
	g.Expect(gathered(t, e.reg, "picobot_browser_pods", profile, "state", "starting")).To(Equal(0.0))

	g.Expect(e.c.Delete(ctx, bp)).To(Succeed())
	e.noPods(t, ns, name)
	g.Eventually(func() float64 { return gathered(t, e.reg, "picobot_browser_pods", profile, "state", "ready") }).
		WithTimeout(eventually).WithPolling(poll).Should(Equal(0.0))
}

// testBrowserPodCap: with the tenant's maxBrowserPods at 1, a second
// browser gets no pod: the session asking for it is told why, its
// profile's Ready says BrowserPodLimit with a Warning Event, and the
// quota's status counts the one browser pod; raising the cap starts it.
func testBrowserPodCap(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	g.Expect(e.c.Create(ctx, tenantQuota(ns, picobotv1alpha1.TenantQuotaSpec{MaxBrowserPods: ptr[int32](1)}))).To(Succeed())
	e.agent(t, ns, "helper")
	e.profile(t, ns, "one", "helper")
	e.profile(t, ns, "two", "helper")
	p := e.provider(t, ns, "helper")
	// The sessions wait for browsers no kubelet serves: stopped at the end.
	waiting, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wait := func(profile string) { wg.Go(func() { _, _ = p.Endpoint(waiting, browser.ProfileKey(profile)) }) }
	wait("one")
	e.livePod(t, ns, wire.ProfileName("one"))
	_, err := p.Endpoint(ctx, browser.ProfileKey("two"))
	g.Expect(err).To(MatchError(ContainSubstring("the tenant's maxBrowserPods is 1 and 1 run in the namespace")))
	e.noPods(t, ns, wire.ProfileName("two"))
	e.waitProfile(t, ns, "two", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(readyOf(bp).Reason).To(Equal(picobotv1alpha1.ReasonBrowserPodLimit))
	})
	g.Eventually(func(g Gomega) {
		q := &picobotv1alpha1.TenantQuota{}
		g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName}, q)).To(Succeed())
		g.Expect(q.Status.BrowserPods).To(HaveValue(BeEquivalentTo(1)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	g.Eventually(func() error {
		q := &picobotv1alpha1.TenantQuota{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: picobotv1alpha1.TenantQuotaName}, q); err != nil {
			return err
		}
		q.Spec.MaxBrowserPods = ptr[int32](2)
		return e.c.Update(ctx, q)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	wait("two")
	e.livePod(t, ns, wire.ProfileName("two"))
}

// testBrowserHealth: a profile whose browser is starting, or cannot pull
// its image, reads InProgress to kstatus and Progressing to the Argo CD
// check of docs/gitops.md; one no agent may use, once asked for, Failed
// and Degraded (the other kinds and states: TestGitOpsHealth).
func testBrowserHealth(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	e.agent(t, ns, "stranger")
	e.profile(t, ns, "shop", "helper")
	e.profile(t, ns, "orphan", "")
	_, h := expectHealth(t, e.c, "BrowserProfile", ns, "shop", status.CurrentStatus, "", "")
	g.Expect(h.Message).To(Equal("Profile stored in s3; no browser running"))

	res := ask(e.provider(t, ns, "helper"), browser.ProfileKey("shop"))
	pod := e.livePod(t, ns, wire.ProfileName("shop"))
	_, h = expectHealth(t, e.c, "BrowserProfile", ns, "shop", status.InProgressStatus, "", "Ready: Waiting for browser pod "+pod.Name+" to serve")
	g.Expect(h.Message).To(Equal(picobotv1alpha1.ReasonBrowserStarting + ": Ready: Waiting for browser pod " + pod.Name + " to serve"))
	e.setPodStatus(t, pod, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "browser",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "image not found"}}}}})
	var r endpointResult
	g.Eventually(res).WithTimeout(eventually).Should(Receive(&r))
	g.Expect(r.err).To(MatchError(ContainSubstring("cannot pull its image")))
	// The image may yet be pushed: the operator keeps trying.
	expectHealth(t, e.c, "BrowserProfile", ns, "shop", status.InProgressStatus, "", "Ready: browser pod "+pod.Name+" cannot pull its image: image not found")

	_, err := e.provider(t, ns, "stranger").Endpoint(context.Background(), browser.ProfileKey("orphan"))
	g.Expect(err).To(MatchError(ContainSubstring("no agent may use browser profile orphan")))
	res2, h := expectHealth(t, e.c, "BrowserProfile", ns, "orphan", status.FailedStatus, "", "")
	g.Expect(res2.Message).To(HavePrefix("Ready: no agent may use browser profile orphan"))
	g.Expect(h.Message).To(Equal(picobotv1alpha1.ReasonInvalidReference + ": " + res2.Message))
}

// testProfileLifecycle: a session holds a profile; the operator starts a
// hardened pod, publishes its address and token to the owning agent only,
// replaces the pod when who may connect changes, and reaps it once the
// session stops renewing for the profile's idle timeout.
func testProfileLifecycle(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	helper := e.agent(t, ns, "helper")
	e.agent(t, ns, "bystander")
	e.profile(t, ns, "shop", "helper", func(bp *picobotv1alpha1.BrowserProfile) {
		bp.Spec.IdleTimeout = picobotv1alpha1.NewDuration(3 * time.Second)
		bp.Spec.AllowedDomains = []string{"shop.example.com"}
	})
	bp := e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(bp.Finalizers).To(ContainElement(browserProfileFinalizer))
		g.Expect(readyOf(bp).Message).To(Equal("Profile stored in s3; no browser running; restricted to 1 domains"))
	})

	p := e.provider(t, ns, "helper")
	name := wire.ProfileName("shop")
	// The session's heartbeat renews the Lease while the driver keeps the
	// browser open, from the request on (as a session pod runs it).
	open := func(browser.Key) bool { return true }
	stopHeartbeat := heartbeat(t, p, open)
	pod, ep := e.serve(t, p, ns, browser.ProfileKey("shop"), name)
	g.Expect(ep.URL).To(Equal(fmt.Sprintf("http://127.0.0.1:%d", e.port)))
	g.Expect(ep.Token).To(HaveLen(43))

	// The session's request.
	lease := &coordinationv1.Lease{}
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, lease)).To(Succeed())
	g.Expect(lease.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "helper"))
	g.Expect(lease.Annotations).To(HaveKeyWithValue(wire.AnnotationProfile, "shop"))
	g.Expect(lease.OwnerReferences[0].UID).To(Equal(bp.UID))
	g.Expect(*lease.Spec.HolderIdentity).To(Equal("helper-session-1"))

	// The pod and its objects.
	g.Expect(pod.OwnerReferences[0].UID).To(Equal(bp.UID))
	g.Expect(pod.Spec.Containers[0].Image).To(Equal(browserImage))
	g.Expect(pod.Spec.Containers[0].Args).To(ContainElement("--allowed-domains=shop.example.com"))
	sec := &corev1.Secret{}
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec)).To(Succeed())
	archive := fmt.Sprintf("tenants/%s/browser-profiles/shop.tar.gz", ns)
	for _, k := range []string{wire.SecretKeyRestoreURL, wire.SecretKeySaveURL} {
		g.Expect(string(sec.Data[k])).To(And(ContainSubstring(archive), ContainSubstring("X-Amz-Signature=")), k)
	}
	np := &networkingv1.NetworkPolicy{}
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, np)).To(Succeed())
	g.Expect(np.Spec.Ingress[0].From[0].PodSelector.MatchExpressions[0].Values).To(Equal([]string{"helper"}))
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.SessionBrowserEgressName}, &networkingv1.NetworkPolicy{})).To(Succeed())

	// Published to the owner only; the proxy refuses anyone without it.
	eps := &corev1.Secret{}
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: wire.EndpointsSecret("helper")}, eps)).To(Succeed())
	g.Expect(eps.OwnerReferences[0].UID).To(Equal(helper.UID))
	g.Expect(eps.Data).NotTo(HaveKey(wire.ErrorKey(name)))
	g.Expect(e.endpoints(g, ns, "bystander")).To(BeNil())
	resp, err := http.Get(ep.URL + "/json/version")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))

	e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(bp.Status.ActivePod).To(Equal(pod.Name))
		g.Expect(bp.Status.LastUsed).NotTo(BeNil())
		g.Expect(readyOf(bp).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(readyOf(bp).Message).To(Equal(fmt.Sprintf("Browser running in pod %s; profile stored in s3; restricted to 1 domains", pod.Name)))
		g.Expect(readyOf(bp).ObservedGeneration).To(Equal(bp.Generation))
	})

	// While the driver keeps it open the session renews the Lease on every
	// heartbeat, well past the idle timeout (3s), and the pod stays: 20
	// heartbeats of 200ms, each seen in the Lease before the next.
	first := lease.Spec.RenewTime.Time
	g.Eventually(e.clock.HasWaiters).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the heartbeat's ticker")
	for range 20 {
		e.clock.Step(200 * time.Millisecond)
		now := e.clock.Now().Truncate(time.Microsecond)
		g.Eventually(func(g Gomega) {
			g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, lease)).To(Succeed())
			g.Expect(lease.Spec.RenewTime.Time).To(BeTemporally("==", now))
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	}
	g.Expect(lease.Spec.RenewTime.Sub(first)).To(Equal(4 * time.Second))
	// The operator reconciled the last renewal (4s after the first, past
	// the idle timeout) and kept the pod.
	e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(bp.Status.LastUsed.Time).To(BeTemporally("==", e.clock.Now().Truncate(time.Second)))
		g.Expect(bp.Status.ActivePod).To(Equal(pod.Name))
	})
	g.Expect(e.livePod(t, ns, name).Name).To(Equal(pod.Name))

	// Another agent may use the profile now: the pod is replaced, so the
	// new pod's policy and token reach both.
	e.agent(t, ns, "other", func(a *picobotv1alpha1.Agent) {
		a.Spec.Browser = &picobotv1alpha1.BrowserSpec{ProfileRef: &corev1.LocalObjectReference{Name: "shop"}}
	})
	p.Beat(ctx, open)
	var second *corev1.Pod
	g.Eventually(func(g Gomega) {
		second = e.livePod(t, ns, name)
		g.Expect(second.Name).NotTo(Equal(pod.Name))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	p.Beat(ctx, open)
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, np)).To(Succeed())
	g.Expect(np.Spec.Ingress[0].From[0].PodSelector.MatchExpressions[0].Values).To(Equal([]string{"helper", "other"}))

	// The driver closes the browser: the profile's pod idles out, its
	// address is withdrawn, the profile keeps its last use.
	stopHeartbeat()
	p.Beat(ctx, func(browser.Key) bool { return false })
	e.clock.Step(3 * time.Second) // the idle timeout since the last renewal
	e.noPods(t, ns, name)
	e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(bp.Status.ActivePod).To(BeEmpty())
		g.Expect(bp.Status.LastUsed).NotTo(BeNil())
		g.Expect(readyOf(bp).Message).To(Equal("Profile stored in s3; no browser running; restricted to 1 domains"))
	})
	g.Eventually(func(g Gomega) {
		g.Expect(e.endpoints(g, ns, "helper")).NotTo(HaveKey(wire.URLKey(name)))
		g.Expect(e.endpoints(g, ns, "other")).NotTo(HaveKey(wire.URLKey(name)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// testEphemeralBrowser: a dialog's browser belongs to its Lease; releasing
// it (the driver closed it) ends the pod at once, and an idle one goes with
// its Lease.
func testEphemeralBrowser(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	helper := e.agent(t, ns, "helper", func(a *picobotv1alpha1.Agent) {
		a.Spec.Browser = &picobotv1alpha1.BrowserSpec{AllowedDomains: []string{"docs.example.com"}}
	})
	p := e.provider(t, ns, "helper", func(c *remote.ProviderConfig) { c.AgentUID = helper.UID; c.EphemeralIdle = 2 * time.Second })
	key := browser.DialogKey("web:alice:1")
	name := wire.DialogName("helper", "web:alice:1")
	stopHeartbeat := heartbeat(t, p, func(k browser.Key) bool { return k == key })
	pod, _ := e.serve(t, p, ns, key, name)

	lease := &coordinationv1.Lease{}
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, lease)).To(Succeed())
	g.Expect(*lease.Spec.LeaseDurationSeconds).To(Equal(int32(2)))
	g.Expect(lease.Annotations).To(HaveKeyWithValue(wire.AnnotationDialog, "web:alice:1"))
	g.Expect(lease.OwnerReferences[0].UID).To(Equal(helper.UID))
	g.Expect(pod.OwnerReferences[0].Kind).To(Equal("Lease"))
	g.Expect(pod.OwnerReferences[0].UID).To(Equal(lease.UID))
	g.Expect(pod.Spec.Containers[0].Args).To(ContainElement("--allowed-domains=docs.example.com"), "the agent's restriction applies")
	g.Expect(envNames(pod)).NotTo(ContainElement(wire.EnvSaveURL), "an ephemeral browser keeps nothing")

	// Released: the pod, its Secret, policy and address go at once.
	g.Expect(p.Release(ctx, key)).To(Succeed())
	e.stopKubelet()
	e.noPods(t, ns, name)
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}))).To(BeTrue())
		g.Expect(apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &networkingv1.NetworkPolicy{}))).To(BeTrue())
		g.Expect(e.endpoints(g, ns, "helper")).NotTo(HaveKey(wire.TokenKey(name)))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// Not renewed for its idle time: the operator ends it and its Lease.
	stopHeartbeat()
	name = wire.DialogName("helper", "web:bob:1")
	e.serve(t, p, ns, browser.DialogKey("web:bob:1"), name)
	e.clock.Step(2 * time.Second) // the Lease's idle time since it was asked for
	e.noPods(t, ns, name)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &coordinationv1.Lease{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
}

// testAgentNotYetCached: a reconciler whose cache has not seen the Agent
// yet (an Agent created a moment before its session asked for a browser)
// asks the API server before ending the Lease as "its agent is gone". The
// cache here is a real informer cache that never sees the Agent (its label
// selector matches none), so the lag is certain instead of timed.
func testAgentNotYetCached(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	helper := e.agent(t, ns, "helper")
	p := e.provider(t, ns, "helper", func(c *remote.ProviderConfig) { c.AgentUID = helper.UID })
	key := browser.DialogKey("web:dan:1")
	name := wire.DialogName("helper", "web:dan:1")
	heartbeat(t, p, func(k browser.Key) bool { return k == key })
	e.serve(t, p, ns, key, name)

	blind, err := cache.New(e.cfg, cache.Options{Scheme: testScheme, ByObject: map[client.Object]cache.ByObject{
		&picobotv1alpha1.Agent{}: {Label: labels.SelectorFromSet(labels.Set{"picobot.test/never": "true"})}}})
	g.Expect(err).NotTo(HaveOccurred())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = blind.Start(cctx) }()
	g.Expect(blind.WaitForCacheSync(cctx)).To(BeTrue())
	c, err := client.New(e.cfg, client.Options{Scheme: testScheme, Cache: &client.CacheOptions{Reader: blind}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "helper"}, &picobotv1alpha1.Agent{}))).
		To(BeTrue(), "the cache does not see the agent")
	pods := e.pods
	pods.APIReader = e.c
	r := &BrowserLeaseReconciler{Client: c, Clock: e.clock, keeper: newBrowserKeeper(c, pods, e.clock)}
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &coordinationv1.Lease{})).To(Succeed(),
		"the Lease of an agent that exists is kept")
	g.Expect(e.livePod(t, ns, name)).NotTo(BeNil())
}

func envNames(p *corev1.Pod) []string {
	var out []string
	for _, e := range p.Spec.Containers[0].Env {
		out = append(out, e.Name)
	}
	return out
}

// testBrowserErrors: why a browser cannot run reaches the waiting session
// as an error (and the profile's status), instead of a timeout.
func testBrowserErrors(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	e.agent(t, ns, "stranger")
	e.agent(t, ns, "nobrowser", func(a *picobotv1alpha1.Agent) {
		a.Spec.Browser = &picobotv1alpha1.BrowserSpec{Enabled: ptr(false)}
	})
	e.profile(t, ns, "shop", "helper")
	e.profile(t, ns, "orphan", "")

	_, err := e.provider(t, ns, "nobrowser").Endpoint(context.Background(), browser.DialogKey("web:x:1"))
	g.Expect(err).To(MatchError(ContainSubstring("agent nobrowser has its browser disabled")))

	_, err = e.provider(t, ns, "stranger").Endpoint(context.Background(), browser.ProfileKey("shop"))
	g.Expect(err).To(MatchError(ContainSubstring("agent stranger may not use browser profile shop")))

	_, err = e.provider(t, ns, "stranger").Endpoint(context.Background(), browser.ProfileKey("orphan"))
	g.Expect(err).To(MatchError(ContainSubstring("no agent may use browser profile orphan")))
	e.waitProfile(t, ns, "orphan", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(readyOf(bp).Reason).To(Equal(picobotv1alpha1.ReasonInvalidReference))
		g.Expect(readyOf(bp).Message).To(ContainSubstring("no agent may use browser profile orphan"))
	})

	_, err = e.provider(t, ns, "helper").Endpoint(context.Background(), browser.ProfileKey("absent"))
	g.Expect(err).To(MatchError(browser.ErrProfileNotFound))

	// The image cannot be pulled.
	pod, err := e.fail(t, e.provider(t, ns, "helper"), ns, browser.ProfileKey("shop"), wire.ProfileName("shop"), corev1.PodStatus{
		Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "browser",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "image not found"}}}}})
	g.Expect(err).To(MatchError(ContainSubstring("cannot pull its image: image not found")))
	e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(readyOf(bp).Reason).To(Equal(picobotv1alpha1.ReasonImagePullFailed))
		g.Expect(bp.Status.ActivePod).To(Equal(pod.Name))
	})
}

// testFailedBrowserPod: a browser that dies is not restarted in a loop;
// the session's next request starts a new pod.
func testFailedBrowserPod(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	e.profile(t, ns, "shop", "helper")
	p := e.provider(t, ns, "helper")
	name := wire.ProfileName("shop")
	pod, err := e.fail(t, p, ns, browser.ProfileKey("shop"), name, corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "browser",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "chromium exited", FinishedAt: metav1.NewTime(e.clock.Now())}}}}})
	g.Expect(err).To(MatchError(ContainSubstring("browser pod " + pod.Name + " failed: exit code 1: chromium exited")))
	e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(readyOf(bp).Reason).To(Equal(picobotv1alpha1.ReasonPodFailed))
	})
	g.Consistently(func(g Gomega) {
		var list corev1.PodList
		g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels(podspec.BrowserSelector(name)))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
	}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	// The next request is after the failure (pod times have second
	// precision: a second later).
	e.clock.Step(time.Second)
	second, _ := e.serve(t, p, ns, browser.ProfileKey("shop"), name)
	g.Expect(second.Name).NotTo(Equal(pod.Name))
	e.waitProfile(t, ns, "shop", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(readyOf(bp).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(bp.Status.ActivePod).To(Equal(second.Name))
	})
}

// testPVCProfile: a profile that asks for a PVC gets its claim, mounted as
// the pod's profile folder, and needs no bucket.
func testPVCProfile(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	e.profile(t, ns, "bank", "helper", func(bp *picobotv1alpha1.BrowserProfile) {
		bp.Spec.Persistence = &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StoragePVC, Size: ptr(resource.MustParse("2Gi"))}
	})
	e.waitProfile(t, ns, "bank", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(readyOf(bp).Message).To(Equal("Profile stored in pvc; no browser running"))
		g.Expect(bp.Finalizers).To(BeEmpty(), "the claim goes with the profile through its owner reference")
	})
	name := wire.ProfileName("bank")
	pod, _ := e.serve(t, e.provider(t, ns, "helper"), ns, browser.ProfileKey("bank"), name)
	pvc := &corev1.PersistentVolumeClaim{}
	g.Expect(e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pvc)).To(Succeed())
	g.Expect(pvc.Spec.Resources.Requests.Storage().String()).To(Equal("2Gi"))
	g.Expect(pvc.OwnerReferences[0].Kind).To(Equal("BrowserProfile"))
	g.Expect(pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName).To(Equal(name))
}

// testProfileDeletion: deleting a profile (browser_profiles delete) ends
// its browser and removes its archive before the profile goes.
func testProfileDeletion(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	bp := e.profile(t, ns, "shop", "helper")
	name := wire.ProfileName("shop")
	e.serve(t, e.provider(t, ns, "helper"), ns, browser.ProfileKey("shop"), name)
	key, err := profileArchiveKey(ns, "shop")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.store.Put(ctx, key, strings.NewReader("saved profile"), int64(len("saved profile")), blob.PutOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(e.c.Delete(ctx, bp)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(bp), &picobotv1alpha1.BrowserProfile{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue())
	e.noPods(t, ns, name)
	_, err = e.store.Head(ctx, key)
	g.Expect(err).To(MatchError(blob.ErrNotFound))
	g.Expect(e.endpoints(g, ns, "helper")).NotTo(HaveKey(wire.URLKey(name)))
}

// testBrowserResync starts a second operator over settled browsers (idle,
// running, ephemeral) and counts its writes: a resync must write nothing.
func testBrowserResync(t *testing.T, e *browserEnv) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.namespace(t)
	e.agent(t, ns, "helper")
	e.profile(t, ns, "idle", "helper")
	e.profile(t, ns, "disk", "helper", func(bp *picobotv1alpha1.BrowserProfile) {
		bp.Spec.Persistence = &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StoragePVC}
	})
	e.profile(t, ns, "busy", "helper")
	pod, _ := e.serve(t, e.provider(t, ns, "helper"), ns, browser.ProfileKey("busy"), wire.ProfileName("busy"))
	for _, name := range []string{"idle", "disk"} {
		e.waitProfile(t, ns, name, func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
			g.Expect(bp.Status.ObservedGeneration).To(Equal(bp.Generation))
		})
	}
	e.waitProfile(t, ns, "busy", func(g Gomega, bp *picobotv1alpha1.BrowserProfile) {
		g.Expect(bp.Status.ActivePod).To(Equal(pod.Name))
		g.Expect(readyOf(bp).Status).To(Equal(metav1.ConditionTrue))
	})

	wc := &writeCounter{}
	opts := ctrl.Options{Scheme: testScheme, Cache: CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)}, NewClient: countingNewClient(wc)}
	opts.Cache.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(e.cfg, opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(SetupIndexes(ctx, mgr)).To(Succeed())
	pods := e.pods
	pods.APIReader = mgr.GetAPIReader()
	g.Expect(setupBrowsers(mgr, Config{Concurrency: 2, Clock: e.clock}, &pods)).To(Succeed())
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = mgr.Start(mctx) })
	defer func() { cancel(); wg.Wait() }()
	g.Eventually(wc.readCount).WithTimeout(eventually).WithPolling(poll).Should(Equal(4), "three profiles and their agent")
	g.Consistently(wc.n.Load).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(BeZero())
}
