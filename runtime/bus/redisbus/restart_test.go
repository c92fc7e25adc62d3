package redisbus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/test/services"
)

// TestSurvivesRedisRestart crashes Redis (SIGKILL) while a publisher and two
// consumers are mid-stream, starts it again on the same port and data (an
// append-only server, as in production), and checks that every message is
// eventually processed exactly once: publishes that failed are retried with
// the same IDs, consumers reconnect with backoff and reclaim what they had
// fetched but not acked, and the store's idempotent append (with Dedup in front
// of it) turns every redelivery into a no-op.
func TestSurvivesRedisRestart(t *testing.T) {
	needRedis(t)
	srv := services.OwnRedis(t, true)
	g := NewWithT(t)
	rb, err := redisbus.Open(srv.URL, redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = rb.Close() }()
	b := &failureCountingBus{Bus: rb}

	const total, batch, window = 3000, 25, 300
	stream := bus.Key("redisbus", "restart", "in")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// store stands for the session store: its append is idempotent by ID.
	var mu sync.Mutex
	store := map[string]int{}
	redelivered := 0
	processed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(store)
	}
	handler := func(_ context.Context, msgs []bus.Message) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if _, ok := store[m.ID]; ok {
				redelivered++
				continue
			}
			store[m.ID]++
		}
		time.Sleep(time.Millisecond) // a store round trip, so acks lag a little
		return nil
	}

	var wg sync.WaitGroup
	consumerErrs := make(chan error, 2)
	for _, name := range []string{"c1", "c2"} {
		c := bus.NewConsumer(b, stream, "session", name, handler, bus.ConsumerOptions{
			Batch: 50, Block: 200 * time.Millisecond,
			ClaimMinIdle: 300 * time.Millisecond, ClaimInterval: 100 * time.Millisecond,
			BackoffInitial: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond,
			Dedup: bus.NewDedup(10_000, time.Hour, nil),
		})
		wg.Go(func() { consumerErrs <- c.Start(ctx) })
	}

	// The publisher stays at most a window ahead of the consumers, so the crash
	// below lands with work in flight on both sides. A failed publish is
	// retried whole, with the same IDs.
	publishFailures := 0
	wg.Go(func() {
		for sent := 0; sent < total; sent += batch {
			for sent-processed() > window && ctx.Err() == nil {
				time.Sleep(2 * time.Millisecond)
			}
			msgs := make([]bus.Message, batch)
			for i := range msgs {
				id := fmt.Sprintf("m-%05d", sent+i)
				msgs[i] = bus.Message{ID: id, Payload: []byte(id)}
			}
			for ctx.Err() == nil {
				if err := b.Publish(ctx, stream, msgs...); err == nil {
					break
				}
				publishFailures++
				time.Sleep(20 * time.Millisecond)
			}
		}
	})

	g.Eventually(processed).WithTimeout(60 * time.Second).Should(BeNumerically(">=", total/3))
	g.Expect(srv.Kill()).To(Succeed())
	// An outage longer than go-redis rides out on its own (it waits up to its
	// 4s pool timeout for a connection), so calls fail and the recovery paths
	// run: publisher retries, consumer backoff, reclaiming.
	time.Sleep(6 * time.Second)
	g.Expect(srv.Restart()).To(Succeed())
	g.Eventually(func() (int64, error) { return rb.Len(ctx, stream) }).WithTimeout(30*time.Second).
		Should(BeNumerically(">=", total/3), "the append-only file kept the stream")

	g.Eventually(processed).WithTimeout(120*time.Second).Should(Equal(total), "nothing lost")
	g.Eventually(func() ([]bus.PendingEntry, error) { return b.Pending(ctx, stream, "session", 10) }).
		WithTimeout(60*time.Second).Should(BeEmpty(), "everything acked in the end")
	cancel()
	wg.Wait()
	close(consumerErrs)
	for err := range consumerErrs {
		g.Expect(err).NotTo(HaveOccurred(), "consumers end cleanly")
	}
	for id, n := range store {
		g.Expect(n).To(Equal(1), "processed twice: %s", id)
	}
	g.Expect(b.failures.Load()).To(BeNumerically(">", 0), "the crash hit operations in flight")
	t.Logf("failed bus calls: %d, publish retries: %d, redeliveries stopped by the store: %d",
		b.failures.Load(), publishFailures, redelivered)
}

// failureCountingBus counts the failed calls of the consumers, to show that the
// crash interrupted them rather than happening between their calls.
type failureCountingBus struct {
	bus.Bus
	failures atomic.Int64
}

func (f *failureCountingBus) count(err error) error {
	if err != nil && !errors.Is(err, context.Canceled) {
		f.failures.Add(1)
	}
	return err
}

func (f *failureCountingBus) Fetch(ctx context.Context, stream, group, consumer string, opts bus.FetchOptions) ([]bus.Message, error) {
	msgs, err := f.Bus.Fetch(ctx, stream, group, consumer, opts)
	return msgs, f.count(err)
}

func (f *failureCountingBus) Ack(ctx context.Context, stream, group string, seqs ...string) error {
	return f.count(f.Bus.Ack(ctx, stream, group, seqs...))
}

func (f *failureCountingBus) Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]bus.Message, error) {
	msgs, err := f.Bus.Claim(ctx, stream, group, consumer, minIdle, count)
	return msgs, f.count(err)
}
