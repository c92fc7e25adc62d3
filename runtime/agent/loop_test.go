package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	os.Exit(0)
}

// protocols runs a test against both wire protocols through the official SDKs.
var protocols = []string{provider.OpenAI, provider.Anthropic}

func newProvider(t testing.TB, s *fakellm.Server, proto string) llm.Provider {
	t.Helper()
	base := s.URL()
	if proto == provider.Anthropic {
		base = s.AnthropicURL()
	}
	p, err := provider.New(provider.Config{Provider: proto, Model: "test-model", BaseURL: base, APIKey: "sk-test"})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return p
}

type echoArgs struct {
	Text string `json:"text" jsonschema:"Text to echo"`
}

func echoTool() tool.Tool {
	return tool.New("echo", "Echo the text back.", func(_ context.Context, _ tool.Env, a echoArgs) (tool.Result, error) {
		return tool.Text("echo: " + a.Text), nil
	}, tool.ReadOnly())
}

type recorder struct {
	mu     sync.Mutex
	events []turn.Event
}

func (r *recorder) sink(e turn.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []turn.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []turn.EventKind
	for _, e := range r.events {
		if e.Kind != turn.EventDelta {
			ks = append(ks, e.Kind)
		}
	}
	return ks
}

func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		if e.Kind == turn.EventDelta {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func registry(t *testing.T, tools ...tool.Tool) *tool.Registry {
	t.Helper()
	r, err := tool.NewRegistry(tools...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return r
}

func TestLoopToolCallThenFinal(t *testing.T) {
	for _, proto := range protocols {
		for _, stream := range []bool{false, true} {
			t.Run(proto+map[bool]string{true: "/stream", false: "/plain"}[stream], func(t *testing.T) {
				g := NewWithT(t)
				s := fakellm.New()
				defer s.Close()
				s.Script(
					fakellm.Turn{Text: "Let me echo that.", ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"hi"}`}}},
					fakellm.Turn{Text: "The tool said: echo: hi"},
				)
				rec := &recorder{}
				l := &Loop{Provider: newProvider(t, s, proto), Tools: registry(t, echoTool())}
				out, err := l.Run(context.Background(), Input{
					System: "You are helpful.", History: []llm.Message{user("echo hi")}, Stream: stream, Sink: rec.sink,
				})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out.StopReason).To(Equal(StopFinal))
				g.Expect(out.Final).To(Equal("The tool said: echo: hi"))
				g.Expect(out.Steps).To(Equal(2))
				g.Expect(out.New).To(HaveLen(3)) // assistant call, tool result, final
				g.Expect(out.New[1].Content).To(Equal("echo: hi"))
				g.Expect(out.Usage.InputTokens).To(BeNumerically(">", 0))
				g.Expect(rec.kinds()).To(Equal([]turn.EventKind{turn.EventUsage, turn.EventToolCall, turn.EventToolResult, turn.EventUsage, turn.EventFinal}))
				if stream {
					g.Expect(rec.text()).To(Equal("Let me echo that.The tool said: echo: hi"))
				} else {
					g.Expect(rec.text()).To(BeEmpty())
				}

				reqs := s.Requests()
				g.Expect(reqs).To(HaveLen(2))
				g.Expect(reqs[0].Protocol).To(Equal(proto))
				g.Expect(reqs[0].System).To(HavePrefix("You are helpful.\n\n## Tools\n- echo: Echo the text back"))
				g.Expect(reqs[0].Tools).To(Equal([]string{"echo"}))
				g.Expect(reqs[0].Stream).To(Equal(stream))
				// The second request carries the call and its result.
				var results []fakellm.ToolResult
				for _, m := range reqs[1].Messages {
					results = append(results, m.ToolResults...)
				}
				g.Expect(results).To(HaveLen(1))
				g.Expect(results[0].Content).To(Equal("echo: hi"))
				g.Expect(results[0].CallID).To(Equal(out.New[0].ToolCalls[0].ID))
			})
		}
	}
}

func TestLoopBadModelOutputBecomesToolErrors(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(
				fakellm.Turn{ToolCalls: []fakellm.Call{
					{Name: "echo", Args: `{"text": "unterminated`},
					{Name: "no_such_tool", Args: `{}`},
					{Name: "echo", Args: `{"txt":"typo"}`},
				}},
				fakellm.Turn{Text: "Sorry, fixed."},
			)
			l := &Loop{Provider: newProvider(t, s, proto), Tools: registry(t, echoTool())}
			out, err := l.Run(context.Background(), Input{History: []llm.Message{user("go")}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Final).To(Equal("Sorry, fixed."))
			tools := out.New[1:4]
			for _, m := range tools {
				g.Expect(m.IsError).To(BeTrue(), m.Content)
			}
			g.Expect(tools[0].Content).To(ContainSubstring("arguments are not valid JSON"))
			g.Expect(tools[1].Content).To(ContainSubstring(`unknown tool "no_such_tool"`))
			g.Expect(tools[2].Content).To(ContainSubstring("invalid arguments for echo"))
			var results []fakellm.ToolResult
			for _, m := range s.Requests()[1].Messages {
				results = append(results, m.ToolResults...)
			}
			g.Expect(results).To(HaveLen(3))
			if proto == provider.Anthropic {
				g.Expect(results[0].IsError).To(BeTrue())
			}
		})
	}
}

// rendezvous succeeds only if n calls are inside it at the same time.
func rendezvous(n int32, inside *atomic.Int32, peak *atomic.Int32, readOnly bool) tool.Tool {
	opts := []tool.Option{}
	if readOnly {
		opts = append(opts, tool.ReadOnly())
	}
	return tool.New("meet", "Wait for the others.", func(ctx context.Context, _ tool.Env, _ struct{}) (tool.Result, error) {
		now := inside.Add(1)
		defer inside.Add(-1)
		for {
			if p := peak.Load(); now > p && !peak.CompareAndSwap(p, now) {
				continue
			}
			break
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // hang guard only
		defer cancel()
		for inside.Load() < n && peak.Load() < n {
			select {
			case <-ctx.Done():
				return tool.Text("alone"), nil
			case <-time.After(time.Millisecond):
			}
		}
		return tool.Text("met"), nil
	}, opts...)
}

func TestLoopConcurrencyFollowsTraits(t *testing.T) {
	for _, readOnly := range []bool{true, false} {
		t.Run(map[bool]string{true: "read-only batch runs together", false: "side-effect batch runs in order"}[readOnly], func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "meet"}, {Name: "meet"}, {Name: "meet"}}}, fakellm.Turn{Text: "done"})
			var inside, peak atomic.Int32
			l := &Loop{Provider: newProvider(t, s, provider.OpenAI), Tools: registry(t, rendezvous(3, &inside, &peak, readOnly))}
			out, err := l.Run(context.Background(), Input{History: []llm.Message{user("meet")}})
			g.Expect(err).NotTo(HaveOccurred())
			if readOnly {
				g.Expect(peak.Load()).To(Equal(int32(3)))
				for _, m := range out.New[1:4] {
					g.Expect(m.Content).To(Equal("met"))
				}
			} else {
				g.Expect(peak.Load()).To(Equal(int32(1)))
			}
		})
	}
}

