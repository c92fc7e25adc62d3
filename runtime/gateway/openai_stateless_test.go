package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// weatherTool is a client tool as the SDK declares it.
func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Weather of a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	})
}

// A request with prior turns and no chat runs on exactly its messages, the
// client's system message after the agent's instructions, and leaves
// nothing behind: no session of the key's default chat, and a second
// request sees none of the first.
func TestOpenAIStatelessHistory(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	client := sdk(e, keyA)
	history := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("Answer in French."), openai.UserMessage("old question"),
		openai.AssistantMessage("old answer"), openai.UserMessage("hello"),
	}
	res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", Messages: history})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Choices[0].Message.Content).To(Equal("echo: hello"))
	g.Expect(res.Choices[0].FinishReason).To(Equal("stop"))
	rec := e.llm.Requests()[0]
	g.Expect(contents(rec)).To(Equal([]string{"user:old question", "assistant:old answer", "user:hello"}), "exactly the client's turns")
	g.Expect(rec.System).To(HavePrefix("You are a test assistant.\n\nAnswer in French.\n\n"), "the client's system message after the agent's instructions")

	// Streaming, another history: nothing of the first request is in it.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "assistant",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a"), openai.AssistantMessage("b"), openai.UserMessage("c")}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].Message.Content).To(Equal("echo: c"))
	g.Expect(contents(e.llm.Requests()[1])).To(Equal([]string{"user:a", "assistant:b", "user:c"}))

	// Nothing stored: the key's default chat has no dialog, and the raw
	// answer names no session.
	raw, err := e.a.Request(http.MethodPost, "/v1/chat/completions",
		`{"model":"assistant","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"},{"role":"user","content":"z"}]}`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(raw.Status).To(Equal(http.StatusOK), "%s", raw.Body)
	g.Expect(raw.Header.Get("X-PicoBot-Session")).To(BeEmpty())
	sum := sha256.Sum256([]byte("a")) // the key's id
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/dialogs?channel=openai&agent=assistant&chat_id=default-"+hex.EncodeToString(sum[:8]), nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body["dialogs"]).To(BeEmpty())

	// With a session key the same history continues the server's chat:
	// only the last message goes to the agent.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", Messages: history, User: openai.String("kept")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(contents(e.llm.Requests()[3])).To(Equal([]string{"user:hello"}))
	status, body = e.a.Do(t, http.MethodGet, "/api/v1/dialogs?channel=openai&agent=assistant&chat_id=kept", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body["dialogs"]).To(HaveLen(1))
}

