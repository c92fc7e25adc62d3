// Package bustest is the conformance suite every bus.Bus implementation passes,
// so the in-process bus of embedded mode and the Redis bus of cluster mode
// cannot drift apart. An implementation's test calls Run with a factory.
package bustest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // Gomega's DSL is made for dot-import
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/bus"
)

// MaxLen is the publish-time bound the factory's bus must be configured with,
// so the suite can check trimming.
const MaxLen = 1000

// claimIdle is the min idle time of the claim tests: short, so tests are quick,
// yet real for implementations that measure idleness on a server's clock.
const claimIdle = 20 * time.Millisecond

// Run runs the suite. newBus returns a fresh bus configured with MaxLen; the
// suite closes it. Buses returned by separate calls may share a server: every
// test works on streams of its own.
func Run(t *testing.T, newBus func(t *testing.T) bus.Bus) {
	tests := []struct {
		name string
		run  func(t *testing.T, b bus.Bus)
	}{
		{"PublishFetchAckInOrder", testPublishFetchAckInOrder},
		{"EmptyPublishIsNoop", testEmptyPublishIsNoop},
		{"PublishRejectsMessageWithoutID", testPublishRejectsMessageWithoutID},
		{"HeadersRoundTrip", testHeadersRoundTrip},
		{"PublishCarriesTraceContext", testPublishCarriesTraceContext},
		{"PublishCopiesPayload", testPublishCopiesPayload},
		{"ConsumersOfAGroupSplitMessages", testConsumersOfAGroupSplitMessages},
		{"GroupsEachGetEveryMessage", testGroupsEachGetEveryMessage},
		{"LateGroupSeesRetainedMessages", testLateGroupSeesRetainedMessages},
		{"ClaimRedeliversIdlePending", testClaimRedeliversIdlePending},
		{"ConsumerDiesMidBatch", testConsumerDiesMidBatch},
		{"ClaimDropsTrimmedPending", testClaimDropsTrimmedPending},
		{"PublishTrimsToMaxLen", testPublishTrimsToMaxLen},
		{"TrimBoundsLength", testTrimBoundsLength},
		{"BlockingFetchWakesOnPublish", testBlockingFetchWakesOnPublish},
		{"CancelEndsBlockingFetch", testCancelEndsBlockingFetch},
		{"CloseEndsBlockingFetch", testCloseEndsBlockingFetch},
		{"Batch1000", testBatch1000},
		{"AckIsIdempotent", testAckIsIdempotent},
		{"ConcurrentPublishersAndConsumers", testConcurrentPublishersAndConsumers},
		{"ConsumerLoopReclaimsAndProcessesOnce", testConsumerLoopReclaimsAndProcessesOnce},
		{"ConsumerLoopEndsOnCancel", testConsumerLoopEndsOnCancel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBus(t)
			t.Cleanup(func() { _ = b.Close() })
			tc.run(t, b)
		})
	}
}

// streamName returns a stream of the test's own.
func streamName(t *testing.T, kind string) string {
	return bus.Key("bustest", t.Name()+"-"+bus.NewID()[:8], kind)
}

// messages returns n messages with IDs prefix-000, prefix-001, ...
func messages(prefix string, from, n int) []bus.Message {
	out := make([]bus.Message, n)
	for i := range out {
		id := fmt.Sprintf("%s-%04d", prefix, from+i)
		out[i] = bus.Message{ID: id, Payload: []byte("payload of " + id)}
	}
	return out
}

func ids(msgs []bus.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].ID
	}
	return out
}

func seqs(msgs []bus.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Seq
	}
	return out
}

// fetchAll fetches until want messages arrived for consumer.
func fetchAll(t *testing.T, b bus.Bus, stream, group, consumer string, count, want int) []bus.Message {
	t.Helper()
	var got []bus.Message
	for len(got) < want {
		msgs, err := b.Fetch(t.Context(), stream, group, consumer, bus.FetchOptions{Count: count, Block: 5 * time.Second})
		if err != nil {
			t.Fatalf("failed to fetch: %v", err)
		}
		if len(msgs) == 0 {
			t.Fatalf("fetch timed out with %d of %d messages", len(got), want)
		}
		got = append(got, msgs...)
	}
	return got
}

