package embedded

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// BenchmarkServeBashTurn is the latency of a turn of `picobot serve` in
// which the model runs `echo hi` with bash once (the fake model's two
// answers, the gateway, the tool), with the real binary's launcher: cold
// starts every program through its own launcher (--warm-sandboxes 0), warm
// from the session's warm sandbox, and warm-first each turn in a new
// session, whose first program starts its warm sandbox. The differences
// are what the sandbox's start costs with this binary. Reports p50/p99.
func BenchmarkServeBashTurn(b *testing.B) {
	llm := fakellm.New()
	defer llm.Close()
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if n := len(r.Messages); n > 0 && len(r.Messages[n-1].ToolResults) > 0 {
			return fakellm.Turn{Text: "done"}
		}
		return fakellm.Turn{ToolCalls: []fakellm.Call{call("bash", map[string]any{"command": "echo hi"})}}
	})
	for _, name := range []string{"cold", "warm", "warm-first"} {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			state, err := os.MkdirTemp("/var/tmp", "picobot-bench-warm-")
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = os.RemoveAll(state) }()
			writeAgent(b, dir, llm.URL(), codingTools)
			args := []string{"--addr", "127.0.0.1:0", "--state", state}
			if name == "cold" {
				args = append(args, "--warm-sandboxes", "0")
			}
			p := serveArgs(b, dir, args, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
			if _, err := say(b, p.url, "chat", "warm-up", "go"); err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			i := 0
			for b.Loop() {
				i++
				chat := "chat"
				if name == "warm-first" {
					chat = fmt.Sprintf("chat%d", i)
				}
				start := time.Now()
				if out, err := say(b, p.url, chat, fmt.Sprintf("m%d", i), "go"); err != nil || out != "done" {
					b.Fatalf("turn %d: %q, %v", i, out, err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
