// Package embeddedtest starts a real gateway for tests of gateway clients: the
// embedded runtime (SQLite, in-process bus) behind the real gateway handler
// on a loopback HTTP server, with agents answered by the scripted fake LLM.
package embeddedtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// Options shape the gateway.
type Options struct {
	// Agents are the names of agents with a working model (the fake LLM);
	// ["assistant"] when empty.
	Agents []string
	// Keyless names an extra agent whose model key is missing, so it
	// answers with a no_model error ("" for none).
	Keyless string
	// APIKey is the key clients must send ("" for none).
	APIKey string
	// Manifests are further manifests (YAML documents) of the folder; the
	// fake LLM's URLs replace {{openai}} and {{anthropic}} in them, and
	// the Secret "llm" holds its key.
	Manifests []string
	// Registry, when set, gets the runtime's metrics (package metrics),
	// which the gateway serves on /metrics.
	Registry *prometheus.Registry
	// TracerProvider, when set, traces the runtime's and the gateway's
	// turns (package tracing).
	TracerProvider trace.TracerProvider
	// Nodes makes the gateway pair devices (`picobot node`, package node).
	Nodes bool
}

// Env is a running gateway.
type Env struct {
	// LLM answers every agent's model calls.
	LLM *fakellm.Server
	// URL is the gateway's base URL (http://127.0.0.1:port).
	URL string
	// Server is the HTTP server; CloseClientConnections breaks every
	// WebSocket.
	Server  *httptest.Server
	Runtime *embedded.Runtime
}

// AgentYAML returns an Agent manifest answered by the OpenAI-protocol model
// at baseURL, with the calculator and todo tools. secret names the Secret
// the key is read from (PICOBOT_SECRET_<SECRET>_APIKEY in embedded mode).
func AgentYAML(name, baseURL, secret string) string {
	return fmt.Sprintf(`apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: %s
spec:
  instructions: You are a test assistant.
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: %s, key: apiKey}
  tools:
    allow: ["calculator", "todo"]
`, name, baseURL, secret)
}

// Start starts a gateway; it is stopped when the test ends.
func Start(tb testing.TB, opts Options) *Env {
	tb.Helper()
	if len(opts.Agents) == 0 {
		opts.Agents = []string{"assistant"}
	}
	llm := fakellm.New()
	tb.Cleanup(llm.Close)
	dir := tb.TempDir()
	docs := make([]string, 0, len(opts.Agents)+1)
	for _, a := range opts.Agents {
		docs = append(docs, AgentYAML(a, llm.URL(), "llm"))
	}
	if opts.Keyless != "" {
		docs = append(docs, AgentYAML(opts.Keyless, llm.URL(), "missing"))
	}
	for _, m := range opts.Manifests {
		docs = append(docs, strings.NewReplacer("{{openai}}", llm.URL(), "{{anthropic}}", llm.AnthropicURL()).Replace(m))
	}
	if err := os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := func(name string) string {
		if name == embedded.SecretEnvName("llm", "apiKey") {
			return "sk-test"
		}
		return ""
	}
	eopts := embedded.Options{Dir: dir, Env: env, TracerProvider: opts.TracerProvider}
	if opts.Nodes {
		eopts.Nodes = &node.Service{Hub: node.NewHub()}
	}
	if opts.Registry != nil {
		m, err := metrics.New(opts.Registry, metrics.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		eopts.Metrics, eopts.Gatherer = m, opts.Registry
	}
	rt, err := embedded.Open(context.Background(), eopts)
	if err != nil {
		tb.Fatalf("failed to open the embedded runtime: %v", err)
	}
	hs := httptest.NewServer(gateway.New(rt, opts.APIKey, nil, nil))
	tb.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rt.Close()
	})
	return &Env{LLM: llm, URL: hs.URL, Server: hs, Runtime: rt}
}

// Proxy is a TCP proxy in front of a server whose connections a test can cut,
// as a network failure or a restarted gateway would.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewProxy forwards a loopback port to target (host:port); it is closed when
// the test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	tb.Cleanup(p.Close)
	return p
}

// URL is the proxy's http:// base URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Go(func() { pipe(out, in) })
		p.wg.Go(func() { pipe(in, out) })
	}
}

// Cut closes every connection through the proxy; new ones are accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Close stops the proxy and cuts its connections.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// LeakOptions are the goroutines goleak ignores in tests of an embedded
// gateway: the runtime's SQLite driver and the HTTP keep-alives of the fake
// LLM outlive single tests.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
	}
}
