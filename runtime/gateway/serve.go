package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound what clients may hold of a gateway's HTTP server: how long a
// request may take to arrive, how long an idle connection stays, and how
// many connections one address and all addresses together may keep open.
// Zero values pick the defaults.
type Limits struct {
	// HeaderTimeout bounds reading a request's headers (10s).
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a REST or OpenAI request's body, counted
	// from the end of its headers (30s); a slower body gets 408 and the
	// connection is closed. WebSockets are exempt (their frames have their
	// own read limit and the connection lives as long as the client).
	BodyTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (2m).
	IdleTimeout time.Duration
	// MaxConns caps all open connections (4096); beyond it new ones wait
	// in the kernel's accept queue.
	MaxConns int
	// MaxConnsPerIP caps the open connections of one client address, an
	// IPv6 client counted by its /64 (256); beyond it new ones are closed
	// at once.
	MaxConnsPerIP int
}

// Defaults of Limits.
const (
	DefaultHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout   = 30 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultMaxConns      = 4096
	DefaultMaxConnsPerIP = 256
)

func (l Limits) withDefaults() Limits {
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = DefaultHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	return l
}

// HTTPServer returns the server both programs serve the gateway with. It
// sets no WriteTimeout: streamed answers (WebSocket, SSE) last as long as
// their turn, and their writes have deadlines of their own.
func HTTPServer(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	return &http.Server{Handler: h, ReadHeaderTimeout: l.HeaderTimeout, IdleTimeout: l.IdleTimeout}
}

// Listen wraps ln with the connection caps of l.
func Listen(ln net.Listener, l Limits) net.Listener {
	l = l.withDefaults()
	return &perIPListener{Listener: netutil.LimitListener(ln, l.MaxConns), max: l.MaxConnsPerIP, open: map[netip.Prefix]int{}}
}

// perIPListener closes a new connection at once when its client already
// holds max. Written here because the standard library and x/net cap only
// the total (netutil.LimitListener, used beneath it).
type perIPListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[netip.Prefix]int
}

// Accept implements net.Listener.
func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, ok := clientKey(c.RemoteAddr().String())
		if !ok {
			return c, nil
		}
		l.mu.Lock()
		if l.open[key] >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open[key]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

func (l *perIPListener) release(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// clientKey is the address a connection counts against: the IPv4 address,
// or the /64 of an IPv6 one (one client gets a whole /64).
func clientKey(addr string) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return netip.Prefix{}, false
	}
	ip := ap.Addr().Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// countedConn gives its slot back once, on the first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
