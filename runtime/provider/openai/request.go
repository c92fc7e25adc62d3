package openai

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	openaisdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/picobot/picobot/runtime/llm"
)

// BuildParams translates a neutral request into Chat Completions parameters.
// It is exported for benchmarks and for callers that want to inspect the
// exact wire request; Complete uses it.
func (p *Provider) BuildParams(req llm.Request, stream bool) (openaisdk.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.opts.Model
	}
	if model == "" {
		return openaisdk.ChatCompletionNewParams{}, fmt.Errorf("failed to build request: no model configured")
	}
	params := openaisdk.ChatCompletionNewParams{Model: model}

	msgs := make([]openaisdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, openaisdk.SystemMessage(req.System))
	}
	// Images returned by tools cannot ride on tool messages (text only), and
	// tool messages must directly follow their assistant message, so they are
	// collected over a run of tool messages and sent in one user message after.
	var toolImages []openaisdk.ChatCompletionContentPartUnionParam
	flushToolImages := func() {
		if len(toolImages) == 0 {
			return
		}
		parts := append([]openaisdk.ChatCompletionContentPartUnionParam{
			openaisdk.TextContentPart("Images returned by the tools above:"),
		}, toolImages...)
		msgs = append(msgs, openaisdk.UserMessage(parts))
		toolImages = nil
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != llm.RoleTool {
			flushToolImages()
		}
		switch m.Role {
		case llm.RoleSystem:
			msgs = append(msgs, openaisdk.SystemMessage(m.Content))
		case llm.RoleUser:
			if len(m.Images) == 0 {
				msgs = append(msgs, openaisdk.UserMessage(m.Content))
				continue
			}
			parts := make([]openaisdk.ChatCompletionContentPartUnionParam, 0, len(m.Images)+1)
			if m.Content != "" {
				parts = append(parts, openaisdk.TextContentPart(m.Content))
			}
			for _, img := range m.Images {
				parts = append(parts, imagePart(img))
			}
			msgs = append(msgs, openaisdk.UserMessage(parts))
		case llm.RoleAssistant:
			a := &openaisdk.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			if len(m.ToolCalls) > 0 {
				a.ToolCalls = make([]openaisdk.ChatCompletionMessageToolCallUnionParam, len(m.ToolCalls))
				for j, tc := range m.ToolCalls {
					a.ToolCalls[j].OfFunction = &openaisdk.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openaisdk.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: tc.Name, Arguments: tc.Arguments,
						},
					}
				}
			}
			msgs = append(msgs, openaisdk.ChatCompletionMessageParamUnion{OfAssistant: a})
		case llm.RoleTool:
			msgs = append(msgs, openaisdk.ToolMessage(m.Content, m.ToolCallID))
			for _, img := range m.Images {
				toolImages = append(toolImages, imagePart(img))
			}
		default:
			return openaisdk.ChatCompletionNewParams{}, fmt.Errorf("failed to build request: message %d has unknown role %q", i, m.Role)
		}
	}
	flushToolImages()
	params.Messages = msgs

	if len(req.Tools) > 0 {
		params.Tools = make([]openaisdk.ChatCompletionToolUnionParam, len(req.Tools))
		for i, t := range req.Tools {
			def, err := functionDefinition(t)
			if err != nil {
				return openaisdk.ChatCompletionNewParams{}, err
			}
			params.Tools[i] = openaisdk.ChatCompletionFunctionTool(def)
		}
	}
	if maxTokens := firstNonZero(req.MaxTokens, p.opts.MaxTokens); maxTokens > 0 {
		params.MaxCompletionTokens = param.NewOpt(int64(maxTokens))
	}
	if req.Temperature != nil {
		params.Temperature = param.NewOpt(*req.Temperature)
	}
	if req.JSON {
		params.ResponseFormat.OfJSONObject = &shared.ResponseFormatJSONObjectParam{}
	}
	if stream {
		params.StreamOptions.IncludeUsage = param.NewOpt(true)
	}
	return params, nil
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
func imagePart(img llm.Image) openaisdk.ChatCompletionContentPartUnionParam {
	var b strings.Builder
	b.Grow(len("data:;base64,") + len(img.MediaType) + base64.StdEncoding.EncodedLen(len(img.Data)))
	b.WriteString("data:")
	b.WriteString(img.MediaType)
	b.WriteString(";base64,")
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	_, _ = enc.Write(img.Data)
	_ = enc.Close()
	return openaisdk.ImageContentPart(openaisdk.ChatCompletionContentPartImageImageURLParam{URL: b.String()})
}

// noParameters is the schema of a tool declared without one.
const noParameters = `{"type":"object","properties":{}}`

// functionDefinition declares a tool with its JSON schema passed through
// byte for byte: the definition is written as raw JSON (the SDK would
// otherwise need the schema decoded into a map and re-encoded on every call).
func functionDefinition(t llm.ToolDef) (shared.FunctionDefinitionParam, error) {
	schema := []byte(t.Parameters)
	if len(schema) == 0 {
		schema = []byte(noParameters)
	} else if !json.Valid(schema) {
		return shared.FunctionDefinitionParam{}, fmt.Errorf("failed to build schema of tool %q: invalid JSON", t.Name)
	}
	name, err := json.Marshal(t.Name)
	if err != nil {
		return shared.FunctionDefinitionParam{}, fmt.Errorf("failed to encode name of tool %q: %w", t.Name, err)
	}
	buf := make([]byte, 0, len(name)+len(t.Description)+len(schema)+48)
	buf = append(buf, `{"name":`...)
	buf = append(buf, name...)
	if t.Description != "" {
		desc, err := json.Marshal(t.Description)
		if err != nil {
			return shared.FunctionDefinitionParam{}, fmt.Errorf("failed to encode description of tool %q: %w", t.Name, err)
		}
		buf = append(buf, `,"description":`...)
		buf = append(buf, desc...)
	}
	buf = append(buf, `,"parameters":`...)
	buf = append(buf, schema...)
	buf = append(buf, '}')
	return param.Override[shared.FunctionDefinitionParam](json.RawMessage(buf)), nil
}
