package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func sdk(e *env, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(e.url + "/v1"), option.WithAPIKey(key), option.WithMaxRetries(0)}, opts...)...)
}

// TestOpenAISDK drives the OpenAI-compatible endpoint with the official
// openai-go SDK over real HTTP, backed by the embedded runtime.
func TestOpenAISDK(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	client := sdk(e, keyA)

	// Non-streaming: the client sends its whole history; the agent gets
	// only the last user message, the session keeps its own history.
	res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "assistant", User: openai.String("user-1"),
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("client system prompt"), openai.UserMessage("old question"),
			openai.AssistantMessage("old answer"), openai.UserMessage("hello"),
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Object).To(BeEquivalentTo("chat.completion"))
	g.Expect(res.Model).To(Equal("assistant"))
	g.Expect(res.ID).To(HavePrefix("chatcmpl-"))
	g.Expect(res.Choices).To(HaveLen(1))
	g.Expect(res.Choices[0].Message.Content).To(Equal("echo: hello"))
	g.Expect(res.Choices[0].FinishReason).To(Equal("stop"))
	g.Expect(res.Usage.TotalTokens).To(BeNumerically(">", 0))
	g.Expect(contents(e.llm.Requests()[0])).To(Equal([]string{"user:hello"}))
	g.Expect(e.llm.Requests()[0].System).To(HavePrefix("You are a test assistant."), "the agent's instructions, not the client's")

	// Streaming, accumulated by the SDK, with usage.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "assistant", User: openai.String("user-1"),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello"), openai.AssistantMessage("echo: hello"), openai.UserMessage("again")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		g.Expect(acc.AddChunk(stream.Current())).To(BeTrue())
		chunks++
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(stream.Close()).To(Succeed())
	g.Expect(chunks).To(BeNumerically(">=", 4), "role, content, finish, usage")
	g.Expect(acc.Choices).To(HaveLen(1))
	g.Expect(acc.Choices[0].Message.Content).To(Equal("echo: again"))
	g.Expect(acc.Choices[0].FinishReason).To(Equal("stop"))
	g.Expect(acc.Usage.TotalTokens).To(BeNumerically(">", 0))
	g.Expect(contents(e.llm.Requests()[1])).To(Equal([]string{"user:hello", "assistant:echo: hello", "user:again"}))

	// The X-PicoBot-Chat-Id header picks another chat; slash commands work.
	other := sdk(e, keyA, option.WithHeader(gateway.HeaderChatID, "user-2"))
	_, err = other.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", User: openai.String("user-1"),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("fresh")}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(contents(e.llm.Requests()[2])).To(Equal([]string{"user:fresh"}))
	res, err = other.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("/new")}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Choices[0].Message.Content).To(HavePrefix("Started a new conversation (d_"))
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/dialogs?agent=assistant&chat_id=user-2&channel=openai", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body["dialogs"]).To(HaveLen(2))

	// Models are the agents.
	page, err := client.Models.List(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	g.Expect(ids).To(Equal([]string{"assistant", "keyless"}))
	m, err := client.Models.Get(ctx, "assistant")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.OwnedBy).To(Equal("picobot"))

	// Errors in OpenAI's shape.
	apiErr := func(err error) *openai.Error {
		var e *openai.Error
		g.ExpectWithOffset(1, errors.As(err, &e)).To(BeTrue(), "%v", err)
		return e
	}
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-nope", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	ae := apiErr(err)
	g.Expect(ae.StatusCode).To(Equal(http.StatusNotFound))
	g.Expect(ae.Code).To(Equal("model_not_found"))
	g.Expect(ae.Param).To(Equal("model"))
	g.Expect(ae.Type).To(Equal("invalid_request_error"))
	_, err = client.Models.Get(ctx, "gpt-nope")
	g.Expect(apiErr(err).Code).To(Equal("model_not_found"))
	bad := sdk(e, "wrong-key")
	_, err = bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	ae = apiErr(err)
	g.Expect(ae.StatusCode).To(Equal(http.StatusUnauthorized))
	g.Expect(ae.Code).To(Equal("invalid_api_key"))
	_, err = bad.Models.List(ctx)
	g.Expect(apiErr(err).StatusCode).To(Equal(http.StatusUnauthorized))
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "keyless", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	ae = apiErr(err)
	g.Expect(ae.StatusCode).To(Equal(http.StatusServiceUnavailable))
	g.Expect(ae.Code).To(Equal("no_model"))
	g.Expect(ae.Message).To(ContainSubstring("agent keyless has no usable model"))
	// A stream whose agent cannot answer fails before it starts.
	stream = client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "keyless", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	g.Expect(stream.Next()).To(BeFalse())
	g.Expect(apiErr(stream.Err()).StatusCode).To(Equal(http.StatusServiceUnavailable))
	g.Expect(e.llm.Requests()).To(HaveLen(3), "no failed request reached the model")
}

