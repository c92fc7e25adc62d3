// Package anthropic is an llm.Provider for the Anthropic Messages API, on the
// official anthropic-sdk-go. The SDK owns HTTP and SSE; this package owns the
// mapping to and from the provider-neutral llm types, including the API's
// structural rules (top-level system prompt, tool results in user messages,
// alternating roles, mandatory max_tokens). Retries are not done here (the
// SDK's are disabled) but by provider.Retry, which knows about streamed deltas.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/internal/httperr"
	"github.com/picobot/picobot/runtime/provider/internal/modelhttp"
)

// Name is the provider name used in errors and model references.
const Name = "anthropic"

// DefaultBaseURL is Anthropic's endpoint, used when Options.BaseURL is empty.
// The SDK appends /v1/messages.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultTimeout bounds one request attempt, streaming included, when
// Options.Timeout is zero; a hung server must not hold an agent turn forever.
const DefaultTimeout = 120 * time.Second

// DefaultMaxTokens is the output cap when neither the request nor the
// options set one: the API requires max_tokens on every call.
const DefaultMaxTokens = 4096

// statusOverloaded is Anthropic's non-standard "overloaded" status.
const statusOverloaded = 529

// Options configure a Provider.
type Options struct {
	// BaseURL of the API, without /v1.
	BaseURL string
	// APIKey is sent as x-api-key. It never appears in errors.
	APIKey string
	// Model is used when a request names none.
	Model string
	// HTTPClient overrides the shared pooled client (proxies, TLS, tests).
	HTTPClient *http.Client
	// Timeout bounds one request attempt; DefaultTimeout when zero.
	Timeout time.Duration
	// MaxTokens caps the output when a request sets no cap;
	// DefaultMaxTokens when zero.
	MaxTokens int
}

// Provider calls the Messages API. It is safe for concurrent use.
type Provider struct {
	opts   Options
	client anthropicsdk.Client
	now    func() time.Time
}

var _ llm.Provider = (*Provider)(nil)

// New builds a Provider. The model is required so a misconfiguration fails
// at startup rather than on the first user message.
func New(opts Options) (*Provider, error) {
	if opts.Model == "" {
		return nil, fmt.Errorf("failed to create anthropic provider: model is required")
	}
	if opts.BaseURL == "" {
		opts.BaseURL = DefaultBaseURL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = DefaultMaxTokens
	}
	httpClient := opts.HTTPClient
	if httpClient == nil {
		httpClient = modelhttp.Client()
	}
	clientOpts := []option.RequestOption{
		// Configuration comes from Options only: no ANTHROPIC_* variables or
		// credential profiles from the environment.
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(opts.BaseURL),
		option.WithHTTPClient(httpClient),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(opts.Timeout),
	}
	if opts.APIKey != "" {
		clientOpts = append(clientOpts, option.WithAPIKey(opts.APIKey))
	}
	return &Provider{opts: opts, client: anthropicsdk.NewClient(clientOpts...), now: time.Now}, nil
}

// Model is the configured default model.
func (p *Provider) Model() string { return p.opts.Model }

// Complete sends one turn; with onDelta non-nil it streams and reports each
// text piece as it arrives.
func (p *Provider) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	params, err := p.BuildParams(req)
	if err != nil {
		return nil, err
	}
	if onDelta == nil {
		msg, err := p.client.Messages.New(ctx, params)
		if err != nil {
			return nil, p.mapError(ctx, err)
		}
		return response(msg, params.Model)
	}
	return p.stream(ctx, params, onDelta)
}

// response maps a non-streaming message.
func response(msg *anthropicsdk.Message, model string) (*llm.Response, error) {
	if msg.StopReason == "" {
		return nil, fmt.Errorf("failed to read anthropic message: %w: no stop_reason", llm.ErrTruncated)
	}
	out := &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant},
		Usage: usage(msg.Usage.InputTokens, msg.Usage.OutputTokens,
			msg.Usage.CacheReadInputTokens, msg.Usage.CacheCreationInputTokens),
		Model: firstString(msg.Model, model),
	}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			out.Message.ToolCalls = append(out.Message.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: inputText(b.Input)})
		}
	}
	out.Message.Content = text.String()
	out.StopReason = stopReason(msg.StopReason, len(out.Message.ToolCalls) > 0)
	return out, nil
}

