package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/metrics"
)

// metricsAddrHelp is the help of the cluster commands' --metrics-addr.
const metricsAddrHelp = "Address of a listener serving /metrics alone, without authentication, for Prometheus inside the cluster (default $PICOBOT_METRICS_ADDR; empty: off)."

// newMetrics returns the process's registry and PicoBot's metrics on it.
func newMetrics() (*prometheus.Registry, *metrics.Metrics, error) {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	return reg, m, err
}

// serveMetrics serves reg on /metrics of its own listener at addr (the
// server's Addr) until the returned server is shut down; failed reports a
// serving error. addr ""
// serves nothing (the returned server may still be shut down). The listener
// has no authentication: it is for a scraper reaching the pod inside the
// cluster, never for an Ingress.
func serveMetrics(addr string, reg prometheus.Gatherer, log *slog.Logger) (srv *http.Server, failed <-chan error, err error) {
	errc := make(chan error, 1)
	if addr == "" {
		return &http.Server{}, errc, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	srv = gateway.HTTPServer(mux, gateway.Limits{})
	srv.Addr = ln.Addr().String() // the port chosen for ":0"
	fmt.Fprintf(os.Stderr, "PicoBot serves metrics on http://%s/metrics\n", ln.Addr())
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("Metrics server failed", "err", err)
			errc <- fmt.Errorf("metrics server failed: %w", err)
		}
	}()
	return srv, errc, nil
}
