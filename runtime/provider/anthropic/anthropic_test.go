package anthropic_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/anthropic"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const testKey = "sk-ant-test-key"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newProvider(t testing.TB, s *fakellm.Server, maxTokens int) *anthropic.Provider {
	t.Helper()
	p, err := anthropic.New(anthropic.Options{BaseURL: s.AnthropicURL(), APIKey: testKey, Model: "claude-test", MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var png = []byte("\x89PNG\r\n\x1a\nfake-image-bytes")

func TestRequestMapping(t *testing.T) {
	temp := 0.2
	tests := []struct {
		name      string
		req       llm.Request
		maxTokens int
		want      fakellm.Recorded // only the neutral fields are compared
	}{
		{
			name: "system, tool calls and grouped tool results",
			req: llm.Request{
				System: "You are terse.",
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: "What is in this picture?", Images: []llm.Image{{MediaType: "image/png", Data: png}}},
					{Role: llm.RoleAssistant, Content: "Let me look.", ToolCalls: []llm.ToolCall{
						{ID: "toolu_1", Name: "read_file", Arguments: `{"path":"a.txt"}`},
						{ID: "toolu_2", Name: "fetch", Arguments: `{"url":"https://example.com"}`},
						{ID: "toolu_3", Name: "clock", Arguments: ``},
					}},
					{Role: llm.RoleTool, ToolCallID: "toolu_1", Name: "read_file", Content: "file body"},
					{Role: llm.RoleTool, ToolCallID: "toolu_2", Name: "fetch", Content: "HTTP 404", IsError: true},
					{Role: llm.RoleTool, ToolCallID: "toolu_3", Name: "clock", Content: "12:00", Images: []llm.Image{{MediaType: "image/png", Data: png}}},
					{Role: llm.RoleAssistant, Content: "Done."},
					{Role: llm.RoleSystem, Content: "Summary of earlier turns."},
					{Role: llm.RoleUser, Content: "thanks"},
				},
				Tools:       []llm.ToolDef{{Name: "read_file"}, {Name: "fetch"}, {Name: "clock"}},
				Temperature: &temp,
			},
			want: fakellm.Recorded{
				Model:     "claude-test",
				System:    "You are terse.\n\nSummary of earlier turns.",
				MaxTokens: anthropic.DefaultMaxTokens,
				Tools:     []string{"read_file", "fetch", "clock"},
				Messages: []fakellm.Message{
					{Role: "user", Content: "What is in this picture?", Images: 1},
					{Role: "assistant", Content: "Let me look.", ToolCalls: []fakellm.Call{
						{ID: "toolu_1", Name: "read_file", Args: `{"path":"a.txt"}`},
						{ID: "toolu_2", Name: "fetch", Args: `{"url":"https://example.com"}`},
						{ID: "toolu_3", Name: "clock", Args: `{}`},
					}},
					// Three tool results, one user message.
					{Role: "user", Images: 1, ToolResults: []fakellm.ToolResult{
						{CallID: "toolu_1", Content: "file body"},
						{CallID: "toolu_2", Content: "HTTP 404", IsError: true},
						{CallID: "toolu_3", Content: "12:00"},
					}},
					{Role: "assistant", Content: "Done."},
					{Role: "user", Content: "thanks"},
				},
			},
		},
		{
			name: "consecutive same-role messages merge, tool results first",
			req: llm.Request{
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: "first"},
					{Role: llm.RoleUser, Content: "second"},
					{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "t1", Name: "a", Arguments: `{}`}}},
					{Role: llm.RoleTool, ToolCallID: "t1", Content: "result"},
					{Role: llm.RoleUser, Content: "and also this"},
					{Role: llm.RoleAssistant, Content: "part one"},
					{Role: llm.RoleAssistant, Content: "part two"},
					{Role: llm.RoleUser, Content: ""},
				},
			},
			maxTokens: 1000,
			want: fakellm.Recorded{
				Model:     "claude-test",
				MaxTokens: 1000,
				Messages: []fakellm.Message{
					{Role: "user", Content: "first\nsecond"},
					{Role: "assistant", ToolCalls: []fakellm.Call{{ID: "t1", Name: "a", Args: `{}`}}},
					{Role: "user", Content: "and also this", ToolResults: []fakellm.ToolResult{{CallID: "t1", Content: "result"}}},
					{Role: "assistant", Content: "part one\npart two"},
				},
			},
		},
		{
			name: "JSON mode instructs through the system prompt",
			req: llm.Request{
				System:    "Extract the fields.",
				Messages:  []llm.Message{{Role: llm.RoleUser, Content: "name: Ada"}},
				JSON:      true,
				MaxTokens: 300,
			},
			want: fakellm.Recorded{
				Model:     "claude-test",
				System:    "Extract the fields.\n\n" + anthropic.JSONInstruction,
				MaxTokens: 300,
				Messages:  []fakellm.Message{{Role: "user", Content: "name: Ada"}},
			},
		},
		{
			name: "malformed arguments from history are sent as an empty object",
			req: llm.Request{
				Model: "claude-other",
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: "go"},
					{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "t1", Name: "a", Arguments: `{"unterminated`}, {ID: "t2", Name: "b", Arguments: `[1,2]`}}},
					{Role: llm.RoleTool, ToolCallID: "t1", Content: "invalid arguments", IsError: true},
					{Role: llm.RoleTool, ToolCallID: "t2", Content: "invalid arguments", IsError: true},
				},
			},
			want: fakellm.Recorded{
				Model:     "claude-other",
				MaxTokens: anthropic.DefaultMaxTokens,
				Messages: []fakellm.Message{
					{Role: "user", Content: "go"},
					{Role: "assistant", ToolCalls: []fakellm.Call{{ID: "t1", Name: "a", Args: `{}`}, {ID: "t2", Name: "b", Args: `{}`}}},
					{Role: "user", ToolResults: []fakellm.ToolResult{
						{CallID: "t1", Content: "invalid arguments", IsError: true},
						{CallID: "t2", Content: "invalid arguments", IsError: true},
					}},
				},
			},
		},
	}
	for _, stream := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(map[bool]string{false: "sync", true: "stream"}[stream]+"/"+tt.name, func(t *testing.T) {
				g := NewWithT(t)
				s := fakellm.New()
				defer s.Close()
				s.Script(fakellm.Turn{Text: "ok"})

				var onDelta func(llm.Delta)
				if stream {
					onDelta = func(llm.Delta) {}
				}
				_, err := newProvider(t, s, tt.maxTokens).Complete(context.Background(), tt.req, onDelta)
				g.Expect(err).NotTo(HaveOccurred())

				reqs := s.Requests()
				g.Expect(reqs).To(HaveLen(1))
				r := reqs[0]
				g.Expect(r.Protocol).To(Equal(fakellm.ProtocolAnthropic))
				g.Expect(r.Path).To(Equal("/v1/messages"))
				g.Expect(r.Header.Get("X-Api-Key")).To(Equal(testKey))
				g.Expect(r.Header.Get("Anthropic-Version")).NotTo(BeEmpty())
				g.Expect(r.Stream).To(Equal(stream))
				g.Expect(r.Model).To(Equal(tt.want.Model))
				g.Expect(r.System).To(Equal(tt.want.System))
				g.Expect(r.MaxTokens).To(Equal(tt.want.MaxTokens))
				g.Expect(r.Tools).To(Equal(tt.want.Tools))
				g.Expect(r.Messages).To(Equal(tt.want.Messages))
			})
		}
	}
}

