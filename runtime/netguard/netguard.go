// Package netguard keeps outbound requests made on the model's behalf (the
// http_request and web_fetch tools, later the browser) away from the machine
// and the networks it sits in: this host's own interface addresses, loopback,
// private, link-local, CGNAT and cloud metadata addresses, and every range of
// the IANA special-purpose registries (documentation, benchmarking, AS112 and
// the rest), in every spelling a URL parser, a resolver or a browser accepts.
// Checking the URL is not enough on its own, because a public-looking name can
// resolve to a private address (or to a public one first and a private one a
// second later: DNS rebinding), so the Guard also checks the address of every
// connection it opens, at connect time.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/idna"
)

// RefusedError reports a destination the Guard will not let a request reach.
// Its message says exactly why, so it can be shown to the model as is.
type RefusedError struct {
	// Reason completes "refused: ", e.g. "127.0.0.1 is a loopback address".
	Reason string
}

// Error implements error; the text starts with "refused: ".
func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// IsRefused reports whether err (or an error it wraps) is a RefusedError, so
// callers can tell a policy refusal from a network failure.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// AsRefused returns the RefusedError inside err, if any; tools show its message
// instead of the transport's wrapping.
func AsRefused(err error) (*RefusedError, bool) {
	var re *RefusedError
	ok := errors.As(err, &re)
	return re, ok
}

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// Resolver looks up the addresses of a host name. *net.Resolver satisfies it;
// ResolverFunc adapts a plain function (a fake DNS in tests).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ResolverFunc is a Resolver made from a function.
type ResolverFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// LookupNetIP implements Resolver.
func (f ResolverFunc) LookupNetIP(ctx context.Context, _ string, host string) ([]netip.Addr, error) {
	return f(ctx, host)
}

// Option configures a Guard.
type Option func(*Guard)

// WithResolver replaces the system resolver. It exists for tests that point a
// made-up name at a local server or at a private address; production uses the
// system resolver.
func WithResolver(r Resolver) Option { return func(g *Guard) { g.resolver = r } }

// AllowPrefixes lets connections reach the given ranges even though they are
// blocked (an explicit allowlist that wins over the block). It exists only so
// tests can reach an httptest server on 127.0.0.1; production never sets it,
// and nothing in configuration can.
func AllowPrefixes(prefixes ...netip.Prefix) Option {
	return func(g *Guard) { g.allow = append(g.allow, prefixes...) }
}

// TrustHosts lets connections to the named hosts (as a URL's host writes
// them: a name, or an IP address without brackets) reach private, shared,
// loopback and other local addresses, though never a cloud metadata address.
// It exists for endpoints an Agent's author configures, such as a self-hosted
// search server in the cluster or beside picobot serve: the model cannot
// choose their host, only what is sent to it. Every other host is judged as
// usual by the same Guard, and in cluster mode the session pods'
// NetworkPolicy still decides what they can reach.
func TrustHosts(hosts ...string) Option {
	return func(g *Guard) {
		if g.trusted == nil {
			g.trusted = map[string]bool{}
		}
		for _, h := range hosts {
			g.trusted[trustKey(h)] = true
		}
	}
}

