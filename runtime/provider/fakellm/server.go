// Package fakellm is a scripted LLM server that speaks the OpenAI Chat
// Completions and Anthropic Messages wire protocols for real over HTTP,
// streaming (SSE) and not, tool calls included. The LLM is the one component
// PicoBot's tests fake (see docs/architecture.md, "Testing"), and faking it
// at the wire rather than behind an interface means the official SDKs and our
// provider translation are exercised exactly as in production.
//
// A test queues Turns with Script; each request, of either protocol, consumes
// the next one. Requests records what the SDKs actually sent, parsed into a
// protocol-neutral view so tests can assert request mapping.
package fakellm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
)

// Protocol names, as recorded in Recorded.Protocol.
const (
	ProtocolOpenAI    = "openai"
	ProtocolAnthropic = "anthropic"
)

// NoTurnMessage is the error message of the 500 reply sent when no scripted
// turn is left and no responder is set, so a test that under-scripts fails
// loudly and recognisably.
const NoTurnMessage = "fakellm: no scripted turn left"

// Call is one tool call a Turn makes the model emit.
type Call struct {
	// ID is generated (call_N / toolu_N) when empty.
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// Args is the raw JSON arguments text, sent as-is; it may be deliberately
	// malformed to test validation downstream. A non-streamed Anthropic body
	// must be JSON, so there invalid Args are sent as a JSON string holding
	// the text (the anthropic provider unwraps it).
	Args string `json:"args,omitempty"`
}

// Usage is the token accounting a Turn reports. InputTokens includes
// CachedInputTokens (OpenAI's convention); the Anthropic encoder splits them
// into input_tokens and cache_read_input_tokens.
type Usage struct {
	InputTokens       int `json:"input_tokens"`
	OutputTokens      int `json:"output_tokens"`
	CachedInputTokens int `json:"cached_input_tokens,omitempty"`
}

// Turn is one scripted reply. With Status or ContextOverflow set the reply is
// an HTTP error in the protocol's own error format; otherwise it is a model
// answer of Text and ToolCalls.
type Turn struct {
	Text      string `json:"text,omitempty"`
	ToolCalls []Call `json:"tool_calls,omitempty"`

	// Status replies with this HTTP error status instead of an answer.
	Status int `json:"status,omitempty"`
	// RetryAfter is sent verbatim as the Retry-After header of an error reply.
	RetryAfter string `json:"retry_after,omitempty"`
	// Header holds extra reply headers (e.g. retry-after-ms), in either case.
	Header map[string]string `json:"header,omitempty"`
	// ErrorBody is the error reply's body when it is a JSON document, else the
	// message placed in the protocol's error envelope.
	ErrorBody string `json:"error_body,omitempty"`
	// ContextOverflow replies with the protocol's real context-length error.
	ContextOverflow bool `json:"context_overflow,omitempty"`

	// Truncate stops a stream mid-answer, without finish_reason / message_stop,
	// ending the response cleanly (a server that gave up).
	Truncate bool `json:"truncate,omitempty"`
	// Drop aborts the connection at the same point instead (a network
	// failure: the client sees an unexpected EOF).
	Drop bool `json:"drop,omitempty"`
	// Delay is waited before replying at all, in either mode (a slow server).
	Delay time.Duration `json:"delay,omitempty"`
	// ChunkDelay is waited between stream chunks after the first piece of
	// content (a slow stream: the client sees the answer begin at once).
	ChunkDelay time.Duration `json:"chunk_delay,omitempty"`
	// Length finishes with the protocol's output-cap reason (length /
	// max_tokens) instead of a natural stop.
	Length bool `json:"length,omitempty"`
	// Model is the model named in the reply; the requested model when empty.
	Model string `json:"model,omitempty"`
	// Usage is reported as given; a size-based estimate when nil.
	Usage *Usage `json:"usage,omitempty"`
}

