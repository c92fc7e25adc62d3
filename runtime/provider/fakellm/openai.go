package fakellm

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Wire shapes of the OpenAI Chat Completions replies the fake writes.
type (
	oaFunction struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	oaToolCall struct {
		Index    *int       `json:"index,omitempty"`
		ID       string     `json:"id,omitempty"`
		Type     string     `json:"type,omitempty"`
		Function oaFunction `json:"function"`
	}
	oaMessage struct {
		Role      string       `json:"role,omitempty"`
		Content   *string      `json:"content"`
		Refusal   *string      `json:"refusal"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	}
	oaDelta struct {
		Role      string       `json:"role,omitempty"`
		Content   *string      `json:"content,omitempty"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	}
	oaChoice struct {
		Index        int        `json:"index"`
		Message      *oaMessage `json:"message,omitempty"`
		Delta        *oaDelta   `json:"delta,omitempty"`
		Logprobs     any        `json:"logprobs"`
		FinishReason *string    `json:"finish_reason"`
	}
	oaUsage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	oaCompletion struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []oaChoice `json:"choices"`
		Usage   *oaUsage   `json:"usage,omitempty"`
	}
)

func openAIUsage(u Usage) *oaUsage {
	ou := &oaUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	ou.PromptTokensDetails.CachedTokens = u.CachedInputTokens
	return ou
}

func openAIFinish(t Turn) string {
	switch {
	case t.Length:
		return "length"
	case len(t.ToolCalls) > 0:
		return "tool_calls"
	default:
		return "stop"
	}
}

// openAICompletion is a non-streaming chat.completion body.
func openAICompletion(id int, t Turn, u Usage) []byte {
	msg := &oaMessage{Role: "assistant"}
	if t.Text != "" || len(t.ToolCalls) == 0 {
		msg.Content = &t.Text
	}
	for _, c := range t.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, oaToolCall{ID: c.ID, Type: "function", Function: oaFunction{Name: c.Name, Arguments: c.Args}})
	}
	finish := openAIFinish(t)
	return mustJSON(oaCompletion{
		ID:      fmt.Sprintf("chatcmpl-%d", id),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   t.Model,
		Choices: []oaChoice{{Message: msg, FinishReason: &finish}},
		Usage:   openAIUsage(u),
	})
}

// openAIChunks is the chat.completion.chunk stream of a turn, ending with
// [DONE]. Parallel tool calls are interleaved by index, as servers may do.
func openAIChunks(id int, t Turn, u Usage, includeUsage bool) []sseEvent {
	created := time.Now().Unix()
	cid := fmt.Sprintf("chatcmpl-%d", id)
	chunk := func(d *oaDelta, finish *string) sseEvent {
		return sseEvent{data: mustJSON(oaCompletion{
			ID: cid, Object: "chat.completion.chunk", Created: created, Model: t.Model,
			Choices: []oaChoice{{Delta: d, FinishReason: finish}},
		}), content: d.Role == "" && (d.Content != nil || len(d.ToolCalls) > 0)}
	}
	empty := ""
	events := []sseEvent{chunk(&oaDelta{Role: "assistant", Content: &empty}, nil)}
	for _, piece := range splitText(t.Text) {
		events = append(events, chunk(&oaDelta{Content: &piece}, nil))
	}
	pieces := make([][]string, len(t.ToolCalls))
	most := 0
	for i, c := range t.ToolCalls {
		pieces[i] = splitArgs(c.Args)
		most = max(most, len(pieces[i]))
	}
	// Round 0 opens every call (id, name, first piece); later rounds carry
	// one argument piece per call, so the calls interleave.
	for round := 0; round < max(most, 1); round++ {
		for i, c := range t.ToolCalls {
			idx := i
			tc := oaToolCall{Index: &idx}
			if round < len(pieces[i]) {
				tc.Function.Arguments = pieces[i][round]
			} else if round > 0 {
				continue
			}
			if round == 0 {
				tc.ID, tc.Type, tc.Function.Name = c.ID, "function", c.Name
			}
			events = append(events, chunk(&oaDelta{ToolCalls: []oaToolCall{tc}}, nil))
		}
	}
	finish := openAIFinish(t)
	events = append(events, chunk(&oaDelta{}, &finish))
	if includeUsage {
		events = append(events, sseEvent{data: mustJSON(oaCompletion{
			ID: cid, Object: "chat.completion.chunk", Created: created, Model: t.Model,
			Choices: []oaChoice{}, Usage: openAIUsage(u),
		})})
	}
	events = append(events, sseEvent{data: []byte("[DONE]")})
	return events
}

