package quota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/protocol"
)

// DefaultSessionWindow is how long a session counts as open after its last
// message: the time a session pod keeps serving a quiet chat
// (cluster.DefaultIdleTimeout), so the sessions counted are about the ones
// holding a runtime.
const DefaultSessionWindow = 10 * time.Minute

// minute is the window of messagesPerMinute, in milliseconds.
const minute = int64(time.Minute / time.Millisecond)

// Limits are the caps a gateway enforces on a tenant's incoming messages. A
// negative cap is no cap; zero admits nothing (the platform team shut the
// tenant's sessions or messages off).
type Limits struct {
	// MaxSessions caps the sessions open at once: chats (channel, agent,
	// chat id) that had a message in the session window.
	MaxSessions int64
	// MessagesPerMinute caps the messages admitted in any minute (a
	// sliding window).
	MessagesPerMinute int64
}

// NoLimits admits everything.
var NoLimits = Limits{MaxSessions: -1, MessagesPerMinute: -1}

// None reports limits without any cap: nothing to count.
func (l Limits) None() bool { return l.MaxSessions < 0 && l.MessagesPerMinute < 0 }

// LimitsOf are the caps a TenantQuota sets; nil (no quota) is NoLimits.
func LimitsOf(q *picobotv1alpha1.TenantQuota) Limits {
	l := NoLimits
	if q == nil {
		return l
	}
	if q.Spec.MaxConcurrentSessions != nil {
		l.MaxSessions = int64(*q.Spec.MaxConcurrentSessions)
	}
	if q.Spec.MessagesPerMinute != nil {
		l.MessagesPerMinute = int64(*q.Spec.MessagesPerMinute)
	}
	return l
}

// Session is the session a message counts towards: its chat, on one
// channel of one agent (the chat's dialogs are one session).
func Session(channel, agent, chatID string) string { return channel + ":" + agent + "/" + chatID }

// Admitter admits a tenant's message to a session (a chat: channel, agent
// and chat id), or refuses it with a protocol.CodedError: session_limit when
// it would open a session over l.MaxSessions, message_limit when it is over
// l.MessagesPerMinute. An admitted message counts towards both; a refused
// one towards neither.
type Admitter interface {
	Admit(ctx context.Context, tenant, session string, l Limits) error
}

// verdict is what the admission count decided.
type verdict struct {
	// refused: 0 admitted, 1 over the session cap, 2 over the message cap.
	refused int64
	// open is the tenant's open sessions (refused 1); oldestMS the last
	// message time of its longest-quiet one.
	open, oldestMS int64
	// prev and cur are the previous and this minute's admitted messages
	// (refused 2); intoMS how far this minute is gone.
	prev, cur, intoMS int64
}

// refusal is v's error for a tenant at nowMS.
func (v verdict) refusal(l Limits, window time.Duration, nowMS int64) error {
	switch v.refused {
	case 1:
		wait := time.Duration(v.oldestMS+window.Milliseconds()-nowMS) * time.Millisecond
		return &protocol.CodedError{Code: protocol.CodeSessionLimit, RetryAfter: max(wait, time.Second), Err: fmt.Errorf(
			"this workspace has %d sessions open, the most its quota allows (maxConcurrentSessions); a session stays open until it has had no message for %s, so continue in an open chat or try again later",
			v.open, window)}
	case 2:
		wait := messageWait(l.MessagesPerMinute, v.prev, v.cur, v.intoMS)
		return &protocol.CodedError{Code: protocol.CodeMessageLimit, RetryAfter: wait, Err: fmt.Errorf(
			"this workspace has sent %d messages in the last minute, the most its quota allows (messagesPerMinute); try again in %s",
			l.MessagesPerMinute, wait.Round(time.Second))}
	}
	return nil
}

// overRate reports whether one more message is over perMinute, by the
// sliding-window estimate: the previous minute's count weighted by the part
// of it still in the last 60 s, plus this minute's.
func overRate(perMinute, prev, cur, intoMS int64) bool {
	return prev*(minute-intoMS)+(cur+1)*minute > perMinute*minute
}

// messageWait is how long until one more message fits under perMinute.
func messageWait(perMinute, prev, cur, intoMS int64) time.Duration {
	if perMinute <= 0 {
		return time.Minute
	}
	ms := int64(0)
	if cur+1 > perMinute {
		// Not this minute: the next one, where this one's count is the
		// previous minute's.
		ms, prev, cur, intoMS = minute-intoMS, cur, 0, 0
	}
	// The smallest into at which prev*(minute-into) + (cur+1)*minute <= perMinute*minute.
	if prev > 0 {
		need := minute - ((perMinute-cur-1)*minute)/prev
		if need > intoMS {
			ms += need - intoMS
		}
	}
	return max(time.Duration(ms)*time.Millisecond, time.Second).Round(time.Second)
}

// LocalAdmitter counts in the process: embedded mode, where one process
// serves every message.
type LocalAdmitter struct {
	Clock clock.PassiveClock
	// Window is how long a session stays open after its last message
	// (DefaultSessionWindow when 0).
	Window time.Duration

	mu      sync.Mutex
	tenants map[string]*localTenant
}

type localTenant struct {
	sessions  map[string]int64 // session -> last message, ms
	minuteIdx int64            // the minute cur counts
	prev, cur int64
}

// Admit implements Admitter.
func (a *LocalAdmitter) Admit(_ context.Context, tenant, session string, l Limits) error {
	if l.None() {
		return nil
	}
	window := a.Window
	if window <= 0 {
		window = DefaultSessionWindow
	}
	now := a.Clock.Now().UnixMilli()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tenants == nil {
		a.tenants = map[string]*localTenant{}
	}
	t := a.tenants[tenant]
	if t == nil {
		t = &localTenant{sessions: map[string]int64{}}
		a.tenants[tenant] = t
	}
	idx := now / minute
	switch {
	case idx == t.minuteIdx+1:
		t.prev, t.cur = t.cur, 0
	case idx != t.minuteIdx:
		t.prev, t.cur = 0, 0
	}
	t.minuteIdx = idx
	v := verdict{prev: t.prev, cur: t.cur, intoMS: now % minute}
	if l.MessagesPerMinute >= 0 && overRate(l.MessagesPerMinute, t.prev, t.cur, v.intoMS) {
		v.refused = 2
		return v.refusal(l, window, now)
	}
	if l.MaxSessions >= 0 {
		if _, open := t.sessions[session]; !open && int64(len(t.sessions)) >= l.MaxSessions {
			// Only now are the quiet sessions dropped: below the cap
			// they cost nothing, and there are at most MaxSessions.
			v.oldestMS = now
			for s, last := range t.sessions {
				if last <= now-window.Milliseconds() {
					delete(t.sessions, s)
				} else {
					v.oldestMS = min(v.oldestMS, last)
				}
			}
			if v.open = int64(len(t.sessions)); v.open >= l.MaxSessions {
				v.refused = 1
				return v.refusal(l, window, now)
			}
		}
		t.sessions[session] = now
	}
	if l.MessagesPerMinute >= 0 {
		t.cur++
	}
	return nil
}
