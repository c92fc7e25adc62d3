package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/llm"
)

// Retry defaults, used for zero fields of RetryPolicy.
const (
	DefaultAttempts      = 3
	DefaultBaseDelay     = 500 * time.Millisecond
	DefaultMaxDelay      = 30 * time.Second
	DefaultMaxRetryAfter = 60 * time.Second
)

// RetryPolicy tunes Retry. The zero value is the production policy; tests
// inject Sleep (and Rand) to observe waits without waiting.
type RetryPolicy struct {
	// Attempts is the total number of calls, the first included.
	Attempts int
	// BaseDelay is the first backoff; it doubles per attempt up to MaxDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter caps a server's Retry-After, so a misbehaving endpoint
	// cannot park an agent turn for an hour.
	MaxRetryAfter time.Duration
	// Sleep waits d or until ctx is done, returning ctx's error then. The
	// default uses a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns the jitter fraction in [0, 1); math/rand/v2 by default.
	Rand func() float64
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = DefaultAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Delay is the wait before retry number attempt (1 for the first retry)
// after err: the server's Retry-After when it gave one (capped at
// MaxRetryAfter), else exponential backoff with "equal jitter" (half fixed,
// half random), which spreads clients out without ever collapsing to zero.
func (p RetryPolicy) Delay(attempt int, err error) time.Duration {
	p = p.withDefaults()
	var se *llm.StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		return min(se.RetryAfter, p.MaxRetryAfter)
	}
	backoff := p.MaxDelay
	if shift := attempt - 1; shift < 32 {
		if d := p.BaseDelay << shift; d > 0 && d < p.MaxDelay {
			backoff = d
		}
	}
	half := backoff / 2
	return half + time.Duration(p.Rand()*float64(backoff-half))
}

// Retry wraps p so transient failures are retried: retryable HTTP statuses
// (408, 409, 429, 5xx, Anthropic's 529) and network errors. It never retries
// the caller's cancellation, a context overflow, other 4xx, or a call that
// already streamed text: the user saw those deltas, and a second answer
// would be spliced onto the first.
func Retry(p llm.Provider, policy RetryPolicy) llm.Provider {
	return &retrying{next: p, policy: policy.withDefaults()}
}

type retrying struct {
	next   llm.Provider
	policy RetryPolicy
}

func (r *retrying) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	for attempt := 1; ; attempt++ {
		var emitted atomic.Bool
		var deltas func(llm.Delta)
		if onDelta != nil {
			deltas = func(d llm.Delta) {
				emitted.Store(true)
				onDelta(d)
			}
		}
		resp, err := r.next.Complete(ctx, req, deltas)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil || emitted.Load() || !IsTransient(err) {
			return nil, err
		}
		if attempt >= r.policy.Attempts {
			return nil, fmt.Errorf("failed to complete after %d attempts: %w", attempt, err)
		}
		if serr := r.policy.Sleep(ctx, r.policy.Delay(attempt, err)); serr != nil || ctx.Err() != nil {
			return nil, fmt.Errorf("failed to wait before retrying (last error: %w): %w", err, firstErr(ctx.Err(), serr))
		}
	}
}

// IsTransient reports whether err may go away on its own: a retryable
// *llm.StatusError or a network failure (connection refused or reset, an
// attempt's timeout, a body cut short). Context cancellation and
// ErrContextOverflow never are. The caller's own deadline must be checked
// separately: a DeadlineExceeded here is taken to be a per-attempt timeout.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrContextOverflow) {
		return false
	}
	var se *llm.StatusError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// sleep is the real-time RetryPolicy.Sleep.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
