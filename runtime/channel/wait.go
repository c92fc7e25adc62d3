package channel

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/clock"
)

// Backoff bounds of background loops (polling, webhook registration).
const (
	loopBackoffFirst = time.Second
	loopBackoffLimit = time.Minute
)

// backoff is the wait after the n-th consecutive failure (n >= 1):
// exponential from a second up to a minute, or what the platform asked for.
func backoff(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	d := loopBackoffFirst
	for i := 1; i < n && d < loopBackoffLimit; i++ {
		d *= 2
	}
	return min(d, loopBackoffLimit)
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk clock.WithTicker, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

func isDuplicate(err error) bool { return errors.Is(err, errDuplicate) }