// inputText is a non-streamed tool_use input as arguments text. The API
// sends an object, passed through raw; a JSON string is taken to hold the
// arguments text itself, which is how a gateway (or fakellm) must encode
// arguments that are not valid JSON in a JSON body, so they reach
// validation as the model produced them.
func inputText(input json.RawMessage) string {
	if len(input) == 0 {
		return emptyInput
	}
	if input[0] == '"' {
		var s string
		if json.Unmarshal(input, &s) == nil {
			return s
		}
	}
	return string(input)
}

// block accumulates one streamed content block.
type block struct {
	kind     string // text | tool_use | other
	id, name string
	buf      strings.Builder
}

// stream runs a streaming message. Accumulation is done here rather than by
// the SDK's Message.Accumulate, which replaces malformed tool input with {}:
// the model's arguments must reach validation exactly as produced.
func (p *Provider) stream(ctx context.Context, params anthropicsdk.MessageNewParams, onDelta func(llm.Delta)) (*llm.Response, error) {
	s := p.client.Messages.NewStreaming(ctx, params)
	defer func() { _ = s.Close() }()
	st := streamState{byIndex: map[int64]*block{}}
	for s.Next() {
		if err := st.apply(s.Current(), onDelta); err != nil {
			return nil, err
		}
	}
	if err := s.Err(); err != nil {
		return nil, p.mapError(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("failed to stream anthropic message: %w", err)
	}
	if !st.stopped || st.stop == "" {
		return nil, fmt.Errorf("failed to stream anthropic message: %w", llm.ErrTruncated)
	}
	return st.response(params.Model), nil
}

// streamState gathers a streamed message from its events.
type streamState struct {
	blocks  []*block
	byIndex map[int64]*block
	stop    anthropicsdk.StopReason
	stopped bool
	model   string
	in      [4]int64 // input, output, cache read, cache creation
}

// apply takes one stream event, handing text deltas to onDelta.
func (st *streamState) apply(ev anthropicsdk.MessageStreamEventUnion, onDelta func(llm.Delta)) error {
	switch ev.Type {
	case "message_start":
		st.model = ev.Message.Model
		u := ev.Message.Usage
		st.in = [4]int64{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens}
	case "content_block_start":
		b := &block{kind: ev.ContentBlock.Type, id: ev.ContentBlock.ID, name: ev.ContentBlock.Name}
		if b.kind == "text" {
			b.buf.WriteString(ev.ContentBlock.Text)
		}
		st.byIndex[ev.Index] = b
		st.blocks = append(st.blocks, b)
	case "content_block_delta":
		b := st.byIndex[ev.Index]
		if b == nil {
			return fmt.Errorf("failed to stream anthropic message: delta for unknown content block %d", ev.Index)
		}
		switch ev.Delta.Type {
		case "text_delta":
			if ev.Delta.Text != "" {
				b.buf.WriteString(ev.Delta.Text)
				onDelta(llm.Delta{Text: ev.Delta.Text})
			}
		case "input_json_delta":
			b.buf.WriteString(ev.Delta.PartialJSON)
		}
	case "message_delta":
		st.stop = ev.Delta.StopReason
		st.in[1] = ev.Usage.OutputTokens
		if ev.Usage.JSON.InputTokens.Valid() {
			st.in[0] = ev.Usage.InputTokens
		}
		if ev.Usage.JSON.CacheReadInputTokens.Valid() {
			st.in[2] = ev.Usage.CacheReadInputTokens
		}
		if ev.Usage.JSON.CacheCreationInputTokens.Valid() {
			st.in[3] = ev.Usage.CacheCreationInputTokens
		}
	case "message_stop":
		st.stopped = true
	}
	return nil
}

// response is the gathered message (requested names the model when the
// stream did not).
func (st *streamState) response(requested string) *llm.Response {
	out := &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant},
		Usage:   usage(st.in[0], st.in[1], st.in[2], st.in[3]),
		Model:   firstString(st.model, requested),
	}
	var text strings.Builder
	for _, b := range st.blocks {
		switch b.kind {
		case "text":
			text.WriteString(b.buf.String())
		case "tool_use":
			args := b.buf.String()
			if args == "" {
				args = emptyInput
			}
			out.Message.ToolCalls = append(out.Message.ToolCalls, llm.ToolCall{ID: b.id, Name: b.name, Arguments: args})
		}
	}
	out.Message.Content = text.String()
	out.StopReason = stopReason(st.stop, len(out.Message.ToolCalls) > 0)
	return out
}

