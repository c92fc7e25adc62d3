package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/picobot/picobot/runtime/llm"
)

// Named is one link of a fallback chain.
type Named struct {
	// Name identifies the model as "provider/model"; it becomes
	// Response.Model when this link answers, and labels its errors.
	Name string
	llm.Provider
}

// Fallback tries each provider in order until one answers, so an outage or
// exhausted quota of the primary model does not stop the agent. It moves on
// after a failure the next model may not share: a retryable status (429,
// 5xx, ...), 401/403/404 (that key or model is unusable), a network error,
// or a stream truncated before any text was shown. It stops at once on the
// caller's cancellation, ErrContextOverflow and other 4xx (the request itself
// is at fault and every model would refuse it), and after any streamed
// delta. Wrap each link in Retry first to retry it before moving on.
func Fallback(chain ...Named) llm.Provider {
	return &fallback{chain: append([]Named(nil), chain...)}
}

type fallback struct {
	chain []Named
}

func (f *fallback) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	if len(f.chain) == 0 {
		return nil, errors.New("failed to complete: empty fallback chain")
	}
	errs := make([]error, 0, len(f.chain))
	for _, link := range f.chain {
		var emitted atomic.Bool
		var deltas func(llm.Delta)
		if onDelta != nil {
			deltas = func(d llm.Delta) {
				emitted.Store(true)
				onDelta(d)
			}
		}
		resp, err := link.Complete(ctx, req, deltas)
		if err == nil {
			if link.Name != "" {
				resp.Model = link.Name
			}
			return resp, nil
		}
		err = fmt.Errorf("failed to complete with %q: %w", link.Name, err)
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			// Cancelled after this link failed: say so, keeping its error.
			err = fmt.Errorf("%w: %w", ctxErr, err)
		}
		if ctx.Err() != nil || emitted.Load() || !shouldFallback(err) {
			if len(errs) == 0 {
				return nil, err
			}
			// The error that stopped the chain stays the one errors.As
			// finds; earlier failures are kept as text.
			return nil, fmt.Errorf("%w (earlier: %s)", err, joinMessages(errs))
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("failed to complete with any of %d models: %w", len(f.chain), errors.Join(errs...))
}

// shouldFallback reports whether another model may succeed where this one
// failed; see Fallback.
func shouldFallback(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrContextOverflow) {
		return false
	}
	var se *llm.StatusError
	if errors.As(err, &se) {
		switch se.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return true
		}
		return se.Retryable()
	}
	return errors.Is(err, llm.ErrTruncated) || IsTransient(err)
}

func joinMessages(errs []error) string {
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}
