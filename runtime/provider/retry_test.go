package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestRetry(t *testing.T) {
	tests := []struct {
		name   string
		script []fakellm.Turn
		stream bool
		// wantRequests is how many requests must reach the server.
		wantRequests int
		// wantWaits are the sleeps Retry must ask for (jitter fixed at 0.5).
		wantWaits []time.Duration
		check     func(g Gomega, resp *llm.Response, err error)
	}{
		{
			name:         "429 with Retry-After then success",
			script:       []fakellm.Turn{{Status: 429, RetryAfter: "2"}, {Text: "ok"}},
			wantRequests: 2,
			wantWaits:    []time.Duration{2 * time.Second},
			check:        answered("ok"),
		},
		{
			name:         "Retry-After is capped at a minute",
			script:       []fakellm.Turn{{Status: 503, RetryAfter: "3600"}, {Text: "ok"}},
			wantRequests: 2,
			wantWaits:    []time.Duration{time.Minute},
			check:        answered("ok"),
		},
		{
			name:         "500 retried with backoff then success",
			script:       []fakellm.Turn{{Status: 500}, {Status: 500}, {Text: "ok"}},
			stream:       true,
			wantRequests: 3,
			// Equal jitter at 0.5: 3/4 of 500ms, then of 1s.
			wantWaits: []time.Duration{375 * time.Millisecond, 750 * time.Millisecond},
			check:     answered("ok"),
		},
		{
			name:         "attempts exhausted",
			script:       []fakellm.Turn{{Status: 503}, {Status: 503}, {Status: 503}, {Text: "never reached"}},
			wantRequests: 3,
			wantWaits:    []time.Duration{375 * time.Millisecond, 750 * time.Millisecond},
			check: func(g Gomega, resp *llm.Response, err error) {
				g.Expect(err).To(MatchError(ContainSubstring("after 3 attempts")))
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.StatusCode).To(Equal(503))
			},
		},
		{
			name:         "400 not retried",
			script:       []fakellm.Turn{{Status: 400, ErrorBody: "bad tool schema"}, {Text: "never reached"}},
			wantRequests: 1,
			check:        statusIs(400),
		},
		{
			name:         "404 not retried",
			script:       []fakellm.Turn{{Status: 404}, {Text: "never reached"}},
			wantRequests: 1,
			check:        statusIs(404),
		},
		{
			name:         "context overflow not retried",
			script:       []fakellm.Turn{{ContextOverflow: true}, {Text: "never reached"}},
			wantRequests: 1,
			check: func(g Gomega, _ *llm.Response, err error) {
				g.Expect(err).To(MatchError(llm.ErrContextOverflow))
			},
		},
		{
			name:         "dropped connection before any delta is retried",
			script:       []fakellm.Turn{{ToolCalls: []fakellm.Call{{Name: "search", Args: `{"query":"a long enough query"}`}}, Drop: true}, {Text: "ok"}},
			stream:       true,
			wantRequests: 2,
			wantWaits:    []time.Duration{375 * time.Millisecond},
			check:        answered("ok"),
		},
		{
			name:         "no retry after deltas were emitted",
			script:       []fakellm.Turn{{Text: "The user already saw this beginning", Drop: true}, {Text: "never reached"}},
			stream:       true,
			wantRequests: 1,
			check: func(g Gomega, _ *llm.Response, err error) {
				g.Expect(err).To(HaveOccurred())
				g.Expect(provider.IsTransient(err)).To(BeTrue(), "the error itself was retryable: %v", err)
			},
		},
		{
			name:         "truncated stream is not a network error",
			script:       []fakellm.Turn{{ToolCalls: []fakellm.Call{{Name: "search", Args: `{"query":"x"}`}}, Truncate: true}, {Text: "never reached"}},
			stream:       true,
			wantRequests: 1,
			check: func(g Gomega, _ *llm.Response, err error) {
				g.Expect(err).To(MatchError(llm.ErrTruncated))
			},
		},
	}
	for _, proto := range protocols() {
		for _, tt := range tests {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				g := NewWithT(t)
				s := newServer(t)
				s.Script(tt.script...)
				sl := &sleeper{}
				p := provider.Retry(newProvider(t, s, proto), provider.RetryPolicy{Sleep: sl.Sleep, Rand: func() float64 { return 0.5 }})

				resp, _, err := call(context.Background(), p, userRequest("hi"), tt.stream)
				tt.check(g, resp, err)
				if err != nil {
					noKeyLeak(g, err)
				}
				g.Expect(s.Requests()).To(HaveLen(tt.wantRequests))
				g.Expect(sl.Waits()).To(Equal(tt.wantWaits))
			})
		}
	}
}

