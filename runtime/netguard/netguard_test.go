package netguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCheckURLRefusesHostileURLs(t *testing.T) {
	g := New()
	cases := []struct {
		url    string
		reason string
	}{
		// Loopback, private and special IPv4 literals.
		{"http://127.0.0.1/", "127.0.0.1 is a loopback address"},
		{"http://127.0.0.1./admin", "127.0.0.1 is a loopback address"},
		{"https://127.255.255.254:8443/", "127.255.255.254 is a loopback address"},
		{"http://10.0.0.1/", "10.0.0.1 is a private address"},
		{"http://10.0.0.1:8080/x", "10.0.0.1 is a private address"},
		{"http://172.16.5.4/", "172.16.5.4 is a private address"},
		{"http://172.31.255.255/", "172.31.255.255 is a private address"},
		{"http://192.168.1.1/", "192.168.1.1 is a private address"},
		{"http://100.64.0.1/", "100.64.0.1 is a shared (CGNAT) address"},
		{"http://169.254.1.1/", "169.254.1.1 is a link-local address"},
		{"http://0.0.0.0/", "0.0.0.0 is an unspecified address"},
		{"http://0.1.2.3/", `0.1.2.3 is a "this network" address`},
		{"http://224.0.0.1/", "224.0.0.1 is a multicast address"},
		{"http://255.255.255.255/", "255.255.255.255 is a broadcast address"},
		{"http://240.0.0.1/", "240.0.0.1 is a reserved address"},
		// Cloud metadata.
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"},
		{"http://100.100.100.200/latest/meta-data/", "100.100.100.200 is a cloud metadata address"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254 is a cloud metadata address"},
		{"http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a cloud metadata host name"},
		{"http://metadata/computeMetadata/v1/", "metadata is a cloud metadata host name"},
		// IPv6 literals.
		{"http://[::1]/", "::1 is a loopback address"},
		{"http://[::]/", ":: is an unspecified address"},
		{"http://[fe80::1]/", "fe80::1 is a link-local address"},
		{"http://[fe80::1%25eth0]/", "has an IPv6 zone"},
		{"http://[fc00::1]/", "fc00::1 is a unique-local (private) address"},
		{"http://[fd12:3456::1]:8080/", "fd12:3456::1 is a unique-local (private) address"},
		{"http://[ff02::1]/", "ff02::1 is a multicast address"},
		{"http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is an IPv4-mapped IPv6 address of 127.0.0.1, a loopback address"},
		{"http://[::ffff:7f00:1]/", "::ffff:127.0.0.1 is an IPv4-mapped IPv6 address of 127.0.0.1, a loopback address"},
		{"http://[::ffff:a9fe:a9fe]/", "IPv4-mapped IPv6 address of 169.254.169.254, a cloud metadata address"},
		{"http://[::127.0.0.1]/", "::7f00:1 is an IPv4-compatible IPv6 address of 127.0.0.1, a loopback address"},
		{"http://[64:ff9b::10.0.0.1]/", "64:ff9b::a00:1 is a NAT64 address of 10.0.0.1, a private address"},
		{"http://[2002:7f00:1::]/", "2002:7f00:1:: is a 6to4 address of 127.0.0.1, a loopback address"},
		{"http://[2002:a9fe:a9fe::1]/", "6to4 address of 169.254.169.254, a cloud metadata address"},
		{"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "Teredo address (client) of 127.0.0.1, a loopback address"},
		// Legacy numeric IPv4 forms.
		{"http://2130706433/", "2130706433 means 127.0.0.1, which is a loopback address"},
		{"http://0x7f000001/", "0x7f000001 means 127.0.0.1, which is a loopback address"},
		{"http://0X7F000001/", "means 127.0.0.1, which is a loopback address"},
		{"http://017700000001/", "017700000001 means 127.0.0.1, which is a loopback address"},
		{"http://0177.0.0.1/", "0177.0.0.1 means 127.0.0.1, which is a loopback address"},
		{"http://127.1/", "127.1 means 127.0.0.1, which is a loopback address"},
		{"http://127.0.1/", "127.0.1 means 127.0.0.1, which is a loopback address"},
		{"http://0x7f.1/", "0x7f.1 means 127.0.0.1, which is a loopback address"},
		{"http://0xa9.0376.43518/", "0xa9.0376.43518 means 169.254.169.254, which is a cloud metadata address"},
		{"http://0xA9FEA9FE/", "means 169.254.169.254, which is a cloud metadata address"},
		{"http://3232235777/", "3232235777 means 192.168.1.1, which is a private address"},
		{"http://0/", "0 means 0.0.0.0, which is an unspecified address"},
		{"http://%31%32%37.0.0.1/", "is not a valid URL"},
		{"http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/", "means 127.0.0.1, which is a loopback address"},
		{"http://1.2.3.4.5/", "looks like a numeric IPv4 address but is not a valid one"},
		{"http://256.1.1.1/", "looks like a numeric IPv4 address but is not a valid one"},
		{"http://example.0x10/", "looks like a numeric IPv4 address but is not a valid one"},
		{"http://a_b!.example/", "is not a valid host name"},
		// Names.
		{"http://localhost/", "localhost is a loopback host name"},
		{"http://LOCALHOST.:8080/", "localhost is a loopback host name"},
		{"http://ip6-localhost/", "ip6-localhost is a loopback host name"},
		{"http://app.localhost/", "app.localhost is a loopback host name"},
		{"http://printer.local/", "printer.local is a local-network (mDNS) host name"},
		{"http://db.internal/", "db.internal is an internal host name"},
		{"http://router.home.arpa/", "router.home.arpa is a home-network host name"},
		// URL shapes.
		{"http://user:pass@example.com/", "credentials"},
		{"http://example.com@127.0.0.1/", "credentials"},
		{"http://@example.com/", "credentials"},
		{"file:///etc/passwd", `scheme "file" is not allowed`},
		{"ftp://example.com/", `scheme "ftp" is not allowed`},
		{"gopher://127.0.0.1:6379/_INFO", `scheme "gopher" is not allowed`},
		{"javascript:alert(1)", `scheme "javascript" is not allowed`},
		{"http:example.com", "is not an absolute http(s) URL with a host"},
		{"http:///etc/passwd", "the URL has no host"},
		{"//example.com/", "has no scheme"},
		{"example.com", "has no scheme"},
		{"http://example.com:0/", `port "0" is not a valid port`},
		{"http://example.com:99999/", `port "99999" is not a valid port`},
		{"http://exa mple.com/", "not a valid URL"},
		{"http://a\\b.example/", "is not a valid URL"},
	}
	g0 := NewWithT(t)
	g0.Expect(len(cases)).To(BeNumerically(">=", 30))
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			g1 := NewWithT(t)
			u, err := g.CheckURL(tc.url)
			g1.Expect(u).To(BeNil())
			g1.Expect(err).To(HaveOccurred())
			g1.Expect(IsRefused(err)).To(BeTrue(), "error %v should be a RefusedError", err)
			g1.Expect(err.Error()).To(HavePrefix("refused: "))
			g1.Expect(err.Error()).To(ContainSubstring(tc.reason))
		})
	}
}

