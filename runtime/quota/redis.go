package quota

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/bus"
)

// admitScript decides and counts one message in one step, so gateway
// replicas admitting at once never pass a cap between them.
//
// KEYS: the tenant's open sessions (a sorted set: session -> last message,
// ms), the previous and this minute's message counters. ARGV: now (ms), the
// session window (ms), the session cap (-1: none), the session, the
// message cap (-1: none), ms into this minute. It returns {0} when
// admitted, {1, open sessions, oldest last message} over the session cap,
// {2, previous minute's count, this minute's} over the message cap.
var admitScript = redis.NewScript(`
local now, window, maxs, mpm, into = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
if mpm >= 0 then
  local prev = tonumber(redis.call('GET', KEYS[2]) or '0')
  local cur = tonumber(redis.call('GET', KEYS[3]) or '0')
  if prev * (60000 - into) + (cur + 1) * 60000 > mpm * 60000 then
    return {2, prev, cur}
  end
end
if maxs >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  if not redis.call('ZSCORE', KEYS[1], ARGV[4]) then
    local n = redis.call('ZCARD', KEYS[1])
    if n >= maxs then
      local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
      return {1, n, tonumber(oldest[2] or now)}
    end
  end
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
end
if mpm >= 0 then
  redis.call('INCR', KEYS[3])
  redis.call('PEXPIRE', KEYS[3], 120000)
end
return {0}
`)

// RedisAdmitter counts in Redis: the cluster gateway, whose replicas share
// the counts of each tenant (keys under the tenant's hash tag, so a tenant's
// keys share a Redis Cluster slot and one script sees them all).
type RedisAdmitter struct {
	Redis redis.Scripter
	// Clock is the replicas' time (their clocks are assumed synchronised,
	// as the leases' are).
	Clock clock.PassiveClock
	// Window is how long a session stays open after its last message
	// (DefaultSessionWindow when 0).
	Window time.Duration
}

// Admit implements Admitter: one script call when the tenant has a cap,
// nothing otherwise.
func (a *RedisAdmitter) Admit(ctx context.Context, tenant, session string, l Limits) error {
	if l.None() {
		return nil
	}
	window := a.Window
	if window <= 0 {
		window = DefaultSessionWindow
	}
	now := a.Clock.Now().UnixMilli()
	idx := now / minute
	keys := []string{bus.Key(tenant, "quota", "sessions"),
		bus.Key(tenant, "quota", "messages", strconv.FormatInt(idx-1, 10)),
		bus.Key(tenant, "quota", "messages", strconv.FormatInt(idx, 10))}
	res, err := admitScript.Run(ctx, a.Redis, keys, now, window.Milliseconds(), l.MaxSessions, session, l.MessagesPerMinute, now%minute).Int64Slice()
	if err != nil {
		return fmt.Errorf("failed to count the message against tenant %q's quota: %w", tenant, err)
	}
	v := verdict{refused: res[0], intoMS: now % minute}
	switch {
	case v.refused == 1 && len(res) == 3:
		v.open, v.oldestMS = res[1], res[2]
	case v.refused == 2 && len(res) == 3:
		v.prev, v.cur = res[1], res[2]
	}
	return v.refusal(l, window, now)
}
