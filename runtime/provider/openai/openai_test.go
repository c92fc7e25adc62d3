package openai_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/provider/openai"
)

const testKey = "sk-test-openai-key"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newProvider(t testing.TB, s *fakellm.Server, maxTokens int) *openai.Provider {
	t.Helper()
	p, err := openai.New(openai.Options{BaseURL: s.URL(), APIKey: testKey, Model: "gpt-test", MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var png = []byte("\x89PNG\r\n\x1a\nfake-image-bytes")

func mappingRequest() llm.Request {
	temp := 0.2
	return llm.Request{
		System: "You are terse.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "What is in this picture?", Images: []llm.Image{{MediaType: "image/png", Data: png}}},
			{Role: llm.RoleAssistant, Content: "Let me look.", ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.txt"}`},
				{ID: "call_2", Name: "fetch", Arguments: `{"url":`},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Name: "read_file", Content: "file body"},
			{Role: llm.RoleTool, ToolCallID: "call_2", Name: "fetch", Content: "HTTP 404", IsError: true, Images: []llm.Image{{MediaType: "image/png", Data: png}}},
			{Role: llm.RoleAssistant, Content: "Done."},
			{Role: llm.RoleSystem, Content: "Summary of earlier turns."},
			{Role: llm.RoleUser, Content: "thanks"},
		},
		Tools: []llm.ToolDef{
			{Name: "read_file", Description: "Reads a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"Path"}},"required":["path"],"additionalProperties":false}`)},
			{Name: "fetch"},
		},
		Temperature: &temp,
		JSON:        true,
	}
}

func TestRequestMapping(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "stream"}[stream], func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(fakellm.Turn{Text: "{}"})

			var onDelta func(llm.Delta)
			if stream {
				onDelta = func(llm.Delta) {}
			}
			_, err := newProvider(t, s, 2048).Complete(context.Background(), mappingRequest(), onDelta)
			g.Expect(err).NotTo(HaveOccurred())

			reqs := s.Requests()
			g.Expect(reqs).To(HaveLen(1))
			r := reqs[0]
			g.Expect(r.Path).To(Equal("/v1/chat/completions"))
			g.Expect(r.Header.Get("Authorization")).To(Equal("Bearer " + testKey))
			g.Expect(r.Model).To(Equal("gpt-test"))
			g.Expect(r.Stream).To(Equal(stream))
			g.Expect(r.IncludeUsage).To(Equal(stream))
			g.Expect(r.MaxTokens).To(Equal(2048))
			g.Expect(r.JSONMode).To(BeTrue())
			g.Expect(r.Tools).To(Equal([]string{"read_file", "fetch"}))
			g.Expect(r.System).To(Equal("You are terse.\n\nSummary of earlier turns."))
			g.Expect(r.Messages).To(Equal([]fakellm.Message{
				{Role: "system", Content: "You are terse."},
				{Role: "user", Content: "What is in this picture?", Images: 1},
				{Role: "assistant", Content: "Let me look.", ToolCalls: []fakellm.Call{
					{ID: "call_1", Name: "read_file", Args: `{"path":"a.txt"}`},
					{ID: "call_2", Name: "fetch", Args: `{"url":`},
				}},
				{Role: "tool", Content: "file body", ToolResults: []fakellm.ToolResult{{CallID: "call_1", Content: "file body"}}},
				{Role: "tool", Content: "HTTP 404", ToolResults: []fakellm.ToolResult{{CallID: "call_2", Content: "HTTP 404"}}},
				// Tool images follow the run of tool messages in a user message.
				{Role: "user", Content: "Images returned by the tools above:", Images: 1},
				{Role: "assistant", Content: "Done."},
				{Role: "system", Content: "Summary of earlier turns."},
				{Role: "user", Content: "thanks"},
			}))

			var body struct {
				Messages []struct {
					Content json.RawMessage `json:"content"`
				} `json:"messages"`
				Tools []struct {
					Type     string `json:"type"`
					Function struct {
						Name        string          `json:"name"`
						Description string          `json:"description"`
						Parameters  json.RawMessage `json:"parameters"`
					} `json:"function"`
				} `json:"tools"`
				Temperature    float64 `json:"temperature"`
				ResponseFormat struct {
					Type string `json:"type"`
				} `json:"response_format"`
				MaxCompletionTokens int `json:"max_completion_tokens"`
			}
			g.Expect(json.Unmarshal(r.Body, &body)).To(Succeed())
			g.Expect(body.Temperature).To(Equal(0.2))
			g.Expect(body.ResponseFormat.Type).To(Equal("json_object"))
			g.Expect(body.MaxCompletionTokens).To(Equal(2048))
			g.Expect(string(body.Messages[1].Content)).To(MatchJSON(`[
				{"type":"text","text":"What is in this picture?"},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString(png) + `"}}
			]`))
			g.Expect(body.Tools).To(HaveLen(2))
			g.Expect(body.Tools[0].Type).To(Equal("function"))
			g.Expect(body.Tools[0].Function.Description).To(Equal("Reads a file"))
			g.Expect(string(body.Tools[0].Function.Parameters)).To(Equal(string(mappingRequest().Tools[0].Parameters)), "the schema is sent byte for byte")
			g.Expect(string(body.Tools[1].Function.Parameters)).To(MatchJSON(`{"type":"object","properties":{}}`))
		})
	}
}

func TestRequestModelOverride(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Script(fakellm.Turn{Text: "hi"})

	resp, err := newProvider(t, s, 0).Complete(context.Background(), llm.Request{
		Model:    "gpt-other",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
	}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Model).To(Equal("gpt-other"))
	r := s.Requests()[0]
	g.Expect(r.Model).To(Equal("gpt-other"))
	g.Expect(r.MaxTokens).To(BeZero(), "no cap unless configured")
	g.Expect(string(r.Body)).NotTo(ContainSubstring("response_format"))
	g.Expect(string(r.Body)).NotTo(ContainSubstring("stream_options"))
}

// TestRequestBody pins the body of the mapping request to the JSON the
// SDK's own parameter types encoded (testdata/mapping_request.json, from
// ChatCompletionNewParams.MarshalJSON before the body was encoded here,
// with the "stream": true its streaming call added).
func TestRequestBody(t *testing.T) {
	g := NewWithT(t)
	p, err := openai.New(openai.Options{Model: "gpt-test", MaxTokens: 2048})
	g.Expect(err).NotTo(HaveOccurred())
	want, err := os.ReadFile("testdata/mapping_request.json")
	g.Expect(err).NotTo(HaveOccurred())
	for range 2 { // the second time with the tools' encoding cached
		body, err := p.BuildBody(mappingRequest(), true)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(body)).To(MatchJSON(want))
	}
	// A changed schema is a different tool set, not a cache hit.
	req := mappingRequest()
	req.Tools[0].Parameters = json.RawMessage(`{"type":"object"}`)
	body, err := p.BuildBody(req, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(body)).To(ContainSubstring(`"parameters":{"type":"object"}}`))
}

func TestBuildBodyErrors(t *testing.T) {
	tests := []struct {
		name string
		req  llm.Request
		want string
	}{
		{name: "unknown role", req: llm.Request{Messages: []llm.Message{{Role: "narrator", Content: "x"}}}, want: `unknown role "narrator"`},
		{name: "schema not JSON", req: llm.Request{Tools: []llm.ToolDef{{Name: "broken", Parameters: json.RawMessage(`{"type":`)}}}, want: `tool "broken"`},
	}
	p, err := openai.New(openai.Options{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.BuildBody(tt.req, false)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// A JSON schema goes out as response_format json_schema, named and strict
// as given, with the settings Settings.Apply put on the request.
func TestRequestJSONSchema(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Script(fakellm.Turn{Text: `{"city":"Paris"}`})
	temp := 0.0
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "where?"}}, MaxTokens: 4096}
	(&llm.Settings{MaxTokens: 64, Temperature: &temp, JSON: true, Schema: &llm.JSONSchema{Name: "place", Strict: true,
		Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}).Apply(&req)
	_, err := newProvider(t, s, 0).Complete(context.Background(), req, nil)
	g.Expect(err).NotTo(HaveOccurred())
	r := s.Requests()[0]
	g.Expect(r.MaxTokens).To(Equal(64), "the client's cap wins over the agent's")
	g.Expect(r.Temperature).To(HaveValue(Equal(0.0)), "a zero temperature is sent, not dropped")
	g.Expect(r.ResponseFormat).To(Equal("json_schema"))
	g.Expect(r.JSONMode).To(BeFalse())
	g.Expect(string(r.JSONSchema)).To(MatchJSON(`{"name":"place","strict":true,"schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`))
}
