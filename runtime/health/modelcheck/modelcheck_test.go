package modelcheck_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "sk-health-SECRET-77"

// The check tells "no model configured" from "configured but unreachable"
// (refused connection, refused key) from a model that answers, on both
// protocols, and never shows a secret of the endpoint.
func TestCheck(t *testing.T) {
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.SetAPIKey(key)
	refused := "http://" + services.ClosedAddr(t) + "/v1"
	p := modelcheck.NewProber()
	ctx := context.Background()
	tests := []struct {
		name   string
		ep     *provider.Config
		ok     bool
		prefix string
		has    []string
	}{
		{name: "no model", ep: nil, prefix: "no model configured: spec.model is not set"},
		{name: "openai answers", ep: &provider.Config{Provider: "openai", Model: "gpt-x", BaseURL: s.URL(), APIKey: key}, ok: true,
			prefix: "openai/gpt-x at " + s.URL() + " answers"},
		{name: "anthropic answers", ep: &provider.Config{Provider: "anthropic", Model: "claude-x", BaseURL: s.AnthropicURL(), APIKey: key}, ok: true,
			prefix: "anthropic/claude-x at " + s.AnthropicURL() + " answers"},
		{name: "refused connection", ep: &provider.Config{Provider: "openai", Model: "gpt-x", BaseURL: refused, APIKey: key},
			prefix: "model configured but unreachable: openai/gpt-x at " + refused + ": ", has: []string{"connection refused"}},
		{name: "DNS failure", ep: &provider.Config{Provider: "openai", Model: "gpt-x", BaseURL: "http://picobot-health.invalid/v1", APIKey: key},
			prefix: "model configured but unreachable: openai/gpt-x at http://picobot-health.invalid/v1: ", has: []string{"lookup picobot-health.invalid"}},
		{name: "refused key", ep: &provider.Config{Provider: "anthropic", Model: "claude-x", BaseURL: s.AnthropicURL(), APIKey: "sk-wrong"},
			prefix: "model configured but unreachable: anthropic/claude-x at " + s.AnthropicURL() + ": ", has: []string{"401", "invalid x-api-key"}},
		{name: "secrets in the URL are redacted", ep: &provider.Config{Provider: "openai", Model: "gpt-x",
			BaseURL: "http://user:hunter2@" + strings.TrimPrefix(refused, "http://") + "?token=hunter3", APIKey: key},
			prefix: "model configured but unreachable: openai/gpt-x at http://REDACTED@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := p.Check(ctx, "agent a", tt.ep, "spec.model is not set")
			g.Expect(c.Name).To(Equal("agent a"))
			g.Expect(c.OK).To(Equal(tt.ok), c.Message)
			g.Expect(c.Message).To(HavePrefix(tt.prefix))
			for _, h := range tt.has {
				g.Expect(c.Message).To(ContainSubstring(h))
			}
			for _, secret := range []string{key, "hunter2", "hunter3"} {
				g.Expect(c.Message).NotTo(ContainSubstring(secret))
			}
			if !tt.ok {
				g.Expect(c.Fix).NotTo(BeEmpty())
			}
		})
	}
}

// A probe's outcome is reused for the TTL, so a busy health page does not
// hammer the provider; a stale one is probed again, per endpoint and key.
func TestProbeIsCached(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.SetAPIKey(key)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := &modelcheck.Prober{Clock: clk, TTL: time.Minute}
	ep := &provider.Config{Provider: "openai", Model: "gpt-x", BaseURL: s.URL(), APIKey: key}
	ctx := context.Background()
	for range 5 {
		g.Expect(p.Check(ctx, "agent a", ep, "").OK).To(BeTrue())
	}
	g.Expect(s.ModelListings()).To(Equal(1))

	wrong := *ep
	wrong.APIKey = "sk-wrong"
	g.Expect(p.Check(ctx, "agent a", &wrong, "").OK).To(BeFalse(), "another key is another endpoint")
	g.Expect(s.ModelListings()).To(Equal(2))

	clk.SetTime(clk.Now().Add(59 * time.Second))
	g.Expect(p.Check(ctx, "agent a", ep, "").OK).To(BeTrue())
	g.Expect(s.ModelListings()).To(Equal(2), "still fresh")

	s.SetAPIKey("sk-rotated")
	clk.SetTime(clk.Now().Add(2 * time.Second))
	c := p.Check(ctx, "agent a", ep, "")
	g.Expect(c.OK).To(BeFalse(), "stale: probed again, and the endpoint now refuses the key")
	g.Expect(c.Message).To(ContainSubstring("401"))
	g.Expect(s.ModelListings()).To(Equal(3))
}
