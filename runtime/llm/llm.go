// Package llm holds the provider-neutral vocabulary of a chat turn: messages,
// tool calls, tool definitions, requests, responses and the errors providers
// report. Providers translate it to their wire protocols; the agent loop,
// context compression and tools speak only this.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role of a message in a conversation.
type Role string

// The four roles every provider maps onto its own.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Image is an inline image sent to a vision-capable model.
type Image struct {
	MediaType string `json:"media_type"` // image/png, image/jpeg, ...
	Data      []byte `json:"data"`
}

// ToolCall is one function call the model asked for. Arguments is the raw
// JSON text the model produced; it may be malformed and is validated before
// the tool runs.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is one entry of a conversation.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message makes.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message.
	Name string `json:"name,omitempty"`
	// IsError marks a tool message that reports a failure.
	IsError bool `json:"is_error,omitempty"`
	// Images are attached to user or tool messages.
	Images []Image `json:"images,omitempty"`
}

// ToolDef declares a tool to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema of an object
}

// Request is one model call.
type Request struct {
	// Model overrides the provider's configured model when set.
	Model    string
	System   string
	Messages []Message
	Tools    []ToolDef
	// MaxTokens caps the output; 0 means the provider's default.
	MaxTokens   int
	Temperature *float64
	// JSON asks for a single JSON object as the answer (no tools).
	JSON bool
	// Schema asks for a JSON answer matching a JSON Schema (OpenAI's
	// response_format json_schema); it wins over JSON.
	Schema *JSONSchema
}

// JSONSchema is a named JSON Schema the answer must match.
type JSONSchema struct {
	// Name identifies the schema to the model (a-z, A-Z, 0-9, _ and -).
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	// Strict asks the provider to enforce the schema exactly.
	Strict bool `json:"strict,omitempty"`
}

// Settings are model settings a client chose for every model call of one
// turn (the OpenAI endpoint's temperature, max_tokens and response_format);
// zero values leave the agent's own.
type Settings struct {
	MaxTokens   int         `json:"max_tokens,omitempty"`
	Temperature *float64    `json:"temperature,omitempty"`
	JSON        bool        `json:"json,omitempty"`
	Schema      *JSONSchema `json:"schema,omitempty"`
}

// Apply sets the settings on a request; fields left zero keep the
// request's.
func (s *Settings) Apply(req *Request) {
	if s == nil {
		return
	}
	if s.MaxTokens > 0 {
		req.MaxTokens = s.MaxTokens
	}
	if s.Temperature != nil {
		req.Temperature = s.Temperature
	}
	if s.JSON {
		req.JSON = true
	}
	if s.Schema != nil {
		req.Schema = s.Schema
	}
}

// Usage is token accounting of one call.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CachedInputTokens is the part of InputTokens served from a prompt cache.
	CachedInputTokens int `json:"cached_input_tokens,omitempty"`
}

// Add accumulates u2 into u.
func (u *Usage) Add(u2 Usage) {
	u.InputTokens += u2.InputTokens
	u.OutputTokens += u2.OutputTokens
	u.CachedInputTokens += u2.CachedInputTokens
}

// StopReason says why the model stopped.
type StopReason string

// Stop reasons, normalised across providers.
const (
	StopEnd       StopReason = "end"        // a final answer
	StopToolCalls StopReason = "tool_calls" // the model wants tools run
	StopLength    StopReason = "length"     // output cap reached
)

// Response is the model's answer.
type Response struct {
	Message    Message // role assistant
	Usage      Usage
	StopReason StopReason
	// Model is the model that actually answered (after fallbacks).
	Model string
}

// Delta is a streamed piece of the answer.
type Delta struct {
	Text string
}

// Errors providers return, wrapped with detail; match them with errors.Is/As.
var (
	// ErrContextOverflow: the prompt does not fit the model's context window.
	// The loop compresses and retries once.
	ErrContextOverflow = errors.New("context window exceeded")
	// ErrTruncated: the stream ended before the model finished.
	ErrTruncated = errors.New("response stream ended before completion")
)

// StatusError is an HTTP error from a model endpoint.
type StatusError struct {
	Provider   string
	StatusCode int
	// RetryAfter is the server's requested wait (Retry-After, retry-after-ms),
	// zero when absent.
	RetryAfter time.Duration
	Message    string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s returned HTTP %d: %s", e.Provider, e.StatusCode, e.Message)
}

// Retryable reports whether a retry may succeed: rate limits, overload and
// server errors.
func (e *StatusError) Retryable() bool {
	return e.StatusCode == 408 || e.StatusCode == 409 || e.StatusCode == 429 || e.StatusCode >= 500
}

// Provider is a model endpoint. Implementations are pure HTTP clients: they
// know no bus, session or channel. With onDelta non-nil the call streams and
// onDelta receives text as it arrives; the returned Response is complete
// either way. Cancelling ctx aborts the call.
type Provider interface {
	Complete(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error)
}