// A client tool the model calls ends the turn with tool_calls (whole and
// streamed); the client's follow-up with the tool result, stateless, gets
// the answer. The agent's own tools run on the server as before, and a
// step calling both kinds runs neither of the agent's calls.
func TestOpenAIClientTools(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	client := sdk(e, keyA)
	params := openai.ChatCompletionNewParams{Model: "assistant", Tools: []openai.ChatCompletionToolUnionParam{weatherTool()},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")}}

	e.llm.Script(fakellm.Turn{Text: "Checking.", ToolCalls: []fakellm.Call{{ID: "call_w1", Name: "get_weather", Args: `{"city":"Paris"}`}}})
	res, err := client.Chat.Completions.New(ctx, params)
	g.Expect(err).NotTo(HaveOccurred())
	choice := res.Choices[0]
	g.Expect(choice.FinishReason).To(Equal("tool_calls"))
	g.Expect(choice.Message.Content).To(Equal("Checking."))
	g.Expect(choice.Message.ToolCalls).To(HaveLen(1))
	call := choice.Message.ToolCalls[0]
	g.Expect(call.ID).To(Equal("call_w1"))
	g.Expect(call.Function.Name).To(Equal("get_weather"))
	g.Expect(call.Function.Arguments).To(Equal(`{"city":"Paris"}`))
	g.Expect(e.llm.Requests()[0].Tools).To(ConsistOf("bash", "calculator", "get_weather"), "both kinds offered")

	// The follow-up carries the call and its result.
	e.llm.Script(fakellm.Turn{Text: "Sunny in Paris."})
	params.Messages = append(params.Messages, choice.Message.ToParam(), openai.ToolMessage("sunny, 21C", call.ID))
	res, err = client.Chat.Completions.New(ctx, params)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Choices[0].Message.Content).To(Equal("Sunny in Paris."))
	g.Expect(res.Choices[0].FinishReason).To(Equal("stop"))
	rec := e.llm.Requests()[1]
	g.Expect(rec.Messages[len(rec.Messages)-2].ToolCalls).To(Equal([]fakellm.Call{{ID: "call_w1", Name: "get_weather", Args: `{"city":"Paris"}`}}))
	g.Expect(rec.Messages[len(rec.Messages)-1].ToolResults).To(Equal([]fakellm.ToolResult{{CallID: "call_w1", Content: "sunny, 21C"}}))

	// Streamed: the agent's calculator runs first, then the client's call
	// ends the turn.
	e.llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_w2", Name: "get_weather", Args: `{"city":"Rome"}`}}},
	)
	params.Messages = params.Messages[:1]
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].FinishReason).To(Equal("tool_calls"))
	g.Expect(acc.Choices[0].Message.ToolCalls).To(HaveLen(1))
	g.Expect(acc.Choices[0].Message.ToolCalls[0].ID).To(Equal("call_w2"))
	g.Expect(acc.Choices[0].Message.ToolCalls[0].Function.Arguments).To(Equal(`{"city":"Rome"}`))
	second := e.llm.Requests()[3]
	g.Expect(second.Messages[len(second.Messages)-1].ToolResults[0].Content).To(ContainSubstring("42"), "the agent's tool ran on the server")

	// One step calling both: only the client's call comes back, the
	// calculator is not run (no further model call).
	e.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{
		{ID: "c1", Name: "calculator", Args: `{"function":"evaluate","expression":"1+1"}`},
		{ID: "c2", Name: "get_weather", Args: `{"city":"Oslo"}`}}})
	res, err = client.Chat.Completions.New(ctx, params)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Choices[0].Message.ToolCalls).To(HaveLen(1))
	g.Expect(res.Choices[0].Message.ToolCalls[0].ID).To(Equal("c2"))
	g.Expect(e.llm.Requests()).To(HaveLen(5))
	g.Expect(e.llm.Pending()).To(BeZero())
}

// An agent can decline client tools (spec.tools.clientTools: false), and a
// client tool may not shadow one of the agent's; both are 400s naming
// "tools" that reach no model.
func TestOpenAIClientToolsRefused(t *testing.T) {
	g := NewWithT(t)
	e := startAgents(t, func(llmURL string) string {
		return fmt.Sprintf(agentYAML, llmURL, llmURL) + fmt.Sprintf(`---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: closed
spec:
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["calculator"]
    clientTools: false
`, llmURL)
	}, nil, nil)
	e.echo()
	tool := `"tools":[{"type":"function","function":{"name":%q,"parameters":{"type":"object"}}}]`
	for _, tc := range []struct{ agent, name, msg string }{
		{"closed", "get_weather", "does not take client tools"},
		{"assistant", "calculator", `name of one of the agent's own tools: "calculator"`},
	} {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],`+tool+`}`, tc.agent, tc.name)
		status, res := e.a.Do(t, http.MethodPost, "/v1/chat/completions", body)
		g.Expect(status).To(Equal(http.StatusBadRequest), "%v", res)
		errBody, _ := res["error"].(map[string]any)
		g.Expect(errBody).To(HaveKeyWithValue("param", "tools"))
		g.Expect(errBody["message"]).To(ContainSubstring(tc.msg))
	}
	// The agent that declines still answers without client tools.
	status, res := e.a.Do(t, http.MethodPost, "/v1/chat/completions",
		`{"model":"closed","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`)
	g.Expect(status).To(Equal(http.StatusOK), "%v", res)
	g.Expect(e.llm.Requests()).To(HaveLen(1))
}

