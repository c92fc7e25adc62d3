package netguard

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// noLocalAddrs makes a Guard's verdicts independent of the host the tests run
// on (whose own addresses might sit in one of the ranges under test).
func noLocalAddrs() ([]netip.Addr, error) { return nil, nil }

func TestSpecialPurposeRangesAreRefused(t *testing.T) {
	cases := []struct {
		addr, reason string
	}{
		// IPv4 Special-Purpose Address Registry.
		{"192.0.2.1", "a documentation address (TEST-NET-1)"},
		{"192.0.2.255", "a documentation address (TEST-NET-1)"},
		{"198.51.100.7", "a documentation address (TEST-NET-2)"},
		{"203.0.113.9", "a documentation address (TEST-NET-3)"},
		{"198.18.0.1", "a benchmarking address"},
		{"198.19.255.254", "a benchmarking address"},
		{"192.88.99.1", "a deprecated 6to4 relay anycast address"},
		{"192.88.99.2", "a 6a44 relay anycast address"},
		{"192.31.196.1", "an AS112 DNS sink address (AS112-v4)"},
		{"192.175.48.6", "an AS112 DNS sink address (direct delegation)"},
		{"192.52.193.1", "an AMT (multicast tunnelling) address"},
		{"192.0.0.1", "an IPv4 service continuity (DS-Lite) address"},
		{"192.0.0.8", "an IPv4 dummy address"},
		{"192.0.0.9", "a Port Control Protocol anycast address"},
		{"192.0.0.10", "a TURN anycast address"},
		{"192.0.0.170", "a NAT64/DNS64 discovery address"},
		{"192.0.0.171", "a NAT64/DNS64 discovery address"},
		{"192.0.0.100", "an IETF protocol assignment address"},
		// IPv6 Special-Purpose Address Registry.
		{"2001:db8::1", "a documentation address"},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "a documentation address"},
		{"3fff::1", "a documentation address"},
		{"3fff:fff:ffff::1", "a documentation address"},
		{"5f00::1", "a segment routing (SRv6 SID) address"},
		{"100:0:0:1::1", "a dummy IPv6 prefix address"},
		{"2620:4f:8000::1", "an AS112 DNS sink address (direct delegation)"},
		{"2001:4:112::1", "an AS112 DNS sink address (AS112-v6)"},
		{"2001:2::1", "a benchmarking address"},
		{"2001:3::1", "an AMT (multicast tunnelling) address"},
		{"2001:10::1", "a deprecated ORCHID address"},
		{"2001:20::1", "an ORCHIDv2 (overlay identifier) address"},
		{"2001:30::1", "a drone remote ID (DET) address"},
		{"2001:1::1", "a Port Control Protocol anycast address"},
		{"2001:1::2", "a TURN anycast address"},
		{"2001:1::3", "a DNS-SD service registration (SRP) anycast address"},
		{"2001:1::4", "an IETF protocol assignment address"},
		{"2001:1ff:ffff::1", "an IETF protocol assignment address"},
		// Teredo: refused in any case, named by its IPv4 end when that is blocked.
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", "a Teredo tunnelling address"},
		{"2001:0:a00:1::f7f7:f7f7", "a Teredo address (server) of 10.0.0.1, a private address"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdfe", "a Teredo address (client) of 192.0.2.1, a documentation address (TEST-NET-1)"},
		// The new IPv4 ranges through the IPv6 forms that embed them.
		{"::ffff:192.0.2.1", "an IPv4-mapped IPv6 address of 192.0.2.1, a documentation address (TEST-NET-1)"},
		{"64:ff9b::203.0.113.1", "a NAT64 address of 203.0.113.1, a documentation address (TEST-NET-3)"},
		{"2002:c633:6401::1", "a 6to4 address of 198.51.100.1, a documentation address (TEST-NET-2)"},
	}
	names := map[string][]string{}
	for i, tc := range cases {
		names[fmt.Sprintf("host%d.example", i)] = []string{tc.addr}
	}
	guard := New(WithLocalAddrs(noLocalAddrs), WithResolver(fakeDNS(names)), WithDialTimeout(2*time.Second))
	ctx := t.Context()

	for i, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.reason).NotTo(BeEmpty())
			ip := netip.MustParseAddr(tc.addr)
			want := fmt.Sprintf("refused: %s is %s", ip, tc.reason)

			g.Expect(guard.CheckAddr(ip)).To(MatchError(want))

			// Every numeric spelling of the host in a URL.
			hosts := []string{ip.String()}
			if ip.Is4() {
				n := binary.BigEndian.Uint32(ip.AsSlice())
				for _, legacy := range []string{fmt.Sprint(n), fmt.Sprintf("0x%08x", n), fmt.Sprintf("0%o", n)} {
					_, err := guard.CheckURL("http://" + legacy + "/")
					g.Expect(err).To(MatchError(fmt.Sprintf("refused: %s means %s, which is %s", legacy, ip, tc.reason)))
				}
			} else {
				hosts = append(hosts, expandIPv6(ip))
			}
			for _, h := range hosts {
				u := "http://" + h + "/"
				if ip.Is6() {
					u = "http://[" + h + "]:8080/"
				}
				_, err := guard.CheckURL(u)
				g.Expect(err).To(MatchError(want), "URL %s", u)
			}

			// A real dial: the literal address, and a name resolving to it
			// (refused in the Control hook, before connect(2)).
			_, err := guard.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), "80"))
			g.Expect(err).To(MatchError(want))
			if !ip.Is4In6() { // the resolver's answers are unmapped first
				name := fmt.Sprintf("host%d.example", i)
				_, err = guard.DialContext(ctx, "tcp", net.JoinHostPort(name, "80"))
				g.Expect(err).To(MatchError(fmt.Sprintf("refused: %s resolved to %s, which is %s", name, ip, tc.reason)))
			}
		})
	}
}

// expandIPv6 writes ip in full: eight groups of four hex digits.
func expandIPv6(ip netip.Addr) string {
	b := ip.As16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%04x", binary.BigEndian.Uint16(b[2*i:]))
	}
	return strings.Join(groups, ":")
}

func TestSpecialPurposeRangesCanBeAllowed(t *testing.T) {
	cases := []struct {
		allow, addr string
	}{
		{"192.0.2.0/24", "192.0.2.10"},
		{"198.18.0.0/15", "198.19.0.1"},
		{"2001:db8::/32", "2001:db8::1"},
		{"2001::/23", "2001:2::1"},
		{"2001::/32", "2001:0:4136:e378:8000:63bf:3fff:fdfe"},
	}
	for _, tc := range cases {
		t.Run(tc.allow, func(t *testing.T) {
			g := NewWithT(t)
			ip := netip.MustParseAddr(tc.addr)
			g.Expect(New(WithLocalAddrs(noLocalAddrs)).CheckAddr(ip)).To(HaveOccurred())
			guard := New(WithLocalAddrs(noLocalAddrs), AllowPrefixes(netip.MustParsePrefix(tc.allow)))
			g.Expect(guard.CheckAddr(ip)).To(Succeed())
		})
	}
}
