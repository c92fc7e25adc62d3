package fakellm_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	openAIBody    = `{"model":"gpt-x","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`
	anthropicBody = `{"model":"claude-x","max_tokens":100,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`
)

// post sends body raw, as no SDK would, to test the wire itself.
func post(t *testing.T, url, body string) (reply, []byte) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{StatusCode: res.StatusCode, Header: res.Header}, b
}

// reply is what tests read of a response whose body post already consumed.
type reply struct {
	StatusCode int
	Header     http.Header
}

// sse splits a stream body into its events (event name, data).
func sse(t *testing.T, body []byte) [][2]string {
	t.Helper()
	var out [][2]string
	for _, block := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		var ev [2]string
		sc := bufio.NewScanner(strings.NewReader(block))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev[0] = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev[1] = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected SSE line %q", line)
			}
		}
		out = append(out, ev)
	}
	return out
}

func TestScriptExhausted(t *testing.T) {
	tests := []struct {
		name, path, body string
		message          func(body []byte) string
	}{
		{name: "openai", path: "/v1/chat/completions", body: openAIBody},
		{name: "anthropic", path: "/v1/messages", body: anthropicBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()

			res, body := post(t, s.AnthropicURL()+tt.path, tt.body)
			g.Expect(res.StatusCode).To(Equal(http.StatusInternalServerError))
			var env struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			g.Expect(json.Unmarshal(body, &env)).To(Succeed())
			g.Expect(env.Error.Message).To(Equal(fakellm.NoTurnMessage))
			g.Expect(s.Requests()).To(HaveLen(1), "the request is still recorded")
		})
	}
}

func TestRecording(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Script(fakellm.Turn{Text: "a"}, fakellm.Turn{Text: "b"})

	req, err := http.NewRequest(http.MethodPost, s.URL()+"/chat/completions", strings.NewReader(`{
		"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":64,
		"response_format":{"type":"json_object"},
		"tools":[{"type":"function","function":{"name":"look","parameters":{}}}],
		"messages":[
			{"role":"system","content":"be brief"},
			{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"look","arguments":"{\"x\":1}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"seen"}
		]}`))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer k")
	res, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	post(t, s.AnthropicURL()+"/v1/messages", `{"model":"claude-x","max_tokens":100,
		"system":[{"type":"text","text":"one"},{"type":"text","text":"two"}],
		"tools":[{"name":"look","input_schema":{"type":"object"}}],
		"messages":[
			{"role":"user","content":"see"},
			{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"look","input":{}},{"type":"tool_use","id":"t2","name":"look","input":{"y":2}}]},
			{"role":"user","content":[
				{"type":"tool_result","tool_use_id":"t1","content":"fine"},
				{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":[{"type":"text","text":"bad"}]},
				{"type":"text","text":"go on"}]}
		]}`)

	reqs := s.Requests()
	g.Expect(reqs).To(HaveLen(2))
	oa := reqs[0]
	g.Expect(oa.Protocol).To(Equal(fakellm.ProtocolOpenAI))
	g.Expect(oa.Path).To(Equal("/v1/chat/completions"))
	g.Expect(oa.Header.Get("Authorization")).To(Equal("Bearer k"))
	g.Expect(oa.Body).To(ContainSubstring(`"model":"gpt-x"`))
	g.Expect(oa.Model).To(Equal("gpt-x"))
	g.Expect(oa.Stream).To(BeTrue())
	g.Expect(oa.IncludeUsage).To(BeTrue())
	g.Expect(oa.MaxTokens).To(Equal(64))
	g.Expect(oa.JSONMode).To(BeTrue())
	g.Expect(oa.Tools).To(Equal([]string{"look"}))
	g.Expect(oa.System).To(Equal("be brief"))
	g.Expect(oa.Messages).To(Equal([]fakellm.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "see", Images: 1},
		{Role: "assistant", ToolCalls: []fakellm.Call{{ID: "c1", Name: "look", Args: `{"x":1}`}}},
		{Role: "tool", Content: "seen", ToolResults: []fakellm.ToolResult{{CallID: "c1", Content: "seen"}}},
	}))

	an := reqs[1]
	g.Expect(an.Protocol).To(Equal(fakellm.ProtocolAnthropic))
	g.Expect(an.System).To(Equal("one\ntwo"))
	g.Expect(an.MaxTokens).To(Equal(100))
	g.Expect(an.Stream).To(BeFalse())
	g.Expect(an.Messages).To(Equal([]fakellm.Message{
		{Role: "user", Content: "see"},
		{Role: "assistant", ToolCalls: []fakellm.Call{{ID: "t1", Name: "look", Args: `{}`}, {ID: "t2", Name: "look", Args: `{"y":2}`}}},
		{Role: "user", Content: "go on", ToolResults: []fakellm.ToolResult{{CallID: "t1", Content: "fine"}, {CallID: "t2", Content: "bad", IsError: true}}},
	}))
	g.Expect(s.Pending()).To(BeZero())
}

