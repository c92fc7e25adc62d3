package netguard

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// whatMetadata is the reason of the cloud metadata ranges, which
// TrustHosts does not open.
const whatMetadata = "a cloud metadata address"

// blockedRange is one address range outbound requests may not reach, with the
// words used to explain a refusal.
type blockedRange struct {
	prefix netip.Prefix
	what   string
}

// Embedding prefixes: IPv6 ranges that carry an IPv4 address inside them.
// Each address in them is judged by the IPv4 address it reaches.
var (
	mappedV4  = netip.MustParsePrefix("::ffff:0:0/96")
	compatV4  = netip.MustParsePrefix("::/96")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
)

// defaultBlocked returns the ranges refused by every Guard: the usual
// private and local ranges plus every entry of the IANA IPv4 and IPv6
// Special-Purpose Address Registries (RFC 6890 and its updates), including
// those the registries mark globally reachable (AS112, AMT, the anycast
// addresses): no tool has a reason to fetch from them, and an explicit
// AllowPrefixes still can. The list is most specific first so a refusal names
// the narrowest reason (a metadata address before the link-local range holding
// it, Teredo before the IETF protocol assignments holding it). It is built per
// Guard rather than kept in a package variable so no caller can alter
// another's policy.
func defaultBlocked() []blockedRange {
	r := func(p, what string) blockedRange {
		return blockedRange{prefix: netip.MustParsePrefix(p), what: what}
	}
	return []blockedRange{
		// Cloud metadata services (AWS, GCP, Azure, Alibaba, AWS IPv6).
		r("169.254.169.254/32", whatMetadata),
		r("169.254.170.2/32", whatMetadata),
		r("100.100.100.200/32", whatMetadata),
		r("fd00:ec2::254/128", whatMetadata),

		// IPv4.
		r("255.255.255.255/32", "a broadcast address"),
		r("0.0.0.0/32", "an unspecified address"),
		r("0.0.0.0/8", "a \"this network\" address"),
		r("127.0.0.0/8", "a loopback address"),
		r("10.0.0.0/8", "a private address"),
		r("172.16.0.0/12", "a private address"),
		r("192.168.0.0/16", "a private address"),
		r("100.64.0.0/10", "a shared (CGNAT) address"),
		r("169.254.0.0/16", "a link-local address"),
		r("192.0.0.0/29", "an IPv4 service continuity (DS-Lite) address"),
		r("192.0.0.8/32", "an IPv4 dummy address"),
		r("192.0.0.9/32", "a Port Control Protocol anycast address"),
		r("192.0.0.10/32", "a TURN anycast address"),
		r("192.0.0.170/32", "a NAT64/DNS64 discovery address"),
		r("192.0.0.171/32", "a NAT64/DNS64 discovery address"),
		r("192.0.0.0/24", "an IETF protocol assignment address"),
		r("192.0.2.0/24", "a documentation address (TEST-NET-1)"),
		r("198.51.100.0/24", "a documentation address (TEST-NET-2)"),
		r("203.0.113.0/24", "a documentation address (TEST-NET-3)"),
		r("192.31.196.0/24", "an AS112 DNS sink address (AS112-v4)"),
		r("192.175.48.0/24", "an AS112 DNS sink address (direct delegation)"),
		r("192.52.193.0/24", "an AMT (multicast tunnelling) address"),
		r("192.88.99.2/32", "a 6a44 relay anycast address"),
		r("192.88.99.0/24", "a deprecated 6to4 relay anycast address"),
		r("198.18.0.0/15", "a benchmarking address"),
		r("224.0.0.0/4", "a multicast address"),
		r("240.0.0.0/4", "a reserved address"),

		// IPv6. The embedding prefixes (mapped, compatible, NAT64, 6to4) are
		// not listed: their addresses are judged by the IPv4 address inside.
		r("::/128", "an unspecified address"),
		r("::1/128", "a loopback address"),
		r("fe80::/10", "a link-local address"),
		r("fec0::/10", "a site-local address"),
		r("fc00::/7", "a unique-local (private) address"),
		r("ff00::/8", "a multicast address"),
		r("64:ff9b:1::/48", "a local-use NAT64 address"),
		r("100::/64", "a discard-only address"),
		r("100:0:0:1::/64", "a dummy IPv6 prefix address"),
		r("2001::/32", "a Teredo tunnelling address"),
		r("2001:1::1/128", "a Port Control Protocol anycast address"),
		r("2001:1::2/128", "a TURN anycast address"),
		r("2001:1::3/128", "a DNS-SD service registration (SRP) anycast address"),
		r("2001:2::/48", "a benchmarking address"),
		r("2001:3::/32", "an AMT (multicast tunnelling) address"),
		r("2001:4:112::/48", "an AS112 DNS sink address (AS112-v6)"),
		r("2001:10::/28", "a deprecated ORCHID address"),
		r("2001:20::/28", "an ORCHIDv2 (overlay identifier) address"),
		r("2001:30::/28", "a drone remote ID (DET) address"),
		r("2001::/23", "an IETF protocol assignment address"),
		r("2001:db8::/32", "a documentation address"),
		r("3fff::/20", "a documentation address"),
		r("2620:4f:8000::/48", "an AS112 DNS sink address (direct delegation)"),
		r("5f00::/16", "a segment routing (SRv6 SID) address"),
	}
}

