package cluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// fanOutCalls is the lead model's step that starts n background runs at
// once: delegate calls of at most eight tasks each (the batch limit).
func fanOutCalls(tag string, n int) fakellm.Turn {
	var calls []fakellm.Call
	for c := 0; c*8 < n; c++ {
		var tasks []string
		for i := c * 8; i < min(n, (c+1)*8); i++ {
			tasks = append(tasks, fmt.Sprintf(`{"task":"%s task %d"}`, tag, i))
		}
		calls = append(calls, fakellm.Call{ID: fmt.Sprintf("f%d", c), Name: delegate.Name,
			Args: `{"target":"researcher","mode":"background","tasks":[` + strings.Join(tasks, ",") + `]}`})
	}
	return fakellm.Turn{ToolCalls: calls}
}

// fanOutTenant is a tenant whose lead starts n background runs of
// researcher (a warm pool of pool pods) for each message, and answers each
// continuation with "Processed" and its run.
func fanOutTenant(tb testing.TB, ns string, n, pool int, continued *atomic.Int64) (c gatewaytest.Client, db store.Store, ctx context.Context) {
	tb.Helper()
	db, ctx = tenantStore(tb, ns)
	c = delegateTenant(tb, ns, 1, pool, "1m", func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher":
			return fakellm.Turn{Text: "result of " + user[strings.LastIndex(user, "\n")+1:]}
		case strings.HasPrefix(user, continuationPrefix):
			if continued != nil {
				continued.Add(1)
			}
			return fakellm.Turn{Text: "Processed " + strings.Fields(user)[2]}
		default:
			return fanOutCalls(user, n)
		}
	})
	return c, db, ctx
}

// fanOutOnce sends one message to lead's chat (its turn starts n runs) and
// waits until every run's completion was delivered; it returns the session
// and how long that took from the send.
func fanOutOnce(ctx context.Context, tb testing.TB, g Gomega, c gatewaytest.Client, db store.Store, n int, tag string) (string, time.Duration) {
	tb.Helper()
	start := time.Now()
	_, sid := sendLead(tb, c, tag, tag, tag)
	g.Eventually(func(g Gomega) {
		runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{SessionID: sid, Completion: store.CompletionDelivered, Limit: 100})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(runs).To(HaveLen(n))
	}, 5*time.Minute, 50*time.Millisecond).Should(Succeed(), tag)
	return sid, time.Since(start)
}

// checkOnceEach checks that each of the session's n runs succeeded and had
// exactly one continuation message and one answer to it in the session.
func checkOnceEach(ctx context.Context, g Gomega, db store.Store, ns, sid string, n int) {
	runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{SessionID: sid, Limit: 100})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(n))
	for _, r := range runs {
		g.Expect(r.Status).To(Equal(store.RunSucceeded), r.ID)
		g.Expect(countMessages(g, db, ns, sid, "user", continuationPrefix+r.ID+" ")).To(Equal(1), "continuation of %s", r.ID)
		g.Expect(countMessages(g, db, ns, sid, "assistant", "Processed "+r.ID)).To(Equal(1), "answer to %s", r.ID)
	}
}

// TestClusterBackgroundFanOutRepeated starts 50 background runs at once
// from one turn, 3 times over in `make test` and 20 times in `make bench`
// (PICOBOT_FANOUT_REPS; 20 take about 10 minutes on 2 cores): every run
// ends succeeded, and its completion is
// delivered by exactly one continuation turn in the chat, none lost, none
// twice.
func TestClusterBackgroundFanOutRepeated(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	const n = 50
	c, db, ctx := fanOutTenant(t, "tenant-bg-fanout", n, 4, nil)
	for rep := range fanOutReps() {
		sid, _ := fanOutOnce(ctx, t, g, c, db, n, fmt.Sprintf("fan%d", rep))
		checkOnceEach(ctx, g, db, "tenant-bg-fanout", sid, n)
	}
}

// BenchmarkClusterBackgroundFanOut50 measures, in cluster mode with a
// model that answers at once and a warm pool of 4 researcher pods, the
// time from the message whose turn starts 50 background runs to the 50th
// continuation turn done in the chat. Each run is a chat of researcher and
// a session pod serves one run, so the time is 50 pod wakes (46 of them
// pods the operator creates as the pool drains) and the 50 continuation
// turns lead's pod takes one after another. Each fan-out is logged with the
// researcher pods (live or finished, not yet reaped) it started with.
func BenchmarkClusterBackgroundFanOut50(b *testing.B) {
	needStack(b)
	g := NewWithT(b)
	const n = 50
	c, db, ctx := fanOutTenant(b, "bench-bg-fanout", n, 4, nil)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		pods := len(st.pods(b, "bench-bg-fanout", "researcher"))
		b.StartTimer()
		sid, d := fanOutOnce(ctx, b, g, c, db, n, fmt.Sprintf("bench%d", i))
		took = append(took, d)
		b.Logf("fan-out %d: %d researcher pods at the start, all 50 continuations in %s", i, pods, d)
		b.StopTimer()
		checkOnceEach(ctx, g, db, "bench-bg-fanout", sid, n)
		b.StartTimer()
	}
	b.ReportMetric(float64(quantile(took, 0.50).Milliseconds()), "ms-all50-p50")
	b.ReportMetric(float64(quantile(took, 0.99).Milliseconds()), "ms-all50-p99")
}

// fanOutReps is how many times TestClusterBackgroundFanOutRepeated fans
// out: 20, or PICOBOT_FANOUT_REPS.
func fanOutReps() int {
	if n, err := strconv.Atoi(os.Getenv("PICOBOT_FANOUT_REPS")); err == nil && n > 0 {
		return n
	}
	return 3
}
