package provider_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// testKey is a recognisable fake secret, asserted absent from every error.
const testKey = "sk-test-SECRET-4f9a"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// protocols are the wire protocols every conformance case runs against.
func protocols() []string { return []string{provider.OpenAI, provider.Anthropic} }

// newProvider builds a real SDK-backed provider pointed at the fake.
func newProvider(t *testing.T, s *fakellm.Server, proto string) llm.Provider {
	t.Helper()
	url := s.URL()
	if proto == provider.Anthropic {
		url = s.AnthropicURL()
	}
	p, err := provider.New(provider.Config{Provider: proto, Model: "model-" + proto, BaseURL: url, APIKey: testKey})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return p
}

// newServer starts a fake closed at the end of the test.
func newServer(t *testing.T) *fakellm.Server {
	t.Helper()
	s := fakellm.New()
	t.Cleanup(s.Close)
	return s
}

func userRequest(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

// call runs one completion, streaming when stream is set, and returns the
// deltas seen.
func call(ctx context.Context, p llm.Provider, req llm.Request, stream bool) (*llm.Response, []string, error) {
	var deltas []string
	var onDelta func(llm.Delta)
	if stream {
		onDelta = func(d llm.Delta) { deltas = append(deltas, d.Text) }
	}
	resp, err := p.Complete(ctx, req, onDelta)
	return resp, deltas, err
}

// sleeper is an injected RetryPolicy.Sleep recording the waits asked for.
type sleeper struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
	return ctx.Err()
}

func (s *sleeper) Waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// noKeyLeak asserts the API key appears nowhere in err's text.
func noKeyLeak(g Gomega, err error) {
	g.Expect(err.Error()).NotTo(ContainSubstring(testKey))
	g.Expect(strings.Contains(err.Error(), "SECRET")).To(BeFalse())
}

// streamModes names both call modes for table subtests.
func streamModes() []bool { return []bool{false, true} }

func modeName(stream bool) string {
	if stream {
		return "stream"
	}
	return "sync"
}

// guard fails the test if done is not closed in a generous time; it only
// catches hangs and asserts no duration.
func guard(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("call did not return after cancellation")
	}
}
