package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/browsertest"
	"github.com/picobot/picobot/runtime/browser/remote"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// browserPodImage is the browser pod image the pod runner maps to the picobot
// binary (`picobot browser`, which launches the machine's Chromium).
const browserPodImage = "local/picobot-browser:e2e"

const browserManifest = `
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: surfer
  namespace: %[1]s
spec:
  instructions: You browse the web.
---
apiVersion: agents.picobot.io/v1alpha1
kind: BrowserProfile
metadata:
  name: shop
  namespace: %[1]s
  labels:
    agents.picobot.io/agent: surfer
    agents.picobot.io/agent-made: "true"
spec:
  label: Shopping
  idleTimeout: %[2]s
`

func needChromium(tb testing.TB) {
	tb.Helper()
	if err := browser.CheckExecutable(browser.DefaultBin); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal(err)
		}
		tb.Skip("SKIPPED LOUDLY: " + err.Error())
	}
}

// browserClient is a session's side: the browser driver reaching browser
// pods through the Provider, whose heartbeat follows the driver.
type browserClient struct {
	provider *remote.Provider
	driver   *browser.Driver
	stop     func()
}

func newBrowserClient(tb testing.TB, ns string) *browserClient {
	tb.Helper()
	p, err := remote.NewProvider(remote.ProviderConfig{Client: st.kube, Namespace: ns, Agent: "surfer", Holder: "e2e-session",
		Heartbeat: time.Second, EphemeralIdle: time.Minute, ReadyTimeout: 2 * time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	d := browser.NewDriver(browser.Config{Endpoint: p.Endpoint})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, d.Active); close(done) }()
	c := &browserClient{provider: p, driver: d, stop: func() { cancel(); <-done; d.Close(); _ = p.Close(context.Background()) }}
	tb.Cleanup(c.stop)
	return c
}

// openTab acquires key's browser, opens a blank tab in it and releases it.
func (c *browserClient) openTab(tb testing.TB, key browser.Key) *browser.Browser {
	tb.Helper()
	ctx := context.Background()
	b, release, err := c.driver.Acquire(ctx, key, browser.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer release()
	if _, err := b.NewTab(ctx); err != nil {
		tb.Fatal(err)
	}
	return b
}

// browserPods lists a browser's pods that are not finished or going.
func browserPods(tb testing.TB, ns, name string) []corev1.Pod {
	tb.Helper()
	var list corev1.PodList
	if err := st.kube.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{wire.LabelBrowser: name}); err != nil {
		tb.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

func endpointsOf(g Gomega, ns string) map[string][]byte {
	s := &corev1.Secret{}
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: wire.EndpointsSecret("surfer")}, s)).To(Succeed())
	return s.Data
}

// devtools runs fn on a raw DevTools connection to a browser pod, made as a
// session's driver makes it (through the proxy, with the pod's token), for
// checks below the browser tool.
func devtools(tb testing.TB, url, token string, fn func(*rod.Browser)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, err := browser.DialDevTools(ctx, browser.Endpoint{URL: url, Token: token})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = ws.Close() }()
	rb := rod.New().Context(ctx).Client(cdp.New().Start(ws))
	if err := rb.Connect(); err != nil {
		tb.Fatal(err)
	}
	fn(rb)
}

