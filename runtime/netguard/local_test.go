package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// hostAddr returns a non-loopback, non-link-local address of this machine
// (eth0's, say) of the wanted family, read the way the Guard reads them.
func hostAddr(t *testing.T, want4 bool) (netip.Addr, bool) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipnet.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() != want4 || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			continue
		}
		return ip, true
	}
	return netip.Addr{}, false
}

// acceptingListener listens on the wildcard address of network and counts the
// connections it accepts.
func acceptingListener(t *testing.T, network, address string) (port string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen(network, address)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	accepted = &atomic.Int64{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	_, port, err = net.SplitHostPort(ln.Addr().String())
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return port, accepted
}

func TestDialRefusesThisHostsOwnAddresses(t *testing.T) {
	cases := []struct {
		family          string
		want4           bool
		network, listen string
	}{
		{"IPv4", true, "tcp", "0.0.0.0:0"},
		{"IPv6", false, "tcp6", "[::]:0"},
	}
	for _, tc := range cases {
		t.Run(tc.family, func(t *testing.T) {
			g := NewWithT(t)
			ip, ok := hostAddr(t, tc.want4)
			if !ok {
				t.Skipf("SKIPPED: this host has no non-loopback, non-link-local %s address, so the %s row tests nothing here", tc.family, tc.family)
			}
			port, accepted := acceptingListener(t, tc.network, tc.listen)
			target := net.JoinHostPort(ip.String(), port)
			ctx := t.Context()

			// The real interface addresses, read by the default source.
			guard := New(WithDialTimeout(2*time.Second), WithResolver(fakeDNS(map[string][]string{"self.example": {ip.String()}})))
			_, err := guard.DialContext(ctx, "tcp", target)
			g.Expect(err).To(MatchError(fmt.Sprintf("refused: %s is an address of this host", ip)))
			_, err = guard.DialContext(ctx, "tcp", net.JoinHostPort("self.example", port))
			g.Expect(err).To(MatchError(fmt.Sprintf("refused: self.example resolved to %s, which is an address of this host", ip)))
			_, err = guard.CheckURL("http://" + target + "/")
			g.Expect(err).To(MatchError(fmt.Sprintf("refused: %s is an address of this host", ip)))
			g.Expect(accepted.Load()).To(BeZero(), "nothing may have reached the listener")

			// Named in AllowPrefixes, the same address is reached.
			allowing := New(WithDialTimeout(2*time.Second), AllowPrefixes(netip.PrefixFrom(ip, ip.BitLen())))
			c, err := allowing.DialContext(ctx, "tcp", target)
			g.Expect(err).NotTo(HaveOccurred())
			_ = c.Close()
			g.Eventually(accepted.Load).Should(BeEquivalentTo(1))
		})
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fakeInterfaces is a settable source of this host's addresses that counts
// its readings.
type fakeInterfaces struct {
	mu    sync.Mutex
	addrs []netip.Addr
	err   error
	reads int
}

func (f *fakeInterfaces) set(err error, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.addrs = err, nil
	for _, a := range addrs {
		f.addrs = append(f.addrs, netip.MustParseAddr(a))
	}
}

func (f *fakeInterfaces) read() ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.addrs, f.err
}

func (f *fakeInterfaces) readings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func TestLocalAddressesAreCachedBriefly(t *testing.T) {
	ifaces := &fakeInterfaces{}
	ifaces.set(nil, "93.184.215.14", "2606:4700::6810:84e5", "fe80::1", "127.0.0.1", "::1")
	clock := &fakeClock{}
	guard := New(WithLocalAddrs(ifaces.read))
	guard.local.now = clock.Now
	netlinkDown := errors.New("netlink: operation not permitted")

	// Each step: move the clock, maybe change the interfaces, then check an
	// address (want "" means it is allowed) and count the readings so far.
	steps := []struct {
		name    string
		advance time.Duration
		change  func()
		addr    string
		want    string
		reads   int
	}{
		{"first check reads the interfaces", 0, nil, "93.184.215.14", "refused: 93.184.215.14 is an address of this host", 1},
		{"IPv6 interface address", 0, nil, "2606:4700::6810:84e5", "refused: 2606:4700::6810:84e5 is an address of this host", 1},
		{"zone is ignored", 0, nil, "fe80::1%eth0", "refused: fe80::1%eth0 is an address of this host", 1},
		{"IPv4-mapped form", 0, nil, "::ffff:93.184.215.14", "refused: ::ffff:93.184.215.14 is an IPv4-mapped IPv6 address of 93.184.215.14, an address of this host", 1},
		{"NAT64 form", 0, nil, "64:ff9b::5db8:d70e", "refused: 64:ff9b::5db8:d70e is a NAT64 address of 93.184.215.14, an address of this host", 1},
		{"6to4 form", 0, nil, "2002:5db8:d70e::1", "refused: 2002:5db8:d70e::1 is a 6to4 address of 93.184.215.14, an address of this host", 1},
		{"loopback keeps its reason", 0, nil, "127.0.0.1", "refused: 127.0.0.1 is a loopback address", 1},
		{"IPv6 loopback keeps its reason", 0, nil, "::1", "refused: ::1 is a loopback address", 1},
		{"another public address is allowed", 0, nil, "8.8.8.8", "", 1},
		{"within the TTL nothing is read", localAddrsTTL - time.Millisecond, nil, "93.184.215.14", "refused: 93.184.215.14 is an address of this host", 1},
		{"after the TTL a new address is seen", time.Millisecond, func() { ifaces.set(nil, "8.8.8.8") }, "8.8.8.8", "refused: 8.8.8.8 is an address of this host", 2},
		{"and a gone one is no longer refused", 0, nil, "93.184.215.14", "", 2},
		{"a failed reading keeps the last known set", localAddrsTTL, func() { ifaces.set(netlinkDown) }, "8.8.8.8", "refused: 8.8.8.8 is an address of this host", 3},
		{"and is not retried before the TTL", time.Second, nil, "8.8.8.8", "refused: 8.8.8.8 is an address of this host", 3},
		{"the next success replaces it", localAddrsTTL, func() { ifaces.set(nil, "1.1.1.1") }, "8.8.8.8", "", 4},
		{"the new set is used", 0, nil, "1.1.1.1", "refused: 1.1.1.1 is an address of this host", 4},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			g := NewWithT(t)
			clock.Advance(s.advance)
			if s.change != nil {
				s.change()
			}
			err := guard.CheckAddr(netip.MustParseAddr(s.addr))
			if s.want == "" {
				g.Expect(err).To(Succeed())
			} else {
				g.Expect(err).To(MatchError(s.want))
			}
			g.Expect(ifaces.readings()).To(Equal(s.reads))
		})
	}
}