// claimEventually claims until want messages were taken over (they become
// claimable once idle for claimIdle).
func claimEventually(t *testing.T, b bus.Bus, stream, group, consumer string, want int) []bus.Message {
	t.Helper()
	var got []bus.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < want {
		msgs, err := b.Claim(t.Context(), stream, group, consumer, claimIdle, want-len(got))
		if err != nil {
			t.Fatalf("failed to claim: %v", err)
		}
		got = append(got, msgs...)
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d of %d messages", len(got), want)
		}
		if len(got) < want {
			time.Sleep(claimIdle / 4)
		}
	}
	return got
}

func testPublishFetchAckInOrder(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	sent := messages("m", 0, 10)
	g.Expect(b.Publish(ctx, s, sent[:4]...)).To(Succeed())
	g.Expect(b.Publish(ctx, s, sent[4:]...)).To(Succeed())
	g.Expect(b.Len(ctx, s)).To(BeEquivalentTo(10))

	got, err := b.Fetch(ctx, s, "g", "c1", bus.FetchOptions{Count: 100})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ids(got)).To(Equal(ids(sent)), "one stream is delivered in publish order")
	seen := map[string]bool{}
	for i, m := range got {
		g.Expect(m.Payload).To(Equal(sent[i].Payload))
		g.Expect(m.Stream).To(Equal(s))
		g.Expect(m.Deliveries).To(Equal(1))
		g.Expect(m.Seq).NotTo(BeEmpty())
		g.Expect(seen[m.Seq]).To(BeFalse(), "seqs are unique")
		seen[m.Seq] = true
	}

	more, err := b.Fetch(ctx, s, "g", "c1", bus.FetchOptions{Count: 100})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(more).To(BeEmpty(), "a group receives each message once")

	pending, err := b.Pending(ctx, s, "g", 100)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(HaveLen(10))
	g.Expect(pending[0].Consumer).To(Equal("c1"))
	g.Expect(pending[0].Seq).To(Equal(got[0].Seq))
	g.Expect(pending[0].Deliveries).To(Equal(1))

	g.Expect(b.Ack(ctx, s, "g", seqs(got)...)).To(Succeed())
	g.Expect(b.Pending(ctx, s, "g", 100)).To(BeEmpty())
	g.Expect(b.Len(ctx, s)).To(BeEquivalentTo(10), "acking does not delete: trimming does")
}

func testEmptyPublishIsNoop(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	g.Expect(b.Publish(ctx, s)).To(Succeed())
	g.Expect(b.Publish(ctx, s, []bus.Message{}...)).To(Succeed())
	g.Expect(b.Len(ctx, s)).To(BeZero())
	g.Expect(b.Pending(ctx, s, "nobody", 10)).To(BeEmpty(), "a missing group has nothing pending")
}

func testPublishRejectsMessageWithoutID(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	batch := append(messages("m", 0, 2), bus.Message{Payload: []byte("no id")})
	g.Expect(b.Publish(ctx, s, batch...)).To(MatchError(ContainSubstring("has no ID")))
	g.Expect(b.Len(ctx, s)).To(BeZero(), "a bad batch publishes nothing")
}

func testHeadersRoundTrip(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	headers := map[string]string{
		bus.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":          "picobot=1",
		"content-type":        "application/json",
	}
	g.Expect(b.Publish(ctx, s,
		bus.Message{ID: "with", Payload: []byte(`{"a":1}`), Headers: headers},
		bus.Message{ID: "without", Payload: nil},
		bus.Message{ID: "binary", Payload: []byte{0, 1, 2, 255, '\r', '\n'}},
	)).To(Succeed())
	got := fetchAll(t, b, s, "g", "c", 10, 3)
	g.Expect(got[0].Headers).To(Equal(headers))
	g.Expect(got[1].Headers).To(BeEmpty())
	g.Expect(got[1].Payload).To(BeEmpty())
	g.Expect(got[2].Payload).To(Equal([]byte{0, 1, 2, 255, '\r', '\n'}))
}

