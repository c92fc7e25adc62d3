// Package modelhttp holds the HTTP client both provider packages use when
// none is configured: one connection pool per process, sized for the many
// concurrent turns a runtime streams to a few model endpoints.
package modelhttp

import (
	"net/http"
	"time"
)

// MaxIdlePerHost is how many idle connections to one model endpoint are
// kept for reuse. net/http keeps 2 by default: with more turns than that in
// flight, every further request dials (and, with TLS, handshakes) a
// connection that is closed again when it ends.
const MaxIdlePerHost = 256

// shared is the process's client; its transport is http.DefaultTransport's
// (proxy from the environment, HTTP/2, dial and TLS timeouts) with the
// larger idle pool.
var shared = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4 * MaxIdlePerHost
	t.MaxIdleConnsPerHost = MaxIdlePerHost
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}()

// Client returns the shared client. Requests are bounded by the providers'
// per-attempt timeouts, not by the client.
func Client() *http.Client { return shared }
