// Package modelcheck is the health check of an agent's model. It tells the
// two cases that otherwise both read "no model" apart, because their fixes
// differ: no model configured (no model, endpoint or key: fix the manifest)
// and a model configured but unreachable (connection refused, DNS failure,
// a key the endpoint refuses: fix the endpoint or the key). The second is
// found with a real request to the endpoint, remembered briefly so a busy
// health page does not hammer the provider.
package modelcheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/anthropic"
	"github.com/picobot/picobot/runtime/provider/openai"
)

// Defaults of Prober.
const (
	// DefaultTTL is how long a probe's outcome is reused.
	DefaultTTL = 30 * time.Second
	// DefaultTimeout bounds one probe: a health page waits for it.
	DefaultTimeout = 10 * time.Second
)

// Prober checks model endpoints and remembers each outcome for TTL. It is
// safe for concurrent use.
type Prober struct {
	// TTL is how long an outcome is reused (DefaultTTL when zero).
	TTL time.Duration
	// Timeout bounds one probe (DefaultTimeout when zero).
	Timeout time.Duration
	// Clock decides when an outcome is stale (the real clock when nil).
	Clock clock.PassiveClock
	// Probe checks one endpoint (provider.Probe when nil).
	Probe func(ctx context.Context, cfg provider.Config) error

	mu    sync.Mutex
	cache map[string]outcome
}

type outcome struct {
	err error
	at  time.Time
}

// NewProber returns a prober with the defaults.
func NewProber() *Prober { return &Prober{} }

// Check is the check named name of a model: ep is the endpoint the agent
// calls first (nil when none is configured, reason then says why).
func (p *Prober) Check(ctx context.Context, name string, ep *provider.Config, reason string) health.Check {
	if ep == nil {
		return health.Check{Name: name, Message: "no model configured: " + reason,
			Fix: "give the agent a model: spec.model with provider, model and an apiKeySecretRef whose key is provided " +
				"(a Secret manifest or PICOBOT_SECRET_<SECRET>_<KEY>), or a picobot-defaults ConfigMap"}
	}
	where := fmt.Sprintf("%s/%s at %s", ep.Provider, ep.Model, RedactURL(baseURL(*ep)))
	if err := p.probe(ctx, *ep); err != nil {
		return health.Check{Name: name, Message: "model configured but unreachable: " + where + ": " + redactError(err, *ep),
			Fix: "check that the endpoint is up and reachable from here, its base URL, and that the API key is valid"}
	}
	return health.Check{Name: name, OK: true, Message: where + " answers"}
}

// probe returns the endpoint's outcome, probing it when none is fresh.
// Probes of different endpoints run in parallel; two callers missing the
// same stale entry may both probe, which is harmless.
func (p *Prober) probe(ctx context.Context, ep provider.Config) error {
	ttl := p.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	clk := p.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	key := cacheKey(ep)
	p.mu.Lock()
	o, ok := p.cache[key]
	p.mu.Unlock()
	if ok && clk.Since(o.at) < ttl {
		return o.err
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	probe := p.Probe
	if probe == nil {
		probe = provider.Probe
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := probe(pctx, ep)
	cancel()
	if ctx.Err() != nil {
		return err // the caller gave up: not the endpoint's fault, not remembered
	}
	p.mu.Lock()
	if p.cache == nil {
		p.cache = map[string]outcome{}
	}
	p.cache[key] = outcome{err: err, at: clk.Now()}
	p.mu.Unlock()
	return err
}

// cacheKey identifies an endpoint with its key, hashed so the cache holds
// no secret.
func cacheKey(ep provider.Config) string {
	sum := sha256.Sum256([]byte(ep.APIKey))
	return ep.Provider + "\x00" + ep.BaseURL + "\x00" + ep.Model + "\x00" + hex.EncodeToString(sum[:8])
}

// baseURL is the endpoint's base URL, the provider's public one when unset.
func baseURL(ep provider.Config) string {
	if ep.BaseURL != "" {
		return ep.BaseURL
	}
	switch ep.Provider {
	case provider.Anthropic:
		return anthropic.DefaultBaseURL
	case provider.OpenAI:
		return openai.DefaultBaseURL
	}
	return ""
}

// RedactURL drops what a URL may carry of a secret: user info, query and
// fragment.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.Fragment = ""
	return u.String()
}

// redactError removes the base URL's secrets from an error that quotes the
// request URL (transport errors do).
func redactError(err error, ep provider.Config) string {
	msg := err.Error()
	if raw := baseURL(ep); raw != "" {
		if red := RedactURL(raw); red != raw {
			msg = strings.ReplaceAll(msg, raw, red)
		}
	}
	if ep.APIKey != "" {
		msg = strings.ReplaceAll(msg, ep.APIKey, "REDACTED")
	}
	return msg
}
