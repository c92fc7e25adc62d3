package provider_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestFallback(t *testing.T) {
	tests := []struct {
		name   string
		script []fakellm.Turn
		stream bool
		// wantModel is Response.Model on success; empty when an error is expected.
		wantModel string
		// wantProtocols are the protocols of the requests, in order.
		wantProtocols []string
		check         func(g Gomega, err error)
	}{
		{
			name: "moves to the second model on repeated 503",
			// The primary is retried 3 times (Retry inside the link), then
			// the secondary answers.
			script:        []fakellm.Turn{{Status: 503}, {Status: 503}, {Status: 503}, {Text: "from the backup"}},
			wantModel:     "anthropic/model-anthropic",
			wantProtocols: []string{"openai", "openai", "openai", "anthropic"},
		},
		{
			name:          "moves on for 401",
			script:        []fakellm.Turn{{Status: 401}, {Text: "from the backup"}},
			stream:        true,
			wantModel:     "anthropic/model-anthropic",
			wantProtocols: []string{"openai", "anthropic"},
		},
		{
			name:          "moves on after a truncation before any delta",
			script:        []fakellm.Turn{{ToolCalls: []fakellm.Call{{Name: "a", Args: `{"k":"some value"}`}}, Truncate: true}, {Text: "from the backup"}},
			stream:        true,
			wantModel:     "anthropic/model-anthropic",
			wantProtocols: []string{"openai", "anthropic"},
		},
		{
			name:          "primary answers",
			script:        []fakellm.Turn{{Text: "from the primary"}},
			wantModel:     "openai/model-openai",
			wantProtocols: []string{"openai"},
		},
		{
			name:          "does not move on for context overflow",
			script:        []fakellm.Turn{{ContextOverflow: true}, {Text: "never reached"}},
			wantProtocols: []string{"openai"},
			check: func(g Gomega, err error) {
				g.Expect(err).To(MatchError(llm.ErrContextOverflow))
				g.Expect(err.Error()).To(ContainSubstring(`"openai/model-openai"`))
			},
		},
		{
			name:          "does not move on for 400",
			script:        []fakellm.Turn{{Status: 400, ErrorBody: "messages: invalid role"}, {Text: "never reached"}},
			wantProtocols: []string{"openai"},
			check: func(g Gomega, err error) {
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
				g.Expect(se.StatusCode).To(Equal(400))
			},
		},
		{
			name:          "does not move on after deltas were shown",
			script:        []fakellm.Turn{{Text: "The user already saw this part", Truncate: true}, {Text: "never reached"}},
			stream:        true,
			wantProtocols: []string{"openai"},
			check: func(g Gomega, err error) {
				g.Expect(err).To(MatchError(llm.ErrTruncated))
			},
		},
		{
			name:          "a fully failed chain names every attempt",
			script:        []fakellm.Turn{{Status: 503}, {Status: 503}, {Status: 503}, {Status: 429, ErrorBody: "quota exhausted"}},
			wantProtocols: []string{"openai", "openai", "openai", "anthropic"},
			check: func(g Gomega, err error) {
				g.Expect(err).To(MatchError(ContainSubstring("any of 2 models")))
				g.Expect(err.Error()).To(SatisfyAll(
					ContainSubstring(`"openai/model-openai"`), ContainSubstring("503"),
					ContainSubstring(`"anthropic/model-anthropic"`), ContainSubstring("quota exhausted"),
				))
				var se *llm.StatusError
				g.Expect(errors.As(err, &se)).To(BeTrue())
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := newServer(t)
			s.Script(tt.script...)
			sl := &sleeper{}
			policy := provider.RetryPolicy{Sleep: sl.Sleep}
			chain := provider.Fallback(
				provider.Named{Name: "openai/model-openai", Provider: provider.Retry(newProvider(t, s, provider.OpenAI), policy)},
				provider.Named{Name: "anthropic/model-anthropic", Provider: newProvider(t, s, provider.Anthropic)},
			)

			resp, _, err := call(context.Background(), chain, userRequest("hi"), tt.stream)
			if tt.wantModel != "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(resp.Model).To(Equal(tt.wantModel))
			} else {
				g.Expect(err).To(HaveOccurred())
				tt.check(g, err)
				noKeyLeak(g, err)
			}
			var protos []string
			for _, r := range s.Requests() {
				protos = append(protos, r.Protocol)
			}
			g.Expect(protos).To(Equal(tt.wantProtocols))
		})
	}
}

func TestFallbackCancelled(t *testing.T) {
	g := NewWithT(t)
	s := newServer(t)
	s.Script(fakellm.Turn{Status: 503}, fakellm.Turn{Text: "never reached"})
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelled between links: the first fails, then the caller gives up.
	first := provider.Named{Name: "a", Provider: cancelAfter{newProvider(t, s, provider.OpenAI), cancel}}
	second := provider.Named{Name: "b", Provider: newProvider(t, s, provider.Anthropic)}

	_, err := provider.Fallback(first, second).Complete(ctx, userRequest("hi"), nil)
	g.Expect(err).To(MatchError(context.Canceled))
	var se *llm.StatusError
	g.Expect(errors.As(err, &se)).To(BeTrue(), "the link's failure is kept")
	g.Expect(s.Requests()).To(HaveLen(1))
}

func TestFallbackEmpty(t *testing.T) {
	_, err := provider.Fallback().Complete(context.Background(), userRequest("hi"), nil)
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("empty fallback chain")))
}

// cancelAfter cancels the caller's context once its call returns.
type cancelAfter struct {
	llm.Provider
	cancel context.CancelFunc
}

func (c cancelAfter) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	defer c.cancel()
	return c.Provider.Complete(ctx, req, onDelta)
}
