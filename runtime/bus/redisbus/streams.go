package redisbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
)

// FetchStreams is Fetch over many streams in one XREADGROUP: it returns up
// to opts.Count new messages of each stream for consumer of group (created
// on every stream that lacks it, at the stream's start), waiting up to
// opts.Block when none has any. One blocked connection serves every stream
// named, so a reader of thousands of tenants' streams needs a few
// connections, not thousands. Each message's Stream says where it came
// from; Ack, Claim and Pending take that stream as usual.
func (b *Bus) FetchStreams(ctx context.Context, streams []string, group, consumer string, opts bus.FetchOptions) ([]bus.Message, error) {
	if len(streams) == 0 {
		return nil, nil
	}
	return b.fetch(ctx, streams, group, consumer, opts, fmt.Sprintf("%d streams", len(streams)))
}

// fetch is Fetch and FetchStreams: one XREADGROUP over streams, whose groups
// are created when missing and once more when Redis lost them; what names
// the streams in errors.
func (b *Bus) fetch(ctx context.Context, streams []string, group, consumer string, opts bus.FetchOptions, what string) ([]bus.Message, error) {
	count := opts.Count
	if count <= 0 {
		count = bus.DefaultBatch
	}
	if b.isClosed() {
		return nil, fmt.Errorf("failed to fetch messages from %s: %w", what, bus.ErrClosed)
	}
	if err := b.ensureGroups(ctx, streams, group); err != nil {
		return nil, err
	}
	names := make([]string, 0, 2*len(streams))
	names = append(names, streams...)
	for range streams {
		names = append(names, ">")
	}
	args := &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: names, Count: int64(count), Block: -1}
	for attempt := 0; ; attempt++ {
		var res []redis.XStream
		var err error
		if opts.Block > 0 {
			args.Block = max(opts.Block, time.Millisecond)
			res, err = b.blockingRead(ctx, args)
		} else {
			res, err = b.client.XReadGroup(ctx, args).Result()
		}
		switch {
		case err == nil:
			var out []bus.Message
			for _, s := range res {
				for _, xm := range s.Messages {
					out = append(out, decode(s.Stream, xm, 1))
				}
			}
			return out, nil
		case isNoGroup(err) && attempt == 0:
			// A stream vanished (deleted, or a restart without AOF) and took
			// its group along; which one, Redis does not say, so every group
			// is created again (read from the start).
			for _, s := range streams {
				b.forgetGroup(s, group)
			}
			if err := b.ensureGroups(ctx, streams, group); err != nil {
				return nil, err
			}
			continue
		case b.isClosed():
			return nil, fmt.Errorf("failed to fetch messages from %s: %w", what, bus.ErrClosed)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("failed to fetch messages from %s: %w", what, ctx.Err())
		case errors.Is(err, redis.Nil):
			return nil, nil // BLOCK timed out
		default:
			return nil, fmt.Errorf("failed to fetch messages from %s: %w", what, err)
		}
	}
}

// ensureGroups creates group on the streams not known to have it, in one
// round trip.
func (b *Bus) ensureGroups(ctx context.Context, streams []string, group string) error {
	var missing []string
	b.mu.Lock()
	for _, s := range streams {
		if _, ok := b.groups[s+"\x00"+group]; !ok {
			missing = append(missing, s)
		}
	}
	b.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	cmds := make([]*redis.StatusCmd, len(missing))
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range missing {
			cmds[i] = p.XGroupCreateMkStream(ctx, s, group, "0")
		}
		return nil
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("failed to create group %q of stream %q: %w", group, missing[i], err)
		}
	}
	b.mu.Lock()
	if len(b.groups)+len(missing) > maxKnownGroups {
		clear(b.groups)
	}
	for _, s := range missing {
		b.groups[s+"\x00"+group] = struct{}{}
	}
	b.mu.Unlock()
	return nil
}
