package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/picobot/picobot/runtime/llm"
)

// The request body is encoded here rather than through the SDK's parameter
// types, and streamed chunks are decoded into wireChunk: the SDK marshals every message and tool through its own reflective
// encoder and then re-scans each one (MarshalJSON output is compacted), which
// cost about 2.5 ms and 3,200 allocations for a 100-message, 40-tool request
// and was the largest single CPU cost of an embedded-mode turn. The body
// below is the same JSON (TestRequestBody pins it); the SDK still sends it
// (option.WithRequestBody), streams and decodes the answer, and maps errors.

// wireMessage is one Chat Completions message. Content is a string, a
// []wirePart, or nil when omitted (an assistant message with only tool
// calls).
type wireMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wirePart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *wireImageURL `json:"image_url,omitempty"`
}

type wireImageURL struct {
	URL string `json:"url"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// BuildBody encodes a neutral request as a Chat Completions request body.
// It is exported
// for benchmarks and for callers that want the exact wire request; Complete
// sends it.
func (p *Provider) BuildBody(req llm.Request, stream bool) ([]byte, error) {
	model := req.Model
	if model == "" {
		model = p.opts.Model
	}
	if model == "" {
		return nil, fmt.Errorf("failed to build request: no model configured")
	}
	msgs, err := wireMessages(req)
	if err != nil {
		return nil, err
	}
	tools, err := p.tools.encode(req.Tools)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(tools) + bodySize(req))
	buf.WriteString(`{"model":`)
	if err := appendJSON(&buf, model); err != nil {
		return nil, err
	}
	buf.WriteString(`,"messages":`)
	if err := appendJSON(&buf, msgs); err != nil {
		return nil, fmt.Errorf("failed to encode the messages: %w", err)
	}
	if len(tools) > 0 {
		buf.WriteString(`,"tools":`)
		buf.Write(tools) // already JSON: written as is, not re-scanned
	}
	if maxTokens := firstNonZero(req.MaxTokens, p.opts.MaxTokens); maxTokens > 0 {
		fmt.Fprintf(&buf, `,"max_completion_tokens":%d`, maxTokens)
	}
	if req.Temperature != nil {
		buf.WriteString(`,"temperature":`)
		if err := appendJSON(&buf, *req.Temperature); err != nil {
			return nil, fmt.Errorf("failed to encode the temperature: %w", err)
		}
	}
	switch {
	case req.Schema != nil:
		buf.WriteString(`,"response_format":{"type":"json_schema","json_schema":`)
		if err := appendJSON(&buf, req.Schema); err != nil {
			return nil, fmt.Errorf("failed to encode the JSON schema %q: %w", req.Schema.Name, err)
		}
		buf.WriteByte('}')
	case req.JSON:
		buf.WriteString(`,"response_format":{"type":"json_object"}`)
	}
	if stream {
		buf.WriteString(`,"stream":true,"stream_options":{"include_usage":true}`)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// appendJSON writes v's JSON without HTML escaping (as the SDK does).
func appendJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return nil
}

// bodySize estimates the encoded size of a request without its tools: the
// texts plus JSON framing per message (escaping and images grow the buffer
// past it when they come).
func bodySize(req llm.Request) int {
	n := len(req.System) + 256
	for i := range req.Messages {
		m := &req.Messages[i]
		n += len(m.Content) + len(m.ToolCallID) + 48
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 64
		}
	}
	return n
}

// wireMessages maps the system prompt and the history to wire messages.
func wireMessages(req llm.Request) ([]wireMessage, error) {
	msgs := make([]wireMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, wireMessage{Role: "system", Content: req.System})
	}
	// Images returned by tools cannot ride on tool messages (text only), and
	// tool messages must directly follow their assistant message, so they are
	// collected over a run of tool messages and sent in one user message after.
	var toolImages []wirePart
	flushToolImages := func() {
		if len(toolImages) == 0 {
			return
		}
		parts := append([]wirePart{{Type: "text", Text: "Images returned by the tools above:"}}, toolImages...)
		msgs = append(msgs, wireMessage{Role: "user", Content: parts})
		toolImages = nil
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != llm.RoleTool {
			flushToolImages()
		}
		switch m.Role {
		case llm.RoleSystem:
			msgs = append(msgs, wireMessage{Role: "system", Content: m.Content})
		case llm.RoleUser:
			if len(m.Images) == 0 {
				msgs = append(msgs, wireMessage{Role: "user", Content: m.Content})
				continue
			}
			parts := make([]wirePart, 0, len(m.Images)+1)
			if m.Content != "" {
				parts = append(parts, wirePart{Type: "text", Text: m.Content})
			}
			for _, img := range m.Images {
				parts = append(parts, imagePart(img))
			}
			msgs = append(msgs, wireMessage{Role: "user", Content: parts})
		case llm.RoleAssistant:
			a := wireMessage{Role: "assistant"}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content = m.Content
			}
			if len(m.ToolCalls) > 0 {
				a.ToolCalls = make([]wireToolCall, len(m.ToolCalls))
				for j, tc := range m.ToolCalls {
					a.ToolCalls[j] = wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}}
				}
			}
			msgs = append(msgs, a)
		case llm.RoleTool:
			msgs = append(msgs, wireMessage{Role: "tool", Content: m.Content, ToolCallID: m.ToolCallID})
			for _, img := range m.Images {
				toolImages = append(toolImages, imagePart(img))
			}
		default:
			return nil, fmt.Errorf("failed to build request: message %d has unknown role %q", i, m.Role)
		}
	}
	flushToolImages()
	return msgs, nil
}

// wireChunk is what the provider reads of a streamed chunk.
type wireChunk struct {
	Model string `json:"model"`
	Usage *struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Choices []struct {
		Index int64 `json:"index"`
		Delta struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    int64  `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// firstNonZero returns a, or b when a is zero.
func firstNonZero(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// imagePart inlines an image as a data: URL, which OpenAI-compatible servers
// accept without a fetch.
func imagePart(img llm.Image) wirePart {
	return wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)}}
}

// noParameters is the schema of a tool declared without one.
const noParameters = `{"type":"object","properties":{}}`

// toolCache keeps the encoded "tools" array of the last few tool sets. An
// agent declares the same tools on every call of every turn, and their
// schemas are most of the request (tens of KB), so they are validated and
// encoded once per set rather than per call.
type toolCache struct {
	mu      sync.Mutex
	entries [toolCacheSize]toolCacheEntry
	next    int
}

const toolCacheSize = 8

type toolCacheEntry struct {
	defs []llm.ToolDef
	json []byte
}

// encode returns the JSON array declaring defs (nil for none). A cached
// encoding is used only for a set equal to defs field by field, which is
// cheap: the definitions of a registry share their strings and schemas
// from call to call, so each comparison stops at the pointers.
func (c *toolCache) encode(defs []llm.ToolDef) ([]byte, error) {
	if len(defs) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	for _, e := range c.entries {
		if sameTools(e.defs, defs) {
			c.mu.Unlock()
			return e.json, nil
		}
	}
	c.mu.Unlock()
	out := []byte{'['}
	for i, t := range defs {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = appendFunctionTool(out, t); err != nil {
			return nil, err
		}
	}
	out = append(out, ']')
	c.mu.Lock()
	c.entries[c.next] = toolCacheEntry{defs: slices.Clone(defs), json: out}
	c.next = (c.next + 1) % toolCacheSize
	c.mu.Unlock()
	return out, nil
}

func sameTools(a, b []llm.ToolDef) bool {
	return slices.EqualFunc(a, b, func(x, y llm.ToolDef) bool {
		return x.Name == y.Name && x.Description == y.Description && bytes.Equal(x.Parameters, y.Parameters)
	})
}

// appendFunctionTool declares a tool with its JSON schema passed through
// byte for byte (after checking that it is JSON).
func appendFunctionTool(out []byte, t llm.ToolDef) ([]byte, error) {
	schema := []byte(t.Parameters)
	if len(schema) == 0 {
		schema = []byte(noParameters)
	} else if !json.Valid(schema) {
		return nil, fmt.Errorf("failed to build schema of tool %q: invalid JSON", t.Name)
	}
	name, err := json.Marshal(t.Name)
	if err != nil {
		return nil, fmt.Errorf("failed to encode name of tool %q: %w", t.Name, err)
	}
	out = append(out, `{"type":"function","function":{"name":`...)
	out = append(out, name...)
	if t.Description != "" {
		desc, err := json.Marshal(t.Description)
		if err != nil {
			return nil, fmt.Errorf("failed to encode description of tool %q: %w", t.Name, err)
		}
		out = append(out, `,"description":`...)
		out = append(out, desc...)
	}
	out = append(out, `,"parameters":`...)
	out = append(out, schema...)
	return append(out, `}}`...), nil
}