// Recorded is one request the server received: the raw request plus a
// protocol-neutral parse of it.
type Recorded struct {
	Protocol string // ProtocolOpenAI or ProtocolAnthropic
	Path     string
	Header   http.Header
	Body     []byte

	Model string
	// System is the top-level system prompt (Anthropic) or the joined content
	// of the system/developer messages (OpenAI, which also keep their place in
	// Messages so placement can be asserted).
	System   string
	Messages []Message
	// Tools are the declared tool names, in order.
	Tools     []string
	Stream    bool
	MaxTokens int
	// JSONMode is true when the request asked for a JSON object answer
	// (OpenAI response_format json_object).
	JSONMode bool
	// Temperature is the request's temperature, nil when it sent none.
	Temperature *float64
	// ResponseFormat is OpenAI's response_format.type ("" when absent) and
	// JSONSchema its json_schema object as sent.
	ResponseFormat string
	JSONSchema     json.RawMessage
	// IncludeUsage is OpenAI's stream_options.include_usage.
	IncludeUsage bool
}

// Message is one wire message in neutral form. Anthropic tool results stay
// grouped as they were sent (several ToolResults in one user Message).
type Message struct {
	Role string
	// Content is the message's text blocks joined with "\n".
	Content     string
	Images      int
	ToolCalls   []Call
	ToolResults []ToolResult
}

// ToolResult is a tool result as sent back to the model.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// Server is a running fake. It is safe for concurrent use.
type Server struct {
	ts *httptest.Server

	mu       sync.Mutex
	script   []Turn
	respond  func(Recorded) Turn
	requests []Recorded
	// limited: only the last limit requests are kept (SetRequestLimit).
	limited bool
	limit   int
	seq     int
	// apiKey, when set, is the one key accepted (SetAPIKey).
	apiKey string
	// models answer GET /models (SetModels); listings counts those calls.
	models   []string
	listings int
}

// New starts a fake on a random loopback port. Close it when done.
func New() *Server {
	s := &Server{}
	s.ts = httptest.NewServer(s)
	return s
}

// Listen starts a fake on addr (host:port), for the standalone command.
func Listen(addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %q: %w", addr, err)
	}
	s := &Server{}
	s.ts = httptest.NewUnstartedServer(s)
	_ = s.ts.Listener.Close()
	s.ts.Listener = l
	s.ts.Start()
	return s, nil
}

// Close stops the server, waiting for in-flight requests to finish.
func (s *Server) Close() { s.ts.Close() }

// URL is the base URL for the OpenAI SDK; it ends with /v1.
func (s *Server) URL() string { return s.ts.URL + "/v1" }

// AnthropicURL is the base URL for the Anthropic SDK, which appends
// /v1/messages itself.
func (s *Server) AnthropicURL() string { return s.ts.URL }

// Script queues replies, consumed in order by requests of either protocol.
func (s *Server) Script(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, turns...)
}

// Respond sets a function computing replies when the script is empty, for
// load tests and benchmarks that need unbounded answers.
func (s *Server) Respond(fn func(req Recorded) Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = fn
}

// SetRequestLimit keeps only the last n requests for Requests (0: none),
// so a long benchmark's memory and garbage collection do not grow with the
// bodies it sent. All are kept by default.
func (s *Server) SetRequestLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limited, s.limit = true, max(n, 0)
	s.trim()
}

// trim applies the request limit; s.mu is held.
func (s *Server) trim() {
	if s.limited && len(s.requests) > s.limit {
		s.requests = slices.Clone(s.requests[len(s.requests)-s.limit:])
	}
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.requests...)
}

// SetAPIKey makes the fake accept only key (OpenAI: Authorization: Bearer;
// Anthropic: x-api-key): other requests get the protocol's real 401, as a
// provider answers a wrong key. Any key is accepted by default.
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = key
}

// SetModels sets the models GET /models lists (default: one, "fake-model").
// Listing models consumes no scripted turn and is not recorded: it is what
// health checks probe.
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]string(nil), ids...)
}

// ModelListings is the number of GET /models calls answered (any key).
func (s *Server) ModelListings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listings
}

