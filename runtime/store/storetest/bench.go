package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// BenchmarkAppendAndLoadLast50 measures one turn's storage work on a long
// session: a session of 10,000 messages, then per iteration append one
// message and load the last 50 (what building a prompt reads). Besides the
// mean it reports p50 and p99 per iteration in milliseconds; the target is a
// p99 under 5 ms.
func BenchmarkAppendAndLoadLast50(b *testing.B, st store.Store) {
	turn := AppendAndLoadLast50(b, st)
	var durations []time.Duration
	b.ResetTimer()
	for b.Loop() {
		begin := time.Now()
		if err := turn(); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(begin))
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(percentile(durations, 0.50), "p50-ms")
	b.ReportMetric(percentile(durations, 0.99), "p99-ms")
}

// AppendAndLoadLast50 writes BenchmarkAppendAndLoadLast50's session of
// 10,000 messages into st and returns one iteration of its work, for
// benchmarks that interleave several stores.
func AppendAndLoadLast50(tb testing.TB, st store.Store) func() error {
	tb.Helper()
	const (
		history = 10_000
		batch   = 500
	)
	ctx := store.WithTenant(tb.Context(), tenantA)
	sess, err := st.CreateSession(ctx, newSession("web", "bench", "d1"))
	if err != nil {
		tb.Fatal(err)
	}
	for start := 0; start < history; start += batch {
		msgs := make([]store.Message, batch)
		for i := range msgs {
			msgs[i] = userMsg(fmt.Sprintf("seed-%d", start+i), fmt.Sprintf("message %d with a little text in it", start+i))
		}
		if _, err := st.AppendMessages(ctx, sess.ID, msgs...); err != nil {
			tb.Fatal(err)
		}
	}
	n := 0
	return func() error {
		n++
		if _, err := st.AppendMessages(ctx, sess.ID, userMsg(fmt.Sprintf("bench-%d", n), "another message")); err != nil {
			return err
		}
		msgs, err := st.LoadMessages(ctx, sess.ID, store.LoadOptions{Last: 50})
		if err != nil {
			return err
		}
		if len(msgs) != 50 {
			return fmt.Errorf("loaded %d messages, want 50", len(msgs))
		}
		return nil
	}
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(float64(len(sorted))*p), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// BenchmarkAuditAppend measures what the audit log adds to one tool call:
// digesting its arguments and appending the record (package audit's
// Recorder), on a log that already holds 10,000 records. It reports p50 and
// p99 per call in milliseconds.
func BenchmarkAuditAppend(b *testing.B, st store.Store) {
	ctx := store.WithTenant(b.Context(), "bench")
	args := `{"command":"ls -la /workspace && cat notes.md","timeout":30}`
	rec := func(i int) store.AuditRecord {
		sum := sha256.Sum256([]byte(args + strconv.Itoa(i)))
		return store.AuditRecord{Actor: "key:bench", Agent: "helper", SessionID: "web:c1:d1", Tool: "exec",
			ArgsDigest: "sha256:" + hex.EncodeToString(sum[:]), Outcome: store.AuditOK, Duration: 12 * time.Millisecond}
	}
	for i := range 10_000 {
		if err := st.AppendAudit(ctx, rec(-i)); err != nil {
			b.Fatal(err)
		}
	}
	var durations []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		begin := time.Now()
		if err := st.AppendAudit(ctx, rec(i)); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(begin))
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(percentile(durations, 0.50), "p50-ms")
	b.ReportMetric(percentile(durations, 0.99), "p99-ms")
}
