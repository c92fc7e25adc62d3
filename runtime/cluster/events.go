package cluster

import (
	"context"
	"encoding/json"
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

func (s signals) publish(ctx context.Context, channel string, e Event) error {
	e.V = protocol.WireVersion
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return s.rdb.Publish(ctx, channel, b).Err()
}

// subscribe returns a subscription whose channel yields decoded events; the
// subscription is confirmed before it returns, so nothing published after
// the call is missed.
func (s signals) subscribe(ctx context.Context, channel string) (*redis.PubSub, <-chan Event, error) {
	ps := s.rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("failed to subscribe to %s: %w", channel, err)
	}
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		for m := range ps.Channel() {
			var e Event
			if json.Unmarshal([]byte(m.Payload), &e) == nil {
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
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
