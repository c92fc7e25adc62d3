package quota_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/quota"
)

// admitters are the implementations under test, each returning n
// admitters sharing their counts (gateway replicas; the local one is one
// process, so its "replicas" are the same admitter).
func admitters(t testing.TB, clk *clocktesting.FakeClock) map[string]func(n int) []quota.Admitter {
	local := &quota.LocalAdmitter{Clock: clk}
	return map[string]func(int) []quota.Admitter{
		"local": func(n int) []quota.Admitter {
			out := make([]quota.Admitter, n)
			for i := range out {
				out[i] = local
			}
			return out
		},
		"redis": func(n int) []quota.Admitter {
			if redisURL == "" {
				t.Skip("SKIPPED: " + redisReason)
			}
			out := make([]quota.Admitter, n)
			for i := range out {
				opts, err := redis.ParseURL(redisURL)
				if err != nil {
					t.Fatal(err)
				}
				rdb := redis.NewClient(opts) // a replica's own connection
				t.Cleanup(func() { _ = rdb.Close() })
				out[i] = &quota.RedisAdmitter{Redis: rdb, Clock: clk}
			}
			return out
		},
	}
}

func code(err error) string {
	if ce := coded(err); ce != nil {
		return ce.Code
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

// coded is err's protocol.CodedError, nil when it has none.
func coded(err error) *protocol.CodedError {
	var ce *protocol.CodedError
	if errors.As(err, &ce) {
		return ce
	}
	return nil
}

// TestSessionCap: tenant A's third session is refused with session_limit
// while its open ones and tenant B's go on; a session quiet for the window
// closes and frees its place.
func TestSessionCap(t *testing.T) {
	for _, name := range []string{"local", "redis"} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			clk := clocktesting.NewFakeClock(day)
			adm := admitters(t, clk)[name](1)[0]
			ctx := context.Background()
			a, b := fmt.Sprintf("a%d", time.Now().UnixNano()), fmt.Sprintf("b%d", time.Now().UnixNano())
			two := quota.Limits{MaxSessions: 2, MessagesPerMinute: -1}

			g.Expect(adm.Admit(ctx, a, "web:helper/1", two)).To(Succeed())
			clk.Step(time.Minute)
			g.Expect(adm.Admit(ctx, a, "web:helper/2", two)).To(Succeed())
			err := adm.Admit(ctx, a, "telegram:helper/3", two)
			g.Expect(code(err)).To(Equal(protocol.CodeSessionLimit))
			g.Expect(err).To(MatchError(ContainSubstring("this workspace has 2 sessions open, the most its quota allows (maxConcurrentSessions)")))
			// The oldest session closes 10 minutes after its message, 9
			// from now.
			g.Expect(coded(err).RetryAfter).To(Equal(9 * time.Minute))
			g.Expect(adm.Admit(ctx, a, "web:helper/1", two)).To(Succeed(), "an open session goes on")
			g.Expect(adm.Admit(ctx, b, "web:helper/3", two)).To(Succeed(), "another tenant's sessions are its own")

			// Session 1 spoke again at minute 1, session 2 at minute 1:
			// both quiet for 10 minutes close.
			clk.Step(quota.DefaultSessionWindow)
			g.Expect(adm.Admit(ctx, a, "telegram:helper/3", two)).To(Succeed())

			zero := quota.Limits{MaxSessions: 0, MessagesPerMinute: -1}
			g.Expect(code(adm.Admit(ctx, b, "web:helper/9", zero))).To(Equal(protocol.CodeSessionLimit), "0 admits no session")
			g.Expect(adm.Admit(ctx, b, "web:helper/9", quota.NoLimits)).To(Succeed())
		})
	}
}