// Request shapes the fake parses.
type (
	oaReqMessage struct {
		Role       string       `json:"role"`
		Content    oaContent    `json:"content"`
		ToolCalls  []oaToolCall `json:"tool_calls"`
		ToolCallID string       `json:"tool_call_id"`
	}
	oaRequest struct {
		Model         string         `json:"model"`
		Messages      []oaReqMessage `json:"messages"`
		Stream        bool           `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens           int      `json:"max_tokens"`
		MaxCompletionTokens int      `json:"max_completion_tokens"`
		Temperature         *float64 `json:"temperature"`
		ResponseFormat      *struct {
			Type       string         `json:"type"`
			JSONSchema jsontext.Value `json:"json_schema"`
		} `json:"response_format"`
		// Tools are read by toolNames: the same declarations come with
		// every request of an agent.
		Tools jsontext.Value `json:"tools"`
	}
	oaTool struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
)

// toolNameCache maps tool declarations, as sent, to their names (the
// first 64 distinct lists a process sees).
var toolNameCache struct {
	sync.Mutex
	m map[string][]string
}

// toolNames reads the names of declared tools, decoding each distinct
// declaration list once.
func toolNames(raw jsontext.Value) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	toolNameCache.Lock()
	cached, ok := toolNameCache.m[string(raw)]
	toolNameCache.Unlock()
	if ok {
		return slices.Clone(cached), nil
	}
	var tools []oaTool
	if err := jsonv2.Unmarshal(raw, &tools); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Function.Name
	}
	toolNameCache.Lock()
	if toolNameCache.m == nil {
		toolNameCache.m = map[string][]string{}
	}
	if len(toolNameCache.m) < 64 {
		toolNameCache.m[string(raw)] = names
	}
	toolNameCache.Unlock()
	return slices.Clone(names), nil
}

// parseOpenAI reads a Chat Completions request. It decodes with
// encoding/json/v2 (the go-json-experiment mirror, the standard library's
// from Go 1.27): one pass instead of v1's validate-then-decode, about twice
// as fast, which matters where a benchmark runs the fake in the process it
// measures.
func parseOpenAI(body []byte, rec *Recorded) error {
	var req oaRequest
	if err := jsonv2.Unmarshal(body, &req); err != nil {
		return err
	}
	rec.Model = req.Model
	rec.Stream = req.Stream
	rec.IncludeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	rec.MaxTokens = max(req.MaxTokens, req.MaxCompletionTokens)
	rec.Temperature = req.Temperature
	if f := req.ResponseFormat; f != nil {
		rec.JSONMode = f.Type == "json_object"
		rec.ResponseFormat, rec.JSONSchema = f.Type, json.RawMessage(slices.Clone(f.JSONSchema))
	}
	names, err := toolNames(req.Tools)
	if err != nil {
		return err
	}
	rec.Tools = names
	var system []string
	rec.Messages = make([]Message, 0, len(req.Messages))
	for _, m := range req.Messages {
		msg := Message{Role: m.Role, Content: m.Content.text, Images: m.Content.images}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, Call{ID: tc.ID, Name: tc.Function.Name, Args: tc.Function.Arguments})
		}
		if m.Role == "tool" {
			msg.ToolResults = []ToolResult{{CallID: m.ToolCallID, Content: m.Content.text}}
		}
		if m.Role == "system" || m.Role == "developer" {
			system = append(system, m.Content.text)
		}
		rec.Messages = append(rec.Messages, msg)
	}
	rec.System = strings.Join(system, "\n\n")
	return validateOpenAI(rec)
}

// validateOpenAI applies the rules the real API enforces on tool messages.
func validateOpenAI(rec *Recorded) error {
	if rec.Model == "" {
		return fmt.Errorf("you must provide a model parameter")
	}
	if len(rec.Messages) == 0 {
		return fmt.Errorf("'messages' must contain at least one message")
	}
	var pending map[string]bool // calls of the last assistant message
	for i, m := range rec.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		case "tool":
			id := m.ToolResults[0].CallID
			if !pending[id] {
				return fmt.Errorf("messages.[%d]: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (id %q)", i, id)
			}
			delete(pending, id)
			continue
		default:
			return fmt.Errorf("messages.[%d].role: invalid value %q", i, m.Role)
		}
		if len(pending) > 0 {
			return fmt.Errorf("messages.[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", i)
		}
		pending = nil
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			pending = map[string]bool{}
			for _, c := range m.ToolCalls {
				pending[c.ID] = true
			}
		}
	}
	return nil
}

// oaContent is a request message's content: a string, an array of content
// parts (their texts joined, images counted) or null.
type oaContent struct {
	text   string
	images int
}

// UnmarshalJSONFrom reads the content in the one decoding pass.
func (c *oaContent) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case 'n', '"':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if tok.Kind() == '"' {
			c.text = tok.String()
		}
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := jsonv2.UnmarshalDecode(dec, &parts); err != nil {
		return fmt.Errorf("message content: %w", err)
	}
	var texts []string
	for _, p := range parts {
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "image_url":
			c.images++
		}
	}
	c.text = strings.Join(texts, "\n")
	return nil
}
