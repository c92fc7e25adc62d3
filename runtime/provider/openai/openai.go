// Package openai is an llm.Provider for the OpenAI Chat Completions API, the
// protocol OpenAI and most self-hosted servers (vLLM, Ollama, llama.cpp,
// LiteLLM) speak. It is a thin translation over the official openai-go SDK:
// the SDK owns HTTP and SSE, this package owns the mapping to and from the
// provider-neutral llm types. Retries are not done here (the SDK's are
// disabled) but by provider.Retry, which knows about streamed deltas.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/internal/httperr"
	"github.com/picobot/picobot/runtime/provider/internal/modelhttp"
)

// Name is the provider name used in errors and model references.
const Name = "openai"

// DefaultBaseURL is OpenAI's own endpoint, used when Options.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultTimeout bounds one request attempt, streaming included, when
// Options.Timeout is zero; a hung server must not hold an agent turn forever.
const DefaultTimeout = 120 * time.Second

// Options configure a Provider.
type Options struct {
	// BaseURL of an OpenAI-compatible API, including the /v1 suffix.
	BaseURL string
	// APIKey is sent as a bearer token; empty for servers without auth. It
	// never appears in errors.
	APIKey string
	// Model is used when a request names none.
	Model string
	// HTTPClient overrides the shared pooled client (proxies, TLS, tests).
	HTTPClient *http.Client
	// Timeout bounds one request attempt; DefaultTimeout when zero.
	Timeout time.Duration
	// MaxTokens caps the output when a request sets no cap; 0 leaves it to
	// the server.
	MaxTokens int
}

// Provider calls a Chat Completions endpoint. It is safe for concurrent use.
type Provider struct {
	opts   Options
	client openaisdk.Client
	now    func() time.Time
	tools  toolCache
}

var _ llm.Provider = (*Provider)(nil)

// New builds a Provider. The model is required so a misconfiguration fails
// at startup rather than on the first user message.
func New(opts Options) (*Provider, error) {
	if opts.Model == "" {
		return nil, fmt.Errorf("failed to create openai provider: model is required")
	}
	if opts.BaseURL == "" {
		opts.BaseURL = DefaultBaseURL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	clientOpts := []option.RequestOption{
		option.WithBaseURL(opts.BaseURL),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(opts.Timeout),
		// An explicit key, even empty, keeps OPENAI_API_KEY from the
		// environment out of a provider configured for another server.
		option.WithAPIKey(opts.APIKey),
		option.WithMiddleware(normalizeErrorBody),
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = modelhttp.Client()
	}
	clientOpts = append(clientOpts, option.WithHTTPClient(opts.HTTPClient))
	return &Provider{opts: opts, client: openaisdk.NewClient(clientOpts...), now: time.Now}, nil
}

// Model is the configured default model.
func (p *Provider) Model() string { return p.opts.Model }

// Complete sends one chat turn; with onDelta non-nil it streams and reports
// each text piece as it arrives.
func (p *Provider) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	body, err := p.BuildBody(req, onDelta != nil)
	if err != nil {
		return nil, err
	}
	model := firstString(req.Model, p.opts.Model)
	// The SDK's parameters stay empty: the body replaces them.
	withBody := option.WithRequestBody("application/json", body)
	if onDelta == nil {
		res, err := p.client.Chat.Completions.New(ctx, openaisdk.ChatCompletionNewParams{}, withBody)
		if err != nil {
			return nil, p.mapError(ctx, err)
		}
		return p.response(res, model)
	}
	return p.stream(ctx, model, withBody, onDelta)
}

// response maps a non-streaming completion.
func (p *Provider) response(res *openaisdk.ChatCompletion, model string) (*llm.Response, error) {
	if len(res.Choices) == 0 {
		return nil, fmt.Errorf("failed to read openai completion: %w: no choices in response", llm.ErrTruncated)
	}
	choice := res.Choices[0]
	out := &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, Content: choice.Message.Content},
		Usage:   usage(res.Usage),
		Model:   firstString(res.Model, model),
	}
	for _, tc := range choice.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		out.Message.ToolCalls = append(out.Message.ToolCalls, llm.ToolCall{
			ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
		})
	}
	if choice.FinishReason == "" {
		return nil, fmt.Errorf("failed to read openai completion: %w: no finish_reason", llm.ErrTruncated)
	}
	out.StopReason = stopReason(choice.FinishReason, len(out.Message.ToolCalls) > 0)
	return out, nil
}

// toolAcc accumulates one streamed tool call.
type toolAcc struct {
	id, name string
	args     strings.Builder
}

