package browser

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/picobot/picobot/runtime/netguard"
)

// Domains is an allowlist of host names. "example.com" matches that host and
// its subdomains (a site is usually served from www. and static. hosts too);
// "*.example.com" matches only the subdomains. Empty allows every public host.
type Domains []string

// Allows reports whether host (lower case, no port) is on the list.
func (d Domains) Allows(host string) bool {
	if len(d) == 0 {
		return true
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, e := range d {
		e = strings.ToLower(strings.TrimSpace(e))
		if rest, ok := strings.CutPrefix(e, "*."); ok {
			if strings.HasSuffix(host, "."+rest) {
				return true
			}
			continue
		}
		if host == e || strings.HasSuffix(host, "."+e) {
			return true
		}
	}
	return false
}

// Policy decides which URLs the browser may open: only plain http(s) URLs to
// public hosts (no credentials, no loopback, private, link-local or metadata
// addresses, no local host names, no names resolving to such addresses) and,
// when Domains is set, only hosts on it.
type Policy struct {
	Guard    *netguard.Guard
	Resolver netguard.Resolver
	Domains  Domains
}

// CheckURL returns the normalised URL or a *netguard.RefusedError saying why
// it is refused. Names are resolved, so a public-looking name pointing at a
// private address is refused before the browser is asked to load it (the
// egress proxy checks each connection again, which defeats DNS rebinding).
func (p Policy) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := p.Guard.CheckURL(raw)
	if err != nil {
		return nil, err
	}
	if err := p.checkHost(ctx, u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

func (p Policy) checkHost(ctx context.Context, host string) error {
	if !p.Domains.Allows(host) {
		return &netguard.RefusedError{Reason: fmt.Sprintf("%s is not in the allowed domains (%s)", host, strings.Join(p.Domains, ", "))}
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.Guard.CheckAddr(ip)
	}
	r := p.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("failed to resolve host %q: %w", host, err)
	}
	for _, ip := range ips {
		if err := p.Guard.CheckAddr(ip.Unmap()); err != nil {
			return &netguard.RefusedError{Reason: fmt.Sprintf("%s resolved to %s", host, strings.TrimPrefix(err.Error(), "refused: "))}
		}
	}
	return nil
}