// TestOpenAIBadInput checks malformed requests get OpenAI-shaped 400s and
// write nothing.
func TestOpenAIBadInput(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	cases := []struct {
		body  string
		param string
		msg   string
	}{
		{`{"model":`, "", "not valid JSON"},
		{`{"messages":[{"role":"user","content":"hi"}]}`, "model", "model is required"},
		{`{"model":"assistant","messages":[]}`, "messages", "at least one message"},
		{`{"model":"assistant","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`, "messages", "the last message must be the user's"},
		{`{"model":"assistant","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, "messages", `content part type "image_url"`},
		{`{"model":"assistant","messages":[{"role":"user","content":"  "}]}`, "messages", "empty"},
		{`{"model":"assistant","n":2,"messages":[{"role":"user","content":"hi"}]}`, "n", "n must be 1"},
		{`{"model":"assistant","user":"a:b","messages":[{"role":"user","content":"hi"}]}`, "user", "must not contain ':'"},
		{`{"model":"assistant","messages":[{"role":"user","content":"hi"}]} {"x":1}`, "", "data after its JSON object"},
		{`{"model":"assistant","messages":[{"role":"user","content":"hi"}]}garbage`, "", "data after its JSON object"},
		{`{"model":"assistant","messages":[{"role":"user","content":"a\u0000b"}]}`, "messages", "NUL"},
	}
	for _, tc := range cases {
		status, body := e.a.Do(t, http.MethodPost, "/v1/chat/completions", tc.body)
		g.Expect(status).To(Equal(http.StatusBadRequest), tc.body)
		errBody, _ := body["error"].(map[string]any)
		g.Expect(errBody).To(HaveKeyWithValue("type", "invalid_request_error"), tc.body)
		g.Expect(errBody["message"]).To(ContainSubstring(tc.msg), tc.body)
		if tc.param != "" {
			g.Expect(errBody).To(HaveKeyWithValue("param", tc.param), tc.body)
		}
	}
	// Parts of text are joined.
	status, body := e.a.Do(t, http.MethodPost, "/v1/chat/completions",
		`{"model":"assistant","messages":[{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]}`)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(contents(e.llm.Requests()[0])).To(ContainElement("user:one\ntwo"))
	// Oversize bodies are refused before they are read.
	big := `{"model":"assistant","messages":[{"role":"user","content":"` + strings.Repeat("a", gateway.MaxBodyBytes) + `"}]}`
	status, body = e.a.Do(t, http.MethodPost, "/v1/chat/completions", big)
	g.Expect(status).To(Equal(http.StatusRequestEntityTooLarge))
	g.Expect(body["error"]).To(HaveKeyWithValue("code", "request_too_large"))
	status, _ = e.a.Do(t, http.MethodGet, "/v1/embeddings", nil)
	g.Expect(status).To(Equal(http.StatusNotFound))
	g.Expect(e.llm.Requests()).To(HaveLen(1), "no bad request reached the model")
	// A stream of a tool-using turn carries the text of every step; the
	// last step's is the final answer.
	e.llm.Script(
		fakellm.Turn{Text: "Let me compute.", ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
		fakellm.Turn{Text: "It is 42."},
	)
	client := sdk(e, keyA)
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "assistant",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("6*7?")}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].Message.Content).To(Equal("Let me compute.\n\nIt is 42."))
	g.Expect(acc.Choices[0].Message.ToolCalls).To(BeEmpty(), "the agent's own tool calls are not the client's to run")
}

// Requests that name no chat get one per API key, never one shared by every
// client of the tenant.
func TestOpenAIDefaultChatIsPerKey(t *testing.T) {
	g := NewWithT(t)
	const keyA2 = "key-a2-0123456789"
	e := start(t, func(c *gateway.Config) {
		c.Auth = gateway.MustStaticKeys(
			gateway.StaticKey{ID: "a", Token: keyA, Tenant: "tenant-a"},
			gateway.StaticKey{ID: "a2", Token: keyA2, Tenant: "tenant-a"})
	})
	e.echo()
	session := func(key string) string {
		res, err := gatewaytest.Client{URL: e.url, Key: key}.Request(http.MethodPost, "/v1/chat/completions",
			`{"model":"assistant","messages":[{"role":"user","content":"hi"}]}`, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(http.StatusOK), "%s", res.Body)
		return res.Header.Get("X-PicoBot-Session")
	}
	a, a2 := session(keyA), session(keyA2)
	g.Expect(a).To(MatchRegexp(`^openai:assistant/default-[0-9a-f]{16}:`))
	g.Expect(a2).To(MatchRegexp(`^openai:assistant/default-[0-9a-f]{16}:`))
	g.Expect(a).NotTo(Equal(a2), "two keys, two chats")
	g.Expect(session(keyA)).To(Equal(a), "the same key keeps its chat")
}

// A model that refuses the request answers the client with its 4xx, which
// the official SDK (with its default retries) does not retry: one model
// call, one stored user message. A model's rate limit is a 429 with its
// Retry-After, on REST and the WebSocket too.
func TestOpenAIModelErrorsKeepTheirStatus(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	e.llm.Script(fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: `{"error":{"message":"prompt is too long","type":"invalid_request_error"}}`})
	client := openai.NewClient(option.WithBaseURL(e.url+"/v1"), option.WithAPIKey(keyA)) // the SDK's own retry policy
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", User: openai.String("c1"),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	g.Expect(errors.As(err, &apiErr)).To(BeTrue(), "%v", err)
	g.Expect(apiErr.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(apiErr.Type).To(Equal("invalid_request_error"))
	g.Expect(apiErr.Code).To(Equal("model_rejected"))
	g.Expect(apiErr.Message).To(ContainSubstring("prompt is too long"))
	g.Expect(e.llm.Requests()).To(HaveLen(1), "not retried by the SDK nor by the provider")
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("openai:assistant/c1:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	users := 0
	for _, m := range body["messages"].([]any) {
		if m.(map[string]any)["role"] == "user" {
			users++
		}
	}
	g.Expect(users).To(Equal(1), "the message is stored once")

	// Rate limited by the model (after the provider's own retries): 429 and
	// the model's wait.
	limited := fakellm.Turn{Status: http.StatusTooManyRequests, RetryAfter: "2", ErrorBody: `{"error":{"message":"slow down","type":"rate_limit_error"}}`}
	e.llm.Script(limited, limited, limited, limited)
	res, err := e.a.Request(http.MethodPost, "/api/v1/send", map[string]any{"agent": "assistant", "chat_id": "c2", "text": "hi"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusTooManyRequests), "%s", res.Body)
	g.Expect(res.Header.Get("Retry-After")).To(Equal("2"))
	g.Expect(string(res.Body)).To(ContainSubstring(`"code":"rate_limited"`))
}

// A stream begins at once — status, headers and the role chunk before the
// model has said anything — and sends SSE comments while the turn is quiet,
// here a model that takes a second; the official SDK reads it as usual.
func TestOpenAIStreamStartsAtOnceAndKeepsAlive(t *testing.T) {
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) { c.StreamKeepAlive = 100 * time.Millisecond })
	e.llm.Script(fakellm.Turn{Text: "slow answer", Delay: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"assistant","stream":true,"user":"s1","messages":[{"role":"user","content":"hi"}]}`))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = res.Body.Close() }()
	g.Expect(res.StatusCode).To(Equal(http.StatusOK))
	g.Expect(res.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	sc := bufio.NewScanner(res.Body)
	var lines []string
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	g.Expect(sc.Err()).NotTo(HaveOccurred())
	g.Expect(lines[0]).To(And(HavePrefix("data: "), ContainSubstring(`"role":"assistant"`)), "the role chunk comes first")
	firstText := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"content":"slow`) })
	g.Expect(firstText).To(BeNumerically(">", 1), "%q", lines)
	g.Expect(lines[1:firstText]).To(ContainElement(": keep-alive"), "comments while the model is quiet")
	g.Expect(lines[len(lines)-1]).To(Equal("data: [DONE]"))

	e.llm.Script(fakellm.Turn{Text: "again", Delay: 300 * time.Millisecond})
	client := sdk(e, keyA)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "assistant", User: openai.String("s1"),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].Message.Content).To(Equal("again"))
}

