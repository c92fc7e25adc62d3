package main

import (
	"crypto/tls"
	"flag"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsOptions are the flags of the operator's metrics endpoint. By default
// it serves HTTPS and answers only callers the API server authenticates
// (TokenReview) and authorizes for `get` on the non-resource URL /metrics
// (SubjectAccessReview), so the endpoint leaks nothing to whoever can reach
// the pod's port.
type metricsOptions struct {
	bindAddress string
	secure      bool
	// certDir holds a serving certificate (e.g. a cert-manager Secret
	// mounted there); empty, or without the files: a self-signed one is
	// generated in memory at start.
	certDir, certName, keyName string
	enableHTTP2                bool
}

func (m *metricsOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&m.bindAddress, "metrics-bind-address", ":8443", "Address the metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&m.secure, "metrics-secure", true,
		"Serve metrics over HTTPS to callers with a bearer token allowed to get /metrics (TokenReview + SubjectAccessReview); false: plain HTTP to anyone, for local runs.")
	fs.StringVar(&m.certDir, "metrics-cert-path", "", "Folder of the metrics serving certificate and key (reloaded when they change); empty or missing files: a self-signed certificate.")
	fs.StringVar(&m.certName, "metrics-cert-name", "tls.crt", "File name of the metrics serving certificate in --metrics-cert-path.")
	fs.StringVar(&m.keyName, "metrics-cert-key", "tls.key", "File name of the metrics serving key in --metrics-cert-path.")
	fs.BoolVar(&m.enableHTTP2, "metrics-enable-http2", false,
		"Accept HTTP/2 on the metrics endpoint (off: HTTP/2 stream-reset floods, CVE-2023-44487 and CVE-2023-39325, need no patched server).")
}

// serverOptions are the controller-runtime metrics server options the flags
// describe.
func (m *metricsOptions) serverOptions() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: m.bindAddress, SecureServing: m.secure}
	if !m.secure {
		return opts
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	opts.CertDir, opts.CertName, opts.KeyName = m.certDir, m.certName, m.keyName
	if !m.enableHTTP2 {
		opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	return opts
}
