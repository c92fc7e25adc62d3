package services

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrometheusBinary returns the path of a Prometheus server built from its Go
// module (hack/prometheus.sh; built once and cached). It fails the test
// under CI and skips it elsewhere when the build fails.
func PrometheusBinary(tb testing.TB) string {
	tb.Helper()
	path, err := hackScript("prometheus.sh")
	if err != nil {
		reason, fatal := Unavailable("Prometheus", err)
		if fatal {
			tb.Fatal(reason)
		}
		tb.Skip(reason)
	}
	return path
}

// PromtoolBinary returns the path of Prometheus's promtool built from the
// same Go module and version as PrometheusBinary (hack/prometheus.sh
// promtool; built once and cached). It fails the test under CI and skips it
// elsewhere when the build fails.
func PromtoolBinary(tb testing.TB) string {
	tb.Helper()
	path, err := hackScript("prometheus.sh", "promtool")
	if err != nil {
		reason, fatal := Unavailable("promtool", err)
		if fatal {
			tb.Fatal(reason)
		}
		tb.Skip(reason)
	}
	return path
}

// ScrapeTarget is one static scrape target of a test Prometheus.
type ScrapeTarget struct {
	Job, Addr string
	// BearerToken, when set, is sent as Authorization: Bearer.
	BearerToken string
	// HTTPS scrapes over TLS without verifying the certificate (a
	// self-signed one, as the operator's metrics endpoint makes).
	HTTPS bool
}

// Prometheus is a running Prometheus server.
type Prometheus struct {
	// URL is its HTTP API's root (http://127.0.0.1:port).
	URL string
}

// StartPrometheus runs Prometheus scraping targets every second, with its
// storage in a temporary folder; it stops with the test.
func StartPrometheus(tb testing.TB, targets ...ScrapeTarget) *Prometheus {
	tb.Helper()
	bin := PrometheusBinary(tb)
	dir := tb.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n")
	for _, t := range targets {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", t.Job, t.Addr)
		if t.BearerToken != "" {
			tokenFile := filepath.Join(dir, t.Job+".token")
			if err := os.WriteFile(tokenFile, []byte(t.BearerToken), 0o600); err != nil {
				tb.Fatal(err)
			}
			fmt.Fprintf(&cfg, "    authorization:\n      credentials_file: %q\n", tokenFile)
		}
		if t.HTTPS {
			cfg.WriteString("    scheme: https\n    tls_config:\n      insecure_skip_verify: true\n")
		}
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("Prometheus log:\n%s", logs.String())
		}
	})
	p := &Prometheus{URL: "http://" + addr}
	wait, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	for {
		err := p.ready(wait)
		if err == nil {
			return p
		}
		select {
		case <-wait.Done():
			tb.Fatalf("Prometheus did not become ready: %v\n%s", err, logs.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ready asks Prometheus whether it serves queries.
func (p *Prometheus) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s", resp.Status)
	}
	return nil
}

// Sample is one series of an instant query's answer.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query through the HTTP API.
func (p *Prometheus) Query(ctx context.Context, promql string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query?query="+url.QueryEscape(promql), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to query Prometheus: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("failed to read Prometheus's answer %q: %w", body, err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %q failed: %s", promql, out.Error)
	}
	if out.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: want a vector, got %s", promql, out.Data.ResultType)
	}
	samples := make([]Sample, 0, len(out.Data.Result))
	for _, r := range out.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", promql, r.Value[1], err)
		}
		samples = append(samples, Sample{Metric: r.Metric, Value: v})
	}
	return samples, nil
}

// Scalar runs a query whose answer is one series and returns its value;
// -1 when it has none.
func (p *Prometheus) Scalar(ctx context.Context, promql string) (float64, error) {
	s, err := p.Query(ctx, promql)
	switch {
	case err != nil:
		return 0, err
	case len(s) == 0:
		return -1, nil
	case len(s) > 1:
		return 0, fmt.Errorf("query %q: %d series, want one", promql, len(s))
	}
	return s[0].Value, nil
}