// Pending is the number of scripted turns not yet consumed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// ServeHTTP routes both protocols, with or without the /v1 prefix.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var proto string
	switch {
	case strings.HasSuffix(r.URL.Path, "/models"):
		s.listModels(w, r)
		return
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		proto = ProtocolOpenAI
	case strings.HasSuffix(r.URL.Path, "/messages"):
		proto = ProtocolAnthropic
	default:
		http.Error(w, "fakellm: unknown path "+r.URL.Path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, proto, http.StatusMethodNotAllowed, "", "fakellm: only POST is served", "")
		return
	}
	if !s.authorized(w, r, proto) {
		return
	}
	body, err := readBody(r)
	if err != nil {
		writeError(w, proto, http.StatusBadRequest, "", "fakellm: failed to read request body", "")
		return
	}
	rec := Recorded{Protocol: proto, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	var perr error
	if proto == ProtocolOpenAI {
		perr = parseOpenAI(body, &rec)
	} else {
		perr = parseAnthropic(body, &rec)
	}

	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.trim()
	if perr != nil {
		s.mu.Unlock()
		writeError(w, proto, http.StatusBadRequest, "", "fakellm: malformed request body: "+perr.Error(), "")
		return
	}
	var turn Turn
	found := true
	respond := s.respond
	if len(s.script) > 0 {
		turn = s.script[0]
		s.script = s.script[1:]
		respond = nil
	} else if respond == nil {
		found = false
	}
	s.mu.Unlock()
	if respond != nil {
		turn = respond(rec)
	}
	if !found {
		writeError(w, proto, http.StatusInternalServerError, "", NoTurnMessage, "")
		return
	}
	if !wait(r.Context(), turn.Delay) {
		return
	}
	for k, v := range turn.Header {
		w.Header().Set(k, v)
	}

	switch {
	case turn.ContextOverflow:
		writeError(w, proto, http.StatusBadRequest, turn.RetryAfter, "", overflowBody(proto))
	case turn.Status >= 400:
		writeError(w, proto, turn.Status, turn.RetryAfter, turn.ErrorBody, "")
	default:
		s.answer(w, r, proto, &rec, turn)
	}
}

// authorized answers a request without the key SetAPIKey set with the
// protocol's 401 and reports false.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, proto string) bool {
	s.mu.Lock()
	want := s.apiKey
	s.mu.Unlock()
	if want == "" {
		return true
	}
	got := r.Header.Get("x-api-key")
	if proto == ProtocolOpenAI {
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if got == want {
		return true
	}
	msg := "invalid x-api-key"
	if proto == ProtocolOpenAI {
		msg = "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
	}
	writeError(w, proto, http.StatusUnauthorized, "", msg, "")
	return false
}

// listModels answers GET /models in the wire format of the protocol the
// client speaks: Anthropic's SDK always sends anthropic-version.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	proto := ProtocolOpenAI
	if r.Header.Get("anthropic-version") != "" {
		proto = ProtocolAnthropic
	}
	if r.Method != http.MethodGet {
		writeError(w, proto, http.StatusMethodNotAllowed, "", "fakellm: only GET lists models", "")
		return
	}
	s.mu.Lock()
	s.listings++
	s.mu.Unlock()
	if !s.authorized(w, r, proto) {
		return
	}
	s.mu.Lock()
	ids := s.models
	s.mu.Unlock()
	if ids == nil {
		ids = []string{"fake-model"}
	}
	const created = 1700000000
	var body any
	if proto == ProtocolOpenAI {
		data := make([]map[string]any, len(ids))
		for i, id := range ids {
			data[i] = map[string]any{"id": id, "object": "model", "created": created, "owned_by": "fakellm"}
		}
		body = map[string]any{"object": "list", "data": data}
	} else {
		data := make([]map[string]any, len(ids))
		for i, id := range ids {
			data[i] = map[string]any{"type": "model", "id": id, "display_name": id, "created_at": time.Unix(created, 0).UTC().Format(time.RFC3339)}
		}
		first, last := "", ""
		if len(ids) > 0 {
			first, last = ids[0], ids[len(ids)-1]
		}
		body = map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// readBody reads a request body into a buffer of its declared size.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 || r.ContentLength > 64<<20 {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, err
	}
	return body, nil
}

