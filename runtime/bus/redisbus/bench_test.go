package redisbus_test

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/bustest"
	"github.com/picobot/picobot/runtime/bus/redisbus"
)

// BenchmarkRedisBus measures publish -> fetch -> ack throughput through Redis
// with batching and pipelining (target: >= 50,000 msgs/s), and beside it the
// raw XADD rate of the same server measured by redis-benchmark, unpipelined and
// at pipeline depth 32, as the ceiling to compare with.
func BenchmarkRedisBus(b *testing.B) {
	url := needRedis(b)
	b.Run("bus/batch=500", func(b *testing.B) { benchmarkBus(b, url, 500) })
	for _, depth := range []int{1, 32} {
		b.Run("redis-benchmark-xadd/P="+strconv.Itoa(depth), func(b *testing.B) { benchmarkRawXAdd(b, url, depth) })
	}
}

func benchmarkBus(b *testing.B, url string, batch int) {
	rb, err := redisbus.Open(url, redisbus.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rb.Close() }()
	stream := bus.Key("bench", bus.NewID()[:8], "in")
	defer rb.Client().Del(context.Background(), stream)
	bustest.Throughput(b, rb, stream, batch, 8)
}

var requestsPerSecond = regexp.MustCompile(`([0-9.]+) requests per second`)

// benchmarkRawXAdd runs `redis-benchmark -n 200000 -P depth XADD key * f v`
// against the server and reports its rate.
func benchmarkRawXAdd(b *testing.B, url string, depth int) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark is not installed: no raw XADD baseline")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	if opt.TLSConfig != nil {
		b.Skip("redis-benchmark baseline skipped for a TLS server")
	}
	host, port, _ := strings.Cut(opt.Addr, ":")
	key := bus.Key("bench", bus.NewID()[:8], "raw")
	client := redis.NewClient(opt)
	defer func() { _ = client.Close() }()
	defer client.Del(context.Background(), key)

	var rate float64
	for range b.N {
		args := []string{"-h", host, "-p", port, "-n", "200000", "-P", strconv.Itoa(depth), "-q"}
		if opt.Password != "" {
			args = append(args, "-a", opt.Password)
		}
		args = append(args, "XADD", key, "*", "f", "v")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			b.Fatalf("redis-benchmark failed: %v: %s", err, out)
		}
		m := requestsPerSecond.FindAllSubmatch(out, -1)
		if len(m) == 0 {
			b.Fatal(errors.New("redis-benchmark printed no rate: " + string(out)))
		}
		if rate, err = strconv.ParseFloat(string(m[len(m)-1][1]), 64); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(rate, "msgs/s")
}
