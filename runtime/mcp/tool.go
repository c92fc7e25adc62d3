package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	// maxDescription keeps MCP descriptions, which are sent with every
	// request, from crowding the prompt.
	maxDescription = 400
	// maxNameLen is the longest function name the model providers accept.
	maxNameLen = 64
	// maxOutputChars caps what one call returns to the model, like the
	// built-in tools do.
	maxOutputChars = 50_000
)

// mcpTool is one MCP tool offered to the model.
type mcpTool struct {
	srv      *server
	name     string // registered name, mcp_<server>_<tool>
	original string // the server's own name, used for calls and settings
	desc     string
	schema   json.RawMessage
	traits   tool.Traits
}

// newTool wraps t; used holds the names already taken.
func newTool(s *server, t *mcpsdk.Tool, used map[string]bool) *mcpTool {
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = strings.TrimSpace(t.Title)
	}
	if desc == "" {
		desc = fmt.Sprintf("Tool %s of MCP server %s.", t.Name, s.spec.Name)
	}
	var traits tool.Traits
	if st, ok := s.settings[t.Name]; ok {
		traits.ReadOnly = st.ReadOnly != nil && *st.ReadOnly
		traits.Exclusive = st.Exclusive != nil && *st.Exclusive
	}
	return &mcpTool{
		srv:      s,
		name:     uniqueName(toolName(s.spec.Name, t.Name), used),
		original: t.Name,
		desc:     truncateRunes(desc, maxDescription),
		schema:   objectSchema(t.InputSchema),
		traits:   traits,
	}
}

// toolName is mcp_<server>_<tool> in lower-case [a-z0-9_], the only names
// every model provider accepts.
func toolName(serverName, toolName string) string {
	t := sanitize(toolName)
	if t == "" {
		t = "tool"
	}
	return "mcp_" + sanitize(serverName) + "_" + t
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// uniqueName shortens base to the provider limit and appends _2, _3, … while
// the name is taken (two tools that differ only in punctuation, or a server
// and tool split that reads the same).
func uniqueName(base string, used map[string]bool) string {
	name := base[:min(len(base), maxNameLen)]
	for i := 2; used[name]; i++ {
		suffix := "_" + strconv.Itoa(i)
		name = base[:min(len(base), maxNameLen-len(suffix))] + suffix
	}
	return name
}

// objectSchema passes the tool's input schema through, making sure it is an
// object schema with properties, which the model APIs require.
func objectSchema(in any) json.RawMessage {
	obj := map[string]any{}
	if in != nil {
		if raw, err := json.Marshal(in); err == nil {
			if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
				obj = map[string]any{}
			}
		}
	}
	obj["type"] = "object"
	if _, ok := obj["properties"].(map[string]any); !ok {
		obj["properties"] = map[string]any{}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return out
}

// Name implements tool.Tool.
func (t *mcpTool) Name() string { return t.name }

// Description implements tool.Tool.
func (t *mcpTool) Description() string { return t.desc }

// Schema implements tool.Tool.
func (t *mcpTool) Schema() json.RawMessage { return t.schema }

// Traits implements tool.Tool.
func (t *mcpTool) Traits() tool.Traits { return t.traits }

// Run implements tool.Tool. Arguments are only checked to be a JSON object:
// the server validates them against its own schema and says what is wrong.
func (t *mcpTool) Run(ctx context.Context, _ tool.Env, raw json.RawMessage) (tool.Result, error) {
	args, err := objectArgs(raw)
	if err != nil {
		return tool.Result{}, &tool.ArgumentError{Tool: t.name, Err: err}
	}
	return t.srv.call(ctx, t.original, args)
}

// objectArgs returns raw as a JSON object; empty and null mean no arguments.
// The bytes go to the server unchanged, so large integers keep their digits.
func objectArgs(raw json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(trimmed) {
		return nil, errors.New("arguments are not valid JSON")
	}
	if trimmed[0] != '{' {
		return nil, errors.New("arguments must be a JSON object")
	}
	return json.RawMessage(trimmed), nil
}

// convertResult turns an MCP result into text for the model: text parts as
// they are, other parts as a short bracketed summary; images also come as
// artifacts, which the agent loop shows a model that accepts images. A
// result flagged isError stays an error.
func convertResult(res *mcpsdk.CallToolResult) tool.Result {
	var parts []string
	var images []tool.Artifact
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcpsdk.TextContent:
			parts = append(parts, c.Text)
		case *mcpsdk.ImageContent:
			// The agent loop shows the image to a model that accepts
			// images, and puts a note in its place for one that does not.
			images = append(images, tool.Artifact{Name: fmt.Sprintf("image-%d", len(images)+1), MediaType: c.MIMEType, Data: c.Data})
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcpsdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcpsdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s]", c.URI))
		case *mcpsdk.EmbeddedResource:
			parts = append(parts, embeddedResource(c.Resource))
		case nil:
		default:
			parts = append(parts, fmt.Sprintf("[%T content]", c))
		}
	}
	// Servers should mirror structured content in a text part; when one does
	// not, the JSON is all the model can get.
	if len(parts) == 0 && res.StructuredContent != nil {
		if raw, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(raw))
		}
	}
	text := strings.Join(parts, "\n")
	if strings.TrimSpace(text) == "" {
		text = "(the tool returned no content)"
	}
	if utf8.RuneCountInString(text) > maxOutputChars {
		text = truncateRunes(text, maxOutputChars) + fmt.Sprintf("\n[output cut at %d characters]", maxOutputChars)
	}
	return tool.Result{Content: text, IsError: res.IsError, Artifacts: images}
}

// embeddedResource summarises a resource; a text resource also brings its
// text, which is usually what the tool was asked for (a file's contents).
func embeddedResource(r *mcpsdk.ResourceContents) string {
	if r == nil {
		return "[resource]"
	}
	if r.Text != "" {
		return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
	}
	return fmt.Sprintf("[resource %s]", r.URI)
}

// truncateRunes cuts s to at most n characters, marking the cut with "…".
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