func TestOpenAIStreamFraming(t *testing.T) {
	tests := []struct {
		name         string
		turn         fakellm.Turn
		includeUsage bool
		check        func(g Gomega, events [][2]string, chunks []map[string]any)
	}{
		{
			name:         "text with usage",
			turn:         fakellm.Turn{Text: "one two three", Usage: &fakellm.Usage{InputTokens: 10, OutputTokens: 3, CachedInputTokens: 4}},
			includeUsage: true,
			check: func(g Gomega, events [][2]string, chunks []map[string]any) {
				g.Expect(events[len(events)-1]).To(Equal([2]string{"", "[DONE]"}))
				var text []string
				for _, c := range chunks {
					for _, ch := range c["choices"].([]any) {
						if s, ok := ch.(map[string]any)["delta"].(map[string]any)["content"].(string); ok && s != "" {
							text = append(text, s)
						}
					}
				}
				g.Expect(text).To(Equal([]string{"one ", "two ", "three"}))
				finish := chunks[len(chunks)-2]["choices"].([]any)[0].(map[string]any)["finish_reason"]
				g.Expect(finish).To(Equal("stop"))
				last := chunks[len(chunks)-1]
				g.Expect(last["choices"]).To(BeEmpty())
				g.Expect(last["usage"]).To(HaveKeyWithValue("prompt_tokens", 10.0))
				g.Expect(last["usage"]).To(HaveKeyWithValue("prompt_tokens_details", HaveKeyWithValue("cached_tokens", 4.0)))
			},
		},
		{
			name: "no usage chunk unless asked",
			turn: fakellm.Turn{Text: "x"},
			check: func(g Gomega, events [][2]string, chunks []map[string]any) {
				for _, c := range chunks {
					g.Expect(c).NotTo(HaveKey("usage"))
				}
			},
		},
		{
			name: "parallel tool calls interleave by index",
			turn: fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "a", Name: "f", Args: `{"long":"argument text"}`}, {ID: "b", Name: "g", Args: `{"other":"argument"}`}}},
			check: func(g Gomega, events [][2]string, chunks []map[string]any) {
				var order []float64
				args := map[float64]string{}
				for _, c := range chunks {
					for _, ch := range c["choices"].([]any) {
						tcs, _ := ch.(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any)
						for _, tc := range tcs {
							m := tc.(map[string]any)
							idx := m["index"].(float64)
							order = append(order, idx)
							args[idx] += m["function"].(map[string]any)["arguments"].(string)
						}
					}
				}
				g.Expect(order[:4]).To(Equal([]float64{0, 1, 0, 1}))
				g.Expect(args).To(Equal(map[float64]string{0: `{"long":"argument text"}`, 1: `{"other":"argument"}`}))
				finish := chunks[len(chunks)-1]["choices"].([]any)[0].(map[string]any)["finish_reason"]
				g.Expect(finish).To(Equal("tool_calls"))
			},
		},
		{
			name: "truncated stream has no finish and no DONE",
			turn: fakellm.Turn{Text: "one two three four", Truncate: true},
			check: func(g Gomega, events [][2]string, chunks []map[string]any) {
				g.Expect(events).NotTo(ContainElement([2]string{"", "[DONE]"}))
				for _, c := range chunks {
					for _, ch := range c["choices"].([]any) {
						g.Expect(ch.(map[string]any)["finish_reason"]).To(BeNil())
					}
				}
				g.Expect(chunks).To(HaveLen(3), "role chunk and half of four text pieces")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(tt.turn)

			body := fmt.Sprintf(`{"model":"gpt-x","stream":true,"stream_options":{"include_usage":%t},"messages":[{"role":"user","content":"hi"}]}`, tt.includeUsage)
			res, raw := post(t, s.URL()+"/chat/completions", body)
			g.Expect(res.StatusCode).To(Equal(http.StatusOK))
			g.Expect(res.Header.Get("Content-Type")).To(Equal("text/event-stream"))
			g.Expect(string(raw)).To(HaveSuffix("\n\n"))
			events := sse(t, raw)
			var chunks []map[string]any
			for _, ev := range events {
				g.Expect(ev[0]).To(BeEmpty(), "OpenAI streams carry no event names")
				if ev[1] == "[DONE]" {
					continue
				}
				var c map[string]any
				g.Expect(json.Unmarshal([]byte(ev[1]), &c)).To(Succeed())
				g.Expect(c).To(HaveKeyWithValue("object", "chat.completion.chunk"))
				chunks = append(chunks, c)
			}
			tt.check(g, events, chunks)
		})
	}
}