// testPublishCarriesTraceContext: a publish under a recording span carries
// the trace in the entry (a child span of the publisher's, the bus.publish
// span), the consumer's context continues it, and the publisher's headers
// map is left alone; without a span nothing is added.
func testPublishCarriesTraceContext(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	s := streamName(t, "in")
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("bustest").Start(t.Context(), "publisher")
	mine := map[string]string{"content-type": "application/json"}
	g.Expect(b.Publish(ctx, s, bus.Message{ID: "traced", Payload: []byte("x"), Headers: mine},
		bus.Message{ID: "explicit", Headers: map[string]string{bus.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})).To(Succeed())
	span.End()
	g.Expect(b.Publish(t.Context(), s, bus.Message{ID: "untraced", Payload: []byte("y")})).To(Succeed())
	g.Expect(mine).To(Equal(map[string]string{"content-type": "application/json"}), "the publisher's map is not changed")

	got := fetchAll(t, b, s, "g", "c", 10, 3)
	g.Expect(got[0].Headers).To(HaveKeyWithValue("content-type", "application/json"))
	g.Expect(got[0].Headers).To(HaveKey(bus.HeaderTraceparent))
	remote := trace.SpanContextFromContext(bus.TraceContext(context.Background(), got[0]))
	g.Expect(remote.IsValid()).To(BeTrue())
	g.Expect(remote.IsRemote()).To(BeTrue())
	g.Expect(remote.TraceID()).To(Equal(span.SpanContext().TraceID()), "the entry continues the publisher's trace")
	g.Expect(remote.SpanID()).NotTo(Equal(span.SpanContext().SpanID()), "its parent is the bus.publish span, a child of the publisher's")
	g.Expect(got[1].Headers[bus.HeaderTraceparent]).To(Equal("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "a publisher's own trace context is kept")
	g.Expect(got[2].Headers).NotTo(HaveKey(bus.HeaderTraceparent))
	g.Expect(trace.SpanContextFromContext(bus.TraceContext(context.Background(), got[2])).IsValid()).To(BeFalse())
}

func testPublishCopiesPayload(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	buf := []byte("original")
	g.Expect(b.Publish(ctx, s, bus.Message{ID: "a", Payload: buf})).To(Succeed())
	copy(buf, "mutated!")
	got := fetchAll(t, b, s, "g", "c", 1, 1)
	g.Expect(string(got[0].Payload)).To(Equal("original"), "publishers may reuse their buffers")
}

func testConsumersOfAGroupSplitMessages(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	sent := messages("m", 0, 40)
	g.Expect(b.Publish(ctx, s, sent...)).To(Succeed())

	perConsumer := map[string][]string{}
	for i := 0; len(perConsumer["c1"])+len(perConsumer["c2"]) < len(sent); i++ {
		c := []string{"c1", "c2"}[i%2]
		got, err := b.Fetch(ctx, s, "g", c, bus.FetchOptions{Count: 7})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).NotTo(BeEmpty())
		perConsumer[c] = append(perConsumer[c], ids(got)...)
		g.Expect(b.Ack(ctx, s, "g", seqs(got)...)).To(Succeed())
	}
	g.Expect(perConsumer["c1"]).NotTo(BeEmpty())
	g.Expect(perConsumer["c2"]).NotTo(BeEmpty())
	all := append(slices.Clone(perConsumer["c1"]), perConsumer["c2"]...)
	slices.Sort(all)
	g.Expect(all).To(Equal(ids(sent)), "each message to exactly one consumer of the group")
}

func testGroupsEachGetEveryMessage(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "out")
	sent := messages("m", 0, 25)
	g.Expect(b.Publish(ctx, s, sent...)).To(Succeed())
	for _, group := range []string{"dispatcher", "audit"} {
		got := fetchAll(t, b, s, group, "c", 10, len(sent))
		g.Expect(ids(got)).To(Equal(ids(sent)), group)
		g.Expect(b.Ack(ctx, s, group, seqs(got)...)).To(Succeed())
	}
	// Acking in one group leaves the other untouched.
	pending, err := b.Pending(ctx, s, "dispatcher", 100)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(BeEmpty())
}

func testLateGroupSeesRetainedMessages(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	g.Expect(b.Publish(ctx, s, messages("early", 0, 3)...)).To(Succeed())
	// The group is created by its first fetch, after the publish: a session
	// runtime woken by its first message must still receive that message.
	got := fetchAll(t, b, s, "late", "c", 10, 3)
	g.Expect(ids(got)).To(Equal(ids(messages("early", 0, 3))))
}

func testClaimRedeliversIdlePending(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	sent := messages("m", 0, 5)
	g.Expect(b.Publish(ctx, s, sent...)).To(Succeed())
	taken := fetchAll(t, b, s, "g", "dead", 10, 5)

	got, err := b.Claim(ctx, s, "g", "alive", time.Hour, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty(), "messages that are not idle long enough stay with their consumer")

	claimed := claimEventually(t, b, s, "g", "alive", 5)
	g.Expect(ids(claimed)).To(Equal(ids(sent)), "oldest first")
	g.Expect(seqs(claimed)).To(Equal(seqs(taken)), "a claim redelivers the same entries")
	for _, m := range claimed {
		g.Expect(m.Deliveries).To(Equal(2))
		g.Expect(m.Stream).To(Equal(s))
		g.Expect(string(m.Payload)).To(Equal("payload of " + m.ID))
	}
	pending, err := b.Pending(ctx, s, "g", 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(HaveLen(5))
	for _, p := range pending {
		g.Expect(p.Consumer).To(Equal("alive"))
		g.Expect(p.Deliveries).To(Equal(2))
	}

	// Claimed again (the new owner stalled too): the count keeps rising.
	again := claimEventually(t, b, s, "g", "third", 5)
	g.Expect(again[0].Deliveries).To(Equal(3))

	g.Expect(b.Ack(ctx, s, "g", seqs(again)...)).To(Succeed())
	g.Expect(b.Pending(ctx, s, "g", 10)).To(BeEmpty())
	got, err = b.Claim(ctx, s, "g", "alive", 0, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty(), "acked messages are never redelivered")
}

// testConsumerDiesMidBatch is the crash the bus exists to survive: consumer A
// takes a batch, persists and acks half of it, persists a few more and dies
// before acking them, and leaves the rest untouched. Meanwhile the publisher
// retries a batch whose reply it lost. Consumer B claims A's leftovers, and with
// the store's idempotent append (the persisted set) and its Dedup the final
// state holds every message exactly once.
func testConsumerDiesMidBatch(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	first := messages("m", 0, 100)
	g.Expect(b.Publish(ctx, s, first...)).To(Succeed())

	// persisted stands for the store: its append is idempotent by message ID.
	persisted := map[string]int{}
	storeGuardHits := 0
	persist := func(m bus.Message) {
		if _, dup := persisted[m.ID]; dup {
			storeGuardHits++
			return
		}
		persisted[m.ID]++
	}

	batch := fetchAll(t, b, s, "g", "A", 100, 100)
	for _, m := range batch[:50] {
		persist(m)
	}
	g.Expect(b.Ack(ctx, s, "g", seqs(batch[:50])...)).To(Succeed())
	for _, m := range batch[50:60] {
		persist(m) // persisted, then A dies before acking
	}

	// The publisher lost the reply of its last batch and retries part of it
	// with the same IDs, then goes on.
	g.Expect(b.Publish(ctx, s, first[95:]...)).To(Succeed())
	g.Expect(b.Publish(ctx, s, messages("m", 100, 50)...)).To(Succeed())

	dedup := bus.NewDedup(1000, time.Hour, nil)
	dedupHits := 0
	handle := func(msgs []bus.Message) {
		for _, m := range msgs {
			if dedup.Seen(m.ID) {
				dedupHits++
				continue
			}
			persist(m)
			dedup.Mark(m.ID)
		}
		g.Expect(b.Ack(ctx, s, "g", seqs(msgs)...)).To(Succeed())
	}

	claimed := claimEventually(t, b, s, "g", "B", 50)
	g.Expect(ids(claimed)).To(Equal(ids(first[50:])), "B takes over exactly what A left unacked")
	for _, m := range claimed {
		g.Expect(m.Deliveries).To(Equal(2))
	}
	handle(claimed)
	handle(fetchAll(t, b, s, "g", "B", 20, 55))

	want := ids(append(slices.Clone(first), messages("m", 100, 50)...))
	g.Expect(slices.Sorted(maps.Keys(persisted))).To(Equal(want), "nothing lost")
	for id, n := range persisted {
		g.Expect(n).To(Equal(1), "processed twice: %s", id)
	}
	g.Expect(storeGuardHits).To(Equal(10), "A's persisted-but-unacked messages stop at the store")
	g.Expect(dedupHits).To(Equal(5), "the publisher's retried duplicates stop at Dedup")
	g.Expect(b.Pending(ctx, s, "g", 1000)).To(BeEmpty())
}

func testClaimDropsTrimmedPending(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	g.Expect(b.Publish(ctx, s, messages("m", 0, 10)...)).To(Succeed())
	fetchAll(t, b, s, "g", "dead", 10, 10)
	g.Expect(b.Trim(ctx, s, 4)).To(Succeed())

	claimed := claimEventually(t, b, s, "g", "alive", 4)
	g.Expect(ids(claimed)).To(Equal(ids(messages("m", 6, 4))), "only retained entries can be redelivered")
	pending, err := b.Pending(ctx, s, "g", 100)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(HaveLen(4), "trimmed entries leave the pending list when met by a claim")
}

func testPublishTrimsToMaxLen(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	for i := range 10 {
		g.Expect(b.Publish(ctx, s, messages("m", i*500, 500)...)).To(Succeed())
	}
	n, err := b.Len(ctx, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeNumerically(">=", MaxLen), "trimming never goes below the bound")
	g.Expect(n).To(BeNumerically("<=", MaxLen*3/2), "approximate trimming stays near the bound")

	// What is retained is the newest.
	got := fetchAll(t, b, s, "g", "c", 1000, int(n))
	g.Expect(got[len(got)-1].ID).To(Equal("m-4999"))
}

func testTrimBoundsLength(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	g.Expect(b.Trim(ctx, s, 10)).To(Succeed(), "trimming a missing stream is a no-op")
	g.Expect(b.Publish(ctx, s, messages("m", 0, 300)...)).To(Succeed())
	g.Expect(b.Trim(ctx, s, 10)).To(Succeed())
	g.Expect(b.Len(ctx, s)).To(BeEquivalentTo(10))
	got := fetchAll(t, b, s, "g", "c", 100, 10)
	g.Expect(ids(got)).To(Equal(ids(messages("m", 290, 10))))
	g.Expect(b.Trim(ctx, s, 0)).To(Succeed())
	g.Expect(b.Len(ctx, s)).To(BeZero())
}

func testBlockingFetchWakesOnPublish(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	// Create the group first, so the publish below is what the fetch waits for.
	got, err := b.Fetch(ctx, s, "g", "c", bus.FetchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())

	type result struct {
		msgs []bus.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := b.Fetch(ctx, s, "g", "c", bus.FetchOptions{Count: 10, Block: time.Minute})
		done <- result{msgs, err}
	}()
	g.Expect(b.Publish(ctx, s, messages("m", 0, 1)...)).To(Succeed())
	var r result
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&r))
	g.Expect(r.err).NotTo(HaveOccurred())
	if len(r.msgs) == 0 {
		// The fetch may have started after the publish and raced nothing; it
		// then returned the message at once. Either way one message arrives.
		r.msgs = fetchAll(t, b, s, "g", "c", 10, 1)
	}
	g.Expect(ids(r.msgs)).To(Equal([]string{"m-0000"}))
}

