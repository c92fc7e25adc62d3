package anthropic

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	anthropicsdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/picobot/picobot/runtime/llm"
)

// JSONInstruction is appended to the system prompt of a Request with JSON
// set: the Messages API has no JSON mode, so the model is told instead.
const JSONInstruction = "Respond with a single JSON object only, with no text before or after it."

// schemaInstruction emulates OpenAI's response_format json_schema, which
// the Messages API lacks: the model is told the schema, and nothing checks
// that the answer matches it.
func schemaInstruction(s *llm.JSONSchema) string {
	var b strings.Builder
	b.WriteString(JSONInstruction)
	b.WriteString(" The object must match this JSON Schema")
	if s.Name != "" {
		b.WriteString(" (")
		b.WriteString(s.Name)
		b.WriteString(")")
	}
	if s.Description != "" {
		b.WriteString(", which describes ")
		b.WriteString(s.Description)
	}
	b.WriteString(":\n")
	if len(s.Schema) == 0 {
		b.WriteString("{}")
	} else {
		b.Write(s.Schema)
	}
	return b.String()
}

// emptyInput stands in for tool-call arguments that are not a JSON object:
// tool_use.input must be one, and a model's malformed arguments from an
// earlier turn must not make the whole conversation unsendable.
const emptyInput = `{}`

// BuildParams translates a neutral request into Messages API parameters.
// It is exported for benchmarks and for callers that want to inspect the
// exact wire request; Complete uses it.
//
// Mapping: the system prompt (plus any system-role messages and the JSON
// instruction) becomes the top-level system; tool results become tool_result
// blocks in a user message; consecutive messages of one role are merged, so
// the tool results answering one assistant turn arrive together in a single
// user message as the API requires.
func (p *Provider) BuildParams(req llm.Request) (anthropicsdk.MessageNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.opts.Model
	}
	if model == "" {
		return anthropicsdk.MessageNewParams{}, fmt.Errorf("failed to build request: no model configured")
	}
	params := anthropicsdk.MessageNewParams{
		Model:     model,
		MaxTokens: int64(firstNonZero(req.MaxTokens, p.opts.MaxTokens, DefaultMaxTokens)),
	}
	var system []string
	if req.System != "" {
		system = append(system, req.System)
	}
	msgs, more, err := messageParams(req.Messages)
	if err != nil {
		return anthropicsdk.MessageNewParams{}, err
	}
	params.Messages = msgs
	system = append(system, more...)
	switch {
	case req.Schema != nil:
		system = append(system, schemaInstruction(req.Schema))
	case req.JSON:
		system = append(system, JSONInstruction)
	}
	if len(system) > 0 {
		params.System = []anthropicsdk.TextBlockParam{{Text: strings.Join(system, "\n\n")}}
	}
	if params.Tools, err = toolParams(req.Tools); err != nil {
		return anthropicsdk.MessageNewParams{}, err
	}
	if req.Temperature != nil {
		params.Temperature = param.NewOpt(*req.Temperature)
	}
	return params, nil
}

// messageParams maps a conversation to Anthropic messages: system messages
// are returned apart (Anthropic has one system prompt), tool results become
// user messages, and consecutive messages of one role are merged (the API
// wants roles to alternate).
func messageParams(in []llm.Message) (msgs []anthropicsdk.MessageParam, system []string, err error) {
	msgs = make([]anthropicsdk.MessageParam, 0, len(in))
	add := func(role anthropicsdk.MessageParamRole, blocks ...anthropicsdk.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, anthropicsdk.MessageParam{Role: role, Content: blocks})
	}
	for i := range in {
		m := &in[i]
		switch m.Role {
		case llm.RoleSystem:
			if m.Content != "" {
				system = append(system, m.Content)
			}
		case llm.RoleUser:
			add(anthropicsdk.MessageParamRoleUser, userBlocks(m)...)
		case llm.RoleAssistant:
			add(anthropicsdk.MessageParamRoleAssistant, assistantBlocks(m)...)
		case llm.RoleTool:
			add(anthropicsdk.MessageParamRoleUser, anthropicsdk.ContentBlockParamUnion{OfToolResult: toolResultBlock(m)})
		default:
			return nil, nil, fmt.Errorf("failed to build request: message %d has unknown role %q", i, m.Role)
		}
	}
	return msgs, system, nil
}