// temperature, max_tokens / max_completion_tokens and response_format
// reach the model's request in the stateless mode.
func TestOpenAIModelSettings(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	client := sdk(e, keyA)
	two := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("q"), openai.AssistantMessage("a"), openai.UserMessage("json please")}
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", Messages: two,
		Temperature: openai.Float(0), MaxCompletionTokens: openai.Int(99),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Strict: openai.Bool(true),
				Schema: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}}}}})
	g.Expect(err).NotTo(HaveOccurred())
	rec := e.llm.Requests()[0]
	g.Expect(rec.Temperature).To(HaveValue(Equal(0.0)))
	g.Expect(rec.MaxTokens).To(Equal(99))
	g.Expect(rec.ResponseFormat).To(Equal("json_schema"))
	g.Expect(string(rec.JSONSchema)).To(MatchJSON(`{"name":"answer","strict":true,"schema":{"type":"object","properties":{"text":{"type":"string"}}}}`))

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", Messages: two,
		Temperature: openai.Float(1.25), MaxTokens: openai.Int(7),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}})
	g.Expect(err).NotTo(HaveOccurred())
	rec = e.llm.Requests()[1]
	g.Expect(rec.Temperature).To(HaveValue(Equal(1.25)))
	g.Expect(rec.MaxTokens).To(Equal(7))
	g.Expect(rec.JSONMode).To(BeTrue())

	// Without settings the agent's own apply: no temperature, no format.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", Messages: two})
	g.Expect(err).NotTo(HaveOccurred())
	rec = e.llm.Requests()[2]
	g.Expect(rec.Temperature).To(BeNil())
	g.Expect(rec.ResponseFormat).To(BeEmpty())
}

