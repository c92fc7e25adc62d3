package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// metricsNamespace holds the ServiceAccounts that scrape the operators'
// metrics in these tests.
const metricsNamespace = "picobot-metrics"

// metricsReaderToken sets up what a cluster's Prometheus has, for the
// operators under test, which serve metrics as in production (HTTPS,
// authenticated and authorized by the API server): a ServiceAccount bound to
// the metrics-reader ClusterRole of config/rbac. It returns a token of it.
func metricsReaderToken() (string, error) {
	for _, args := range [][]string{
		{"create", "namespace", metricsNamespace},
		{"create", "serviceaccount", "prometheus", "-n", metricsNamespace},
		{"apply", "-f", "config/rbac/metrics_reader_role.yaml"},
		{"create", "clusterrolebinding", "e2e-metrics-reader", "--clusterrole=metrics-reader", "--serviceaccount=" + metricsNamespace + ":prometheus"},
	} {
		if _, stderr, err := kubectl(args...); err != nil {
			return "", fmt.Errorf("failed to set up the metrics reader (kubectl %s): %w: %s", strings.Join(args, " "), err, stderr)
		}
	}
	return mintToken("prometheus")
}

// mintToken returns a token of a ServiceAccount of metricsNamespace (the
// TokenRequest API, through kubectl create token).
func mintToken(sa string) (string, error) {
	out, stderr, err := kubectl("create", "token", sa, "-n", metricsNamespace, "--duration=24h")
	if err != nil {
		return "", fmt.Errorf("failed to create a token of %q: %w: %s", sa, err, stderr)
	}
	return strings.TrimSpace(out), nil
}

// metricsClient trusts the operator's self-signed metrics certificate, as a
// ServiceMonitor with insecureSkipVerify does.
var metricsClient = &http.Client{Timeout: 30 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed by design

// scrapeStatus gets the operator's /metrics with a bearer token ("" for none)
// and returns the status code.
func (p *operatorProcess) scrapeStatus(ctx context.Context, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, resp.Body.Close()
}

// TestOperatorMetricsNeedAnAuthorizedToken: the operator binary, with its
// default metrics flags, serves metrics only over HTTPS and only to a token
// allowed to get /metrics.
func TestOperatorMetricsNeedAnAuthorizedToken(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	_, stderr, err := kubectl("create", "serviceaccount", "stranger", "-n", metricsNamespace)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	stranger, err := mintToken("stranger")
	g.Expect(err).NotTo(HaveOccurred())

	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"metrics reader": {metricsToken, http.StatusOK},
		"no binding":     {stranger, http.StatusForbidden},
		"no token":       {"", http.StatusUnauthorized},
	} {
		code, err := operator.scrapeStatus(ctx, tc.token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(tc.want), name)
	}
	resp, err := http.Get("http://" + operator.metricsAddr + "/metrics")
	if err == nil {
		g.Expect(resp.Body.Close()).To(Succeed())
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "plain HTTP to the TLS port")
	}
}