// stream runs a streaming completion, accumulating text and tool calls
// (parallel calls may interleave by index) into a complete Response.
func (p *Provider) stream(ctx context.Context, reqModel string, withBody option.RequestOption, onDelta func(llm.Delta)) (*llm.Response, error) {
	// The SDK's own call (Chat.Completions.NewStreaming) decodes every chunk
	// with its reflective decoder; chunks are read into wireChunk instead
	// (see request.go). The SDK still sends, frames the SSE stream and
	// reports errors.
	var raw *http.Response
	err := p.client.Post(ctx, "chat/completions", nil, &raw, withBody)
	s := ssestream.NewStream[wireChunk](ssestream.NewDecoder(raw), err)
	defer func() { _ = s.Close() }()

	var (
		text   strings.Builder
		calls  []*toolAcc
		slots  = map[int64]*toolAcc{}
		finish string
		model  string
		use    llm.Usage
	)
	for s.Next() {
		chunk := s.Current()
		if chunk.Model != "" {
			model = chunk.Model
		}
		if u := chunk.Usage; u != nil {
			use = llm.Usage{InputTokens: int(u.PromptTokens), OutputTokens: int(u.CompletionTokens),
				CachedInputTokens: int(u.PromptTokensDetails.CachedTokens)}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if c := ch.Delta.Content; c != "" {
				text.WriteString(c)
				onDelta(llm.Delta{Text: c})
			}
			for _, tc := range ch.Delta.ToolCalls {
				acc := slots[tc.Index]
				// Some servers reuse index 0 for every call; a new ID then
				// starts a new call.
				if acc == nil || (tc.ID != "" && acc.id != "" && tc.ID != acc.id) {
					acc = &toolAcc{}
					slots[tc.Index] = acc
					calls = append(calls, acc)
				}
				if tc.ID != "" {
					acc.id = tc.ID
				}
				if tc.Function.Name != "" {
					acc.name = tc.Function.Name
				}
				acc.args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, p.mapError(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("failed to stream openai completion: %w", err)
	}
	if finish == "" {
		return nil, fmt.Errorf("failed to stream openai completion: %w", llm.ErrTruncated)
	}
	out := &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, Content: text.String()},
		Usage:   use,
		Model:   firstString(model, reqModel),
	}
	for _, c := range calls {
		out.Message.ToolCalls = append(out.Message.ToolCalls, llm.ToolCall{ID: c.id, Name: c.name, Arguments: c.args.String()})
	}
	out.StopReason = stopReason(finish, len(out.Message.ToolCalls) > 0)
	return out, nil
}

// stopReason normalises finish_reason. Some compatible servers report "stop"
// alongside tool calls, so the calls decide.
func stopReason(finish string, hasCalls bool) llm.StopReason {
	switch {
	case finish == "length":
		return llm.StopLength
	case hasCalls || finish == "tool_calls" || finish == "function_call":
		return llm.StopToolCalls
	default:
		return llm.StopEnd
	}
}

func usage(u openaisdk.CompletionUsage) llm.Usage {
	return llm.Usage{
		InputTokens:       int(u.PromptTokens),
		OutputTokens:      int(u.CompletionTokens),
		CachedInputTokens: int(u.PromptTokensDetails.CachedTokens),
	}
}

// normalizeErrorBody rewrites error replies that lack OpenAI's
// {"error": {...}} object (proxies' HTML pages, vLLM's top-level message,
// Ollama's {"error": "text"}) into that shape, so the SDK always yields an
// *openai.Error carrying the status, headers and a readable message.
func normalizeErrorBody(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil || res.StatusCode < 400 {
		return res, err
	}
	body, readErr := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	_ = res.Body.Close()
	if readErr != nil {
		return nil, fmt.Errorf("failed to read error response body: %w", readErr)
	}
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &probe) != nil || len(probe.Error) == 0 || probe.Error[0] != '{' {
		body, _ = json.Marshal(map[string]any{"error": map[string]string{"message": httperr.Message(body, res.StatusCode)}})
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	return res, nil
}

// mapError turns SDK errors into the llm error vocabulary. The caller's
// cancellation wins over whatever the transport reported.
func (p *Provider) mapError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("failed to call openai: %w", ctxErr)
	}
	var apiErr *openaisdk.Error
	if errors.As(err, &apiErr) {
		se := &llm.StatusError{Provider: Name, StatusCode: apiErr.StatusCode, Message: apiErr.Message}
		if apiErr.Response != nil {
			se.RetryAfter = httperr.RetryAfter(apiErr.Response.Header, p.now())
		}
		if se.Message == "" {
			se.Message = http.StatusText(apiErr.StatusCode)
		}
		if isOverflow(apiErr.Code, apiErr.Message) {
			return fmt.Errorf("%w: %w", llm.ErrContextOverflow, se)
		}
		return se
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An error event mid-stream: the answer ended before completion.
		return fmt.Errorf("failed to stream openai completion: %w: %s", llm.ErrTruncated, streamErr.Message)
	}
	return fmt.Errorf("failed to call openai: %w", err)
}

// isOverflow recognises the context-length error of OpenAI and the wording
// compatible servers (vLLM, LiteLLM) use.
func isOverflow(code, msg string) bool {
	if code == "context_length_exceeded" {
		return true
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "maximum context length") || strings.Contains(m, "context length exceeded") ||
		strings.Contains(m, "context_length_exceeded")
}

func firstString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Probe lists the endpoint's models (GET {BaseURL}/models), the cheapest
// request that proves the server answers and accepts the key; it generates
// nothing and costs no tokens.
func (p *Provider) Probe(ctx context.Context) error {
	if _, err := p.client.Models.List(ctx); err != nil {
		return p.mapError(ctx, err)
	}
	return nil
}
