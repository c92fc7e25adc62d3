package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
	"github.com/picobot/picobot/runtime/turn"
	"github.com/picobot/picobot/test/timing"
)

// timedProvider measures the time spent inside the provider (SDK + HTTP round
// trip), so the loop's own overhead is the rest of the turn.
type timedProvider struct {
	llm.Provider
	spent time.Duration
}

func (p *timedProvider) Complete(ctx context.Context, req llm.Request, d func(llm.Delta)) (*llm.Response, error) {
	start := time.Now()
	r, err := p.Provider.Complete(ctx, req, d)
	p.spent += time.Since(start)
	return r, err
}

// BenchmarkTurn runs turns of one tool call + final answer against a fake model
// that answers instantly, reporting p50/p99 of the whole turn and of the loop's
// own time (the turn minus the time inside the provider's HTTP calls).
func BenchmarkTurn(b *testing.B) {
	for _, proto := range protocols {
		b.Run(proto, func(b *testing.B) {
			s := fakellm.New()
			defer s.Close()
			s.Respond(func(r fakellm.Recorded) fakellm.Turn {
				if len(r.Messages) > 0 && len(r.Messages[len(r.Messages)-1].ToolResults) > 0 {
					return fakellm.Turn{Text: "The answer is 42."}
				}
				return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"42"}`}}}
			})
			tp := &timedProvider{Provider: newProvider(b, s, proto)}
			reg, err := tool.NewRegistry(echoTool())
			if err != nil {
				b.Fatal(err)
			}
			l := &Loop{Provider: tp, Tools: reg}
			in := Input{System: "You are helpful.", History: []llm.Message{user("what is 6*7?")}, Sink: func(turn.Event) {}}
			benchTurns(b, l, in, tp, "The answer is 42.")
		})
	}
}

// benchTurns runs the benchmark's turns of l on in, each ending with the
// answer want, and reports p50/p99 of the whole turn and of the loop's own
// time (the turn minus tp's time in the provider).
func benchTurns(b *testing.B, l *Loop, in Input, tp *timedProvider, want string) {
	var total, own []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tp.spent = 0
		start := time.Now()
		out, err := l.Run(context.Background(), in)
		d := time.Since(start)
		if err != nil || out.Final != want {
			b.Fatalf("turn failed: %v %q", err, out.Final)
		}
		total = append(total, d)
		own = append(own, d-tp.spent)
	}
	b.ReportMetric(float64(timing.Percentile(total, 0.50).Microseconds()), "us-turn-p50")
	b.ReportMetric(float64(timing.Percentile(total, 0.99).Microseconds()), "us-turn-p99")
	b.ReportMetric(float64(timing.Percentile(own, 0.50).Microseconds()), "us-loop-p50")
	b.ReportMetric(float64(timing.Percentile(own, 0.99).Microseconds()), "us-loop-p99")
}

// BenchmarkCompressFastTrim measures the cheap stage on a long history.
func BenchmarkCompressFastTrim(b *testing.B) {
	var history []llm.Message
	for i := range 200 {
		id := fmt.Sprint(i)
		history = append(history, user("question "+id), call(id, "file_read"), result(id, string(make([]byte, 4000))), assistant("answer "+id))
	}
	c := &Compressor{Window: 64000}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Compress(context.Background(), "", history, nil, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImageTurn runs turns where the model reads a 104 KB PNG with
// file_read and answers, on a model that accepts images: p50/p99 of the
// turn and of the loop's own time, and the bytes of the follow-up request
// that carries the image.
func BenchmarkImageTurn(b *testing.B) {
	pic := testPNG(b, 320, 240)
	for _, proto := range protocols {
		b.Run(proto, func(b *testing.B) {
			ws := b.TempDir()
			if err := os.WriteFile(filepath.Join(ws, "shot.png"), pic, 0o600); err != nil {
				b.Fatal(err)
			}
			s := fakellm.New()
			defer s.Close()
			s.SetRequestLimit(2)
			s.Respond(func(r fakellm.Recorded) fakellm.Turn {
				for _, m := range r.Messages {
					if len(m.ToolResults) > 0 {
						return fakellm.Turn{Text: "Stripes."}
					}
				}
				return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "file_read", Args: `{"path":"shot.png"}`}}}
			})
			tp := &timedProvider{Provider: newProvider(b, s, proto)}
			reg, err := tool.NewRegistry(fs.NewFileRead())
			if err != nil {
				b.Fatal(err)
			}
			l := &Loop{Provider: tp, Tools: reg, Images: Images{Accept: true}}
			in := Input{System: "You are helpful.", History: []llm.Message{user("what is in shot.png?")}, Env: tool.Env{Workspace: ws}}
			benchTurns(b, l, in, tp, "Stripes.")
			reqs := s.Requests()
			b.ReportMetric(float64(len(reqs[len(reqs)-1].Body)), "bytes-request-with-image")
		})
	}
}