func TestRetryStopsWaitingOnCancel(t *testing.T) {
	g := NewWithT(t)
	s := newServer(t)
	s.Script(fakellm.Turn{Status: 429, RetryAfter: "30"}, fakellm.Turn{Text: "never reached"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The real timer-based sleep: a 30 s wait that cancellation must cut.
	p := provider.Retry(newProvider(t, s, provider.OpenAI), provider.RetryPolicy{})

	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		_, err = p.Complete(ctx, userRequest("hi"), nil)
	}()
	g.Eventually(func() int { return len(s.Requests()) }).Should(Equal(1))
	cancel()
	guard(t, done)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(err.Error()).To(ContainSubstring("429"), "the last error is named")
	g.Expect(s.Requests()).To(HaveLen(1))
}

func TestRetryPolicyDelay(t *testing.T) {
	status := func(code int, after time.Duration) error {
		return &llm.StatusError{Provider: "openai", StatusCode: code, RetryAfter: after}
	}
	tests := []struct {
		name    string
		policy  provider.RetryPolicy
		attempt int
		err     error
		want    time.Duration
	}{
		{name: "first retry, no jitter", policy: provider.RetryPolicy{Rand: func() float64 { return 0 }}, attempt: 1, err: status(500, 0), want: 250 * time.Millisecond},
		{name: "first retry, jitter", policy: provider.RetryPolicy{Rand: func() float64 { return 0.75 }}, attempt: 1, err: status(500, 0), want: 437500 * time.Microsecond},
		{name: "doubles", policy: provider.RetryPolicy{Rand: func() float64 { return 0 }}, attempt: 3, err: status(500, 0), want: time.Second},
		{name: "capped at 30s", policy: provider.RetryPolicy{Rand: func() float64 { return 0 }}, attempt: 10, err: status(500, 0), want: 15 * time.Second},
		{name: "huge attempt does not overflow", policy: provider.RetryPolicy{Rand: func() float64 { return 0 }}, attempt: 200, err: status(500, 0), want: 15 * time.Second},
		{name: "Retry-After wins", policy: provider.RetryPolicy{}, attempt: 1, err: status(429, 4*time.Second), want: 4 * time.Second},
		{name: "Retry-After capped", policy: provider.RetryPolicy{}, attempt: 1, err: status(429, time.Hour), want: time.Minute},
		{name: "custom base and cap", policy: provider.RetryPolicy{BaseDelay: time.Second, MaxDelay: 2 * time.Second, Rand: func() float64 { return 0 }}, attempt: 5, err: io.EOF, want: time.Second},
		{name: "network error uses backoff", policy: provider.RetryPolicy{Rand: func() float64 { return 0 }}, attempt: 2, err: io.ErrUnexpectedEOF, want: 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(tt.policy.Delay(tt.attempt, tt.err)).To(Equal(tt.want))
		})
	}
}

func TestIsTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "429", err: &llm.StatusError{StatusCode: 429}, want: true},
		{name: "529", err: &llm.StatusError{StatusCode: 529}, want: true},
		{name: "wrapped 503", err: fmt.Errorf("x: %w", &llm.StatusError{StatusCode: 503}), want: true},
		{name: "400", err: &llm.StatusError{StatusCode: 400}, want: false},
		{name: "401", err: &llm.StatusError{StatusCode: 401}, want: false},
		{name: "overflow", err: fmt.Errorf("%w: %w", llm.ErrContextOverflow, &llm.StatusError{StatusCode: 400}), want: false},
		{name: "canceled", err: fmt.Errorf("x: %w", context.Canceled), want: false},
		{name: "attempt timeout", err: fmt.Errorf("x: %w", context.DeadlineExceeded), want: true},
		{name: "truncated", err: fmt.Errorf("x: %w", llm.ErrTruncated), want: false},
		{name: "unexpected EOF", err: &url.Error{Op: "Post", URL: "http://x", Err: io.ErrUnexpectedEOF}, want: true},
		{name: "connection refused", err: &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, want: true},
		{name: "connection reset", err: fmt.Errorf("read: %w", syscall.ECONNRESET), want: true},
		{name: "plain error", err: errors.New("failed to decode response"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(provider.IsTransient(tt.err)).To(Equal(tt.want))
		})
	}
}

func TestRetryConnectionRefused(t *testing.T) {
	g := NewWithT(t)
	// A port nothing listens on: every attempt fails to dial.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())

	inner, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: "http://" + addr + "/v1", APIKey: testKey})
	g.Expect(err).NotTo(HaveOccurred())
	sl := &sleeper{}
	_, err = provider.Retry(inner, provider.RetryPolicy{Sleep: sl.Sleep}).Complete(context.Background(), userRequest("hi"), nil)
	g.Expect(err).To(MatchError(ContainSubstring("after 3 attempts")))
	g.Expect(provider.IsTransient(err)).To(BeTrue())
	g.Expect(sl.Waits()).To(HaveLen(2))
	noKeyLeak(g, err)
}

func answered(text string) func(g Gomega, resp *llm.Response, err error) {
	return func(g Gomega, resp *llm.Response, err error) {
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Message.Content).To(Equal(text))
	}
}

func statusIs(code int) func(g Gomega, resp *llm.Response, err error) {
	return func(g Gomega, _ *llm.Response, err error) {
		var se *llm.StatusError
		g.Expect(errors.As(err, &se)).To(BeTrue(), "want a StatusError, got %v", err)
		g.Expect(se.StatusCode).To(Equal(code))
	}
}
