package redisbus

import (
	"context"
	"fmt"
	"strconv"

	"github.com/picobot/picobot/runtime/bus"
)

// Range returns up to count entries of stream, oldest first, without
// consuming them (no consumer group sees a difference): for tools that look
// at a stream, such as `picobot dead-letters`.
func (b *Bus) Range(ctx context.Context, stream string, count int64) ([]bus.Message, error) {
	xs, err := b.client.XRangeN(ctx, stream, "-", "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read stream %q: %w", stream, err)
	}
	out := make([]bus.Message, len(xs))
	for i, x := range xs {
		out[i] = decode(stream, x, 0)
	}
	return out, nil
}

// Delete removes entries of stream by seq (their stream ids).
func (b *Bus) Delete(ctx context.Context, stream string, seqs ...string) error {
	if len(seqs) == 0 {
		return nil
	}
	n, err := b.client.XDel(ctx, stream, seqs...).Result()
	if err != nil {
		return fmt.Errorf("failed to delete %d entries of stream %q: %w", len(seqs), stream, err)
	}
	if n != int64(len(seqs)) {
		return fmt.Errorf("failed to delete entries of stream %q: %s of %d were there", stream, strconv.FormatInt(n, 10), len(seqs))
	}
	return nil
}
