package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

// TestServeMetrics: the cluster commands' --metrics-addr listener serves
// PicoBot's metrics (and the Go runtime's) on /metrics alone, in
// OpenMetrics when asked; an empty address serves nothing.
func TestServeMetrics(t *testing.T) {
	g := NewWithT(t)
	reg, met, err := newMetrics()
	g.Expect(err).NotTo(HaveOccurred())
	met.AuthFailure()
	srv, _, err := serveMetrics("127.0.0.1:0", reg, slog.New(slog.DiscardHandler))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	get := func(path, accept string) (status int, contentType, body string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+srv.Addr+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	status, contentType, body := get("/metrics", "application/openmetrics-text; version=1.0.0")
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(contentType).To(HavePrefix("application/openmetrics-text"))
	g.Expect(body).To(MatchRegexp(`(?m)^picobot_gateway_auth_failures_total 1(\.0)?$`))
	g.Expect(body).To(ContainSubstring("go_goroutines "))
	g.Expect(body).To(HaveSuffix("# EOF\n"))
	status, _, _ = get("/api/v1/health", "")
	g.Expect(status).To(Equal(http.StatusNotFound))

	off, _, err := serveMetrics("", reg, slog.New(slog.DiscardHandler))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(off.Addr).To(BeEmpty())
	g.Expect(off.Shutdown(context.Background())).To(Succeed())
}
