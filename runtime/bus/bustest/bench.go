package bustest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/bus"
)

// Throughput measures publish -> fetch -> ack through b in batches, with a
// publisher and a consumer on their own goroutines and a realistic message (an
// ID, a small payload and a traceparent header), and reports msgs/s. The
// publisher stays at most window batches ahead, as a gateway does behind its
// clients, so publishing and consuming overlap and no backlog is trimmed
// unread. One implementation of the loop serves every Bus's benchmark.
func Throughput(tb *testing.B, b bus.Bus, stream string, batch, window int) {
	ctx := context.Background()
	payload := []byte(`{"text":"hello, how are you today?"}`)
	headers := map[string]string{bus.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	msgs := make([]bus.Message, batch)
	for i := range msgs {
		msgs[i] = bus.Message{ID: "id-" + strconv.Itoa(i), Payload: payload, Headers: headers}
	}
	// Create the group before timing.
	if _, err := b.Fetch(ctx, stream, "g", "c", bus.FetchOptions{}); err != nil {
		tb.Fatal(err)
	}
	ahead := make(chan struct{}, window)

	tb.ReportAllocs()
	tb.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		for sent := 0; sent < tb.N; sent += batch {
			ahead <- struct{}{}
			if err := b.Publish(ctx, stream, msgs[:min(batch, tb.N-sent)]...); err != nil {
				tb.Error(err)
				return
			}
		}
	})
	seqs := make([]string, 0, batch)
	for got := 0; got < tb.N; {
		out, err := b.Fetch(ctx, stream, "g", "c", bus.FetchOptions{Count: batch, Block: 10 * time.Second})
		if err != nil || len(out) == 0 {
			tb.Fatalf("fetch: %d messages, err %v", len(out), err)
		}
		seqs = seqs[:0]
		for i := range out {
			seqs = append(seqs, out[i].Seq)
		}
		if err := b.Ack(ctx, stream, "g", seqs...); err != nil {
			tb.Fatal(err)
		}
		for range (got+len(out))/batch - got/batch {
			<-ahead // a whole published batch is through
		}
		got += len(out)
	}
	wg.Wait()
	tb.StopTimer()
	tb.ReportMetric(float64(tb.N)/time.Since(start).Seconds(), "msgs/s")
}
