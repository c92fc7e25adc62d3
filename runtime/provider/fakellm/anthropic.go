package fakellm

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Wire shapes of the Anthropic Messages replies the fake writes.
type (
	anBlock struct {
		Type  string          `json:"type"`
		Text  *string         `json:"text,omitempty"`
		ID    string          `json:"id,omitempty"`
		Name  string          `json:"name,omitempty"`
		Input json.RawMessage `json:"input,omitempty"`
	}
	anUsage struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	}
	anMessage struct {
		ID           string    `json:"id"`
		Type         string    `json:"type"`
		Role         string    `json:"role"`
		Model        string    `json:"model"`
		Content      []anBlock `json:"content"`
		StopReason   *string   `json:"stop_reason"`
		StopSequence *string   `json:"stop_sequence"`
		Usage        anUsage   `json:"usage"`
	}
)

// anthropicUsage splits the neutral input count: Anthropic's input_tokens
// excludes tokens read from the prompt cache.
func anthropicUsage(u Usage) anUsage {
	return anUsage{
		InputTokens:          max(u.InputTokens-u.CachedInputTokens, 0),
		OutputTokens:         u.OutputTokens,
		CacheReadInputTokens: u.CachedInputTokens,
	}
}

func anthropicStop(t Turn) string {
	switch {
	case t.Length:
		return "max_tokens"
	case len(t.ToolCalls) > 0:
		return "tool_use"
	default:
		return "end_turn"
	}
}

// anthropicInput is the tool_use input of a non-streaming reply: the raw
// arguments when they are JSON, else the text as a JSON string.
func anthropicInput(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	return mustJSON(args)
}

// anthropicMessage is a non-streaming message body.
func anthropicMessage(id int, t Turn, u Usage) []byte {
	msg := anMessage{
		ID: fmt.Sprintf("msg_%d", id), Type: "message", Role: "assistant", Model: t.Model,
		Content: []anBlock{}, Usage: anthropicUsage(u),
	}
	if t.Text != "" {
		msg.Content = append(msg.Content, anBlock{Type: "text", Text: &t.Text})
	}
	for _, c := range t.ToolCalls {
		msg.Content = append(msg.Content, anBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: anthropicInput(c.Args)})
	}
	stop := anthropicStop(t)
	msg.StopReason = &stop
	return mustJSON(msg)
}

// anthropicEvents is the SSE event sequence of a turn.
func anthropicEvents(id int, t Turn, u Usage) []sseEvent {
	ev := func(name string, v any) sseEvent {
		return sseEvent{name: name, data: mustJSON(v), content: name == "content_block_delta"}
	}
	startUsage := anthropicUsage(u)
	startUsage.OutputTokens = 1
	events := []sseEvent{
		ev("message_start", map[string]any{"type": "message_start", "message": anMessage{
			ID: fmt.Sprintf("msg_%d", id), Type: "message", Role: "assistant", Model: t.Model,
			Content: []anBlock{}, Usage: startUsage,
		}}),
		{name: "ping", data: []byte(`{"type": "ping"}`)},
	}
	index := 0
	if t.Text != "" {
		empty := ""
		events = append(events, ev("content_block_start", map[string]any{
			"type": "content_block_start", "index": index, "content_block": anBlock{Type: "text", Text: &empty},
		}))
		for _, piece := range splitText(t.Text) {
			events = append(events, ev("content_block_delta", map[string]any{
				"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": piece},
			}))
		}
		events = append(events, ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}))
		index++
	}
	for _, c := range t.ToolCalls {
		events = append(events, ev("content_block_start", map[string]any{
			"type": "content_block_start", "index": index,
			"content_block": anBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: json.RawMessage("{}")},
		}))
		for _, piece := range splitArgs(c.Args) {
			events = append(events, ev("content_block_delta", map[string]any{
				"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece},
			}))
		}
		events = append(events, ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}))
		index++
	}
	events = append(events,
		ev("message_delta", map[string]any{
			"type":  "message_delta",
			"delta": map[string]any{"stop_reason": anthropicStop(t), "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": u.OutputTokens},
		}),
		sseEvent{name: "message_stop", data: []byte(`{"type":"message_stop"}`)},
	)
	return events
}

