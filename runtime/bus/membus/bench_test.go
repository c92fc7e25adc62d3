package membus_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
)

// BenchmarkMemBus measures publish -> fetch -> ack throughput in batches, with a
// publisher and a consumer on their own goroutines and a realistic message (an
// ID, a small payload and a traceparent header). Target: >= 1,000,000 msgs/s.
func BenchmarkMemBus(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			benchmarkMemBus(b, batch)
		})
	}
}

func benchmarkMemBus(b *testing.B, batch int) {
	ctx := context.Background()
	mb := membus.New(membus.Options{})
	defer func() { _ = mb.Close() }()
	const stream = "bench"
	payload := []byte(`{"text":"hello, how are you today?"}`)
	headers := map[string]string{bus.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	msgs := make([]bus.Message, batch)
	for i := range msgs {
		msgs[i] = bus.Message{ID: "id-" + strconv.Itoa(i), Payload: payload, Headers: headers}
	}
	// Create the group before timing.
	if _, err := mb.Fetch(ctx, stream, "g", "c", bus.FetchOptions{}); err != nil {
		b.Fatal(err)
	}

	// The publisher stays at most a window of batches ahead, as a gateway
	// does behind its clients; a backlog beyond MaxLen would be trimmed unread.
	window := make(chan struct{}, 16)

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		for sent := 0; sent < b.N; sent += batch {
			window <- struct{}{}
			if err := mb.Publish(ctx, stream, msgs[:min(batch, b.N-sent)]...); err != nil {
				b.Error(err)
				return
			}
		}
	})
	seqs := make([]string, 0, batch)
	for got := 0; got < b.N; {
		out, err := mb.Fetch(ctx, stream, "g", "c", bus.FetchOptions{Count: batch, Block: 10 * time.Second})
		if err != nil || len(out) == 0 {
			b.Fatalf("fetch: %d messages, err %v", len(out), err)
		}
		seqs = seqs[:0]
		for i := range out {
			seqs = append(seqs, out[i].Seq)
		}
		if err := mb.Ack(ctx, stream, "g", seqs...); err != nil {
			b.Fatal(err)
		}
		for range (got+len(out))/batch - got/batch {
			<-window // a whole published batch is through
		}
		got += len(out)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