func testCancelEndsBlockingFetch(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	s := streamName(t, "in")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := b.Fetch(ctx, s, "g", "c", bus.FetchOptions{Block: time.Hour})
		done <- err
	}()
	waitBlocked()
	cancel()
	var err error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&err))
	g.Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "got %v", err)

	// The bus is still usable afterwards.
	g.Expect(b.Publish(t.Context(), s, messages("m", 0, 1)...)).To(Succeed())
	g.Expect(fetchAll(t, b, s, "g", "c", 1, 1)).To(HaveLen(1))
}

func testCloseEndsBlockingFetch(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	s := streamName(t, "in")
	done := make(chan error, 1)
	go func() {
		_, err := b.Fetch(t.Context(), s, "g", "c", bus.FetchOptions{Block: time.Hour})
		done <- err
	}()
	waitBlocked()
	g.Expect(b.Close()).To(Succeed())
	var err error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&err))
	g.Expect(errors.Is(err, bus.ErrClosed)).To(BeTrue(), "got %v", err)
	g.Expect(b.Publish(t.Context(), s, messages("m", 0, 1)...)).To(MatchError(bus.ErrClosed))
	g.Expect(b.Close()).To(Succeed(), "Close is idempotent")
}

// waitBlocked gives a fetch started on another goroutine the chance to block
// before the test ends it. The tests it serves pass whether or not the fetch got
// that far (one that starts late sees the cancelled context or closed bus at
// once), so the pause is about covering the blocked path, not about timing.
func waitBlocked() {
	time.Sleep(50 * time.Millisecond)
}