func TestUnreadableLocalAddressesKeepTheGuardClosed(t *testing.T) {
	ifaces := &fakeInterfaces{}
	ifaces.set(errors.New("netlink: operation not permitted"))
	guard := New(WithLocalAddrs(ifaces.read), WithResolver(fakeDNS(map[string][]string{"public.example": {"8.8.8.8"}})),
		AllowPrefixes(netip.MustParsePrefix("1.1.1.1/32")))
	unknown := "possibly an address of this host (its addresses could not be read: netlink: operation not permitted)"

	cases := []struct {
		name  string
		check func() error
		want  string
	}{
		{"a public address is refused", func() error { return guard.CheckAddr(netip.MustParseAddr("8.8.8.8")) },
			"refused: 8.8.8.8 is " + unknown},
		{"so is its URL", func() error { _, err := guard.CheckURL("http://8.8.8.8/"); return err },
			"refused: 8.8.8.8 is " + unknown},
		{"and a name resolving to it", func() error {
			_, err := guard.DialContext(t.Context(), "tcp", "public.example:80")
			return err
		}, "refused: public.example resolved to 8.8.8.8, which is " + unknown},
		{"a blocked range keeps its reason", func() error { return guard.CheckAddr(netip.MustParseAddr("10.0.0.1")) },
			"refused: 10.0.0.1 is a private address"},
		{"an allowed address is allowed", func() error { return guard.CheckAddr(netip.MustParseAddr("1.1.1.1")) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tc.check()
			if tc.want == "" {
				g.Expect(err).To(Succeed())
				return
			}
			g.Expect(err).To(MatchError(tc.want))
			g.Expect(IsRefused(err)).To(BeTrue())
		})
	}
}

func TestAllowPrefixesWinsOverLocalAddresses(t *testing.T) {
	g := NewWithT(t)
	local := func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil }
	g.Expect(New(WithLocalAddrs(local)).CheckAddr(netip.MustParseAddr("93.184.215.14"))).
		To(MatchError("refused: 93.184.215.14 is an address of this host"))
	guard := New(WithLocalAddrs(local), AllowPrefixes(netip.MustParsePrefix("93.184.215.0/24")))
	g.Expect(guard.CheckAddr(netip.MustParseAddr("93.184.215.14"))).To(Succeed())
	g.Expect(guard.CheckAddr(netip.MustParseAddr("::ffff:93.184.215.14"))).To(Succeed())
}

func TestLocalAddressesConcurrentUse(t *testing.T) {
	ifaces := &fakeInterfaces{}
	ifaces.set(nil, "93.184.215.14")
	clock := &fakeClock{}
	guard := New(WithLocalAddrs(ifaces.read))
	guard.local.now = clock.Now

	var wg sync.WaitGroup
	var wrong atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				if i == 0 && j%20 == 0 {
					clock.Advance(localAddrsTTL)
				}
				if guard.CheckAddr(netip.MustParseAddr("93.184.215.14")) == nil {
					wrong.Add(1)
				}
				if guard.CheckAddr(netip.MustParseAddr("8.8."+strconv.Itoa(j%256)+".8")) != nil {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	g := NewWithT(t)
	g.Expect(wrong.Load()).To(BeZero())
	g.Expect(ifaces.readings()).To(BeNumerically("<=", 11), "one reading per TTL, not one per check")
}
