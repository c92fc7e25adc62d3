package gateway

import (
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failed authentications allowed per client address: bursts of
// authFailBurst, then one every authFailEvery. Past them the address is
// refused with 429 before its key is even looked at, so guessing keys runs at
// ten a minute.
const (
	authFailBurst = 10
	authFailEvery = 6 * time.Second
	// maxAuthFailIPs bounds the addresses remembered; when full, those
	// whose allowance has grown back are forgotten first.
	maxAuthFailIPs = 10_000
)

// authFailures throttles failed authentication per client address (an IPv6
// client by its /64).
type authFailures struct {
	mu sync.Mutex
	m  map[netip.Prefix]*rate.Limiter
}

func newAuthFailures() *authFailures {
	return &authFailures{m: map[netip.Prefix]*rate.Limiter{}}
}

// blocked reports whether r's address has used up its failures, and how
// long until it may try again.
func (a *authFailures) blocked(r *http.Request) (bool, time.Duration) {
	key, ok := requestKey(r)
	if !ok {
		return false, 0
	}
	a.mu.Lock()
	lim := a.m[key]
	a.mu.Unlock()
	if lim == nil {
		return false, 0
	}
	now := time.Now()
	if tokens := lim.TokensAt(now); tokens < 1 {
		return true, time.Duration((1 - tokens) * float64(authFailEvery))
	}
	return false, 0
}

// fail records a failed authentication of r's address.
func (a *authFailures) fail(r *http.Request) {
	key, ok := requestKey(r)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	lim := a.m[key]
	if lim == nil {
		if len(a.m) >= maxAuthFailIPs {
			a.forget()
		}
		lim = rate.NewLimiter(rate.Every(authFailEvery), authFailBurst)
		a.m[key] = lim
	}
	lim.Allow()
}

// forget drops the addresses whose allowance has grown back (they are as if
// never seen), or all of them if none has: memory stays bounded under a
// flood of addresses, at worst resetting their counts.
func (a *authFailures) forget() {
	now := time.Now()
	for k, lim := range a.m {
		if lim.TokensAt(now) >= authFailBurst {
			delete(a.m, k)
		}
	}
	if len(a.m) >= maxAuthFailIPs {
		clear(a.m)
	}
}

// requestKey is the client address of r as the connection caps count it.
func requestKey(r *http.Request) (netip.Prefix, bool) { return clientKey(r.RemoteAddr) }