func getVersion(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url+"/json/version", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestBrowserPodsEndToEnd: a BrowserProfile in use gets a browser pod, run
// by the pod runner as `picobot browser` with the machine's Chromium; a
// session's driver reaches it through the authenticating proxy with the
// pod's token (a client without it is refused), reuses it, and once the
// driver closes it the operator reaps the pod after the profile's idle
// timeout; the pod saves the profile to S3 as it stops and the next pod
// restores it (a cookie survives). A dialog's ephemeral browser then gets a
// pod of its own, reaped once released.
func TestBrowserPodsEndToEnd(t *testing.T) {
	needStack(t)
	needChromium(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := "browser-e2e"
	st.apply(t, fmt.Sprintf(browserManifest, ns, "6s"))
	c := newBrowserClient(t, ns)
	key := browser.ProfileKey("shop")
	name := wire.ProfileName("shop")

	b := c.openTab(t, key)
	info, err := b.Info(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.URL).To(Equal("about:blank"))

	// One pod, hardened, serving the profile; the profile says so.
	pods := browserPods(t, ns, name)
	g.Expect(pods).To(HaveLen(1))
	pod := pods[0]
	g.Expect(pod.Spec.Containers[0].Image).To(Equal(browserPodImage))
	g.Expect(*pod.Spec.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(*pod.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(st.runner.PID(pod.UID)).NotTo(BeZero())
	bp := &picobotv1alpha1.BrowserProfile{}
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, bp)).To(Succeed())
		g.Expect(bp.Status.ActivePod).To(Equal(pod.Name))
		g.Expect(bp.Status.LastUsed).NotTo(BeNil())
		g.Expect(meta.IsStatusConditionTrue(bp.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// The proxy: the token opens DevTools, nothing else does.
	eps := endpointsOf(g, ns)
	url, token := string(eps[wire.URLKey(name)]), string(eps[wire.TokenKey(name)])
	code, body, err := getVersion(url, token)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	var version struct{ Browser string }
	g.Expect(json.Unmarshal([]byte(body), &version)).To(Succeed())
	g.Expect(version.Browser).To(ContainSubstring("Chrome/"))
	for _, bad := range []string{"", "not-the-token-of-this-pod", token + "x"} {
		code, _, err = getVersion(url, bad)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusUnauthorized), "token %q", bad)
	}

	// The same dialog's next operation reuses the open browser.
	again, release, err := c.driver.Acquire(ctx, key, browser.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(b))
	tabs, err := again.Tabs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tabs).NotTo(BeEmpty())
	release()
	g.Expect(c.driver.Stats().Reuses).To(Equal(1))

	// The profile is an identity: a persistent cookie set now is in the
	// Chrome profile `picobot browser` saves to S3 when its pod stops.
	devtools(t, url, token, func(rb *rod.Browser) {
		g.Expect(browsertest.SetCookie(rb, "shop.example", "session", "kept")).To(Succeed())
	})

	// The driver closes it: no more renewals; after the idle timeout the
	// operator deletes the pod and the runner ends its Chromium.
	g.Expect(c.driver.CloseKey(ctx, key)).To(Succeed())
	g.Eventually(func() []corev1.Pod { return browserPods(t, ns, name) }, 90*time.Second, 250*time.Millisecond).Should(BeEmpty())
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, bp)).To(Succeed())
		g.Expect(bp.Status.ActivePod).To(BeEmpty())
		g.Expect(bp.Status.LastUsed).NotTo(BeNil())
		g.Expect(endpointsOf(g, ns)).NotTo(HaveKey(wire.TokenKey(name)))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func() error { _, _, err := getVersion(url, token); return err }, 30*time.Second, 250*time.Millisecond).
		Should(HaveOccurred(), "the old browser no longer listens")

	// Opened again: a new pod, its profile restored from S3 before Chromium
	// started, still has the cookie.
	c.openTab(t, key)
	again2 := browserPods(t, ns, name)
	g.Expect(again2).To(HaveLen(1))
	g.Expect(again2[0].UID).NotTo(Equal(pod.UID))
	eps = endpointsOf(g, ns)
	devtools(t, string(eps[wire.URLKey(name)]), string(eps[wire.TokenKey(name)]), func(rb *rod.Browser) {
		g.Expect(browsertest.Cookies(rb)).To(ContainElement("shop.example session=kept"))
	})
	g.Expect(c.driver.CloseKey(ctx, key)).To(Succeed())
	g.Eventually(func() []corev1.Pod { return browserPods(t, ns, name) }, 90*time.Second, 250*time.Millisecond).Should(BeEmpty())

	// A dialog's ephemeral browser, in the same namespace after the
	// profile's pods, runs in its own pod, gone once released.
	dialog := browser.DialogKey("web:alice:1")
	eph := wire.DialogName("surfer", "web:alice:1")
	c.openTab(t, dialog)
	g.Expect(browserPods(t, ns, eph)).To(HaveLen(1))
	g.Expect(c.driver.CloseKey(ctx, dialog)).To(Succeed())
	g.Eventually(func() []corev1.Pod { return browserPods(t, ns, eph) }, 60*time.Second, 250*time.Millisecond).Should(BeEmpty())
}

// BenchmarkBrowserPod measures a persistent profile's browser pod: the cold
// start (a session's first request to a DevTools session through the proxy,
// Chromium launched in a new pod), a second session attaching to the running
// pod (another dialog, another session pod), how many operations one pod
// start served in this workload (two dialogs of ten operations each within
// the idle timeout), and the memory of the pod's processes (picobot browser
// and Chromium's, proportional set size, so shared pages count once).
func BenchmarkBrowserPod(b *testing.B) {
	needStack(b)
	needChromium(b)
	g := NewWithT(b)
	ctx := context.Background()
	ns := "browser-bench"
	st.apply(b, fmt.Sprintf(browserManifest, ns, "2s"))
	name := wire.ProfileName("shop")
	var cold, warm []time.Duration
	var pss []float64
	ops, starts := 0, 0
	session := func() (*browserClient, time.Duration) {
		c := newBrowserClient(b, ns)
		start := time.Now()
		c.openTab(b, browser.ProfileKey("shop"))
		took := time.Since(start)
		for range 9 {
			_, release, err := c.driver.Acquire(ctx, browser.ProfileKey("shop"), browser.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			release()
		}
		ops += 10
		return c, took
	}
	for range max(b.N, 3) {
		g.Eventually(func() []corev1.Pod { return browserPods(b, ns, name) }, 90*time.Second, 100*time.Millisecond).Should(BeEmpty())
		first, took := session()
		cold = append(cold, took)
		pods := browserPods(b, ns, name)
		g.Expect(pods).To(HaveLen(1))
		starts++
		second, took := session()
		warm = append(warm, took)
		g.Expect(browserPods(b, ns, name)).To(Equal(pods), "the second dialog uses the same pod")
		pss = append(pss, treePSS(b, st.runner.PID(pods[0].UID)))
		first.stop()
		second.stop()
	}
	slices.Sort(cold)
	slices.Sort(warm)
	slices.Sort(pss)
	b.ReportMetric(float64(cold[len(cold)/2].Milliseconds()), "cold-p50-ms")
	b.ReportMetric(float64(cold[len(cold)-1].Milliseconds()), "cold-max-ms")
	b.ReportMetric(float64(warm[len(warm)/2].Milliseconds()), "attach-p50-ms")
	b.ReportMetric(1-float64(starts)/float64(ops), "reuse-rate")
	b.ReportMetric(pss[len(pss)/2], "pss-MB")
}

// treePSS sums the proportional set size of a process and its descendants.
func treePSS(tb testing.TB, root int) float64 {
	tb.Helper()
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command may hold spaces: fields start after its ")".
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	total := 0.0
	for todo := []int{root}; len(todo) > 0; {
		pid := todo[0]
		todo = append(todo[1:], children[pid]...)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				total += kb / 1024
			}
		}
	}
	if total == 0 {
		tb.Fatalf("no memory figures for pid %d", root)
	}
	return total
}
