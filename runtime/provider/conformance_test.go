package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// The conformance suite runs every case through the official SDKs against
// fakellm, for each protocol and both call modes.

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     provider.Config
		wantErr string
	}{
		{name: "openai", cfg: provider.Config{Provider: "openai", Model: "gpt-test"}},
		{name: "anthropic", cfg: provider.Config{Provider: "anthropic", Model: "claude-test", MaxTokens: 1000}},
		{name: "unknown provider", cfg: provider.Config{Provider: "gemini", Model: "m", APIKey: testKey}, wantErr: `unknown provider`},
		{name: "empty provider", cfg: provider.Config{Model: "m"}, wantErr: `unknown provider`},
		{name: "openai without model", cfg: provider.Config{Provider: "openai"}, wantErr: "model is required"},
		{name: "anthropic without model", cfg: provider.Config{Provider: "anthropic", APIKey: testKey}, wantErr: "model is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := provider.New(tt.cfg)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(p).To(BeNil())
				noKeyLeak(g, err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).NotTo(BeNil())
		})
	}
}

func TestConformanceAnswers(t *testing.T) {
	tests := []struct {
		name string
		turn fakellm.Turn
		want llm.Response // Model is checked separately
	}{
		{
			name: "text",
			turn: fakellm.Turn{Text: "Hello from the fake model, streamed in pieces.", Usage: &fakellm.Usage{InputTokens: 120, OutputTokens: 9, CachedInputTokens: 100}},
			want: llm.Response{
				Message:    llm.Message{Role: llm.RoleAssistant, Content: "Hello from the fake model, streamed in pieces."},
				Usage:      llm.Usage{InputTokens: 120, OutputTokens: 9, CachedInputTokens: 100},
				StopReason: llm.StopEnd,
			},
		},
		{
			name: "unicode text",
			turn: fakellm.Turn{Text: "Grüße 👋 — 你好世界，这是一个很长的句子没有空格", Usage: &fakellm.Usage{InputTokens: 5, OutputTokens: 5}},
			want: llm.Response{
				Message:    llm.Message{Role: llm.RoleAssistant, Content: "Grüße 👋 — 你好世界，这是一个很长的句子没有空格"},
				Usage:      llm.Usage{InputTokens: 5, OutputTokens: 5},
				StopReason: llm.StopEnd,
			},
		},
		{
			name: "single tool call",
			turn: fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_weather", Name: "get_weather", Args: `{"city":"Paris","unit":"celsius"}`}}, Usage: &fakellm.Usage{InputTokens: 50, OutputTokens: 20}},
			want: llm.Response{
				Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
					{ID: "call_weather", Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`},
				}},
				Usage:      llm.Usage{InputTokens: 50, OutputTokens: 20},
				StopReason: llm.StopToolCalls,
			},
		},
		{
			name: "parallel tool calls with text",
			turn: fakellm.Turn{
				Text: "Checking both.",
				ToolCalls: []fakellm.Call{
					{ID: "call_1", Name: "read_file", Args: `{"path":"/workspace/notes/a-rather-long-file-name.md"}`},
					{ID: "call_2", Name: "web_search", Args: `{"query":"kubernetes operator best practices","limit":5}`},
					{ID: "call_3", Name: "clock", Args: `{}`},
				},
				Usage: &fakellm.Usage{InputTokens: 10, OutputTokens: 30},
			},
			want: llm.Response{
				Message: llm.Message{Role: llm.RoleAssistant, Content: "Checking both.", ToolCalls: []llm.ToolCall{
					{ID: "call_1", Name: "read_file", Arguments: `{"path":"/workspace/notes/a-rather-long-file-name.md"}`},
					{ID: "call_2", Name: "web_search", Arguments: `{"query":"kubernetes operator best practices","limit":5}`},
					{ID: "call_3", Name: "clock", Arguments: `{}`},
				}},
				Usage:      llm.Usage{InputTokens: 10, OutputTokens: 30},
				StopReason: llm.StopToolCalls,
			},
		},
		{
			name: "malformed arguments pass through",
			// In a non-streamed Anthropic body the fake encodes the malformed
			// arguments as a JSON string, which the provider unwraps.
			turn: fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_bad", Name: "write_file", Args: `{"path": "/tmp/x", "content": "unterminated`}}, Usage: &fakellm.Usage{InputTokens: 1, OutputTokens: 1}},
			want: llm.Response{
				Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
					{ID: "call_bad", Name: "write_file", Arguments: `{"path": "/tmp/x", "content": "unterminated`},
				}},
				Usage:      llm.Usage{InputTokens: 1, OutputTokens: 1},
				StopReason: llm.StopToolCalls,
			},
		},
		{
			name: "output cap reached",
			turn: fakellm.Turn{Text: "This answer was cut", Length: true, Usage: &fakellm.Usage{InputTokens: 3, OutputTokens: 4}},
			want: llm.Response{
				Message:    llm.Message{Role: llm.RoleAssistant, Content: "This answer was cut"},
				Usage:      llm.Usage{InputTokens: 3, OutputTokens: 4},
				StopReason: llm.StopLength,
			},
		},
	}
	for _, proto := range protocols() {
		for _, stream := range streamModes() {
			for _, tt := range tests {
				t.Run(proto+"/"+modeName(stream)+"/"+tt.name, func(t *testing.T) {
					g := NewWithT(t)
					s := newServer(t)
					s.Script(tt.turn)

					resp, deltas, err := call(context.Background(), newProvider(t, s, proto), userRequest("hi"), stream)
					g.Expect(err).NotTo(HaveOccurred())

					want := tt.want
					want.Model = "model-" + proto
					g.Expect(*resp).To(Equal(want))
					if stream {
						g.Expect(strings.Join(deltas, "")).To(Equal(want.Message.Content))
						if strings.Count(want.Message.Content, " ") > 1 {
							g.Expect(len(deltas)).To(BeNumerically(">", 1), "text should arrive in several deltas")
						}
					}
					reqs := s.Requests()
					g.Expect(reqs).To(HaveLen(1))
					g.Expect(reqs[0].Protocol).To(Equal(proto))
					g.Expect(reqs[0].Stream).To(Equal(stream))
				})
			}
		}
	}
}

func TestConformanceGeneratedToolCallIDs(t *testing.T) {
	for _, proto := range protocols() {
		for _, stream := range streamModes() {
			t.Run(proto+"/"+modeName(stream), func(t *testing.T) {
				g := NewWithT(t)
				s := newServer(t)
				s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "a", Args: `{"x":1}`}, {Name: "b", Args: `{"y":2}`}}})

				resp, _, err := call(context.Background(), newProvider(t, s, proto), userRequest("hi"), stream)
				g.Expect(err).NotTo(HaveOccurred())
				calls := resp.Message.ToolCalls
				g.Expect(calls).To(HaveLen(2))
				g.Expect(calls[0].ID).NotTo(BeEmpty())
				g.Expect(calls[1].ID).NotTo(BeEmpty())
				g.Expect(calls[0].ID).NotTo(Equal(calls[1].ID))
				g.Expect([]string{calls[0].Name, calls[1].Name}).To(Equal([]string{"a", "b"}))
				g.Expect([]string{calls[0].Arguments, calls[1].Arguments}).To(Equal([]string{`{"x":1}`, `{"y":2}`}))
			})
		}
	}
}

