package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/turn"
)

// Completion is a stateless turn of the OpenAI endpoint: the agent answers
// exactly the client's messages, as the OpenAI API does, and nothing of the
// conversation is stored.
type Completion struct {
	Agent string
	protocol.Stateless
	Stream bool
	// Sink receives the turn's events; it is called from another goroutine.
	Sink func(turn.Event)
}

// Completed is how a stateless turn ended.
type Completed struct {
	Text string
	// ToolCalls are the calls of the client's tools that ended the turn.
	ToolCalls []llm.ToolCall
}

// Errors of client tools a backend refuses (runtime/protocol).
var (
	ErrClientToolsRefused = protocol.ErrClientToolsRefused
	ErrClientToolClash    = protocol.ErrClientToolClash
)

// StatelessBackend is implemented by backends that run stateless turns.
// Without it the endpoint refuses requests that would be stateless and says
// how to name a chat instead.
type StatelessBackend interface {
	Complete(ctx context.Context, c Completion) (Completed, error)
}

// Request shapes of the stateless mode.
type (
	oaToolCall struct {
		// Index is set in stream deltas only.
		Index    *int       `json:"index,omitempty"`
		ID       string     `json:"id"`
		Type     string     `json:"type"`
		Function oaFunction `json:"function"`
	}
	oaFunction struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	oaTool struct {
		Type     string `json:"type"`
		Function *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	oaResponseFormat struct {
		Type       string          `json:"type"`
		JSONSchema *llm.JSONSchema `json:"json_schema"`
	}
)

// toolName is what OpenAI accepts as a function name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// badParam is a refused request: the field and why.
type badParam struct{ param, msg string }

func badf(param, format string, args ...any) *badParam {
	return &badParam{param: param, msg: fmt.Sprintf(format, args...)}
}

// stateless reports whether a request without a session key runs in the
// stateless mode: it carries more than a single user message (prior turns,
// system or developer messages), client tools, or model settings. Only a
// bare user message goes to the API key's own chat.
func (req *oaRequest) stateless() bool {
	if len(req.Tools) > 0 || req.hasSettings() || len(req.Messages) > 1 {
		return true
	}
	return len(req.Messages) == 1 && req.Messages[0].Role != "user"
}

// hasSettings reports whether the request sets a model setting.
func (req *oaRequest) hasSettings() bool {
	return req.Temperature != nil || req.MaxTokens != nil || req.MaxCompletionTokens != nil ||
		(req.ResponseFormat != nil && req.ResponseFormat.Type != "text")
}

// settings checks and returns the request's model settings, nil when it
// sets none.
func (req *oaRequest) settings() (*llm.Settings, *badParam) {
	var s llm.Settings
	set := false
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return nil, badf("temperature", "temperature must be between 0 and 2 (got %g)", *t)
		}
		s.Temperature, set = t, true
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return nil, badf(f.name, "%s must be at least 1 (got %d)", f.name, *f.v)
		}
		if s.MaxTokens != 0 && s.MaxTokens != *f.v {
			return nil, badf(f.name, "max_tokens (%d) and max_completion_tokens (%d) differ: send one", s.MaxTokens, *f.v)
		}
		s.MaxTokens, set = *f.v, true
	}
	if f := req.ResponseFormat; f != nil {
		switch f.Type {
		case "text":
		case "json_object":
			s.JSON, set = true, true
		case "json_schema":
			js := f.JSONSchema
			if js == nil {
				return nil, badf("response_format.json_schema", "response_format of type json_schema needs a json_schema object")
			}
			if !toolName.MatchString(js.Name) {
				return nil, badf("response_format.json_schema.name", "json_schema.name must be 1-64 letters, digits, _ or - (got %q)", js.Name)
			}
			if len(js.Schema) > 0 && !isJSONObject(js.Schema) {
				return nil, badf("response_format.json_schema.schema", "json_schema.schema must be a JSON Schema object")
			}
			s.Schema, set = js, true
		default:
			return nil, badf("response_format.type", "response_format.type must be text, json_object or json_schema (got %q)", f.Type)
		}
	}
	if !set {
		return nil, nil
	}
	return &s, nil
}