func TestCheckURLAcceptsPublicURLs(t *testing.T) {
	g := New()
	cases := []struct {
		url, want string
	}{
		{"https://example.com/", "https://example.com/"},
		{"  https://example.com/path?q=1  ", "https://example.com/path?q=1"},
		{"https://Example.COM:8443/a/b?q=1#frag", "https://example.com:8443/a/b?q=1"},
		{"http://example.com./", "http://example.com/"},
		{"http://93.184.215.14/", "http://93.184.215.14/"},
		{"https://1.1.1.1/dns-query", "https://1.1.1.1/dns-query"},
		{"http://134744072/", "http://8.8.8.8/"},
		{"http://0x08080808/", "http://8.8.8.8/"},
		{"http://[2606:4700:4700::1111]/", "http://[2606:4700:4700::1111]/"},
		{"http://[2606:4700:4700::1111]:8080/", "http://[2606:4700:4700::1111]:8080/"},
		{"https://b\u00fccher.example/", "https://xn--bcher-kva.example/"},
		{"https://xn--bcher-kva.example/", "https://xn--bcher-kva.example/"},
		{"https://my_service.example.org/x", "https://my_service.example.org/x"},
		{"http://172.32.0.1/", "http://172.32.0.1/"},
		{"http://[2002:808:808::1]/", "http://[2002:808:808::1]/"},
		{"http://localhost.example.com/", "http://localhost.example.com/"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			g1 := NewWithT(t)
			u, err := g.CheckURL(tc.url)
			g1.Expect(err).NotTo(HaveOccurred())
			g1.Expect(u.String()).To(Equal(tc.want))
		})
	}
}