// Request shapes the fake parses.
type (
	anReqBlock struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		IsError   bool            `json:"is_error"`
		Content   json.RawMessage `json:"content"`
	}
	anRequest struct {
		Model       string          `json:"model"`
		MaxTokens   int             `json:"max_tokens"`
		Temperature *float64        `json:"temperature"`
		Stream      bool            `json:"stream"`
		System      json.RawMessage `json:"system"`
		Messages    []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
)

func parseAnthropic(body []byte, rec *Recorded) error {
	var req anRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	rec.Model = req.Model
	rec.Stream = req.Stream
	rec.MaxTokens = req.MaxTokens
	rec.Temperature = req.Temperature
	for i, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Name)
		if t.Name == "" || len(t.InputSchema) == 0 {
			return fmt.Errorf("tools.%d: name and input_schema are required", i)
		}
	}
	system, err := anthropicBlocks(req.System)
	if err != nil {
		return fmt.Errorf("system: %w", err)
	}
	rec.System, _ = anthropicText(system)
	for _, m := range req.Messages {
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return fmt.Errorf("message content: %w", err)
		}
		msg := Message{Role: m.Role}
		msg.Content, msg.Images = anthropicText(blocks)
		for _, b := range blocks {
			switch b.Type {
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, Call{ID: b.ID, Name: b.Name, Args: string(b.Input)})
			case "tool_result":
				inner, err := anthropicBlocks(b.Content)
				if err != nil {
					return fmt.Errorf("tool_result content: %w", err)
				}
				text, images := anthropicText(inner)
				msg.Images += images
				msg.ToolResults = append(msg.ToolResults, ToolResult{CallID: b.ToolUseID, Content: text, IsError: b.IsError})
			}
		}
		rec.Messages = append(rec.Messages, msg)
		if err := checkAnthropicBlocks(len(rec.Messages)-1, m.Role, blocks); err != nil {
			return err
		}
	}
	return validateAnthropic(rec)
}

// checkAnthropicBlocks applies the per-message rules the real API enforces.
func checkAnthropicBlocks(i int, role string, blocks []anReqBlock) error {
	if role != "user" && role != "assistant" {
		return fmt.Errorf("messages.%d.role: unexpected role %q", i, role)
	}
	if len(blocks) == 0 {
		return fmt.Errorf("messages.%d: all messages must have non-empty content", i)
	}
	seenOther := false
	for j, b := range blocks {
		switch b.Type {
		case "text":
			if b.Text == "" {
				return fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
			}
		case "tool_result":
			if role != "user" {
				return fmt.Errorf("messages.%d.content.%d: tool_result blocks are only allowed in user messages", i, j)
			}
			if seenOther {
				return fmt.Errorf("messages.%d.content.%d: tool_result blocks must come first in a user message", i, j)
			}
			continue
		case "tool_use":
			if role != "assistant" {
				return fmt.Errorf("messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
			}
			if len(b.Input) == 0 || b.Input[0] != '{' {
				return fmt.Errorf("messages.%d.content.%d.input: must be an object", i, j)
			}
		}
		seenOther = true
	}
	return nil
}

// validateAnthropic applies the request-level rules the real API enforces.
func validateAnthropic(rec *Recorded) error {
	if rec.Model == "" {
		return fmt.Errorf("model: field required")
	}
	if rec.MaxTokens <= 0 {
		return fmt.Errorf("max_tokens: field required")
	}
	if len(rec.Messages) == 0 {
		return fmt.Errorf("messages: at least one message is required")
	}
	for i, m := range rec.Messages {
		if len(m.ToolCalls) == 0 {
			continue
		}
		answered := map[string]bool{}
		if i+1 < len(rec.Messages) {
			for _, r := range rec.Messages[i+1].ToolResults {
				answered[r.CallID] = true
			}
		}
		for _, c := range m.ToolCalls {
			if !answered[c.ID] && i+1 < len(rec.Messages) {
				return fmt.Errorf("messages.%d: tool_use ids were found without tool_result blocks immediately after: %s", i, c.ID)
			}
		}
	}
	return nil
}

// anthropicBlocks reads a string (one text block) or an array of blocks.
func anthropicBlocks(raw json.RawMessage) ([]anReqBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []anReqBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anReqBlock
	err := json.Unmarshal(raw, &blocks)
	return blocks, err
}

func anthropicText(blocks []anReqBlock) (string, int) {
	var texts []string
	images := 0
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "image":
			images++
		}
	}
	return strings.Join(texts, "\n"), images
}