// Bad settings, tools and histories get 400 invalid_request_error naming
// the field, before anything reaches the model; so do settings in the
// session mode, where the chat keeps the agent's own.
func TestOpenAIStatelessBadInput(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	hist := `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"hi"}]`
	cases := []struct{ body, param, msg string }{
		{`{"model":"assistant","temperature":2.5,` + hist + `}`, "temperature", "between 0 and 2"},
		{`{"model":"assistant","temperature":-0.1,` + hist + `}`, "temperature", "between 0 and 2"},
		{`{"model":"assistant","max_tokens":-5,` + hist + `}`, "max_tokens", "at least 1"},
		{`{"model":"assistant","max_completion_tokens":0,` + hist + `}`, "max_completion_tokens", "at least 1"},
		{`{"model":"assistant","max_tokens":5,"max_completion_tokens":6,` + hist + `}`, "max_completion_tokens", "differ"},
		{`{"model":"assistant","response_format":{"type":"xml"},` + hist + `}`, "response_format.type", `got "xml"`},
		{`{"model":"assistant","response_format":{"type":"json_schema"},` + hist + `}`, "response_format.json_schema", "needs a json_schema"},
		{`{"model":"assistant","response_format":{"type":"json_schema","json_schema":{"name":"a b","schema":{}}},` + hist + `}`, "response_format.json_schema.name", "letters, digits"},
		{`{"model":"assistant","response_format":{"type":"json_schema","json_schema":{"name":"ab","schema":[1]}},` + hist + `}`, "response_format.json_schema.schema", "JSON Schema object"},
		{`{"model":"assistant","tools":[{"type":"retrieval"}],` + hist + `}`, "tools[0].type", "function tool"},
		{`{"model":"assistant","tools":[{"type":"function","function":{"name":"has space"}}],` + hist + `}`, "tools[0].function.name", "letters, digits"},
		{`{"model":"assistant","tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}],` + hist + `}`, "tools[1].function.name", "declared twice"},
		{`{"model":"assistant","tools":[{"type":"function","function":{"name":"f","parameters":"x"}}],` + hist + `}`, "tools[0].function.parameters", "JSON Schema object"},
		{`{"model":"assistant","tool_choice":"required","tools":[{"type":"function","function":{"name":"f"}}],` + hist + `}`, "tool_choice", "does not force"},
		{`{"model":"assistant","messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"nope","content":"r"}]}`, "messages[1].tool_call_id", `tool call "nope"`},
		{`{"model":"assistant","messages":[{"role":"user","content":"q"},{"role":"function","content":"r"},{"role":"user","content":"x"}]}`, "messages[1].role", "must be system"},
		{`{"model":"assistant","messages":[{"role":"user","content":"q\u0000"},{"role":"assistant","content":"a"},{"role":"user","content":"x"}]}`, "messages[0].content", "NUL"},
		{`{"model":"assistant","messages":[{"role":"user","content":"q"},{"role":"assistant","content":{"x":1}},{"role":"user","content":"x"}]}`, "messages[1].content", "string or an array"},
		{`{"model":"assistant","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"","type":"function","function":{"name":"f"}}]},{"role":"user","content":"x"}]}`, "messages[1].tool_calls[0]", "needs an id"},
		// The session mode (a chat named) refuses what it cannot honour.
		{`{"model":"assistant","user":"u1","temperature":1,"messages":[{"role":"user","content":"hi"}]}`, "temperature", "only in the stateless mode"},
		{`{"model":"assistant","user":"u1","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"hi"}]}`, "response_format", "only in the stateless mode"},
		{`{"model":"assistant","user":"u1","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools", "only in the stateless mode"},
		{`{"model":"assistant","user":"u1","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "only in the stateless mode"},
	}
	for _, tc := range cases {
		status, body := e.a.Do(t, http.MethodPost, "/v1/chat/completions", tc.body)
		g.Expect(status).To(Equal(http.StatusBadRequest), tc.body)
		errBody, _ := body["error"].(map[string]any)
		g.Expect(errBody).To(HaveKeyWithValue("type", "invalid_request_error"), tc.body)
		g.Expect(errBody).To(HaveKeyWithValue("param", tc.param), tc.body)
		g.Expect(errBody["message"]).To(ContainSubstring(tc.msg), tc.body)
	}
	g.Expect(e.llm.Requests()).To(BeEmpty(), "no bad request reached the model")
	// A response_format of type text is the default, accepted in both modes.
	status, body := e.a.Do(t, http.MethodPost, "/v1/chat/completions",
		`{"model":"assistant","user":"u1","response_format":{"type":"text"},"tool_choice":"auto","messages":[{"role":"user","content":"hi"}]}`)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	// Without a chat, one user message with settings, or a system message,
	// is stateless: honoured, and nothing stored.
	for i, req := range []string{
		`{"model":"assistant","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"assistant","messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"hi"}]}`,
	} {
		res, err := e.a.Request(http.MethodPost, "/v1/chat/completions", req, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(http.StatusOK), "%s", res.Body)
		g.Expect(res.Header.Get("X-PicoBot-Session")).To(BeEmpty(), req)
		g.Expect(e.llm.Requests()).To(HaveLen(i + 2))
	}
	g.Expect(e.llm.Requests()[1].MaxTokens).To(Equal(3))
	g.Expect(e.llm.Requests()[2].System).To(ContainSubstring("You are a test assistant.\n\nBe terse."))
}

// A backend that keeps every conversation (cluster mode) refuses a
// stateless request with a 400 that says how to name a chat.
func TestOpenAIStatelessNeedsABackendThatRunsIt(t *testing.T) {
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) { c.Backend = struct{ gateway.Backend }{c.Backend} })
	e.echo()
	res, err := gatewaytest.Client{URL: e.url, Key: keyA}.Request(http.MethodPost, "/v1/chat/completions",
		`{"model":"assistant","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"hi"}]}`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusBadRequest))
	g.Expect(string(res.Body)).To(And(ContainSubstring(`"param":"user"`), ContainSubstring("name a chat")))
	g.Expect(e.llm.Requests()).To(BeEmpty())
	g.Expect(strings.Contains(string(res.Body), "invalid_request_error")).To(BeTrue())
}