func userBlocks(m *llm.Message) []anthropicsdk.ContentBlockParamUnion {
	blocks := make([]anthropicsdk.ContentBlockParamUnion, 0, len(m.Images)+1)
	for _, img := range m.Images {
		blocks = append(blocks, anthropicsdk.ContentBlockParamUnion{OfImage: imageBlock(img)})
	}
	if m.Content != "" {
		blocks = append(blocks, anthropicsdk.ContentBlockParamUnion{OfText: &anthropicsdk.TextBlockParam{Text: m.Content}})
	}
	return blocks
}

func assistantBlocks(m *llm.Message) []anthropicsdk.ContentBlockParamUnion {
	blocks := make([]anthropicsdk.ContentBlockParamUnion, 0, len(m.ToolCalls)+1)
	if m.Content != "" {
		blocks = append(blocks, anthropicsdk.ContentBlockParamUnion{OfText: &anthropicsdk.TextBlockParam{Text: m.Content}})
	}
	for _, tc := range m.ToolCalls {
		blocks = append(blocks, anthropicsdk.ContentBlockParamUnion{OfToolUse: &anthropicsdk.ToolUseBlockParam{
			ID: tc.ID, Name: tc.Name, Input: toolInput(tc.Arguments),
		}})
	}
	return blocks
}

func toolResultBlock(m *llm.Message) *anthropicsdk.ToolResultBlockParam {
	res := &anthropicsdk.ToolResultBlockParam{ToolUseID: m.ToolCallID}
	if m.IsError {
		res.IsError = param.NewOpt(true)
	}
	if m.Content != "" || len(m.Images) > 0 {
		res.Content = make([]anthropicsdk.ToolResultBlockParamContentUnion, 0, len(m.Images)+1)
	}
	if m.Content != "" {
		res.Content = append(res.Content, anthropicsdk.ToolResultBlockParamContentUnion{OfText: &anthropicsdk.TextBlockParam{Text: m.Content}})
	}
	for _, img := range m.Images {
		res.Content = append(res.Content, anthropicsdk.ToolResultBlockParamContentUnion{OfImage: imageBlock(img)})
	}
	return res
}

// toolParams declares the request's tools.
func toolParams(tools []llm.ToolDef) ([]anthropicsdk.ToolUnionParam, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]anthropicsdk.ToolUnionParam, len(tools))
	for i, t := range tools {
		if len(t.Parameters) > 0 && !json.Valid(t.Parameters) {
			return nil, fmt.Errorf("failed to build schema of tool %q: invalid JSON", t.Name)
		}
		tool := &anthropicsdk.ToolParam{Name: t.Name, InputSchema: inputSchema(t.Parameters)}
		if t.Description != "" {
			tool.Description = param.NewOpt(t.Description)
		}
		out[i] = anthropicsdk.ToolUnionParam{OfTool: tool}
	}
	return out, nil
}

// noParameters is the schema of a tool declared without one; input_schema
// is required.
const noParameters = `{"type":"object","properties":{}}`

// inputSchema sends a tool's JSON schema as-is, without decoding it.
func inputSchema(raw json.RawMessage) anthropicsdk.ToolInputSchemaParam {
	if len(raw) == 0 {
		raw = json.RawMessage(noParameters)
	}
	return param.Override[anthropicsdk.ToolInputSchemaParam](raw)
}

// toolInput is a tool call's arguments as tool_use.input: raw when they are
// a JSON object, else an empty object.
func toolInput(args string) json.RawMessage {
	s := strings.TrimSpace(args)
	if s == "" || s[0] != '{' || !json.Valid([]byte(s)) {
		return json.RawMessage(emptyInput)
	}
	return json.RawMessage(s)
}

func imageBlock(img llm.Image) *anthropicsdk.ImageBlockParam {
	return &anthropicsdk.ImageBlockParam{Source: anthropicsdk.ImageBlockParamSourceUnion{
		OfBase64: &anthropicsdk.Base64ImageSourceParam{
			Data:      base64.StdEncoding.EncodeToString(img.Data),
			MediaType: anthropicsdk.Base64ImageSourceMediaType(img.MediaType),
		},
	}}
}

// firstNonZero returns the first non-zero value, or 0.
func firstNonZero(vs ...int) int {
	for _, v := range vs {
		if v != 0 {
			return v
		}
	}
	return 0
}