func TestLoopContextOverflowCompressesAndRetriesOnce(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(fakellm.Turn{ContextOverflow: true}, fakellm.Turn{Text: "fits now"})
			var history []llm.Message
			for i := range 6 {
				id := "c" + string(rune('0'+i))
				history = append(history, user("step"), call(id, "echo"), result(id, strings.Repeat("output ", 1000)), assistant("ok"))
			}
			history = append(history, user("and now?"))
			rec := &recorder{}
			l := &Loop{Provider: newProvider(t, s, proto), Tools: registry(t, echoTool()), Compressor: &Compressor{}}
			out, err := l.Run(context.Background(), Input{History: history, Sink: rec.sink})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Final).To(Equal("fits now"))
			g.Expect(out.Compressed).To(BeTrue())
			g.Expect(rec.kinds()).To(ContainElement(turn.EventCompressed))
			reqs := s.Requests()
			g.Expect(reqs).To(HaveLen(2))
			g.Expect(len(reqs[1].Body)).To(BeNumerically("<", len(reqs[0].Body)/2))

			// A second overflow in the same turn is an error, not a loop.
			s.Script(fakellm.Turn{ContextOverflow: true}, fakellm.Turn{ContextOverflow: true})
			_, err = l.Run(context.Background(), Input{History: history})
			g.Expect(errors.Is(err, llm.ErrContextOverflow)).To(BeTrue(), "%v", err)
		})
	}
}