func TestParseLegacyIPv4(t *testing.T) {
	cases := []struct {
		host        string
		want        string
		numeric, ok bool
		comment     string
	}{
		{"1.2.3.4", "1.2.3.4", true, true, "dotted quad"},
		{"16909060", "1.2.3.4", true, true, "decimal"},
		{"0x01020304", "1.2.3.4", true, true, "hex"},
		{"01.02.03.04", "1.2.3.4", true, true, "octal parts"},
		{"1.0x2.03.4", "1.2.3.4", true, true, "mixed"},
		{"1.2.772", "1.2.3.4", true, true, "three parts"},
		{"1.131844", "1.2.3.4", true, true, "two parts"},
		{"0x", "0.0.0.0", true, true, "bare 0x"},
		{"1.2.3.4.", "1.2.3.4", true, true, "trailing dot"},
		{"4294967296", "", true, false, "too large"},
		{"1.2.3.256", "", true, false, "part too large"},
		{"1.2.65536", "", true, false, "last part too large"},
		{"09.1.1.1", "", true, false, "bad octal"},
		{"1..2.3", "", true, false, "empty part"},
		{"example.com", "", false, false, "name"},
		{"1.2.3.example", "", false, false, "name ending in a label"},
		{"example.0x10", "", true, false, "name ending in a hex number"},
	}
	for _, tc := range cases {
		t.Run(tc.comment, func(t *testing.T) {
			g := NewWithT(t)
			addr, numeric, ok := parseLegacyIPv4(tc.host)
			g.Expect(numeric).To(Equal(tc.numeric))
			g.Expect(ok).To(Equal(tc.ok))
			if tc.ok {
				g.Expect(addr.String()).To(Equal(tc.want))
			}
		})
	}
}

// fakeDNS answers from a fixed table, like a hostile DNS server would.
func fakeDNS(table map[string][]string) ResolverFunc {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		addrs, ok := table[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		out := make([]netip.Addr, 0, len(addrs))
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
}

// countingServer is a local HTTP server that counts requests.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestDialRefusesNamesResolvingToBlockedAddresses(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secret") })
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	g := New(WithResolver(fakeDNS(map[string][]string{
		"loopback.example":    {"127.0.0.1"},
		"private.example":     {"10.0.0.1"},
		"mapped.example":      {"::ffff:127.0.0.1"},
		"metadata.example":    {"169.254.169.254"},
		"ipv6local.example":   {"::1"},
		"unspecified.example": {"0.0.0.0"},
	})), WithDialTimeout(2*time.Second))
	defer g.CloseIdleConnections()

	cases := []struct {
		host, reason string
	}{
		{"loopback.example", "refused: loopback.example resolved to 127.0.0.1, which is a loopback address"},
		{"private.example", "refused: private.example resolved to 10.0.0.1, which is a private address"},
		{"mapped.example", "refused: mapped.example resolved to 127.0.0.1, which is a loopback address"},
		{"metadata.example", "refused: metadata.example resolved to 169.254.169.254, which is a cloud metadata address"},
		{"ipv6local.example", "refused: ipv6local.example resolved to ::1, which is a loopback address"},
		{"unspecified.example", "refused: unspecified.example resolved to 0.0.0.0, which is an unspecified address"},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			g1 := NewWithT(t)
			u, err := g.CheckURL(fmt.Sprintf("http://%s:%d/", tc.host, port))
			g1.Expect(err).NotTo(HaveOccurred(), "the URL itself looks public")

			resp, err := g.Client(5 * time.Second).Get(u.String())
			if resp != nil {
				_ = resp.Body.Close()
			}
			g1.Expect(err).To(HaveOccurred())
			re, ok := AsRefused(err)
			g1.Expect(ok).To(BeTrue(), "error %v should be a RefusedError", err)
			g1.Expect(re.Error()).To(Equal(tc.reason))
		})
	}
	NewWithT(t).Expect(hits.Load()).To(BeZero())
}

