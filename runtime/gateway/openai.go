package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// HeaderChatID names the chat of an OpenAI-compatible request; without it the
// request's "user" field does, and without that the API key's default chat
// (defaultOpenAIChat).
const HeaderChatID = "X-PicoBot-Chat-Id"

// defaultOpenAIChat is the chat of OpenAI requests that name none: one per
// API key ("default-<hash of the key's id>"), so two clients that name no
// chat do not share one conversation unless they share a key.
func defaultOpenAIChat(p Principal) string {
	sum := sha256.Sum256([]byte(p.KeyID))
	return "default-" + hex.EncodeToString(sum[:8])
}

// OpenAI request shapes (only what PicoBot reads; other fields are ignored).
type (
	oaRequest struct {
		Model         string      `json:"model"`
		Messages      []oaMessage `json:"messages"`
		Stream        bool        `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		User string `json:"user"`
		N    *int   `json:"n"`
		// Model settings and client tools (see settings and clientTools).
		Temperature         *float64          `json:"temperature"`
		MaxTokens           *int              `json:"max_tokens"`
		MaxCompletionTokens *int              `json:"max_completion_tokens"`
		ResponseFormat      *oaResponseFormat `json:"response_format"`
		Tools               []oaTool          `json:"tools"`
		ToolChoice          json.RawMessage   `json:"tool_choice"`
	}
	oaMessage struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []oaToolCall    `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
	}
	oaPart struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
)