func TestLoopRetriesATruncatedStreamOnce(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(fakellm.Turn{Text: "I was going to say", Truncate: true}, fakellm.Turn{Text: "complete answer"})
			l := &Loop{Provider: newProvider(t, s, proto)}
			out, err := l.Run(context.Background(), Input{History: []llm.Message{user("q")}, Stream: true})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Final).To(Equal("complete answer"))
			g.Expect(s.Requests()).To(HaveLen(2))
		})
	}
}

func TestLoopStepLimit(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"again"}`}}}
	})
	l := &Loop{Provider: newProvider(t, s, provider.OpenAI), Tools: registry(t, echoTool()), MaxSteps: 3}
	out, err := l.Run(context.Background(), Input{History: []llm.Message{user("loop forever")}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.StopReason).To(Equal(StopStepLimit))
	g.Expect(out.Final).To(ContainSubstring("stopped after 3 steps"))
	g.Expect(s.Requests()).To(HaveLen(3))
	validChain(g, out.History)
}

func TestLoopStopCancelsCleanly(t *testing.T) {
	t.Run("during a slow stream", func(t *testing.T) {
		for _, proto := range protocols {
			t.Run(proto, func(t *testing.T) {
				g := NewWithT(t)
				s := fakellm.New()
				defer s.Close()
				s.Script(fakellm.Turn{Text: strings.Repeat("word ", 200), ChunkDelay: 20 * time.Millisecond})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var once sync.Once
				rec := &recorder{}
				l := &Loop{Provider: newProvider(t, s, proto)}
				out, err := l.Run(ctx, Input{History: []llm.Message{user("talk")}, Stream: true,
					Sink: func(e turn.Event) {
						rec.sink(e)
						if e.Kind == turn.EventDelta {
							once.Do(cancel) // the user sends /stop after the first words
						}
					}})
				g.Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "%v", err)
				g.Expect(out.StopReason).To(Equal(StopCancelled))
				g.Expect(out.Partial).To(HavePrefix("word"))
				g.Expect(out.Partial).To(Equal(rec.text()), "the partial text is what was streamed")
				g.Expect(out.New).To(BeEmpty(), "the cut answer is not a message of the turn")
				validChain(g, out.History)
			})
		}
	})
	t.Run("during a tool", func(t *testing.T) {
		g := NewWithT(t)
		s := fakellm.New()
		defer s.Close()
		s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "wait"}, {Name: "echo", Args: `{"text":"x"}`}}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wait := tool.New("wait", "Wait until stopped.", func(ctx context.Context, _ tool.Env, _ struct{}) (tool.Result, error) {
			cancel()
			<-ctx.Done()
			return tool.Result{}, ctx.Err()
		})
		l := &Loop{Provider: newProvider(t, s, provider.OpenAI), Tools: registry(t, wait, echoTool())}
		out, err := l.Run(ctx, Input{History: []llm.Message{user("wait")}})
		g.Expect(errors.Is(err, context.Canceled)).To(BeTrue())
		g.Expect(out.StopReason).To(Equal(StopCancelled))
		g.Expect(out.New).To(HaveLen(3))
		g.Expect(out.New[1].Content).To(Equal("error: wait was cancelled: context canceled"))
		g.Expect(out.New[2].Content).To(Equal("error: echo was not run: the turn was cancelled"))
		g.Expect(out.Partial).To(BeEmpty(), "no model call was cut")
		validChain(g, out.History)
	})
}

func TestCompressionSummariesGoToTimeline(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(fakellm.Turn{Text: "User asked for logs; assistant read 3 files and found the crash in main.go."})
			var summaries []string
			// Trimming off, so the summary round is what brings the history down.
			c := &Compressor{Window: 1000, ToolTrimChars: 1 << 20, Summarizer: newProvider(t, s, proto), MaxRounds: 1,
				OnSummary: func(_ context.Context, s string) error { summaries = append(summaries, s); return nil }}
			var history []llm.Message
			history = append(history, user("find the crash"))
			for i := range 3 {
				id := "r" + string(rune('0'+i))
				history = append(history, call(id, "file_read"), result(id, strings.Repeat("log line ", 150)))
			}
			history = append(history, assistant("found it"), user("fix it"))
			out, st, err := c.Compress(context.Background(), "", history, nil, false)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.SummaryRounds).To(Equal(1))
			g.Expect(summaries).To(Equal([]string{"User asked for logs; assistant read 3 files and found the crash in main.go."}))
			g.Expect(out).To(HaveLen(3))
			g.Expect(out[1].Content).To(Equal(summaryPrefix + summaries[0]))
			var sent strings.Builder
			for _, m := range s.Requests()[0].Messages {
				sent.WriteString(m.Content)
			}
			g.Expect(sent.String()).To(ContainSubstring("[assistant called file_read"))
			validChain(g, out)
		})
	}
}

// TestLoopSteerJoinsTheBatchBoundary: what Steer returns at the end of a
// tool batch joins the batch's last result — after it is checkpointed with
// it, commit runs — and the model reads it in its next call; a batch with
// nothing to steer is left as it was.
func TestLoopSteerJoinsTheBatchBoundary(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(
				fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"a"}`}, {Name: "echo", Args: `{"text":"b"}`}}},
				fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"c"}`}}},
				fakellm.Turn{Text: "done"},
			)
			var asked, committed int
			var checkpointed []string
			l := &Loop{Provider: newProvider(t, s, proto), Tools: registry(t, echoTool())}
			out, err := l.Run(context.Background(), Input{History: []llm.Message{user("go")},
				Checkpoint: func(_ context.Context, m llm.Message) error {
					checkpointed = append(checkpointed, m.Content)
					return nil
				},
				Steer: func(context.Context) (string, func(context.Context) error) {
					if asked++; asked > 1 {
						return "", nil
					}
					return "[steer] stop at b", func(context.Context) error {
						committed++
						g.Expect(checkpointed).To(ContainElement("echo: b\n\n[steer] stop at b"), "stored before it is committed")
						return nil
					}
				}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Final).To(Equal("done"))
			g.Expect(asked).To(Equal(2), "once per batch")
			g.Expect(committed).To(Equal(1))
			g.Expect(out.New[1].Content).To(Equal("echo: a"), "only the batch's last result carries it")
			g.Expect(out.New[2].Content).To(Equal("echo: b\n\n[steer] stop at b"))
			g.Expect(out.New[4].Content).To(Equal("echo: c"))
			var results []string
			for _, m := range s.Requests()[1].Messages {
				for _, r := range m.ToolResults {
					results = append(results, r.Content)
				}
				if m.Role == "tool" {
					results = append(results, m.Content)
				}
			}
			g.Expect(results).To(ContainElement("echo: b\n\n[steer] stop at b"), "the model read it")
		})
	}
}