// answer writes a model answer, streamed or not.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, proto string, rec *Recorded, t Turn) {
	s.mu.Lock()
	s.seq++
	id := s.seq
	calls := make([]Call, len(t.ToolCalls))
	for i, c := range t.ToolCalls {
		if c.ID == "" {
			s.seq++
			if proto == ProtocolOpenAI {
				c.ID = fmt.Sprintf("call_%d", s.seq)
			} else {
				c.ID = fmt.Sprintf("toolu_%d", s.seq)
			}
		}
		calls[i] = c
	}
	s.mu.Unlock()
	t.ToolCalls = calls
	if t.Model == "" {
		t.Model = rec.Model
	}
	u := estimateUsage(rec, t)

	if !rec.Stream {
		var body []byte
		if proto == ProtocolOpenAI {
			body = openAICompletion(id, t, u)
		} else {
			body = anthropicMessage(id, t, u)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}

	var events []sseEvent
	if proto == ProtocolOpenAI {
		events = openAIChunks(id, t, u, rec.IncludeUsage)
	} else {
		events = anthropicEvents(id, t, u)
	}
	if t.Truncate || t.Drop {
		events = truncate(events)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var buf bytes.Buffer
	contentSent := false
	for _, ev := range events {
		// The delay starts after the first content piece, so a client sees
		// the beginning of a slow answer at once.
		if contentSent && !wait(r.Context(), t.ChunkDelay) {
			return
		}
		buf.Reset()
		if ev.name != "" {
			buf.WriteString("event: ")
			buf.WriteString(ev.name)
			buf.WriteByte('\n')
		}
		buf.WriteString("data: ")
		buf.Write(ev.data)
		buf.WriteString("\n\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		// Events spaced in time go out one by one; an instant answer goes
		// out in one write, as a server would send what it has ready.
		if flusher != nil && t.ChunkDelay > 0 {
			flusher.Flush()
		}
		contentSent = contentSent || ev.content
	}
	if flusher != nil {
		flusher.Flush()
	}
	if t.Drop {
		// Abort without the terminating chunk; net/http closes the
		// connection and does not log this sentinel.
		panic(http.ErrAbortHandler)
	}
}

// wait sleeps d unless the client goes away first; it reports whether to
// carry on.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sseEvent is one SSE event; content marks the text and tool-argument
// pieces, which truncation halves and ChunkDelay spaces out.
type sseEvent struct {
	name    string
	data    []byte
	content bool
}

// truncate keeps the events up to half of the content pieces (rounded up),
// never the finish: a stream cut mid-answer.
func truncate(events []sseEvent) []sseEvent {
	total := 0
	for _, ev := range events {
		if ev.content {
			total++
		}
	}
	keep := (total + 1) / 2
	if keep == 0 {
		return events[:1]
	}
	for i, ev := range events {
		if ev.content {
			keep--
			if keep == 0 {
				return events[:i+1]
			}
		}
	}
	return events
}

// estimateUsage is the turn's Usage, or a deterministic size-based guess.
func estimateUsage(rec *Recorded, t Turn) Usage {
	if t.Usage != nil {
		return *t.Usage
	}
	out := len(t.Text)
	for _, c := range t.ToolCalls {
		out += len(c.Name) + len(c.Args)
	}
	return Usage{InputTokens: len(rec.Body)/4 + 1, OutputTokens: out/4 + 1}
}

// writeError replies with an HTTP error in the protocol's envelope. A raw JSON
// body is sent verbatim; otherwise msg (or a default) is wrapped.
func writeError(w http.ResponseWriter, proto string, status int, retryAfter, msg, raw string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	if raw == "" && json.Valid([]byte(msg)) && strings.HasPrefix(strings.TrimSpace(msg), "{") {
		raw = msg
	}
	if raw == "" {
		if msg == "" {
			msg = fmt.Sprintf("fakellm: scripted HTTP %d", status)
		}
		raw = string(errorEnvelope(proto, status, msg))
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, raw)
}

func errorEnvelope(proto string, status int, msg string) []byte {
	if proto == ProtocolOpenAI {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": msg, "type": openAIErrorType(status), "param": nil, "code": nil,
		}})
		return b
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{
		"type": anthropicErrorType(status), "message": msg,
	}})
	return b
}

// overflowBody is the protocol's real context-length error.
func overflowBody(proto string) string {
	if proto == ProtocolOpenAI {
		return `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	}
	return `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// splitText cuts text into stream pieces after each space, or every 16 bytes
// of a long word, on rune boundaries, so a stream has several chunks.
func splitText(text string) []string {
	var out []string
	start := 0
	for i, r := range text {
		end := i + len(string(r))
		if r == ' ' || end-start >= 16 {
			out = append(out, text[start:end])
			start = end
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// splitArgs cuts tool arguments into pieces of about 8 bytes, on rune
// boundaries; malformed JSON is cut the same way.
func splitArgs(args string) []string {
	var out []string
	start := 0
	for i, r := range args {
		end := i + len(string(r))
		if end-start >= 8 {
			out = append(out, args[start:end])
			start = end
		}
	}
	if start < len(args) {
		out = append(out, args[start:])
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakellm: failed to marshal reply: %v", err))
	}
	return b
}
