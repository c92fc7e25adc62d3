package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/picobot/picobot/test/controlplane"
)

// The metrics tests run against a real kube-apiserver (test/controlplane),
// started once for the package; the flag tests need none.
var (
	env        *controlplane.Environment
	skipReason string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	baseline := goleak.IgnoreCurrent()
	code := runSuite(m)
	if code == 0 {
		if err := goleak.Find(append(controlplane.LeakIgnores(
			goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) int {
	var err error
	env, err = controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		env, skipReason = nil, reason
		return m.Run()
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}()
	return m.Run()
}

func needAPIServer(tb testing.TB) {
	tb.Helper()
	if env == nil {
		tb.Skip(skipReason)
	}
}

// metricsFixture is a running operator metrics endpoint, built from the
// flags as main builds it, and tokens of three callers.
type metricsFixture struct {
	url string
	// reader is bound to the shipped metrics-reader ClusterRole; stranger
	// is a ServiceAccount with no binding.
	readerToken, strangerToken string
	client                     *http.Client
	cs                         kubernetes.Interface
	// readersNS is a namespace all of whose ServiceAccounts are bound to
	// the metrics-reader role (through their group).
	readersNS string
}

// readClusterRole reads a ClusterRole of config/rbac, so the test grants
// exactly what is shipped.
func readClusterRole(tb testing.TB, file string) *rbacv1.ClusterRole {
	tb.Helper()
	root, err := controlplane.RepoRoot()
	NewWithT(tb).Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
	NewWithT(tb).Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	NewWithT(tb).Expect(yaml.UnmarshalStrict(data, role)).To(Succeed())
	return role
}

// startMetrics starts the metrics server with opts. Its TokenReviews and
// SubjectAccessReviews are made as the operator's ServiceAccount (impersonated)
// holding only the shipped metrics-auth ClusterRole, so the test proves that
// role is enough.
func startMetrics(tb testing.TB, opts metricsserver.Options) *metricsFixture {
	tb.Helper()
	g := NewWithT(tb)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	ns := fmt.Sprintf("metrics-%d", time.Now().UnixNano())
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, sa := range []string{"operator", "prometheus", "stranger"} {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	readersNS := ns + "-readers"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: readersNS}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	bind := func(file string, subjects ...rbacv1.Subject) {
		role := readClusterRole(tb, file)
		role.Name = ns + "-" + role.Name
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   subjects,
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		tb.Cleanup(func() {
			_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
			_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		})
	}
	bind("metrics_auth_role.yaml", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "operator", Namespace: ns})
	bind("metrics_reader_role.yaml", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns},
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + readersNS})
	tb.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), readersNS, metav1.DeleteOptions{})
	})

	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}
	f := &metricsFixture{readerToken: token("prometheus"), strangerToken: token("stranger"), cs: cs, readersNS: readersNS}

	opCfg := rest.CopyConfig(env.Config)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":operator"}
	httpClient, err := rest.HTTPClientFor(opCfg)
	g.Expect(err).NotTo(HaveOccurred())
	srv, err := metricsserver.NewServer(opts, opCfg, httpClient)
	g.Expect(err).NotTo(HaveOccurred())
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(runCtx) }()
	tb.Cleanup(func() {
		cancel()
		g.Expect(<-done).To(Succeed())
		httpClient.CloseIdleConnections()
	})
	addr := srv.(interface{ GetBindAddr() string })
	g.Eventually(addr.GetBindAddr).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).NotTo(BeEmpty())
	scheme := "http"
	if opts.SecureServing {
		scheme = "https"
	}
	f.url = scheme + "://" + addr.GetBindAddr() + "/metrics"
	// The default certificate is self-signed, as for a Prometheus with
	// insecureSkipVerify.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // self-signed by design
	f.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	tb.Cleanup(tr.CloseIdleConnections)
	return f
}

// newReader creates a ServiceAccount allowed to read the metrics, one the
// endpoint has never seen, and returns a token of it.
func (f *metricsFixture) newReader(ctx context.Context, name string) (string, error) {
	if _, err := f.cs.CoreV1().ServiceAccounts(f.readersNS).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("failed to create ServiceAccount %q: %w", name, err)
	}
	tr, err := f.cs.CoreV1().ServiceAccounts(f.readersNS).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to create a token of %q: %w", name, err)
	}
	return tr.Status.Token, nil
}