// trustKey is the form of a host TrustHosts and the checks compare.
func trustKey(host string) string {
	host = strings.TrimRight(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return host
}

// WithLocalAddrs replaces the source of this host's own addresses (by default
// net.InterfaceAddrs), which the Guard refuses like a blocked range. The Guard
// reads it at most once every few seconds; tests use it to make an address
// local, or to make the reading fail.
func WithLocalAddrs(read func() ([]netip.Addr, error)) Option {
	return func(g *Guard) { g.readLocal = read }
}

// WithDialTimeout bounds how long one connection attempt may take (default 30s).
func WithDialTimeout(d time.Duration) Option { return func(g *Guard) { g.dialTimeout = d } }

// Guard decides which destinations outbound requests may reach and provides a
// dialer and an HTTP client that enforce it. It is safe for concurrent use;
// one Guard (and so one connection pool) serves all tools of a runtime.
type Guard struct {
	resolver    Resolver
	allow       []netip.Prefix
	trusted     map[string]bool
	blocked     []blockedRange
	readLocal   func() ([]netip.Addr, error)
	local       *localAddrs
	dialTimeout time.Duration
	transport   *http.Transport
}

// New returns a Guard that refuses every blocked range and this host's own
// addresses.
func New(opts ...Option) *Guard {
	g := &Guard{
		resolver:    net.DefaultResolver,
		blocked:     defaultBlocked(),
		readLocal:   interfaceAddrs,
		dialTimeout: 30 * time.Second,
	}
	for _, opt := range opts {
		opt(g)
	}
	g.local = newLocalAddrs(g.readLocal, time.Now)
	g.transport = &http.Transport{
		Proxy:                 nil, // never a proxy from the environment: it would dial for us, unchecked
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return g
}

// CheckAddr returns a RefusedError when ip is in a blocked range or is an
// address of this host (and is not explicitly allowed), nil otherwise.
func (g *Guard) CheckAddr(ip netip.Addr) error {
	if why := g.classify(ip); why != "" {
		return refused("%s is %s", ip, why)
	}
	return nil
}

func (g *Guard) classify(ip netip.Addr) string {
	ip = ip.WithZone("")
	for _, p := range g.allow {
		if p.Contains(ip) || (ip.Is4In6() && p.Contains(ip.Unmap())) {
			return ""
		}
	}
	return g.judge(ip)
}

// judge says why ip may not be reached, the allowlist aside, or "" when it
// may. An address of this host comes first, being the narrowest reason (a
// pod's 10.x address is named as this host's, not as a private one), except
// loopback addresses, which keep their own familiar reason.
func (g *Guard) judge(ip netip.Addr) string {
	ip = ip.WithZone("")
	local, err := g.local.contains(ip)
	if local && !ip.IsLoopback() {
		return "an address of this host"
	}
	if why := classify(g.blocked, ip, g.judge); why != "" {
		return why
	}
	if err != nil {
		return fmt.Sprintf("possibly an address of this host (its addresses could not be read: %v)", err)
	}
	return ""
}

// CheckURL parses raw and refuses anything but a plain http(s) URL to an
// allowed host: other schemes, credentials in the URL, an empty host, local
// host names, and IP addresses in blocked ranges in any notation (IPv6 forms
// embedding IPv4, and the decimal, hex, octal and short IPv4 forms). The URL it
// returns has its host normalised (IDNA to ASCII, lower case, numeric forms
// rewritten as the dotted quad they mean), so what is fetched is what was
// checked. Names are not resolved here: the dialer checks the addresses they
// resolve to when connecting.
func (g *Guard) CheckURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, refused("%q is not a valid URL: %v", raw, errors.Unwrap(err))
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return nil, refused("%q has no scheme; use an absolute http:// or https:// URL", raw)
	default:
		return nil, refused("scheme %q is not allowed; only http and https URLs can be fetched", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, refused("%q is not an absolute http(s) URL with a host", raw)
	}
	if u.User != nil {
		return nil, refused("URLs with credentials (user:password@) are not allowed")
	}
	host, err := g.checkHost(u.Hostname())
	if err != nil {
		return nil, err
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, refused("port %q is not a valid port", p)
		}
		host = net.JoinHostPort(host, p)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	u.Host = host
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// checkHost judges a host (no port, no brackets) and returns its normal form.
func (g *Guard) checkHost(host string) (string, error) {
	if host == "" {
		return "", refused("the URL has no host")
	}
	if key := trustKey(host); g.trusted[key] {
		if ip, err := netip.ParseAddr(key); err == nil && g.metadata(ip) {
			return "", refused("%s is a cloud metadata address", ip)
		}
		return key, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", refused("%s has an IPv6 zone, which is only meaningful on the local network", host)
		}
		if err := g.CheckAddr(ip); err != nil {
			return "", err
		}
		return ip.String(), nil
	}
	name := host
	if !isASCII(name) {
		ascii, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", refused("%q is not a valid host name", host)
		}
		name = ascii
	}
	name = strings.TrimRight(strings.ToLower(name), ".")
	if ip, numeric, ok := parseLegacyIPv4(name); numeric {
		if !ok {
			return "", refused("%q looks like a numeric IPv4 address but is not a valid one", host)
		}
		if why := g.classify(ip); why != "" {
			if strings.TrimRight(host, ".") == ip.String() {
				return "", refused("%s is %s", ip, why)
			}
			return "", refused("%s means %s, which is %s", host, ip, why)
		}
		return ip.String(), nil
	}
	if !validHostName(name) {
		return "", refused("%q is not a valid host name", host)
	}
	if why := blockedName(name); why != "" {
		return "", refused("%s is %s", name, why)
	}
	return name, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// DialContext connects like net.Dialer.DialContext, but resolves the name
// itself and checks the address of every connection in the dialer's Control
// hook, which runs just before connect(2) with the address actually used. So a
// name that resolves to a private address, or that is rebound to one between a
// check and the connection, is refused; the error names both the host and the
// address it resolved to.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("failed to split address %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("failed to parse port %q: %w", portStr, err)
	}
	norm, err := g.checkHost(host)
	if err != nil {
		return nil, err
	}
	ips, err := g.lookup(ctx, network, norm)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		d := &net.Dialer{Timeout: g.dialTimeout, KeepAlive: 30 * time.Second, Control: g.control(host, g.trusted[norm])}
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if re, ok := AsRefused(err); ok {
			err = re // drop the *net.OpError wrapping: the reason says it all
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// lookup returns the addresses to try for host: itself when it is an address,
// the resolver's answer (restricted to the network's family) otherwise.
func (g *Guard) lookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	family := "ip"
	switch network {
	case "tcp4", "udp4":
		family = "ip4"
	case "tcp6", "udp6":
		family = "ip6"
	}
	ips, err := g.resolver.LookupNetIP(ctx, family, host)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve host %q: %w", host, err)
	}
	out := ips[:0:0]
	for _, ip := range ips {
		ip = ip.Unmap()
		if (family == "ip4" && !ip.Is4()) || (family == "ip6" && !ip.Is6()) {
			continue
		}
		out = append(out, ip)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("failed to resolve host %q: no %s addresses", host, family)
	}
	return out, nil
}