// usage normalises Anthropic's split counts: input_tokens excludes cache
// reads and writes, while llm.Usage.InputTokens is the whole prompt.
func usage(input, output, cacheRead, cacheWrite int64) llm.Usage {
	return llm.Usage{
		InputTokens:       int(input + cacheRead + cacheWrite),
		OutputTokens:      int(output),
		CachedInputTokens: int(cacheRead),
	}
}

func stopReason(r anthropicsdk.StopReason, hasCalls bool) llm.StopReason {
	switch {
	case r == anthropicsdk.StopReasonMaxTokens || r == anthropicsdk.StopReasonModelContextWindowExceeded:
		return llm.StopLength
	case hasCalls || r == anthropicsdk.StopReasonToolUse:
		return llm.StopToolCalls
	default:
		return llm.StopEnd
	}
}

// mapError turns SDK errors into the llm error vocabulary. The caller's
// cancellation wins over whatever the transport reported.
func (p *Provider) mapError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("failed to call anthropic: %w", ctxErr)
	}
	var apiErr *anthropicsdk.Error
	if !errors.As(err, &apiErr) {
		return fmt.Errorf("failed to call anthropic: %w", err)
	}
	status := apiErr.StatusCode
	if status < 400 {
		// An error event inside a 200 stream: take the status from its type.
		status = statusForType(string(apiErr.Type()))
	}
	se := &llm.StatusError{
		Provider:   Name,
		StatusCode: status,
		Message:    httperr.Message([]byte(apiErr.RawJSON()), status),
	}
	if apiErr.Response != nil && apiErr.StatusCode >= 400 {
		se.RetryAfter = httperr.RetryAfter(apiErr.Response.Header, p.now())
	}
	if isOverflow(status, se.Message) {
		return fmt.Errorf("%w: %w", llm.ErrContextOverflow, se)
	}
	return se
}

// statusForType maps an error type of a mid-stream error event to the HTTP
// status the same error has as a response.
func statusForType(t string) int {
	switch t {
	case "overloaded_error":
		return statusOverloaded
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "timeout_error":
		return http.StatusGatewayTimeout
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	default:
		return http.StatusInternalServerError
	}
}

// isOverflow recognises "prompt is too long" and the wording of
// Anthropic-compatible gateways.
func isOverflow(status int, msg string) bool {
	if status != http.StatusBadRequest {
		return false
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "prompt is too long") || strings.Contains(m, "context window") ||
		strings.Contains(m, "maximum context length")
}

func firstString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Probe lists one of the endpoint's models (GET {BaseURL}/v1/models), the
// cheapest request that proves the server answers and accepts the key; it
// generates nothing and costs no tokens.
func (p *Provider) Probe(ctx context.Context) error {
	if _, err := p.client.Models.List(ctx, anthropicsdk.ModelListParams{Limit: anthropicsdk.Int(1)}); err != nil {
		return p.mapError(ctx, err)
	}
	return nil
}