func TestDialContextChecksEveryConnection(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ln.Close() }()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	// A rebinding name: the first answer is the (allowed) test address, the
	// next ones a blocked address.
	var calls atomic.Int64
	rebind := ResolverFunc(func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "rebind.example":
			if calls.Add(1) == 1 {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		case "mixed.example":
			// A blocked address first: it is skipped, the allowed one is used.
			return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, errors.New("no such host")
	})
	guard := New(WithResolver(rebind), AllowPrefixes(netip.MustParsePrefix("127.0.0.1/32")))
	ctx := t.Context()
	addr := fmt.Sprintf("rebind.example:%d", port)

	c, err := guard.DialContext(ctx, "tcp", addr)
	g.Expect(err).NotTo(HaveOccurred())
	_ = c.Close()

	_, err = guard.DialContext(ctx, "tcp", addr)
	g.Expect(err).To(MatchError("refused: rebind.example resolved to 127.0.0.2, which is a loopback address"))

	c, err = guard.DialContext(ctx, "tcp", fmt.Sprintf("mixed.example:%d", port))
	g.Expect(err).NotTo(HaveOccurred())
	_ = c.Close()

	// Literal addresses and blocked names are checked by the dialer too.
	_, err = guard.DialContext(ctx, "tcp", "127.0.0.3:80")
	g.Expect(err).To(MatchError("refused: 127.0.0.3 is a loopback address"))
	_, err = guard.DialContext(ctx, "tcp", "2130706434:80")
	g.Expect(err).To(MatchError("refused: 2130706434 means 127.0.0.2, which is a loopback address"))
	_, err = guard.DialContext(ctx, "tcp", "localhost:80")
	g.Expect(err).To(MatchError("refused: localhost is a loopback host name"))
	_, err = guard.DialContext(ctx, "tcp", "nowhere.example:80")
	g.Expect(err).To(MatchError(ContainSubstring(`failed to resolve host "nowhere.example"`)))
	g.Expect(IsRefused(err)).To(BeFalse())

	_ = ln.Close()
	<-accepted
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	g := NewWithT(t)
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	guard := New(
		WithResolver(fakeDNS(map[string][]string{"site.example": {"127.0.0.1"}})),
		AllowPrefixes(netip.MustParsePrefix("127.0.0.1/32")),
	)
	defer guard.CloseIdleConnections()

	resp, err := guard.Client(5 * time.Second).Get(fmt.Sprintf("http://site.example:%d/", port))
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusFound))
	g.Expect(resp.Header.Get("Location")).To(Equal("http://169.254.169.254/latest/meta-data/"))
	g.Expect(hits.Load()).To(BeEquivalentTo(1))

	_, err = guard.CheckURL(resp.Header.Get("Location"))
	g.Expect(err).To(MatchError("refused: 169.254.169.254 is a cloud metadata address"))
}

