package gateway

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is a token bucket: Rate requests per second on average, bursts of
// up to Burst.
type RateLimit struct {
	Rate  rate.Limit
	Burst int
}

// Rate limits.
var (
	// DefaultRateLimit is the limit of a key that sets none: 10 requests a
	// second, bursts of 20. A WebSocket frame counts as a request.
	DefaultRateLimit = RateLimit{Rate: 10, Burst: 20}
	// Unlimited never limits (loopback clients of embedded mode).
	Unlimited = RateLimit{Rate: rate.Inf}
)

func (l RateLimit) String() string {
	if l.Rate == rate.Inf {
		return "unlimited"
	}
	return fmt.Sprintf("%g/s burst %d", float64(l.Rate), l.Burst)
}

// ParseRateLimit parses "<n>/<s|m|h>" (e.g. "600/m"), optionally followed by
// ",burst=<b>"; the burst defaults to n. "unlimited" never limits.
func ParseRateLimit(s string) (RateLimit, error) {
	s = strings.TrimSpace(s)
	if s == "unlimited" {
		return Unlimited, nil
	}
	spec, burstPart, hasBurst := strings.Cut(s, ",")
	num, unit, ok := strings.Cut(strings.TrimSpace(spec), "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[strings.TrimSpace(unit)]
	if !ok || err != nil || per == 0 || n <= 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return RateLimit{}, fmt.Errorf("rate limit %q: want <requests>/<s|m|h>[,burst=<n>], e.g. 600/m,burst=20", s)
	}
	l := RateLimit{Rate: rate.Limit(n / per), Burst: int(math.Ceil(n))}
	if hasBurst {
		k, v, _ := strings.Cut(strings.TrimSpace(burstPart), "=")
		b, err := strconv.Atoi(v)
		if strings.TrimSpace(k) != "burst" || err != nil || b < 1 {
			return RateLimit{}, fmt.Errorf("rate limit %q: burst must be burst=<positive integer>", s)
		}
		l.Burst = b
	}
	if l.Burst > 1_000_000 {
		return RateLimit{}, errors.New("rate limit: burst above 1000000")
	}
	return l, nil
}

// limiters keeps a token bucket per key.
type limiters struct {
	def RateLimit
	mu  sync.Mutex
	m   map[string]*keyLimiter
}

type keyLimiter struct {
	limit RateLimit
	lim   *rate.Limiter
}

func newLimiters(def RateLimit) *limiters {
	return &limiters{def: def, m: map[string]*keyLimiter{}}
}

// allow takes one token of p's bucket; when none is left it returns how long
// until one is.
func (l *limiters) allow(p Principal) (bool, time.Duration) {
	limit := l.def
	if p.Limit != nil {
		limit = *p.Limit
	}
	if limit.Rate == rate.Inf {
		return true, 0
	}
	l.mu.Lock()
	k := l.m[p.KeyID]
	switch {
	case k == nil:
		k = &keyLimiter{limit: limit, lim: rate.NewLimiter(limit.Rate, limit.Burst)}
		l.m[p.KeyID] = k
	case k.limit != limit: // changed by an annotation: applies at once
		k.limit = limit
		k.lim.SetLimit(limit.Rate)
		k.lim.SetBurst(limit.Burst)
	}
	lim := k.lim
	l.mu.Unlock()
	now := time.Now()
	res := lim.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Second
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}
