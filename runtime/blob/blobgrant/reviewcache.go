package blobgrant

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// reviewCache keeps the user name a TokenReview gave a token, so that a
// pod's requests within ttl cost one review; the API server is asked again
// after ttl, which bounds how long a revoked token still works. Entries are
// keyed by the token's SHA-256, so the cache holds no usable credential.
//
// Only successful reviews are kept. The tokens refused are garbage,
// expired, forged or of another audience: a session pod does not send them
// again and again, so keeping them would save nothing for real traffic,
// while a flood of distinct ones would push real pods' entries out. Errors
// of the API server are passing and never kept.
type reviewCache struct {
	ttl   time.Duration
	clock clock.PassiveClock
	lru   *cache.LRUExpireCache
}

// newReviewCache keeps up to size tokens (DefaultCacheSize when 0) for ttl
// (DefaultCacheTTL when 0).
func newReviewCache(ttl time.Duration, size int, clk clock.PassiveClock) *reviewCache {
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &reviewCache{ttl: ttl, clock: clk, lru: cache.NewLRUExpireCacheWithClock(size, clk)}
}

// get returns the user reviewed for token, unless that was more than the
// entry's TTL ago. A nil cache has nothing.
func (c *reviewCache) get(token string) (string, bool) {
	if c == nil {
		return "", false
	}
	v, ok := c.lru.Get(sha256.Sum256([]byte(token)))
	if !ok {
		return "", false
	}
	return v.(string), true
}

// add keeps the user the API server reviewed for token, for the cache's
// TTL or until the token's expiry when that comes sooner.
func (c *reviewCache) add(token, user string) {
	if c == nil {
		return
	}
	ttl := c.ttl
	if exp, ok := expiry(token); ok {
		ttl = min(ttl, exp.Sub(c.clock.Now()))
	}
	if ttl <= 0 {
		return
	}
	c.lru.Add(sha256.Sum256([]byte(token)), user, ttl)
}

// expiry reads the exp claim of a JWT's payload. The signature is not
// checked (the TokenReview did that): the claim is used only to keep an
// entry for less time, never for more.
func expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"` // seconds since the epoch (RFC 7519 NumericDate)
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*claims.Exp), 0), true
}