func TestClientIgnoresProxyEnvironment(t *testing.T) {
	g := NewWithT(t)
	proxy, proxyHits := countingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "proxied") })
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	srv, hits := countingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "direct") })
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	guard := New(
		WithResolver(fakeDNS(map[string][]string{"site.example": {"127.0.0.1"}})),
		AllowPrefixes(netip.MustParsePrefix("127.0.0.1/32")),
	)
	defer guard.CloseIdleConnections()

	resp, err := guard.Client(5 * time.Second).Get(fmt.Sprintf("http://site.example:%d/", port))
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(body)).To(Equal("direct"))
	g.Expect(hits.Load()).To(BeEquivalentTo(1))
	g.Expect(proxyHits.Load()).To(BeZero())
}

func TestAllowPrefixesIsExact(t *testing.T) {
	g := NewWithT(t)
	guard := New(AllowPrefixes(netip.MustParsePrefix("127.0.0.1/32")))
	g.Expect(guard.CheckAddr(netip.MustParseAddr("127.0.0.1"))).To(Succeed())
	g.Expect(guard.CheckAddr(netip.MustParseAddr("::ffff:127.0.0.1"))).To(Succeed())
	g.Expect(guard.CheckAddr(netip.MustParseAddr("127.0.0.2"))).To(MatchError("refused: 127.0.0.2 is a loopback address"))
	g.Expect(guard.CheckAddr(netip.MustParseAddr("10.1.2.3"))).To(MatchError("refused: 10.1.2.3 is a private address"))
	g.Expect(New().CheckAddr(netip.MustParseAddr("127.0.0.1"))).To(HaveOccurred())
	g.Expect(New().CheckAddr(netip.MustParseAddr("8.8.8.8"))).To(Succeed())

	u, err := guard.CheckURL("http://127.0.0.1:8080/")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u).To(Equal(&url.URL{Scheme: "http", Host: "127.0.0.1:8080", Path: "/"}))
}

// TrustHosts opens exactly the named hosts to local addresses, never to a
// cloud metadata address, and leaves every other host judged as usual.
func TestTrustHosts(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	g := New(WithResolver(fakeDNS(map[string][]string{
		"search.test":   {"127.0.0.1"},
		"other.test":    {"127.0.0.1"},
		"meta.test":     {"169.254.169.254"},
		"searxng.local": {"127.0.0.1"},
	})), WithDialTimeout(2*time.Second), TrustHosts("Search.Test.", "127.0.0.1", "meta.test", "searxng.local", "169.254.169.254"))
	defer g.CloseIdleConnections()

	cases := []struct {
		url, refusal string
	}{
		{fmt.Sprintf("http://search.test:%d/", port), ""},
		{fmt.Sprintf("http://127.0.0.1:%d/", port), ""},
		{fmt.Sprintf("http://searxng.local:%d/", port), ""},
		{fmt.Sprintf("http://other.test:%d/", port), "refused: other.test resolved to 127.0.0.1, which is a loopback address"},
		{fmt.Sprintf("http://127.0.0.2:%d/", port), "refused: 127.0.0.2 is a loopback address"},
		{fmt.Sprintf("http://meta.test:%d/", port), "refused: meta.test resolved to 169.254.169.254, which is a cloud metadata address"},
		{"http://169.254.169.254/latest/meta-data/", "refused: 169.254.169.254 is a cloud metadata address"},
	}
	want := int64(0)
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			g1 := NewWithT(t)
			u, err := g.CheckURL(tc.url)
			if err == nil {
				var resp *http.Response
				resp, err = g.Client(5 * time.Second).Get(u.String())
				if resp != nil {
					_ = resp.Body.Close()
				}
			}
			if tc.refusal == "" {
				g1.Expect(err).NotTo(HaveOccurred())
				want++
				return
			}
			re, ok := AsRefused(err)
			g1.Expect(ok).To(BeTrue(), "error %v should be a RefusedError", err)
			g1.Expect(re.Error()).To(Equal(tc.refusal))
		})
	}
	NewWithT(t).Expect(hits.Load()).To(Equal(want))
}