// TestMessageCap: the tenant's messages over messagesPerMinute in a
// sliding minute are refused with message_limit and a wait, refused ones
// do not count, and another tenant is not affected.
func TestMessageCap(t *testing.T) {
	for _, name := range []string{"local", "redis"} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			// 10 s into a minute.
			clk := clocktesting.NewFakeClock(day.Truncate(time.Minute).Add(10 * time.Second))
			adm := admitters(t, clk)[name](1)[0]
			ctx := context.Background()
			a, b := fmt.Sprintf("a%d", time.Now().UnixNano()), fmt.Sprintf("b%d", time.Now().UnixNano())
			three := quota.Limits{MaxSessions: -1, MessagesPerMinute: 3}
			for i := range 3 {
				g.Expect(adm.Admit(ctx, a, "web:helper/1", three)).To(Succeed(), "message %d", i)
			}
			for range 5 {
				err := adm.Admit(ctx, a, "web:helper/1", three)
				g.Expect(code(err)).To(Equal(protocol.CodeMessageLimit))
				g.Expect(err).To(MatchError(ContainSubstring("this workspace has sent 3 messages in the last minute, the most its quota allows (messagesPerMinute); try again in 1m10s")))
				// The next minute starts in 50 s; 20 s into it, a third
				// of the 3 messages still counts (the sliding estimate).
				g.Expect(coded(err).RetryAfter).To(Equal(70 * time.Second))
			}
			g.Expect(adm.Admit(ctx, b, "web:helper/1", three)).To(Succeed(), "another tenant's messages are its own")

			// 40 s into the next minute, a third of the minute before's 3
			// messages still counts: two more fit.
			clk.Step(90 * time.Second)
			g.Expect(adm.Admit(ctx, a, "web:helper/1", three)).To(Succeed())
			g.Expect(adm.Admit(ctx, a, "web:helper/1", three)).To(Succeed())
			g.Expect(code(adm.Admit(ctx, a, "web:helper/1", three))).To(Equal(protocol.CodeMessageLimit))
			// Two minutes later none count.
			clk.Step(2 * time.Minute)
			for range 3 {
				g.Expect(adm.Admit(ctx, a, "web:helper/1", three)).To(Succeed())
			}
		})
	}
}

// TestCapsHoldAcrossReplicas: 4 gateway replicas sharing one Redis, 64
// concurrent messages each opening a session of tenant A, admit exactly the
// tenant's 10 sessions between them; then, with a messages cap, exactly 25
// messages in the minute.
func TestCapsHoldAcrossReplicas(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(day.Truncate(time.Minute))
	replicas := admitters(t, clk)["redis"](4)
	ctx := context.Background()
	tenant := fmt.Sprintf("a%d", time.Now().UnixNano())

	race := func(l quota.Limits, session func(i int) string) (admitted int32, codes map[string]int) {
		var n atomic.Int32
		var mu sync.Mutex
		codes = map[string]int{}
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				err := replicas[i%len(replicas)].Admit(ctx, tenant, session(i), l)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					n.Add(1)
					return
				}
				codes[code(err)]++
			})
		}
		wg.Wait()
		return n.Load(), codes
	}
	n, codes := race(quota.Limits{MaxSessions: 10, MessagesPerMinute: -1}, func(i int) string { return fmt.Sprintf("web:helper/%d", i) })
	g.Expect(n).To(Equal(int32(10)))
	g.Expect(codes).To(Equal(map[string]int{protocol.CodeSessionLimit: 54}))

	clk.Step(time.Hour)
	n, codes = race(quota.Limits{MaxSessions: -1, MessagesPerMinute: 25}, func(int) string { return "web:helper/1" })
	g.Expect(n).To(Equal(int32(25)))
	g.Expect(codes).To(Equal(map[string]int{protocol.CodeMessageLimit: 39}))
}

// TestLimitsOf: a TenantQuota's caps; unset is no cap, 0 is a cap of 0.
func TestLimitsOf(t *testing.T) {
	g := NewWithT(t)
	five, zero := int32(5), int32(0)
	g.Expect(quota.LimitsOf(nil)).To(Equal(quota.NoLimits))
	g.Expect(quota.LimitsOf(&picobotv1alpha1.TenantQuota{})).To(Equal(quota.NoLimits))
	g.Expect(quota.LimitsOf(&picobotv1alpha1.TenantQuota{Spec: picobotv1alpha1.TenantQuotaSpec{MaxConcurrentSessions: &five, MessagesPerMinute: &zero}})).
		To(Equal(quota.Limits{MaxSessions: 5, MessagesPerMinute: 0}))
}

// BenchmarkAdmit is what the caps add to every message at the gateway:
// nothing for a tenant without caps, a map update in process (embedded), one
// Redis script call shared by the replicas (cluster; a local server).
func BenchmarkAdmit(b *testing.B) {
	clk := clocktesting.NewFakeClock(day)
	caps := quota.Limits{MaxSessions: 1000, MessagesPerMinute: 1 << 40}
	for _, name := range []string{"none", "local", "redis"} {
		b.Run(name, func(b *testing.B) {
			adm, l := quota.Admitter(&quota.LocalAdmitter{Clock: clk}), caps
			switch name {
			case "none":
				l = quota.NoLimits
			case "redis":
				adm = admitters(b, clk)["redis"](1)[0]
			}
			ctx := context.Background()
			tenant := fmt.Sprintf("bench%d", time.Now().UnixNano())
			times := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				start := time.Now()
				if err := adm.Admit(ctx, tenant, fmt.Sprintf("web:helper/%d", i%100), l); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				i++
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			if len(times) > 0 {
				b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1000, "p50-µs")
				b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1000, "p99-µs")
			}
		})
	}
}
