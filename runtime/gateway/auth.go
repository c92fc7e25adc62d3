package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// ErrUnauthorized is returned by an Authenticator for a missing, unknown or
// revoked key.
var ErrUnauthorized = errors.New("missing or wrong API key")

// Principal is who a request acts for.
type Principal struct {
	// Tenant scopes everything the request reads and writes (the
	// namespace in cluster mode).
	Tenant string
	// KeyID names the key (e.g. "<namespace>/<secret>"); rate limits are
	// kept per KeyID. Never the token itself.
	KeyID string
	// Limit overrides the gateway's default rate limit for this key.
	Limit *RateLimit
}

// Authenticator resolves a request to a principal. token is the bearer token
// the client sent ("" when none); implementations compare it in constant time
// and return an error wrapping ErrUnauthorized when it is not accepted.
type Authenticator interface {
	Authenticate(r *http.Request, token string) (Principal, error)
}

// Actor is the principal as the audit log records who a turn acted for.
func (p Principal) Actor() string { return "key:" + p.KeyID }

// ActorFrom is the actor of an authenticated request's context, "" when
// it has no principal.
func ActorFrom(ctx context.Context) string {
	if p, ok := PrincipalFrom(ctx); ok {
		return p.Actor()
	}
	return ""
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal of an authenticated request.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Loopback serves clients on loopback addresses without a key, all as one
// tenant: embedded mode on a laptop. Requests from other addresses are refused
// (the process also refuses to listen beyond loopback without a key).
//
// A browser is a loopback client too, and any page it shows may send
// requests to the gateway; so a request that carries an Origin (every
// browser request that can change something does) is served only with
// UIKey, which the gateway gives its own web UI as a SameSite=Strict cookie
// (UICookie) that no other site's page gets or sends. Clients without an
// Origin (picobot chat, curl, SDKs) need no key.
type Loopback struct {
	Tenant string
	// UIKey is the per-install key of the web UI; browsers without it are
	// refused.
	UIKey string
}

// UICookie is the cookie that carries Loopback.UIKey.
const UICookie = "picobot_ui"

// Authenticate implements Authenticator.
func (l Loopback) Authenticate(r *http.Request, token string) (Principal, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return Principal{}, fmt.Errorf("%w: clients beyond loopback need a key", ErrUnauthorized)
	}
	if r.Header.Get("Origin") != "" && !l.uiKey(r, token) {
		return Principal{}, fmt.Errorf("%w: a browser needs the key of the gateway's own web UI (open the UI from this gateway)", ErrUnauthorized)
	}
	return Principal{Tenant: l.Tenant, KeyID: "loopback", Limit: &Unlimited}, nil
}

// uiKey reports whether r carries UIKey, as the cookie or the token.
func (l Loopback) uiKey(r *http.Request, token string) bool {
	if l.UIKey == "" {
		return false
	}
	if token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(l.UIKey)) == 1 {
		return true
	}
	c, err := r.Cookie(UICookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(l.UIKey)) == 1
}

// StaticKey is an API key given in configuration.
type StaticKey struct {
	// ID names the key in limits and logs.
	ID string
	// Token is what clients send as "Authorization: Bearer <token>".
	Token string
	// Tenant is the tenant the key acts for.
	Tenant string
	// Limit overrides the gateway's default rate limit.
	Limit *RateLimit
}

// StaticKeys authenticates the keys of a configuration (embedded mode). Only
// SHA-256 hashes of the tokens are kept.
type StaticKeys struct {
	keys []hashedKey
}

type hashedKey struct {
	hash [sha256.Size]byte
	p    Principal
}

// NewStaticKeys returns an authenticator for keys; every key needs a token
// and a tenant, and IDs and tokens must be unique.
func NewStaticKeys(keys ...StaticKey) (*StaticKeys, error) {
	s := &StaticKeys{}
	ids := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i, k := range keys {
		if k.Token == "" || k.Tenant == "" {
			return nil, fmt.Errorf("API key %d (%q) needs a token and a tenant", i, k.ID)
		}
		if k.ID == "" {
			k.ID = fmt.Sprintf("key-%d", i)
		}
		h := sha256.Sum256([]byte(k.Token))
		if ids[k.ID] || hashes[h] {
			return nil, fmt.Errorf("API key %q is given twice", k.ID)
		}
		ids[k.ID], hashes[h] = true, true
		s.keys = append(s.keys, hashedKey{hash: h, p: Principal{Tenant: k.Tenant, KeyID: k.ID, Limit: k.Limit}})
	}
	return s, nil
}

// MustStaticKeys is NewStaticKeys for keys known to be valid.
func MustStaticKeys(keys ...StaticKey) *StaticKeys {
	s, err := NewStaticKeys(keys...)
	if err != nil {
		panic(err)
	}
	return s
}

// Authenticate implements Authenticator. Every key is compared, in constant
// time, whatever matches.
func (s *StaticKeys) Authenticate(_ *http.Request, token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrUnauthorized
	}
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range s.keys {
		if subtle.ConstantTimeCompare(h[:], s.keys[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, ErrUnauthorized
	}
	return s.keys[found].p, nil
}

// bearer returns the token of a request: the Authorization header, or for
// the protocol's endpoints the ?key= parameter (browsers cannot set headers
// on WebSockets and image links).
func bearer(r *http.Request, allowQuery bool) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			return strings.TrimSpace(h[7:])
		}
		return ""
	}
	if allowQuery {
		return r.URL.Query().Get("key")
	}
	return ""
}
