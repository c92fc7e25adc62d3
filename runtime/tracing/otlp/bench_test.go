package otlp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tracing/otlp"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
	"github.com/picobot/picobot/test/timing"
)

// cpuTime is the CPU time (user + system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	d, err := timing.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkTurnTracing runs whole turns (a tool call, then the answer)
// through the gateway's WebSocket and the embedded runtime with tracing off
// and with every turn sampled and exported over OTLP/gRPC to a receiver in
// a child process (its CPU is not the turns'), reporting p50/p99 of a turn
// and the process's CPU time per turn (the fake model runs in the process
// too).
func BenchmarkTurnTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("traces=%t", on), func(b *testing.B) {
			opts := embeddedtest.Options{}
			flush := func() {}
			if on {
				endpoint := receiverProcess(b)
				tp, err := otlp.NewProvider(context.Background(), otlp.Config{Endpoint: endpoint, Protocol: otlp.ProtocolGRPC,
					Getenv: func(string) string { return "" }})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				var provider trace.TracerProvider = tp
				opts.TracerProvider = provider
				// The spans still queued are exported within the
				// measurement: their cost is the turns'.
				flush = func() { _ = tp.ForceFlush(context.Background()) }
			}
			env := embeddedtest.Start(b, opts)
			env.LLM.SetRequestLimit(1)
			env.LLM.Respond(func(r fakellm.Recorded) fakellm.Turn {
				if last := r.Messages[len(r.Messages)-1]; len(last.ToolResults) > 0 {
					return fakellm.Turn{Text: "The answer is 42."}
				}
				return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}}
			})
			c, err := client.New(env.URL, client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			conn, err := c.Dial(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			var took []time.Duration
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				reply, err := conn.Ask(ctx, client.Send{Agent: "assistant", ChatID: fmt.Sprintf("b%d", i), Text: "6*7?"}, nil)
				if err != nil || reply.Text != "The answer is 42." {
					b.Fatalf("turn failed: %v %+v", err, reply)
				}
				took = append(took, time.Since(start))
			}
			flush()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(len(took)), "cpu-us/turn")
			b.ReportMetric(float64(timing.Percentile(took, 0.50).Microseconds()), "us-turn-p50")
			b.ReportMetric(float64(timing.Percentile(took, 0.99).Microseconds()), "us-turn-p99")
		})
	}
}

// receiverEnv makes this test binary the OTLP receiver of
// BenchmarkTurnTracing (TestReceiverProcess).
const receiverEnv = "PICOBOT_TEST_OTLP_RECEIVER"

// receiverProcess starts this test binary as an OTLP receiver in a child
// process, stopped when b ends, and returns its gRPC endpoint.
func receiverProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReceiverProcess$")
	cmd.Env = append(os.Environ(), receiverEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "http://") {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return line
		}
	}
	b.Fatalf("the receiver process did not start: %v", sc.Err())
	return ""
}

// TestReceiverProcess is the child process of receiverProcess: a real OTLP
// receiver serving until its standard input closes. Run as a test of the
// package, it checks that the receiver starts and stops.
func TestReceiverProcess(t *testing.T) {
	r, stop, err := tracingtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if os.Getenv(receiverEnv) == "" {
		if !strings.HasPrefix(r.GRPCEndpoint, "http://127.0.0.1:") || !strings.HasPrefix(r.HTTPEndpoint, "http://127.0.0.1:") {
			t.Fatalf("receiver endpoints %q, %q are not loopback URLs", r.GRPCEndpoint, r.HTTPEndpoint)
		}
		return
	}
	fmt.Println(r.GRPCEndpoint)
	_, _ = io.Copy(io.Discard, os.Stdin)
}
