package busbacklog

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// TestReaderCountsWhatRedisHolds reads a real Redis's streams for the
// namespaces a real API server has Agents in: a wake stream with entries
// pending and unread for the pods' group, a chat stream no runtime reads
// yet, a chat stream read and acknowledged, and a tenant without Agents
// (not reported).
func TestReaderCountsWhatRedisHolds(t *testing.T) {
	g := NewWithT(t)
	env, kube, skip, err := controlplane.Connect()
	g.Expect(err).NotTo(HaveOccurred())
	if skip != "" {
		t.Skip(skip)
	}
	defer func() { _ = env.Stop() }()
	b, err := redisbus.Open(services.RedisFor(t), redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = b.Close() }()
	ctx := context.Background()

	for _, ns := range []string{"team-a", "team-c"} {
		g.Expect(kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		g.Expect(kube.Create(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: ns}})).To(Succeed())
	}
	publish := func(stream string, n int) {
		for i := range n {
			g.Expect(b.Publish(ctx, stream, bus.Message{ID: fmt.Sprintf("%s-%d", stream, i), Payload: []byte("{}")})).To(Succeed())
		}
	}
	// Three wakes: two taken by a pod, one of them acknowledged.
	wakes := wake.Stream("team-a", "helper")
	publish(wakes, 3)
	got, err := b.Fetch(ctx, wakes, wake.GroupPods, "pod-1", bus.FetchOptions{Count: 2})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(2))
	g.Expect(b.Ack(ctx, wakes, wake.GroupPods, got[1].Seq)).To(Succeed())
	// Alice's chat waits for a runtime; Bob's was read and acknowledged.
	publish(protocol.ChatStream("team-a", "helper", "web", "alice"), 2)
	bob := protocol.ChatStream("team-a", "helper", "web", "bob")
	publish(bob, 1)
	got, err = b.Fetch(ctx, bob, protocol.ChatGroup, "pod-2", bus.FetchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Ack(ctx, bob, protocol.ChatGroup, got[0].Seq)).To(Succeed())
	// A tenant without Agents is not read.
	publish(protocol.ChatStream("team-b", "helper", "web", "carol"), 4)

	reg := prometheus.NewRegistry()
	r, err := New(kube, b.Client(), reg)
	g.Expect(err).NotTo(HaveOccurred())
	clk := clocktesting.NewFakeClock(time.Now().Add(time.Hour))
	r.Clock = clk
	g.Expect(r.Update(ctx)).To(Succeed())

	entries := func(ns, stream, group, state string) float64 {
		return testutil.ToFloat64(r.entries.WithLabelValues(ns, stream, group, state))
	}
	g.Expect(entries("team-a", StreamWake, wake.GroupPods, StatePending)).To(Equal(1.0))
	g.Expect(entries("team-a", StreamWake, wake.GroupPods, StateUnread)).To(Equal(1.0))
	g.Expect(entries("team-a", StreamChat, noGroup, StateUnread)).To(Equal(2.0), "Alice's messages wait for a runtime")
	g.Expect(entries("team-a", StreamChat, protocol.ChatGroup, StatePending)).To(Equal(0.0))
	g.Expect(entries("team-a", StreamChat, protocol.ChatGroup, StateUnread)).To(Equal(0.0))
	g.Expect(testutil.ToFloat64(r.streams.WithLabelValues("team-a", StreamChat))).To(Equal(2.0))
	g.Expect(testutil.ToFloat64(r.streams.WithLabelValues("team-a", StreamOutbound))).To(Equal(0.0), "none written")
	g.Expect(testutil.ToFloat64(r.streams.WithLabelValues("team-c", StreamWake))).To(Equal(0.0))
	// The pending wake was given its id an hour before the reader's clock.
	g.Expect(testutil.ToFloat64(r.oldest.WithLabelValues("team-a", StreamWake))).To(BeNumerically("~", 3600, 60))
	g.Expect(testutil.ToFloat64(r.oldest.WithLabelValues("team-a", StreamChat))).To(Equal(0.0))
	for _, name := range []string{"picobot_bus_stream_entries", "picobot_bus_streams", "picobot_bus_stream_oldest_pending_seconds"} {
		g.Expect(testutil.CollectAndCount(reg, name) > 0).To(BeTrue(), name)
	}
	n, err := testutil.GatherAndCount(reg, "picobot_bus_streams")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(6), "three kinds for team-a and team-c; team-b has no Agent")

	// A cap on the chat streams read per pass.
	r.MaxChatStreams = 1
	g.Expect(r.Update(ctx)).To(Succeed())
	g.Expect(testutil.ToFloat64(r.streams.WithLabelValues("team-a", StreamChat))).To(Equal(1.0))

	// The wake acknowledged and the other read: nothing waits. team-c's
	// Agent deleted: its series go.
	got, err = b.Fetch(ctx, wakes, wake.GroupPods, "pod-1", bus.FetchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	pending, err := b.Pending(ctx, wakes, wake.GroupPods, 10)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range pending {
		g.Expect(b.Ack(ctx, wakes, wake.GroupPods, p.Seq)).To(Succeed())
	}
	g.Expect(kube.Delete(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "team-c"}})).To(Succeed())
	r.MaxChatStreams = 0
	g.Expect(r.Update(ctx)).To(Succeed())
	g.Expect(entries("team-a", StreamWake, wake.GroupPods, StatePending)).To(Equal(0.0))
	g.Expect(entries("team-a", StreamWake, wake.GroupPods, StateUnread)).To(Equal(0.0))
	g.Expect(testutil.ToFloat64(r.oldest.WithLabelValues("team-a", StreamWake))).To(Equal(0.0))
	n, err = testutil.GatherAndCount(reg, "picobot_bus_streams")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(3), "team-c's series went with its last Agent")
}

// BenchmarkUpdate measures one pass over a tenant with many chats: 1000
// chat streams (each read by a runtime, one entry pending on every tenth),
// reported per pass and per stream.
func BenchmarkUpdate(b *testing.B) {
	env, kube, skip, err := controlplane.Connect()
	if err != nil {
		b.Fatal(err)
	}
	if skip != "" {
		b.Skip(skip)
	}
	defer func() { _ = env.Stop() }()
	bb, err := redisbus.Open(services.RedisFor(b), redisbus.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bb.Close() }()
	ctx := context.Background()
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	if err := kube.Create(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "bench"}}); err != nil {
		b.Fatal(err)
	}
	const chats = 1000
	for i := range chats {
		s := protocol.ChatStream("bench", "helper", "web", fmt.Sprintf("chat-%d", i))
		if err := bb.Publish(ctx, s, bus.Message{ID: fmt.Sprint(i), Payload: []byte("{}")}); err != nil {
			b.Fatal(err)
		}
		got, err := bb.Fetch(ctx, s, protocol.ChatGroup, "pod", bus.FetchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if i%10 != 0 {
			if err := bb.Ack(ctx, s, protocol.ChatGroup, got[0].Seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	r, err := New(kube, bb.Client(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := r.Update(ctx); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	if got := testutil.ToFloat64(r.entries.WithLabelValues("bench", StreamChat, protocol.ChatGroup, StatePending)); got != chats/10 {
		b.Fatalf("pending = %v, want %d", got, chats/10)
	}
	p50, p99 := percentile(durations, 0.50), percentile(durations, 0.99)
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs/pass")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs/pass")
	b.ReportMetric(float64(p50.Microseconds())/chats, "p50-µs/stream")
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}
