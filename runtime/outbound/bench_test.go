package outbound

import (
	"context"
	"fmt"
	"testing"

	"github.com/picobot/picobot/runtime/store"
)

// BenchmarkDeliver is one delivery end to end: resolve the target session,
// record the delivery and the message, POST to a local generic webhook
// receiver over HTTP, record the result; the ops cycle through 16 chats.
func BenchmarkDeliver(b *testing.B) {
	eachStoreB(b, func(b *testing.B, st store.Store, ctx context.Context) {
		w := newWorld(ctx, b, st)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			res, err := w.d.Deliver(ctx, Message{Agent: agentName, Target: fmt.Sprintf("tickets:T-%d", i%16), Text: "status update"})
			if err != nil || res.Status != store.DeliveryDelivered {
				b.Fatalf("delivery %d: %v %v", i, res.Status, err)
			}
		}
	})
}
