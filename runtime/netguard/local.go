package netguard

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// localAddrsTTL is how long one reading of this host's interface addresses is
// trusted. Interfaces change (a DHCP lease, a pod's new IP, a VPN coming up),
// so the set is read again, but not on every connection: the dialer's Control
// hook runs for each connect, and a reading is a netlink round trip.
const localAddrsTTL = 5 * time.Second

// interfaceAddrs is the default source of this host's addresses:
// net.InterfaceAddrs, which lists the addresses of all interfaces, up or
// down, IPv4 and IPv6.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("failed to read interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, addr)
		}
	}
	return out, nil
}

// localAddrs is this host's own addresses, read through read and kept for ttl.
//
// A reading that fails does not open the guard. After a successful reading
// the last known set is kept (an address that was this host's a few seconds
// ago is still refused) and reading is tried again after ttl, not on every
// connection. While no reading has ever succeeded, contains returns the error
// and the Guard refuses every address it does not otherwise allow: it cannot
// tell which ones lead back to this host. There is no logger here; the error
// reaches the caller in the refusal instead.
type localAddrs struct {
	read func() ([]netip.Addr, error)
	now  func() time.Time
	ttl  time.Duration

	mu     sync.Mutex
	tried  bool                    // read has been called at least once
	readAt time.Time               // when read was last called
	set    map[netip.Addr]struct{} // the last successful reading; nil if none
	err    error                   // why the last reading failed, while set is nil
}

func newLocalAddrs(read func() ([]netip.Addr, error), now func() time.Time) *localAddrs {
	return &localAddrs{read: read, now: now, ttl: localAddrsTTL}
}

// contains reports whether ip (without zone, not mapped) is an address of
// this host. The error is non-nil only while no reading has succeeded.
func (l *localAddrs) contains(ip netip.Addr) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); !l.tried || now.Sub(l.readAt) >= l.ttl {
		l.tried, l.readAt = true, now
		l.refresh()
	}
	if l.set == nil {
		return false, l.err
	}
	_, ok := l.set[ip]
	return ok, nil
}

// refresh reads the addresses once; on failure it keeps the last known set.
func (l *localAddrs) refresh() {
	addrs, err := l.read()
	if err != nil {
		if l.set == nil {
			l.err = err
		}
		return
	}
	set := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		set[a.Unmap().WithZone("")] = struct{}{}
	}
	l.set, l.err = set, nil
}