func TestRequestWireDetails(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Script(fakellm.Turn{Text: "ok"})
	temp := 0.7
	schema := `{"type":"object","properties":{"path":{"type":"string","description":"Path"}},"required":["path"],"additionalProperties":false}`

	_, err := newProvider(t, s, 0).Complete(context.Background(), llm.Request{
		System: "sys",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "look", Images: []llm.Image{{MediaType: "image/png", Data: png}}},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "t1", Name: "read_file", Arguments: `{"path": "a",  "n": 1}`}}},
			{Role: llm.RoleTool, ToolCallID: "t1", Content: "boom", IsError: true},
		},
		Tools:       []llm.ToolDef{{Name: "read_file", Description: "Reads a file", Parameters: json.RawMessage(schema)}, {Name: "noargs"}},
		Temperature: &temp,
	}, nil)
	g.Expect(err).NotTo(HaveOccurred())

	var body struct {
		System      json.RawMessage `json:"system"`
		Temperature float64         `json:"temperature"`
		Messages    []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	g.Expect(json.Unmarshal(s.Requests()[0].Body, &body)).To(Succeed())
	g.Expect(string(body.System)).To(MatchJSON(`[{"type":"text","text":"sys"}]`))
	g.Expect(body.Temperature).To(Equal(0.7))
	g.Expect(string(body.Messages[0].Content)).To(MatchJSON(`[
		{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + base64.StdEncoding.EncodeToString(png) + `"}},
		{"type":"text","text":"look"}
	]`))
	g.Expect(string(body.Messages[1].Content)).To(MatchJSON(`[{"type":"tool_use","id":"t1","name":"read_file","input":{"path":"a","n":1}}]`))
	g.Expect(string(body.Messages[2].Content)).To(MatchJSON(`[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"boom"}]}]`))
	g.Expect(body.Tools[0].Description).To(Equal("Reads a file"))
	g.Expect(string(body.Tools[0].InputSchema)).To(Equal(schema), "the schema is sent byte for byte")
	g.Expect(string(body.Tools[1].InputSchema)).To(MatchJSON(`{"type":"object","properties":{}}`))
}

func TestBuildParamsErrors(t *testing.T) {
	tests := []struct {
		name string
		req  llm.Request
		want string
	}{
		{name: "unknown role", req: llm.Request{Messages: []llm.Message{{Role: "narrator", Content: "x"}}}, want: `unknown role "narrator"`},
		{name: "schema not JSON", req: llm.Request{Tools: []llm.ToolDef{{Name: "broken", Parameters: json.RawMessage(`{"type":`)}}}, want: `tool "broken"`},
	}
	p, err := anthropic.New(anthropic.Options{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.BuildParams(tt.req)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

func TestUsageIncludesCache(t *testing.T) {
	// Anthropic's input_tokens excludes cache reads; the neutral count is
	// the whole prompt.
	for _, stream := range []bool{false, true} {
		g := NewWithT(t)
		s := fakellm.New()
		s.Script(fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 1000, OutputTokens: 12, CachedInputTokens: 800}})
		var onDelta func(llm.Delta)
		if stream {
			onDelta = func(llm.Delta) {}
		}
		resp, err := newProvider(t, s, 0).Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, onDelta)
		s.Close()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Usage).To(Equal(llm.Usage{InputTokens: 1000, OutputTokens: 12, CachedInputTokens: 800}))
		g.Expect(string(s.Requests()[0].Body)).NotTo(ContainSubstring("cache_read"))
	}
}

// The Messages API has no response_format: a JSON schema is emulated by
// telling the model the schema in the system prompt; the temperature and
// the output cap go out as the API's own fields.
func TestRequestJSONSchemaIsEmulated(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Script(fakellm.Turn{Text: `{"city":"Paris"}`})
	temp := 1.5
	req := llm.Request{System: "sys", Messages: []llm.Message{{Role: llm.RoleUser, Content: "where?"}}}
	(&llm.Settings{MaxTokens: 64, Temperature: &temp, Schema: &llm.JSONSchema{Name: "place",
		Schema: json.RawMessage(`{"type":"object","required":["city"]}`)}}).Apply(&req)
	_, err := newProvider(t, s, 0).Complete(context.Background(), req, nil)
	g.Expect(err).NotTo(HaveOccurred())
	r := s.Requests()[0]
	g.Expect(r.MaxTokens).To(Equal(64))
	g.Expect(r.Temperature).To(HaveValue(Equal(1.5)))
	g.Expect(r.System).To(Equal("sys\n\n" + anthropic.JSONInstruction +
		" The object must match this JSON Schema (place):\n" + `{"type":"object","required":["city"]}`))
	g.Expect(string(r.Body)).NotTo(ContainSubstring("response_format"))
}
