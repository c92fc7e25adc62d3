package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/tool/bot"
)

// BotStatus reports an agent's session pods and queue for bot_status, from
// what the pods themselves keep in Redis: their registrations (wake.PodsKey:
// "warm" or "busy <channel> <chat>"), the owner hint of a busy pod's chat,
// which its heartbeat renews to LeaseTTL (so LeaseTTL minus the hint's
// remaining TTL is the heartbeat's age), and the agent's wake stream, whose
// consumer group's lag is the wakes no pod has taken yet.
type BotStatus struct {
	Redis    *redis.Client
	LeaseTTL time.Duration
}

// Instances lists the agent's registered session pods, by name.
func (s BotStatus) Instances(ctx context.Context, tenant, agent string) ([]bot.Instance, error) {
	pods, err := s.Redis.HGetAll(ctx, wake.PodsKey(tenant, agent)).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read the session pods of agent %q: %w", agent, err)
	}
	out := make([]bot.Instance, 0, len(pods))
	for name, state := range pods {
		in := bot.Instance{ID: name, Kind: "session pod", State: state}
		if rest, ok := strings.CutPrefix(state, "busy "); ok {
			if channel, chat, ok := strings.Cut(rest, " "); ok {
				left, err := s.Redis.PTTL(ctx, wake.OwnerKey(tenant, agent, channel, chat)).Result()
				if err != nil {
					return nil, fmt.Errorf("failed to read the heartbeat of pod %q: %w", name, err)
				}
				if left > 0 && s.LeaseTTL > 0 {
					age := max(s.LeaseTTL-left, 0).Seconds()
					in.HeartbeatAge = &age
				}
			}
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b bot.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Queue counts the agent's wakes no pod has taken (the pods group's lag on
// the wake stream) and its busy pods.
func (s BotStatus) Queue(ctx context.Context, tenant, agent string) (bot.Queue, error) {
	var q bot.Queue
	groups, err := s.Redis.XInfoGroups(ctx, wake.Stream(tenant, agent)).Result()
	if err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "no such key") {
		return q, fmt.Errorf("failed to read the wake stream of agent %q: %w", agent, err)
	}
	for _, g := range groups {
		if g.Name == wake.GroupPods && g.Lag > 0 {
			q.Waiting = g.Lag
		}
	}
	pods, err := s.Redis.HGetAll(ctx, wake.PodsKey(tenant, agent)).Result()
	if err != nil {
		return q, fmt.Errorf("failed to read the session pods of agent %q: %w", agent, err)
	}
	for _, state := range pods {
		if strings.HasPrefix(state, "busy ") {
			q.Running++
		}
	}
	return q, nil
}