func TestConformanceErrors(t *testing.T) {
	tests := []struct {
		name       string
		turn       fakellm.Turn
		streamOnly bool
		check      func(g Gomega, err error)
	}{
		{
			name: "context overflow",
			turn: fakellm.Turn{ContextOverflow: true},
			check: func(g Gomega, err error) {
				g.Expect(err).To(MatchError(llm.ErrContextOverflow))
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.StatusCode).To(Equal(400))
				g.Expect(se.Retryable()).To(BeFalse())
			},
		},
		{
			name:       "truncated stream",
			turn:       fakellm.Turn{Text: "This answer stops somewhere in the middle of it", Truncate: true},
			streamOnly: true,
			check: func(g Gomega, err error) {
				g.Expect(err).To(MatchError(llm.ErrTruncated))
				g.Expect(provider.IsTransient(err)).To(BeFalse())
			},
		},
		{
			name:       "dropped connection",
			turn:       fakellm.Turn{Text: "This answer stops somewhere in the middle of it", Drop: true},
			streamOnly: true,
			check: func(g Gomega, err error) {
				g.Expect(provider.IsTransient(err)).To(BeTrue(), "a cut connection is a network error: %v", err)
			},
		},
		{
			name: "rate limited with Retry-After",
			turn: fakellm.Turn{Status: 429, RetryAfter: "7", ErrorBody: "slow down"},
			check: func(g Gomega, err error) {
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.StatusCode).To(Equal(429))
				g.Expect(se.RetryAfter).To(Equal(7 * time.Second))
				g.Expect(se.Message).To(Equal("slow down"))
				g.Expect(se.Retryable()).To(BeTrue())
			},
		},
		{
			name: "retry-after-ms wins",
			turn: fakellm.Turn{Status: 503, RetryAfter: "7", Header: map[string]string{"retry-after-ms": "1500"}},
			check: func(g Gomega, err error) {
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.RetryAfter).To(Equal(1500 * time.Millisecond))
			},
		},
		{
			name: "unauthorized",
			turn: fakellm.Turn{Status: 401, ErrorBody: "invalid x-api-key"},
			check: func(g Gomega, err error) {
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.StatusCode).To(Equal(401))
				g.Expect(se.Retryable()).To(BeFalse())
			},
		},
		{
			name: "non-JSON gateway error",
			turn: fakellm.Turn{Status: 502, ErrorBody: "<html>502 Bad Gateway</html>"},
			check: func(g Gomega, err error) {
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.StatusCode).To(Equal(502))
				g.Expect(se.Retryable()).To(BeTrue())
			},
		},
	}
	for _, proto := range protocols() {
		for _, stream := range streamModes() {
			for _, tt := range tests {
				t.Run(proto+"/"+modeName(stream)+"/"+tt.name, func(t *testing.T) {
					if tt.streamOnly && !stream {
						t.Skip("streaming only")
					}
					g := NewWithT(t)
					s := newServer(t)
					s.Script(tt.turn)

					resp, _, err := call(context.Background(), newProvider(t, s, proto), userRequest("hi"), stream)
					g.Expect(resp).To(BeNil())
					g.Expect(err).To(HaveOccurred())
					tt.check(g, err)
					noKeyLeak(g, err)
				})
			}
		}
	}
}

