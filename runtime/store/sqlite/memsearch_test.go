package sqlite

import (
	"testing"

	"github.com/picobot/picobot/runtime/store/storetest"
)

func BenchmarkRecall100k(b *testing.B) {
	st, _ := openTemp(b)
	storetest.BenchmarkRecallAt(b, st, 100_000, nil)
}

// BenchmarkRecall1M needs PICOBOT_BENCH_1M=1.
func BenchmarkRecall1M(b *testing.B) {
	storetest.RequireLargeBenchmarks(b)
	st, _ := openTemp(b)
	storetest.BenchmarkRecallAt(b, st, 1_000_000, nil)
}

func BenchmarkRecallQuality(b *testing.B) {
	st, _ := openTemp(b)
	storetest.BenchmarkRecallQuality(b, st)
}