func TestAnthropicStreamFraming(t *testing.T) {
	tests := []struct {
		name       string
		turn       fakellm.Turn
		wantEvents []string
	}{
		{
			name: "text then tool call",
			turn: fakellm.Turn{Text: "on it", ToolCalls: []fakellm.Call{{ID: "t", Name: "f", Args: `{"a":"bcdefgh"}`}}},
			wantEvents: []string{
				"message_start", "ping",
				"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
				"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
				"message_delta", "message_stop",
			},
		},
		{
			name:       "truncated",
			turn:       fakellm.Turn{Text: "one two three four", Truncate: true},
			wantEvents: []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(tt.turn)

			res, raw := post(t, s.AnthropicURL()+"/v1/messages", `{"model":"claude-x","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			g.Expect(res.StatusCode).To(Equal(http.StatusOK))
			var names []string
			for _, ev := range sse(t, raw) {
				names = append(names, ev[0])
				var data map[string]any
				g.Expect(json.Unmarshal([]byte(ev[1]), &data)).To(Succeed())
				g.Expect(data).To(HaveKeyWithValue("type", ev[0]), "the data type matches the event name")
				if ev[0] == "content_block_delta" {
					g.Expect(data["delta"]).To(HaveKeyWithValue("type", BeElementOf("text_delta", "input_json_delta")))
				}
				if ev[0] == "message_delta" {
					g.Expect(data["delta"]).To(HaveKeyWithValue("stop_reason", "tool_use"))
				}
			}
			g.Expect(names).To(Equal(tt.wantEvents))
		})
	}
}

func TestErrorReplies(t *testing.T) {
	tests := []struct {
		name, path, body string
		turn             fakellm.Turn
		wantStatus       int
		wantBody         string
		wantRetryAfter   string
	}{
		{
			name: "openai 429", path: "/v1/chat/completions", body: openAIBody,
			turn:       fakellm.Turn{Status: 429, RetryAfter: "2", ErrorBody: "slow down"},
			wantStatus: 429, wantRetryAfter: "2",
			wantBody: `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}`,
		},
		{
			name: "anthropic 529", path: "/v1/messages", body: anthropicBody,
			turn:       fakellm.Turn{Status: 529},
			wantStatus: 529,
			wantBody:   `{"type":"error","error":{"type":"overloaded_error","message":"fakellm: scripted HTTP 529"}}`,
		},
		{
			name: "raw JSON error body", path: "/v1/messages", body: anthropicBody,
			turn:       fakellm.Turn{Status: 400, ErrorBody: `{"custom":true}`},
			wantStatus: 400, wantBody: `{"custom":true}`,
		},
		{
			name: "openai context overflow", path: "/v1/chat/completions", body: openAIBody,
			turn:       fakellm.Turn{ContextOverflow: true},
			wantStatus: 400,
			wantBody:   `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		},
		{
			name: "anthropic context overflow", path: "/v1/messages", body: anthropicBody,
			turn:       fakellm.Turn{ContextOverflow: true},
			wantStatus: 400,
			wantBody:   `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(tt.turn)

			res, body := post(t, s.AnthropicURL()+tt.path, tt.body)
			g.Expect(res.StatusCode).To(Equal(tt.wantStatus))
			g.Expect(res.Header.Get("Retry-After")).To(Equal(tt.wantRetryAfter))
			g.Expect(string(body)).To(MatchJSON(tt.wantBody))
		})
	}
}

func TestInvalidRequestsAreRejected(t *testing.T) {
	tests := []struct {
		name, path, body, want string
	}{
		{name: "not JSON", path: "/v1/chat/completions", body: `{"model":`, want: "malformed request body"},
		{name: "openai orphan tool message", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"x","content":"r"}]}`, want: "must be a response to a preceding message"},
		{name: "openai unanswered tool call", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"hi"}]}`, want: "must be followed by tool messages"},
		{name: "anthropic without max_tokens", path: "/v1/messages", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, want: "max_tokens"},
		{name: "anthropic empty text", path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, want: "non-empty"},
		{name: "anthropic tool result not first", path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t"}]}]}`, want: "must come first"},
		{name: "anthropic unanswered tool use", path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":"x"}]}`, want: "without tool_result"},
		{name: "anthropic system role", path: "/v1/messages", body: `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, want: "unexpected role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(fakellm.Turn{Text: "kept"})

			res, body := post(t, s.AnthropicURL()+tt.path, tt.body)
			g.Expect(res.StatusCode).To(Equal(http.StatusBadRequest))
			g.Expect(string(body)).To(ContainSubstring(tt.want))
			g.Expect(s.Pending()).To(Equal(1), "a rejected request consumes no turn")
			g.Expect(s.Requests()).To(HaveLen(1))
		})
	}
}

func TestRouting(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(r fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: r.Protocol + " " + r.Path} })

	for _, path := range []string{"/v1/chat/completions", "/chat/completions", "/openai/v1/chat/completions"} {
		res, body := post(t, s.AnthropicURL()+path, openAIBody)
		g.Expect(res.StatusCode).To(Equal(http.StatusOK), path)
		g.Expect(string(body)).To(ContainSubstring(`"content":"openai ` + path + `"`))
	}
	for _, path := range []string{"/v1/messages", "/messages"} {
		res, body := post(t, s.AnthropicURL()+path, anthropicBody)
		g.Expect(res.StatusCode).To(Equal(http.StatusOK), path)
		g.Expect(string(body)).To(ContainSubstring(`"text":"anthropic ` + path + `"`))
	}
	res, _ := post(t, s.AnthropicURL()+"/v1/embeddings", `{}`)
	g.Expect(res.StatusCode).To(Equal(http.StatusNotFound))
	getRes, err := http.Get(s.URL() + "/chat/completions")
	g.Expect(err).NotTo(HaveOccurred())
	_ = getRes.Body.Close()
	g.Expect(getRes.StatusCode).To(Equal(http.StatusMethodNotAllowed))
}

func TestScriptBeforeResponder(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "computed"} })
	s.Script(fakellm.Turn{Text: "scripted"})

	_, first := post(t, s.URL()+"/chat/completions", openAIBody)
	_, second := post(t, s.URL()+"/chat/completions", openAIBody)
	g.Expect(string(first)).To(ContainSubstring(`"scripted"`))
	g.Expect(string(second)).To(ContainSubstring(`"computed"`))
}

func TestConcurrentRequests(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	const n = 16
	turns := make([]fakellm.Turn, n)
	for i := range turns {
		turns[i] = fakellm.Turn{Text: fmt.Sprintf("turn %d", i), ToolCalls: []fakellm.Call{{Name: "f"}}}
	}
	s.Script(turns...)

	var wg sync.WaitGroup
	seen := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(stream bool) {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
			res, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				seen <- err.Error()
				return
			}
			defer func() { _ = res.Body.Close() }()
			b, _ := io.ReadAll(res.Body)
			seen <- string(b)
		}(i%2 == 0)
	}
	wg.Wait()
	close(seen)
	ids := map[string]bool{}
	for body := range seen {
		g.Expect(body).To(ContainSubstring("turn "))
		i := strings.Index(body, `"id":"call_`)
		g.Expect(i).To(BeNumerically(">=", 0))
		id := body[i : i+strings.Index(body[i+6:], `"`)+7]
		g.Expect(ids).NotTo(HaveKey(id), "generated tool-call IDs are unique")
		ids[id] = true
	}
	g.Expect(s.Requests()).To(HaveLen(n))
	g.Expect(s.Pending()).To(BeZero())
}