func testBatch1000(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	sent := messages("m", 0, 1000)
	g.Expect(b.Publish(ctx, s, sent...)).To(Succeed(), "one batch, one round trip")
	got, err := b.Fetch(ctx, s, "g", "c", bus.FetchOptions{Count: 1000, Block: time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ids(got)).To(Equal(ids(sent)), "one fetch returns the whole batch")
	g.Expect(b.Ack(ctx, s, "g", seqs(got)...)).To(Succeed())
	g.Expect(b.Pending(ctx, s, "g", 2000)).To(BeEmpty())

	// Smaller fetches split it without loss or overlap.
	g.Expect(b.Publish(ctx, s, messages("n", 0, 1000)...)).To(Succeed())
	var all []string
	for range 4 {
		got, err := b.Fetch(ctx, s, "g", "c", bus.FetchOptions{Count: 250})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(HaveLen(250))
		all = append(all, ids(got)...)
	}
	g.Expect(all).To(Equal(ids(messages("n", 0, 1000))))
}

func testAckIsIdempotent(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	g.Expect(b.Ack(ctx, s, "g", "1")).To(Succeed(), "acking on a missing stream is a no-op")
	g.Expect(b.Publish(ctx, s, messages("m", 0, 3)...)).To(Succeed())
	got := fetchAll(t, b, s, "g", "c", 10, 3)
	g.Expect(b.Ack(ctx, s, "g")).To(Succeed())
	g.Expect(b.Ack(ctx, s, "g", seqs(got)...)).To(Succeed())
	g.Expect(b.Ack(ctx, s, "g", seqs(got)...)).To(Succeed())
	g.Expect(b.Ack(ctx, s, "other-group", seqs(got)...)).To(Succeed())
	g.Expect(b.Ack(ctx, s, "g", "not a seq")).NotTo(Succeed())
	g.Expect(b.Pending(ctx, s, "g", 10)).To(BeEmpty())
}

func testConcurrentPublishersAndConsumers(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	const publishers, perPublisher = 4, 200 // within MaxLen: a backlog beyond it is trimmed unread
	const total = publishers * perPublisher

	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := 0; i < perPublisher; i += 50 {
				if err := b.Publish(ctx, s, messages(fmt.Sprintf("p%d", p), i, 50)...); err != nil {
					t.Errorf("failed to publish: %v", err)
					return
				}
			}
		})
	}
	consumeCtx, stop := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	for c := range 3 {
		consumers.Go(func() {
			for consumeCtx.Err() == nil {
				msgs, err := b.Fetch(consumeCtx, s, "g", fmt.Sprintf("c%d", c), bus.FetchOptions{Count: 64, Block: time.Second})
				if err != nil {
					if consumeCtx.Err() == nil {
						t.Errorf("failed to fetch: %v", err)
					}
					return
				}
				mu.Lock()
				for _, m := range msgs {
					got[m.ID]++
				}
				mu.Unlock()
				if err := b.Ack(ctx, s, "g", seqs(msgs)...); err != nil {
					t.Errorf("failed to ack: %v", err)
				}
			}
		})
	}
	wg.Wait()
	g.Eventually(func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}).WithTimeout(30 * time.Second).Should(Equal(total))
	stop()
	consumers.Wait()
	for id, n := range got {
		g.Expect(n).To(Equal(1), "delivered twice: %s", id)
	}
	g.Expect(b.Pending(ctx, s, "g", 10)).To(BeEmpty())
}

