package netguard

import (
	"net/netip"
	"strconv"
	"strings"
)

// parseLegacyIPv4 reads host the way inet_aton(3) and the WHATWG URL standard
// (so every browser) do: one to four dot-separated parts, each decimal, octal
// (leading 0) or hex (0x), the last part filling the remaining bytes, so
// "2130706433", "0x7f000001", "0177.0.0.1" and "127.1" all mean 127.0.0.1.
// Go's net/url and net/netip reject these forms, but a resolver or a browser
// handed the same string would connect to the address, so the guard must judge
// the address they mean.
//
// numeric reports whether host ends in a number, which makes it an IPv4 address
// in browsers' eyes; a numeric host that does not parse (too many parts, a part
// out of range) is returned with ok false and must be refused.
func parseLegacyIPv4(host string) (addr netip.Addr, numeric, ok bool) {
	parts := strings.Split(host, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1] // one trailing dot is allowed
	}
	if _, isNum := parseIPv4Number(parts[len(parts)-1]); !isNum && !allDigits(parts[len(parts)-1]) {
		return netip.Addr{}, false, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, true, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, isNum := parseIPv4Number(p)
		if !isNum {
			return netip.Addr{}, true, false
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, true, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, true, false
	}
	v := last
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, true
}

// parseIPv4Number parses one part of a legacy IPv4 address: "0x" hex (an empty
// remainder is 0), a leading "0" octal, decimal otherwise.
func parseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
		if s == "" {
			return 0, true
		}
	case len(s) > 1 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validHostName reports whether s uses only the characters of DNS names (plus
// the underscore some real names carry). Anything else is a parser-confusion
// attempt or a typo.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return false
			}
		}
	}
	return true
}

// blockedName says why a (lower-case, dot-trimmed) host name is refused before
// any lookup, or "" when it is not: names that by convention or standard point
// inside the machine or the local network.
func blockedName(name string) string {
	switch name {
	case "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback":
		return "a loopback host name"
	case "metadata", "metadata.google.internal":
		return "a cloud metadata host name"
	}
	for _, s := range []struct{ suffix, why string }{
		{".localhost", "a loopback host name"},
		{".local", "a local-network (mDNS) host name"},
		{".internal", "an internal host name"},
		{".home.arpa", "a home-network host name"},
		{".localdomain", "a local-network host name"},
	} {
		if strings.HasSuffix(name, s.suffix) {
			return s.why
		}
	}
	return ""
}