func TestListen(t *testing.T) {
	g := NewWithT(t)
	s, err := fakellm.Listen("127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer s.Close()
	g.Expect(s.URL()).To(HavePrefix("http://127.0.0.1:"))
	g.Expect(s.URL()).To(HaveSuffix("/v1"))

	_, err = fakellm.Listen("256.0.0.1:1")
	g.Expect(err).To(MatchError(ContainSubstring("failed to listen")))
}

func TestRequestLimit(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	send := func(text string) {
		body := `{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`
		r, _ := post(t, s.URL()+"/chat/completions", body)
		g.Expect(r.StatusCode).To(Equal(http.StatusOK))
	}
	send("one")
	send("two")
	send("three")
	g.Expect(s.Requests()).To(HaveLen(3), "all kept by default")
	s.SetRequestLimit(2)
	send("four")
	var last []string
	for _, r := range s.Requests() {
		last = append(last, r.Messages[0].Content)
	}
	g.Expect(last).To(Equal([]string{"three", "four"}))
	s.SetRequestLimit(0)
	send("five")
	g.Expect(s.Requests()).To(BeEmpty())
}

// GET /models answers in the wire format of the protocol that asks (the
// Anthropic SDK sends anthropic-version), refuses a wrong key with the
// protocol's 401 once SetAPIKey is set, and consumes no scripted turn.
func TestModelListing(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.Script(fakellm.Turn{Text: "kept"})
	s.SetModels("m1", "m2")
	get := func(path string, header map[string]string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, s.AnthropicURL()+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = res.Body.Close() }()
		var body map[string]any
		g.Expect(json.NewDecoder(res.Body).Decode(&body)).To(Succeed())
		return res.StatusCode, body
	}
	code, body := get("/v1/models", nil)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("object", "list"))
	g.Expect(body["data"]).To(ConsistOf(
		And(HaveKeyWithValue("id", "m1"), HaveKeyWithValue("object", "model"), HaveKey("created"), HaveKey("owned_by")),
		HaveKeyWithValue("id", "m2")))
	code, body = get("/v1/models", map[string]string{"anthropic-version": "2023-06-01"})
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(And(HaveKeyWithValue("has_more", false), HaveKeyWithValue("first_id", "m1"), HaveKeyWithValue("last_id", "m2")))
	g.Expect(body["data"]).To(ContainElement(And(HaveKeyWithValue("type", "model"), HaveKeyWithValue("id", "m1"),
		HaveKeyWithValue("display_name", "m1"), HaveKeyWithValue("created_at", "2023-11-14T22:13:20Z"))))

	s.SetAPIKey("sk-right")
	code, body = get("/v1/models", map[string]string{"Authorization": "Bearer sk-wrong"})
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	g.Expect(body).To(HaveKeyWithValue("error", HaveKeyWithValue("type", "authentication_error")))
	code, body = get("/v1/models", map[string]string{"anthropic-version": "2023-06-01", "x-api-key": "sk-wrong"})
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	g.Expect(body).To(And(HaveKeyWithValue("type", "error"), HaveKeyWithValue("error", HaveKeyWithValue("type", "authentication_error"))))
	code, _ = get("/v1/models", map[string]string{"Authorization": "Bearer sk-right"})
	g.Expect(code).To(Equal(http.StatusOK))
	res, raw := post(t, s.URL()+"/chat/completions", openAIBody)
	g.Expect(res.StatusCode).To(Equal(http.StatusUnauthorized), "a wrong key is refused on every path: %s", raw)

	g.Expect(s.ModelListings()).To(Equal(5))
	g.Expect(s.Pending()).To(Equal(1), "listing models consumes no turn")
}
