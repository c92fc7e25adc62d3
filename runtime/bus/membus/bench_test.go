package membus_test

import (
	"strconv"
	"testing"

	"github.com/picobot/picobot/runtime/bus/bustest"
	"github.com/picobot/picobot/runtime/bus/membus"
)

// BenchmarkMemBus measures publish -> fetch -> ack throughput in batches.
// Target: >= 1,000,000 msgs/s.
func BenchmarkMemBus(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			mb := membus.New(membus.Options{})
			defer func() { _ = mb.Close() }()
			bustest.Throughput(b, mb, "bench", batch, 16)
		})
	}
}