// A request retried with the same Idempotency-Key (the client lost the
// answer) runs its turn once: the retry gets the stored answer, marked as a
// replay. Another key, or no key, is a new message. REST sends with the
// same id get the stored answer too.
func TestOpenAIIdempotencyKey(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.llm.Respond(func(rec fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: fmt.Sprintf("answer %d", len(e.llm.Requests()))}
	})
	post := func(key string) (string, string) {
		h := http.Header{}
		if key != "" {
			h.Set("Idempotency-Key", key)
		}
		res, err := e.a.Request(http.MethodPost, "/v1/chat/completions",
			`{"model":"assistant","user":"idem","messages":[{"role":"user","content":"book it"}]}`, h)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(http.StatusOK), "%s", res.Body)
		var body struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		g.Expect(json.Unmarshal(res.Body, &body)).To(Succeed())
		return body.Choices[0].Message.Content, res.Header.Get("Idempotent-Replayed")
	}
	first, replayed := post("order-42")
	g.Expect(first).To(Equal("answer 1"))
	g.Expect(replayed).To(BeEmpty())
	again, replayed := post("order-42")
	g.Expect(again).To(Equal("answer 1"), "the stored answer, not a second turn")
	g.Expect(replayed).To(Equal("true"))
	other, _ := post("order-43")
	g.Expect(other).To(Equal("answer 2"))
	none, _ := post("")
	g.Expect(none).To(Equal("answer 3"))
	g.Expect(e.llm.Requests()).To(HaveLen(3))
	res, err := e.a.Request(http.MethodPost, "/v1/chat/completions",
		`{"model":"assistant","messages":[{"role":"user","content":"x"}]}`, http.Header{"Idempotency-Key": {"bad key"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusBadRequest))

	send := map[string]any{"id": "rest-1", "agent": "assistant", "chat_id": "idem", "text": "hello"}
	status, body := e.a.Do(t, http.MethodPost, "/api/v1/send", send)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("text", "answer 4"))
	status, body = e.a.Do(t, http.MethodPost, "/api/v1/send", send)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("text", "answer 4"), "duplicate beside the real text")
	g.Expect(body).To(HaveKeyWithValue("duplicate", true))
	g.Expect(e.llm.Requests()).To(HaveLen(4))
}