// clientTools checks and returns the request's function tools.
func (req *oaRequest) clientTools() ([]llm.ToolDef, *badParam) {
	switch choice := strings.TrimSpace(string(req.ToolChoice)); choice {
	case "", "null", `"auto"`:
	case `"none"`:
		return nil, nil // the model may call none: offer none
	default:
		return nil, badf("tool_choice", "tool_choice must be \"auto\" or \"none\": PicoBot does not force tool calls")
	}
	if len(req.Tools) == 0 {
		return nil, nil
	}
	defs := make([]llm.ToolDef, 0, len(req.Tools))
	seen := map[string]bool{}
	for i, t := range req.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" || t.Function == nil {
			return nil, badf(param+".type", "tools[%d] must be a function tool (type \"function\" with a function object; got type %q)", i, t.Type)
		}
		f := t.Function
		if !toolName.MatchString(f.Name) {
			return nil, badf(param+".function.name", "tools[%d].function.name must be 1-64 letters, digits, _ or - (got %q)", i, f.Name)
		}
		if seen[f.Name] {
			return nil, badf(param+".function.name", "tool %q is declared twice", f.Name)
		}
		seen[f.Name] = true
		params := f.Parameters
		if len(params) > 0 && string(params) != "null" && !isJSONObject(params) {
			return nil, badf(param+".function.parameters", "tools[%d].function.parameters must be a JSON Schema object", i)
		}
		if string(params) == "null" {
			params = nil
		}
		defs = append(defs, llm.ToolDef{Name: f.Name, Description: f.Description, Parameters: params})
	}
	return defs, nil
}

func isJSONObject(raw json.RawMessage) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(raw, &v) == nil && v != nil
}

// completion maps a stateless request's messages to a Completion: system
// and developer messages become System, the rest the conversation, checked
// as the OpenAI API checks it (tool results answer earlier calls; the last
// message is the user's or a tool result).
func (req *oaRequest) completion() (Completion, *badParam) {
	c := Completion{Agent: req.Model, Stream: req.Stream}
	var system []string
	calls := map[string]string{} // call id -> tool name
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		text, bad := contentText(m.Content, param)
		if bad != nil {
			return Completion{}, bad
		}
		if strings.ContainsRune(text, 0) {
			return Completion{}, badf(param+".content", "messages[%d] contains a NUL character", i)
		}
		switch m.Role {
		case "system", "developer":
			if text != "" {
				system = append(system, text)
			}
		case "user":
			c.Messages = append(c.Messages, llm.Message{Role: llm.RoleUser, Content: text})
		case "assistant":
			am := llm.Message{Role: llm.RoleAssistant, Content: text}
			for j, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Function.Name == "" {
					return Completion{}, badf(fmt.Sprintf("%s.tool_calls[%d]", param, j), "a tool call needs an id and a function name")
				}
				calls[tc.ID] = tc.Function.Name
				am.ToolCalls = append(am.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			c.Messages = append(c.Messages, am)
		case "tool":
			name, ok := calls[m.ToolCallID]
			if !ok {
				return Completion{}, badf(param+".tool_call_id", "messages[%d] answers tool call %q, which no earlier assistant message made", i, m.ToolCallID)
			}
			c.Messages = append(c.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: m.ToolCallID, Name: name, Content: text})
		default:
			return Completion{}, badf(param+".role", "messages[%d].role must be system, developer, user, assistant or tool (got %q)", i, m.Role)
		}
	}
	if n := len(c.Messages); n == 0 || (c.Messages[n-1].Role != llm.RoleUser && c.Messages[n-1].Role != llm.RoleTool) {
		return Completion{}, badf("messages", "the last message must be the user's or a tool result")
	}
	c.System = strings.Join(system, "\n\n")
	return c, nil
}

// contentText reads a message's content: a string, an array of text
// parts, or null.
func contentText(raw json.RawMessage, param string) (string, *badParam) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var parts []oaPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badf(param+".content", "%s.content must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", badf(param+".content", "content part type %q is not supported; send text", p.Type)
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// wireToolCalls are calls as OpenAI replies carry them; indexed for a
// stream's delta.
func wireToolCalls(calls []llm.ToolCall, indexed bool) []oaToolCall {
	out := make([]oaToolCall, len(calls))
	for i, c := range calls {
		out[i] = oaToolCall{ID: c.ID, Type: "function", Function: oaFunction{Name: c.Name, Arguments: c.Arguments}}
		if indexed {
			out[i].Index = &i
		}
	}
	return out
}
