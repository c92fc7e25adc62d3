package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/provider/fakellm"
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

// BenchmarkTurn runs whole turns (a tool call, then the answer) through the
// gateway's WebSocket and the embedded runtime, with PicoBot's metrics off
// and on, reporting p50/p99 of a turn and the process's CPU time per turn
// (the fake model runs in the process too).
func BenchmarkTurn(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%t", on), func(b *testing.B) {
			opts := embeddedtest.Options{}
			if on {
				opts.Registry = prometheus.NewRegistry()
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
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(len(took)), "cpu-us/turn")
			b.ReportMetric(float64(timing.Percentile(took, 0.50).Microseconds()), "us-turn-p50")
			b.ReportMetric(float64(timing.Percentile(took, 0.99).Microseconds()), "us-turn-p99")
		})
	}
}

// instant answers at once with a fixed usage.
type instant struct{}

func (instant) Complete(_ context.Context, _ llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	if onDelta != nil {
		onDelta(llm.Delta{Text: "ok"})
	}
	return &llm.Response{Usage: llm.Usage{InputTokens: 100, OutputTokens: 10}}, nil
}

// BenchmarkRecordTurn is what the metrics add to the turn of
// BenchmarkTurn alone: a turn with two streamed model calls and one tool
// call, recorded on a registry.
func BenchmarkRecordTurn(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := m.Model("default", "assistant", "openai/fake", false, instant{})
	tools := m.Tools("default", "assistant")
	deltas := func(llm.Delta) {}
	b.ReportAllocs()
	for b.Loop() {
		ctx, turn := m.StartTurn(context.Background(), "default", "assistant")
		turn.QueuedAt(time.Now())
		_, _ = p.Complete(ctx, llm.Request{}, deltas)
		tools.ToolStarted(ctx, "calculator")(false)
		_, _ = p.Complete(ctx, llm.Request{}, deltas)
		turn.End(metrics.OutcomeOK)
	}
}