// classify says why ip may not be reached by the ranges in blocked, or ""
// when none holds it. Addresses that embed an IPv4 address (mapped,
// compatible, NAT64, 6to4, Teredo) are judged by the address they lead to,
// since that is where the packets end up; judge is how that IPv4 address is
// judged (the Guard's whole policy, this host's addresses included).
func classify(blocked []blockedRange, ip netip.Addr, judge func(netip.Addr) string) string {
	ip = ip.WithZone("")
	for _, b := range blocked {
		if !b.prefix.Contains(ip) {
			continue
		}
		// Every Teredo address is refused (2001::/23 holds it), but when the
		// IPv4 address it leads to is blocked too, that names the danger.
		if b.prefix == teredo {
			if why := viaEmbedded(ip, judge); why != "" {
				return why
			}
		}
		return b.what
	}
	return viaEmbedded(ip, judge)
}

// viaEmbedded says why ip is refused for the IPv4 address it carries, or "".
func viaEmbedded(ip netip.Addr, judge func(netip.Addr) string) string {
	if !ip.Is6() {
		return ""
	}
	for _, e := range embedded(ip) {
		if why := judge(e.v4); why != "" {
			return fmt.Sprintf("%s of %s, %s", e.kind, e.v4, why)
		}
	}
	return ""
}

// embeddedV4 is an IPv4 address carried inside an IPv6 one.
type embeddedV4 struct {
	kind string
	v4   netip.Addr
}

// embedded lists the IPv4 addresses an IPv6 address may deliver packets to.
func embedded(ip netip.Addr) []embeddedV4 {
	b := ip.As16()
	last32 := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case mappedV4.Contains(ip):
		return []embeddedV4{{"an IPv4-mapped IPv6 address", last32}}
	case compatV4.Contains(ip):
		return []embeddedV4{{"an IPv4-compatible IPv6 address", last32}}
	case nat64.Contains(ip):
		return []embeddedV4{{"a NAT64 address", last32}}
	case sixToFour.Contains(ip):
		return []embeddedV4{{"a 6to4 address", netip.AddrFrom4([4]byte(b[2:6]))}}
	case teredo.Contains(ip):
		// Teredo: server in bits 32-63, client obfuscated (inverted) in 96-127.
		client := binary.BigEndian.Uint32(b[12:16]) ^ 0xffffffff
		var c [4]byte
		binary.BigEndian.PutUint32(c[:], client)
		return []embeddedV4{
			{"a Teredo address (client)", netip.AddrFrom4(c)},
			{"a Teredo address (server)", netip.AddrFrom4([4]byte(b[4:8]))},
		}
	}
	return nil
}
