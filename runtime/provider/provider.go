// Package provider builds llm.Providers from configuration and wraps them with
// the policies every model call needs: Retry (backoff that honours the
// server's Retry-After and never repeats text the user already saw) and
// Fallback (an ordered chain of models). The wire protocols live in the
// openai and anthropic subpackages; fakellm fakes both for tests.
package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/anthropic"
	"github.com/picobot/picobot/runtime/provider/openai"
)

// Provider names accepted by Config.Provider.
const (
	OpenAI    = openai.Name
	Anthropic = anthropic.Name
)

// Config selects and configures one model endpoint, as it comes from the
// Agent/ModelConfig resources.
type Config struct {
	// Provider is the wire protocol: "openai" (also any OpenAI-compatible
	// server) or "anthropic".
	Provider string
	Model    string
	// BaseURL overrides the provider's public endpoint (OpenAI: with /v1).
	BaseURL string
	// APIKey is never logged nor included in errors.
	APIKey string
	// Timeout bounds one request attempt; the provider default when zero.
	Timeout time.Duration
	// MaxTokens is the default output cap; the provider default when zero.
	MaxTokens int
}

// New builds the provider cfg names, without retry or fallback wrapping so
// callers compose those explicitly.
func New(cfg Config) (llm.Provider, error) {
	var (
		p   llm.Provider
		err error
	)
	switch cfg.Provider {
	case OpenAI:
		p, err = openai.New(openai.Options{
			BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Model: cfg.Model,
			Timeout: cfg.Timeout, MaxTokens: cfg.MaxTokens,
		})
	case Anthropic:
		p, err = anthropic.New(anthropic.Options{
			BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Model: cfg.Model,
			Timeout: cfg.Timeout, MaxTokens: cfg.MaxTokens,
		})
	default:
		return nil, fmt.Errorf("failed to create provider %q: unknown provider (want %q or %q)", cfg.Provider, OpenAI, Anthropic)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Prober is a provider that can check its endpoint without generating.
type Prober interface {
	Probe(ctx context.Context) error
}

// Probe checks that the endpoint cfg names answers and accepts its key,
// with one cheap request (listing models) and no retry: a health check
// wants the endpoint's state now, not after backoff.
func Probe(ctx context.Context, cfg Config) error {
	p, err := New(cfg)
	if err != nil {
		return err
	}
	pr, ok := p.(Prober)
	if !ok {
		return fmt.Errorf("failed to probe provider %q: it cannot be probed", cfg.Provider)
	}
	return pr.Probe(ctx)
}