// postsSoFar sums client-go's rest_client_requests_total over POST
// requests of this process, read from controller-runtime's registry (the one
// /metrics serves).
func postsSoFar(tb testing.TB) float64 {
	tb.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	NewWithT(tb).Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, mf := range families {
		if mf.GetName() != "rest_client_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == http.MethodPost {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// scrape gets /metrics with a bearer token ("" for none).
func (f *metricsFixture) scrape(ctx context.Context, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("operator", flag.ContinueOnError) }

// secureDefaults are the metrics flags as the operator parses them with
// none given, on a free loopback port.
func secureDefaults(tb testing.TB) metricsOptions {
	tb.Helper()
	var m metricsOptions
	fs := newFlagSet()
	m.bindFlags(fs)
	NewWithT(tb).Expect(fs.Parse([]string{"--metrics-bind-address=127.0.0.1:0"})).To(Succeed())
	return m
}

// TestMetricsAreServedOnlyToAuthorizedCallers: with the default flags the
// operator's metrics are HTTPS and need a token the API server authenticates
// and authorizes for get /metrics: the metrics-reader ServiceAccount gets
// controller-runtime's metrics, a ServiceAccount without the binding 403, no
// token 401, a forged one 500; plain HTTP on the port gets nothing.
func TestMetricsAreServedOnlyToAuthorizedCallers(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	m := secureDefaults(t)
	g.Expect(m.secure).To(BeTrue(), "secure by default")
	f := startMetrics(t, m.serverOptions())
	ctx := context.Background()

	before := postsSoFar(t)
	code, body, err := f.scrape(ctx, f.readerToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(body).To(ContainSubstring("rest_client_requests_total"), "controller-runtime's client metrics")
	g.Expect(body).To(ContainSubstring("certwatcher_read_certificate_total"))
	// The reviews of a token are cached (TokenReview 1 minute,
	// SubjectAccessReview 5): further scrapes make no API request (the
	// reviews are this process's only POSTs after set-up, counted by
	// client-go's metrics in the scraped registry itself).
	g.Expect(postsSoFar(t)).To(Equal(before+2), "a TokenReview and a SubjectAccessReview")
	for range 3 {
		code, body, err = f.scrape(ctx, f.readerToken)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
	}
	g.Expect(postsSoFar(t)).To(Equal(before+2), "reviews answered from the cache")

	code, body, err = f.scrape(ctx, f.strangerToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), body)
	g.Expect(body).To(ContainSubstring("Authorization denied for user system:serviceaccount:"))
	g.Expect(body).NotTo(ContainSubstring("rest_client_requests_total"))

	code, body, err = f.scrape(ctx, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusUnauthorized), body)
	g.Expect(body).NotTo(ContainSubstring("rest_client_requests_total"))

	// A forged token: the API server's TokenReview says why it is invalid,
	// which controller-runtime's filter answers as 500 "Authentication
	// failed" rather than 401; either way nothing is served.
	code, body, err = f.scrape(ctx, f.readerToken[:len(f.readerToken)-4]+"AAAA")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusInternalServerError), body)
	g.Expect(body).To(ContainSubstring("Authentication failed"))
	g.Expect(body).NotTo(ContainSubstring("rest_client_requests_total"))

	// TLS only, and HTTP/1.1 only unless --metrics-enable-http2.
	resp, err := http.Get("http" + strings.TrimPrefix(f.url, "https"))
	if err == nil {
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "plain HTTP to the TLS port")
	}
	conn, err := tls.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(f.url, "https://"), "/metrics"),
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // self-signed by design
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.ConnectionState().NegotiatedProtocol).To(Equal("http/1.1"))
	_ = conn.Close()
}

// TestInsecureMetricsForLocalRuns: --metrics-secure=false serves plain HTTP
// to anyone, with no filter (what a laptop run or a test harness scrapes).
func TestInsecureMetricsForLocalRuns(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	var m metricsOptions
	fs := newFlagSet()
	m.bindFlags(fs)
	g.Expect(fs.Parse([]string{"--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false"})).To(Succeed())
	opts := m.serverOptions()
	g.Expect(opts.FilterProvider).To(BeNil())
	f := startMetrics(t, opts)
	code, body, err := f.scrape(context.Background(), "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("rest_client_requests_total"))
}

// BenchmarkMetricsScrape measures a scrape of /metrics over a kept-alive
// connection (as Prometheus scrapes): plain HTTP (--metrics-secure=false);
// HTTPS with the authn/authz filter and one token, as a Prometheus scrapes;
// and HTTPS where every scrape comes from a ServiceAccount the endpoint has
// not seen, so neither controller-runtime's TokenReview cache (1 minute) nor
// its SubjectAccessReview cache (5 minutes when allowed) answers and each
// scrape makes both reviews on the API server.
func BenchmarkMetricsScrape(b *testing.B) {
	needAPIServer(b)
	for _, tc := range []struct {
		name      string
		secure    bool
		newCaller bool
	}{{"http", false, false}, {"https-authz-cached", true, false}, {"https-authz-uncached", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			m := secureDefaults(b)
			m.secure = tc.secure
			f := startMetrics(b, m.serverOptions())
			ctx := context.Background()
			token := f.readerToken
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				if tc.newCaller {
					b.StopTimer()
					var err error
					if token, err = f.newReader(ctx, fmt.Sprintf("reader-%d", i)); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				start := time.Now()
				code, _, err := f.scrape(ctx, token)
				lat = append(lat, time.Since(start))
				if err != nil || code != http.StatusOK {
					b.Fatalf("scrape: %d %v", code, err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// TestMetricsServeTheGivenCertificate: with --metrics-cert-path (the chart's
// certSecret mounted), the endpoint serves that certificate, so a client
// that verifies it against its CA (no insecureSkipVerify) can scrape.
func TestMetricsServeTheGivenCertificate(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600)).To(Succeed())
	var m metricsOptions
	fs := newFlagSet()
	m.bindFlags(fs)
	g.Expect(fs.Parse([]string{"--metrics-bind-address=127.0.0.1:0", "--metrics-cert-path=" + dir})).To(Succeed())
	f := startMetrics(t, m.serverOptions())
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(certPEM)).To(BeTrue())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	f.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	code, body, err := f.scrape(context.Background(), f.readerToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK), body)

	// The self-signed default does not verify against that CA.
	defaults := secureDefaults(t)
	def := startMetrics(t, defaults.serverOptions())
	def.client = f.client
	_, _, err = def.scrape(context.Background(), def.readerToken)
	g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))
}
