package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/protocol"
)

// signals carries turn events and controls over Redis Pub/Sub, and the chat
// ownership hints the gateway consults before waking a runtime. Pub/Sub is
// fire-and-forget on purpose: events are a live view, the store has the
// record.
type signals struct{ rdb *redis.Client }

func (s signals) publish(ctx context.Context, channel string, f protocol.Frame) error {
	b, err := protocol.EncodeFrame(f)
	if err != nil {
		return err
	}
	return s.rdb.Publish(ctx, channel, b).Err()
}

// publishCount sends a frame on a channel and returns how many subscribers
// received it.
func (s signals) publishCount(ctx context.Context, channel string, f protocol.Frame) (int64, error) {
	b, err := protocol.EncodeFrame(f)
	if err != nil {
		return 0, err
	}
	return s.rdb.Publish(ctx, channel, b).Result()
}

// received is a frame read from a channel, or why it could not be read
// (a frame of a newer version: Frame then holds its message id).
type received struct {
	protocol.Frame
	Err error
}

// subscribe returns a subscription whose channel yields decoded frames and
// the frames of versions this build cannot read (malformed payloads are
// dropped: nothing could say whose they were); the subscription is confirmed
// before it returns, so nothing published after the call is missed.
func (s signals) subscribe(ctx context.Context, channel string) (*redis.PubSub, <-chan received, error) {
	ps := s.rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("failed to subscribe to %s: %w", channel, err)
	}
	out := make(chan received, 64)
	go func() {
		defer close(out)
		for m := range ps.Channel() {
			f, err := protocol.DecodeFrame([]byte(m.Payload))
			if err != nil && !errors.Is(err, protocol.ErrUnknownVersion) {
				continue
			}
			select {
			case out <- received{Frame: f, Err: err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ps, out, nil
}

// setOwner records (and refreshes) that holder serves a chat, for ttl.
func (s signals) setOwner(ctx context.Context, key, holder string, ttl time.Duration) error {
	return s.rdb.Set(ctx, key, holder, ttl).Err()
}

// clearOwner removes the hint if holder still owns it.
func (s signals) clearOwner(ctx context.Context, key, holder string) error {
	return clearOwnerScript.Run(ctx, s.rdb, []string{key}, holder).Err()
}

var clearOwnerScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

func (s signals) owned(ctx context.Context, key string) (bool, error) {
	n, err := s.rdb.Exists(ctx, key).Result()
	return n > 0, err
}
