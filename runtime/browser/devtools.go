package browser

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/netguard"
)

// MinTokenLength is the shortest token the DevTools proxy accepts.
const MinTokenLength = 16

type inboundHostKey struct{}

// DevToolsProxy is the authenticating reverse proxy in front of Chromium's
// DevTools endpoint (HTTP and WebSocket). Chromium binds DevTools to
// loopback and refuses a Host header that is a name, so the proxy forwards
// to loopback with the Host rewritten, and rewrites the WebSocket addresses
// in /json answers to its own. Every request but GET /healthz must carry
// "Authorization: Bearer <token>", compared in constant time.
type DevToolsProxy struct {
	target *url.URL
	token  []byte
	rp     *httputil.ReverseProxy
}

// NewDevToolsProxy returns a proxy forwarding to target (the loopback
// DevTools address, http://127.0.0.1:PORT) for holders of token.
func NewDevToolsProxy(target, token string) (*DevToolsProxy, error) {
	if len(token) < MinTokenLength {
		return nil, fmt.Errorf("the DevTools proxy token must be at least %d characters", MinTokenLength)
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("invalid DevTools address %q", target)
	}
	p := &DevToolsProxy{target: u, token: []byte(token)}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = u.Host
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Origin") // Chromium refuses WebSocket origins it does not know
			pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), inboundHostKey{}, pr.In.Host))
		},
		ModifyResponse: p.rewriteJSON,
	}
	return p, nil
}

// rewriteJSON points the WebSocket addresses of /json answers at the proxy.
func (p *DevToolsProxy) rewriteJSON(resp *http.Response) error {
	if !strings.HasPrefix(resp.Request.URL.Path, "/json") {
		return nil
	}
	in, _ := resp.Request.Context().Value(inboundHostKey{}).(string)
	if in == "" {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("failed to read the DevTools answer: %w", err)
	}
	body = bytes.ReplaceAll(body, []byte("ws://"+p.target.Host+"/"), []byte("ws://"+in+"/"))
	body = bytes.ReplaceAll(body, []byte("ws="+p.target.Host+"/"), []byte("ws="+in+"/"))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// ServeHTTP implements http.Handler.
func (p *DevToolsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" && r.Method == http.MethodGet {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), p.token) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="picobot-browser"`)
		http.Error(w, "a valid browser token is required", http.StatusUnauthorized)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// PodConfig configures the browser of a browser pod (`picobot browser`).
type PodConfig struct {
	// Bin is the Chromium executable (DefaultBin).
	Bin string
	// UserDataDir is the Chrome profile folder (required).
	UserDataDir string
	// Token authenticates the session runtime (required).
	Token string
	// Domains restricts what the browser may load.
	Domains Domains
	// Guard enforces the address policy (netguard.New()).
	Guard *netguard.Guard
	// NoSandbox starts Chromium with --no-sandbox (LaunchSpec.NoSandbox).
	NoSandbox bool
	Log       *slog.Logger
}

// Pod is a running Chromium with its egress proxy and its authenticating
// DevTools proxy.
type Pod struct {
	proc    *Process
	egress  *EgressProxy
	handler http.Handler
}

// StartPod launches Chromium (every request through the egress proxy) and
// returns the pod with the DevTools proxy handler to serve.
func StartPod(ctx context.Context, cfg PodConfig) (*Pod, error) {
	if cfg.UserDataDir == "" {
		return nil, errors.New("a user data folder is required")
	}
	if len(cfg.Token) < MinTokenLength {
		return nil, fmt.Errorf("the DevTools proxy token must be at least %d characters", MinTokenLength)
	}
	if err := os.MkdirAll(cfg.UserDataDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create user data folder %s: %w", cfg.UserDataDir, err)
	}
	if cfg.Guard == nil {
		cfg.Guard = netguard.New()
	}
	egress, err := StartEgressProxy(cfg.Guard, cfg.Domains, cfg.Log)
	if err != nil {
		return nil, err
	}
	proc, err := Launch(ctx, LaunchSpec{Bin: cfg.Bin, UserDataDir: cfg.UserDataDir, ProxyURL: egress.URL(), NoSandbox: cfg.NoSandbox})
	if err != nil {
		egress.Close()
		return nil, err
	}
	wsu, err := url.Parse(proc.WebSocketURL)
	if err != nil {
		proc.Kill()
		egress.Close()
		return nil, fmt.Errorf("browser printed an invalid DevTools address %q: %w", proc.WebSocketURL, err)
	}
	h, err := NewDevToolsProxy("http://"+wsu.Host, cfg.Token)
	if err != nil {
		proc.Kill()
		egress.Close()
		return nil, err
	}
	return &Pod{proc: proc, egress: egress, handler: h}, nil
}

// Handler serves the authenticated DevTools endpoint.
func (p *Pod) Handler() http.Handler { return p.handler }

// Done is closed when Chromium exits.
func (p *Pod) Done() <-chan struct{} { return p.proc.Done() }

// Close stops Chromium and the egress proxy.
func (p *Pod) Close() {
	p.proc.Stop(5 * time.Second)
	p.egress.Close()
}
