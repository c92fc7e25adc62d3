package browser

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/netguard"
)

// EgressProxy is the HTTP proxy a locally launched Chromium sends every
// request through (navigation, sub-resources, WebSocket, EventSource; QUIC
// and non-proxied WebRTC are off). Each connection is dialled through the
// netguard Guard, so loopback, private and metadata addresses are refused at
// connect time whatever name led there, and with Domains set only those hosts
// are reached. Blocked requests are remembered for the tool to report.
type EgressProxy struct {
	guard   *netguard.Guard
	domains Domains
	ln      net.Listener
	srv     *http.Server
	rp      *httputil.ReverseProxy
	log     *slog.Logger

	mu      sync.Mutex
	blocked []string
	conns   map[net.Conn]struct{}
}

// maxBlockedKept bounds the blocked-request log.
const maxBlockedKept = 50

// StartEgressProxy listens on a free loopback port and serves the proxy.
func StartEgressProxy(guard *netguard.Guard, domains Domains, log *slog.Logger) (*EgressProxy, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to listen for the browser egress proxy: %w", err)
	}
	p := &EgressProxy{guard: guard, domains: domains, ln: ln, log: log, conns: map[net.Conn]struct{}{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(*httputil.ProxyRequest) {},
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           p.dial,
			MaxIdleConns:          32,
			IdleConnTimeout:       30 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.refuse(w, r.Host, err)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's address for --proxy-server.
func (p *EgressProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy and every tunnel through it.
func (p *EgressProxy) Close() {
	_ = p.srv.Close()
	p.closeAll()
	if t, ok := p.rp.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}

// Blocked returns and forgets the requests refused since the last call.
func (p *EgressProxy) Blocked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.blocked
	p.blocked = nil
	return out
}

func (p *EgressProxy) noteBlocked(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.blocked) < maxBlockedKept {
		p.blocked = append(p.blocked, s)
	}
}

// dial checks the host against the allowlist, then connects through the
// Guard (which resolves and checks every address).
func (p *EgressProxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("failed to split address %q: %w", addr, err)
	}
	if !p.domains.Allows(strings.Trim(host, "[]")) {
		return nil, &netguard.RefusedError{Reason: fmt.Sprintf("%s is not in the allowed domains", host)}
	}
	return p.guard.DialContext(ctx, network, addr)
}

func (p *EgressProxy) refuse(w http.ResponseWriter, host string, err error) {
	status := http.StatusBadGateway
	msg := err.Error()
	if re, ok := netguard.AsRefused(err); ok {
		status, msg = http.StatusForbidden, re.Error()
		p.noteBlocked(host + ": " + re.Reason)
	}
	p.log.Debug("Browser request refused", "host", host, "err", msg)
	http.Error(w, "PicoBot blocked this request: "+msg, status)
}

// ServeHTTP implements http.Handler: CONNECT tunnels (https, wss) and
// absolute-URL requests (http, ws).
func (p *EgressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if r.URL.Host == "" || (r.URL.Scheme != "http" && r.URL.Scheme != "ws") {
		http.Error(w, "PicoBot egress proxy: only proxy requests are served", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme == "ws" {
		r.URL.Scheme = "http"
	}
	r.Header.Del("Proxy-Connection")
	r.Header.Del("Proxy-Authorization")
	p.rp.ServeHTTP(w, r)
}

func (p *EgressProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	upstream, err := p.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		p.refuse(w, r.Host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "PicoBot egress proxy: tunnelling unsupported", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.track(client, upstream)
	go func() {
		defer p.untrack(client, upstream)
		done := make(chan struct{}, 2)
		go func() {
			if n := buf.Reader.Buffered(); n > 0 {
				b, _ := buf.Peek(n)
				_, _ = upstream.Write(b)
			}
			_, _ = io.Copy(upstream, client)
			closeWrite(upstream)
			done <- struct{}{}
		}()
		go func() {
			_, _ = io.Copy(client, upstream)
			closeWrite(client)
			done <- struct{}{}
		}()
		<-done
		<-done
	}()
}

// track keeps hijacked tunnels so Close can end them.
func (p *EgressProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

func (p *EgressProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// closeAll closes tunnels left open.
func (p *EgressProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