// OpenAI reply shapes.
type (
	oaUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	oaReplyMessage struct {
		Role string `json:"role"`
		// Content is null in a reply of only tool calls.
		Content   *string      `json:"content"`
		Refusal   *string      `json:"refusal"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	}
	oaDelta struct {
		Role      string       `json:"role,omitempty"`
		Content   *string      `json:"content,omitempty"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	}
	oaChoice struct {
		Index        int             `json:"index"`
		Message      *oaReplyMessage `json:"message,omitempty"`
		Delta        *oaDelta        `json:"delta,omitempty"`
		Logprobs     *struct{}       `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	}
	oaCompletion struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []oaChoice `json:"choices"`
		Usage   *oaUsage   `json:"usage,omitempty"`
	}
	oaModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
)

// writeOpenAIError writes OpenAI's error JSON.
func writeOpenAIError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	body := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		body["code"] = code
	}
	if param != "" {
		body["param"] = param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": body})
}

// openAIError maps a protocol code to OpenAI's status, type and code.
func openAIError(code string) (status int, typ, oaCode string) {
	status = statusOf[code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	switch code {
	case CodeUnauthorized:
		return status, "invalid_request_error", "invalid_api_key"
	case CodeUnknownAgent:
		return status, "invalid_request_error", "model_not_found"
	case CodeRateLimited:
		return status, "requests", "rate_limit_exceeded"
	case CodeTooLarge:
		return status, "invalid_request_error", "request_too_large"
	}
	if status >= 500 {
		return status, "server_error", code
	}
	return status, "invalid_request_error", code
}

func writeOpenAIErrorCode(w http.ResponseWriter, code, msg string) {
	status, typ, oaCode := openAIError(code)
	writeOpenAIError(w, status, typ, oaCode, "", msg)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	agents, err := s.backend.ListAgents(r.Context())
	if err != nil {
		s.log.Error("Failed to list agents", "err", err)
		writeOpenAIErrorCode(w, errorCode(err, CodeNotFound), "failed to list agents")
		return
	}
	data := make([]oaModel, 0, len(agents))
	for _, a := range agents {
		data = append(data, oaModel{ID: a.Name, Object: "model", OwnedBy: "picobot"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if _, err := s.findAgent(r, name); err != nil {
		s.openAIFail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(oaModel{ID: name, Object: "model", OwnedBy: "picobot"})
}

func (s *Server) findAgent(r *http.Request, name string) (AgentInfo, error) {
	agents, err := s.backend.ListAgents(r.Context())
	if err != nil {
		return AgentInfo{}, err
	}
	for _, a := range agents {
		if a.Name == name {
			return a, nil
		}
	}
	return AgentInfo{}, Errorf(CodeUnknownAgent, "The model `%s` does not exist: PicoBot's models are its agents (GET /v1/models lists them).", name)
}

func (s *Server) openAIFail(w http.ResponseWriter, r *http.Request, err error) {
	code := errorCode(err, CodeUnknownSession)
	if code == CodeInternal && r.Context().Err() == nil { // a client that left is no fault of ours
		s.log.Error("OpenAI request failed", "path", r.URL.Path, "err", err)
	}
	_, typ, oaCode := openAIError(code)
	status := statusFor(w, err, code)
	param := ""
	switch {
	case code == CodeUnknownAgent:
		param = "model"
	case errors.Is(err, ErrClientToolsRefused), errors.Is(err, ErrClientToolClash):
		param = "tools"
	}
	writeOpenAIError(w, status, typ, oaCode, param, protocol.ClientMessage(code, err))
}

// HeaderIdempotencyKey makes a retried OpenAI request (same key, same API
// key, same chat) the same message: its turn runs once and a retry gets the
// stored answer.
const HeaderIdempotencyKey = "Idempotency-Key"

// idempotentID is the message id of a request: derived from its
// Idempotency-Key and API key when it has one, else fresh.
func idempotentID(w http.ResponseWriter, r *http.Request, fresh string) (string, bool) {
	key := r.Header.Get(HeaderIdempotencyKey)
	if key == "" {
		return fresh, true
	}
	if len(key) > 255 || strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		badOpenAI(w, "header "+HeaderIdempotencyKey, "%s must be 1-255 visible ASCII characters", HeaderIdempotencyKey)
		return "", false
	}
	p, _ := PrincipalFrom(r.Context())
	sum := sha256.Sum256([]byte(p.KeyID + "\x00" + key))
	return "oa-k-" + hex.EncodeToString(sum[:12]), true
}

func badOpenAI(w http.ResponseWriter, param, format string, args ...any) {
	writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", param, fmt.Sprintf(format, args...))
}

// lastUserText returns the text of the request's last message, which must be
// the user's: the session keeps its own history, so earlier messages, which
// OpenAI clients resend every time, are not given to the agent again.
func lastUserText(msgs []oaMessage) (string, string) {
	if len(msgs) == 0 {
		return "", "messages must hold at least one message"
	}
	m := msgs[len(msgs)-1]
	if m.Role != "user" {
		return "", fmt.Sprintf("the last message must be the user's (got role %q): PicoBot keeps the conversation and answers the last user message", m.Role)
	}
	var text string
	if err := json.Unmarshal(m.Content, &text); err == nil {
		return text, ""
	}
	var parts []oaPart
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", "the last message's content must be a string or an array of text parts"
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Sprintf("content part type %q is not supported; send text", p.Type)
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Text)
	}
	return b.String(), ""
}

// readCompletion reads and checks the frame of a chat completions request
// (strict JSON, model, n); on a bad request it has answered it and reports
// false.
func readCompletion(w http.ResponseWriter, r *http.Request) (oaRequest, bool) {
	data, err := io.ReadAll(r.Body) // in memory: guard read it within the size and time limits
	if err != nil {
		badOpenAI(w, "", "failed to read request body: %v", err)
		return oaRequest{}, false
	}
	var req oaRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&req); err != nil {
		badOpenAI(w, "", "request body is not valid JSON: %v", err)
		return oaRequest{}, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		badOpenAI(w, "", "request body holds data after its JSON object")
		return oaRequest{}, false
	}
	if req.Model == "" {
		badOpenAI(w, "model", "model is required: the name of a PicoBot agent (GET /v1/models)")
		return oaRequest{}, false
	}
	if req.N != nil && *req.N != 1 {
		badOpenAI(w, "n", "n must be 1")
		return oaRequest{}, false
	}
	return req, true
}

// sessionText checks a request of the session mode and returns the text of
// its last user message. The session keeps the conversation and the
// agent's settings, so client tools and model settings, which only the
// stateless mode honours, are refused by name rather than ignored.
func (req *oaRequest) sessionText() (string, *badParam) {
	for _, f := range []struct {
		name string
		set  bool
	}{{"tools", len(req.Tools) > 0}, {"temperature", req.Temperature != nil}, {"max_tokens", req.MaxTokens != nil},
		{"max_completion_tokens", req.MaxCompletionTokens != nil}, {"response_format", req.ResponseFormat != nil && req.ResponseFormat.Type != "text"}} {
		if f.set {
			return "", badf(f.name, "%s is honoured only in the stateless mode (a request with no user field and no %s header); a chat kept by PicoBot runs on the agent's own settings", f.name, HeaderChatID)
		}
	}
	text, msg := lastUserText(req.Messages)
	if msg == "" && strings.TrimSpace(text) == "" {
		msg = "the last user message is empty"
	}
	if msg == "" && len(text) > MaxTextBytes {
		msg = fmt.Sprintf("the last user message is %d bytes; the limit is %d", len(text), MaxTextBytes)
	}
	if msg == "" && strings.ContainsRune(text, 0) {
		msg = "the last user message contains a NUL character"
	}
	if msg != "" {
		return "", badf("messages", "%s", msg)
	}
	return text, nil
}

// answer is what a completion's turn returns to its client.
type answer struct {
	Text      string
	ToolCalls []llm.ToolCall
	SessionID string
	Duplicate bool
}

// runTurn runs a completion's turn, its events going to sink.
type runTurn func(ctx context.Context, sink func(turn.Event)) (answer, error)

// chatCompletions is POST /v1/chat/completions: in the session mode the
// last user message goes to the agent named by "model", in the chat named
// by X-PicoBot-Chat-Id or "user" (channel "openai"), or the API key's own
// chat; a request that names no chat and carries more than a bare user
// message runs in the stateless mode (statelessCompletion).
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	req, ok := readCompletion(w, r)
	if !ok {
		return
	}
	chatID := r.Header.Get(HeaderChatID)
	param := "header " + HeaderChatID
	if chatID == "" {
		chatID, param = req.User, "user"
	}
	ctx, span := s.startTurn(r.Context(), r.Header, tracing.SpanChatCompletion, req.Model, chatID)
	defer span.End()
	r = r.WithContext(ctx)
	if chatID == "" && req.stateless() {
		s.statelessCompletion(w, r, &req)
		return
	}
	text, bad := req.sessionText()
	if bad != nil {
		badOpenAI(w, bad.param, "%s", bad.msg)
		return
	}
	if chatID == "" {
		p, _ := PrincipalFrom(r.Context())
		chatID = defaultOpenAIChat(p)
	}
	if err := checkChat(Chat{Agent: req.Model, ChatID: chatID}); err != nil {
		badOpenAI(w, param, "chat id %q: %v", chatID, err)
		return
	}
	if !s.admit(w, r, &req) {
		return
	}
	id := newRequestID("chatcmpl-")
	msgID, ok := idempotentID(w, r, "oa-"+id[len("chatcmpl-"):])
	if !ok {
		return
	}
	send := Send{ID: msgID, Channel: ChannelOpenAI, Agent: req.Model, ChatID: chatID, Text: text}
	s.complete(w, r, &req, id, func(ctx context.Context, sink func(turn.Event)) (answer, error) {
		send.Sink = sink
		out, err := s.backend.Handle(ctx, send)
		return answer{Text: out.Text, SessionID: out.SessionID, Duplicate: out.Duplicate}, err
	})
}

// admit checks that the request's agent exists and, for a stream, which
// starts at once (200 and the role chunk), that it has a usable model: an
// agent known not to answer is refused before, with the status a turn
// would end with.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, req *oaRequest) bool {
	info, err := s.findAgent(r, req.Model)
	if err != nil {
		s.openAIFail(w, r, err)
		return false
	}
	if req.Stream && !info.Ready {
		s.openAIFail(w, r, Errorf(CodeNoModel, "agent %s has no usable model (%s): %s", info.Name, info.Reason, info.Message))
		return false
	}
	return true
}

// statelessCompletion runs a request of the stateless mode: the agent
// answers exactly the client's messages, with its settings and tools, and
// nothing is stored.
func (s *Server) statelessCompletion(w http.ResponseWriter, r *http.Request, req *oaRequest) {
	c, bad := req.completion()
	if bad == nil {
		c.Settings, bad = req.settings()
	}
	if bad == nil {
		c.Tools, bad = req.clientTools()
	}
	if bad != nil {
		badOpenAI(w, bad.param, "%s", bad.msg)
		return
	}
	sb, ok := s.backend.(StatelessBackend)
	if !ok {
		badOpenAI(w, "user", "this gateway keeps conversations server-side and does not run stateless requests: name a chat with the user field or the %s header and send only the new message", HeaderChatID)
		return
	}
	if !s.admit(w, r, req) {
		return
	}
	s.complete(w, r, req, newRequestID("chatcmpl-"), func(ctx context.Context, sink func(turn.Event)) (answer, error) {
		c.Sink = sink
		out, err := sb.Complete(ctx, c)
		return answer{Text: out.Text, ToolCalls: out.ToolCalls}, err
	})
}

// complete answers a completion with its turn's result, whole or as a
// stream.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, req *oaRequest, id string, run runTurn) {
	if req.Stream {
		s.streamCompletion(w, r, req, id, run)
		return
	}
	var mu sync.Mutex
	var usage oaUsage
	files := &finalFiles{}
	out, err := run(r.Context(), func(e turn.Event) {
		files.sink(e)
		if e.Kind == turn.EventUsage && e.Usage != nil {
			mu.Lock()
			usage.PromptTokens += e.Usage.InputTokens
			usage.CompletionTokens += e.Usage.OutputTokens
			mu.Unlock()
		}
	})
	if err != nil {
		s.openAIFail(w, r, err)
		return
	}
	mu.Lock()
	u := usage
	mu.Unlock()
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	finish := "stop"
	msg := &oaReplyMessage{Role: "assistant"}
	if text := joinFiles(out.Text, files.markdown()); text != "" || len(out.ToolCalls) == 0 {
		msg.Content = &text
	}
	if len(out.ToolCalls) > 0 {
		finish, msg.ToolCalls = "tool_calls", wireToolCalls(out.ToolCalls, false)
	}
	w.Header().Set("Content-Type", "application/json")
	if out.SessionID != "" {
		w.Header().Set("X-PicoBot-Session", out.SessionID)
	}
	if out.Duplicate {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	_ = json.NewEncoder(w).Encode(oaCompletion{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
		Choices: []oaChoice{{Message: msg, FinishReason: &finish}}, Usage: &u})
}

// joinFiles appends the markdown links of a reply's files to its text:
// OpenAI messages have no attachments.
func joinFiles(text, files string) string {
	switch {
	case files == "":
		return text
	case text == "":
		return files
	}
	return text + "\n\n" + files
}

// sseWriter writes server-sent events until closed; the agent's sink may call
// it from another goroutine after the handler gave up on a gone client.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	first   []byte // the first event, written with the header
	started bool
	closed  bool
}

func (s *sseWriter) data(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.raw(b)
}

func (s *sseWriter) raw(b []byte) { s.write("data: %s\n\n", b) }

// write writes one event (the status and the first event before it, the
// first time) and flushes it.
func (s *sseWriter) write(format string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if !s.started {
		s.started = true
		s.w.WriteHeader(http.StatusOK)
		if _, err := fmt.Fprintf(s.w, "data: %s\n\n", s.first); err != nil {
			s.closed = true
			return
		}
	}
	if b != nil {
		if _, err := fmt.Fprintf(s.w, format, b); err != nil {
			s.closed = true
			return
		}
	}
	_ = s.rc.Flush()
}

// start sends the status and the role chunk now, so a client sees the
// answer begin before the turn's first text (which may come after minutes
// of tools).
func (s *sseWriter) start() { s.write("", nil) }

// keepAlive writes an SSE comment every interval until stop is called, so
// proxies and clients do not give up on a stream while the agent runs
// tools.
func (s *sseWriter) keepAlive(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.write(": %s\n\n", []byte("keep-alive"))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (s *sseWriter) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// streamCompletion answers with OpenAI's chunk stream: a role chunk, a chunk
// per text delta, a finish chunk, the usage chunk when asked for, and
// "data: [DONE]".
func (s *Server) streamCompletion(w http.ResponseWriter, r *http.Request, req *oaRequest, id string, run runTurn) {
	created := time.Now().Unix()
	chunk := func(d *oaDelta, finish *string) oaCompletion {
		return oaCompletion{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			Choices: []oaChoice{{Delta: d, FinishReason: finish}}}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	empty := ""
	first, _ := json.Marshal(chunk(&oaDelta{Role: "assistant", Content: &empty}, nil))
	sse := &sseWriter{w: w, rc: http.NewResponseController(w), first: first}
	defer sse.close()
	sse.start()
	defer sse.keepAlive(s.keepAlive)()
	var mu sync.Mutex
	var usage oaUsage
	files := &finalFiles{}
	streamed, afterTool := false, false
	sink := func(e turn.Event) {
		files.sink(e)
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case turn.EventDelta:
			if e.Text == "" {
				return
			}
			text := e.Text
			if afterTool && streamed {
				text = "\n\n" + text // text of a later step, after tool calls
			}
			afterTool, streamed = false, true
			sse.data(chunk(&oaDelta{Content: &text}, nil))
		case turn.EventToolCall:
			afterTool = true
		case turn.EventUsage:
			if e.Usage != nil {
				usage.PromptTokens += e.Usage.InputTokens
				usage.CompletionTokens += e.Usage.OutputTokens
			}
		}
	}
	out, err := run(r.Context(), sink)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		code := errorCode(err, CodeUnknownSession)
		if code == CodeInternal {
			s.log.Error("OpenAI stream failed", "path", r.URL.Path, "err", err)
		}
		_, typ, oaCode := openAIError(code)
		sse.data(map[string]any{"error": map[string]any{"message": protocol.ClientMessage(code, err), "type": typ, "param": nil, "code": oaCode}})
		return
	}
	if !streamed && out.Text != "" { // a slash command's reply, or a duplicate
		text := out.Text
		sse.data(chunk(&oaDelta{Content: &text}, nil))
		streamed = true
	}
	if md := files.markdown(); md != "" { // the reply's files, as links after its text
		if streamed {
			md = "\n\n" + md
		}
		sse.data(chunk(&oaDelta{Content: &md}, nil))
	}
	finish := "stop"
	if len(out.ToolCalls) > 0 {
		finish = "tool_calls"
		sse.data(chunk(&oaDelta{ToolCalls: wireToolCalls(out.ToolCalls, true)}, nil))
	}
	sse.data(chunk(&oaDelta{}, &finish))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := usage
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		sse.data(oaCompletion{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model, Choices: []oaChoice{}, Usage: &u})
	}
	sse.raw([]byte("[DONE]"))
}