// control is the net.Dialer Control hook: the last point before connect(2),
// holding the exact remote address. A trusted host (TrustHosts) may reach
// any address but a cloud metadata one.
func (g *Guard) control(host string, trusted bool) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return refused("cannot check remote address %q", address)
		}
		ip := ap.Addr()
		why := g.classify(ip)
		if trusted {
			why = ""
			if g.metadata(ip) {
				why = "a cloud metadata address"
			}
		}
		if why == "" {
			return nil
		}
		if h, err := netip.ParseAddr(host); err == nil && h.Unmap() == ip.Unmap() {
			return refused("%s is %s", ip, why)
		}
		return refused("%s resolved to %s, which is %s", host, ip, why)
	}
}

// metadata reports whether ip is a cloud metadata address, which not even a
// trusted host may reach.
func (g *Guard) metadata(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	for _, b := range g.blocked {
		if b.what == whatMetadata && b.prefix.Contains(ip) {
			return true
		}
	}
	return false
}

// Client returns an HTTP client that dials only through the Guard, uses no
// proxy from the environment and never follows redirects: a 3xx response is
// returned as is, so the caller can check its Location like any other URL
// before requesting it. timeout bounds the whole exchange (0: none). Clients
// share the Guard's connection pool.
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: g.transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// CloseIdleConnections closes pooled connections; call it when the runtime
// shuts down.
func (g *Guard) CloseIdleConnections() { g.transport.CloseIdleConnections() }