// testConsumerLoopReclaimsAndProcessesOnce runs the Consumer loop on a stream
// where a dead consumer left messages pending (some already persisted) and new
// ones keep arriving.
func testConsumerLoopReclaimsAndProcessesOnce(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	ctx, s := t.Context(), streamName(t, "in")
	g.Expect(b.Publish(ctx, s, messages("m", 0, 30)...)).To(Succeed())
	dead := fetchAll(t, b, s, "g", "dead", 30, 30)

	var mu sync.Mutex
	persisted := map[string]int{}
	for _, m := range dead[:10] {
		persisted[m.ID] = 1 // the dead consumer persisted these, then crashed
	}
	handler := func(_ context.Context, msgs []bus.Message) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if _, ok := persisted[m.ID]; ok {
				continue // the store's idempotent append
			}
			persisted[m.ID]++
		}
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	c := bus.NewConsumer(b, s, "g", "alive", handler, bus.ConsumerOptions{
		Batch: 8, Block: 50 * time.Millisecond, ClaimMinIdle: claimIdle, ClaimInterval: claimIdle,
		Dedup: bus.NewDedup(100, time.Minute, nil),
	})
	done := make(chan error, 1)
	go func() { done <- c.Start(runCtx) }()

	g.Expect(b.Publish(ctx, s, messages("m", 30, 30)...)).To(Succeed())
	g.Expect(b.Publish(ctx, s, messages("m", 55, 5)...)).To(Succeed()) // a publisher retry
	want := ids(messages("m", 0, 60))
	g.Eventually(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(persisted))
	}).WithTimeout(30 * time.Second).Should(Equal(want))
	g.Eventually(func() ([]bus.PendingEntry, error) { return b.Pending(ctx, s, "g", 100) }).
		WithTimeout(30 * time.Second).Should(BeEmpty())
	stop()
	var err error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&err))
	g.Expect(err).NotTo(HaveOccurred())
	for id, n := range persisted {
		g.Expect(n).To(Equal(1), "processed twice: %s", id)
	}
}

func testConsumerLoopEndsOnCancel(t *testing.T, b bus.Bus) {
	g := NewWithT(t)
	s := streamName(t, "in")
	ctx, cancel := context.WithCancel(t.Context())
	c := bus.NewConsumer(b, s, "g", "c", func(context.Context, []bus.Message) error { return nil },
		bus.ConsumerOptions{Block: time.Hour, ClaimMinIdle: -1})
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	waitBlocked()
	cancel()
	var err error
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&err))
	g.Expect(err).NotTo(HaveOccurred(), "a cancelled consumer ends cleanly")
}
