package provider_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/services"
)

// Probe lists the endpoint's models through the official SDKs: it passes
// against a server that accepts the key, reports a refused key as the
// endpoint's 401 and a closed port as a connection error, on both
// protocols, and spends no scripted turn.
func TestProbe(t *testing.T) {
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.SetAPIKey(testKey)
	refused := services.ClosedAddr(t)
	for _, proto := range []struct{ name, url, refused string }{
		{provider.OpenAI, s.URL(), "http://" + refused + "/v1"},
		{provider.Anthropic, s.AnthropicURL(), "http://" + refused},
	} {
		t.Run(proto.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			before := s.ModelListings()
			g.Expect(provider.Probe(ctx, provider.Config{Provider: proto.name, Model: "m", BaseURL: proto.url, APIKey: testKey})).To(Succeed())
			g.Expect(s.ModelListings()).To(Equal(before + 1))

			err := provider.Probe(ctx, provider.Config{Provider: proto.name, Model: "m", BaseURL: proto.url, APIKey: "sk-wrong-0123456789"})
			var se *llm.StatusError
			g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
			g.Expect(se.StatusCode).To(Equal(401))
			g.Expect(err.Error()).NotTo(ContainSubstring("sk-wrong-0123456789"))

			err = provider.Probe(ctx, provider.Config{Provider: proto.name, Model: "m", BaseURL: proto.refused, APIKey: testKey})
			g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
			noKeyLeak(g, err)
		})
	}
	NewWithT(t).Expect(s.Requests()).To(BeEmpty(), "probes generate nothing")
}