func TestConformanceCancelMidStream(t *testing.T) {
	for _, proto := range protocols() {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := newServer(t)
			// A stream that would take hours: only cancellation can end it.
			s.Script(fakellm.Turn{Text: "one two three four five six", ChunkDelay: time.Hour})
			p := newProvider(t, s, proto)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				deltas []string
				err    error
			)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, err = p.Complete(ctx, userRequest("hi"), func(d llm.Delta) {
					deltas = append(deltas, d.Text)
					cancel()
				})
			}()
			guard(t, done)
			g.Expect(err).To(MatchError(context.Canceled))
			g.Expect(deltas).To(Equal([]string{"one "}))
		})
	}
}

func TestConformanceCancelWhileWaiting(t *testing.T) {
	for _, proto := range protocols() {
		for _, stream := range streamModes() {
			t.Run(proto+"/"+modeName(stream), func(t *testing.T) {
				g := NewWithT(t)
				s := newServer(t)
				// The server sits on the request: only cancellation can end it.
				s.Script(fakellm.Turn{Text: "late", Delay: time.Hour})
				p := newProvider(t, s, proto)

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var err error
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _, err = call(ctx, p, userRequest("hi"), stream)
				}()
				g.Eventually(func() int { return len(s.Requests()) }).Should(Equal(1))
				cancel()
				guard(t, done)
				g.Expect(err).To(MatchError(context.Canceled))
				g.Expect(provider.IsTransient(err)).To(BeFalse())
			})
		}
	}
}

func TestConformanceAttemptTimeout(t *testing.T) {
	for _, proto := range protocols() {
		for _, stream := range streamModes() {
			t.Run(proto+"/"+modeName(stream), func(t *testing.T) {
				g := NewWithT(t)
				s := newServer(t)
				turn := fakellm.Turn{Text: "late", Delay: time.Hour}
				if stream {
					turn = fakellm.Turn{Text: "starts but never ends", ChunkDelay: time.Hour}
				}
				s.Script(turn)
				url := s.URL()
				if proto == provider.Anthropic {
					url = s.AnthropicURL()
				}
				p, err := provider.New(provider.Config{Provider: proto, Model: "m", BaseURL: url, APIKey: testKey, Timeout: 50 * time.Millisecond})
				g.Expect(err).NotTo(HaveOccurred())

				_, _, err = call(context.Background(), p, userRequest("hi"), stream)
				g.Expect(err).To(MatchError(context.DeadlineExceeded))
				g.Expect(provider.IsTransient(err)).To(BeTrue(), "an attempt's timeout is worth a retry")
				noKeyLeak(g, err)
			})
		}
	}
}

func TestConformanceAnthropicOverloaded(t *testing.T) {
	g := NewWithT(t)
	s := newServer(t)
	s.Script(fakellm.Turn{Status: 529, RetryAfter: "3"})

	_, _, err := call(context.Background(), newProvider(t, s, provider.Anthropic), userRequest("hi"), true)
	var se *llm.StatusError
	g.Expect(errors.As(err, &se)).To(BeTrue())
	g.Expect(se.StatusCode).To(Equal(529))
	g.Expect(se.Retryable()).To(BeTrue())
	g.Expect(se.RetryAfter).To(Equal(3 * time.Second))
	g.Expect(se.Message).To(ContainSubstring("fakellm"))
}
