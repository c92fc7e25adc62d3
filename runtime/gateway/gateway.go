// Package gateway serves PicoBot's client protocol (docs/protocol.md): a JSON
// WebSocket that streams turn events, a small REST API, and the web UI. It
// knows nothing of LLMs or storage: everything goes through a Backend.
package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/store"
)

// ProtocolVersion is the "v" of every frame.
const ProtocolVersion = 1

// Limits of client input.
const (
	MaxFrameBytes   = 256 << 10 // a WebSocket frame
	MaxTextBytes    = 64 << 10  // the text of one message
	maxIDBytes      = 128
	maxChatIDBytes  = 200
	writeTimeout    = 10 * time.Second
	defaultHistory  = 50
	maxHistoryLimit = 500
)

// AgentInfo is an agent as clients see it.
type AgentInfo struct {
	Name    string     `json:"name"`
	Ready   bool       `json:"ready"`
	Reason  string     `json:"reason"`
	Message string     `json:"message"`
	Model   *ModelInfo `json:"model"`
	Tools   []string   `json:"tools"`
}

// ModelInfo is an agent's effective model.
type ModelInfo struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Source   string `json:"source"`
}

// Check is one line of the health report.
type Check struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Send is a message from a client.
type Send struct {
	ID, Agent, ChatID, Text string
	// Sink receives the turn's events; it is called from another goroutine.
	Sink func(agent.Event)
}

// Outcome is how a send ended.
type Outcome struct {
	SessionID string
	Command   string // slash command handled
	Text      string // command reply or final text
	Duplicate bool
}

// Backend is what the gateway needs from the runtime.
type Backend interface {
	Agents() []AgentInfo
	// Handle processes a send to the end and returns its outcome.
	Handle(ctx context.Context, s Send) (Outcome, error)
	Stop(agent, chatID string) bool
	Sessions(ctx context.Context, agent, chatID string) (current string, list []store.Session, err error)
	Messages(ctx context.Context, sessionID string, last int) ([]store.Message, error)
	Health(ctx context.Context) []Check
	// Artifact opens a stored artifact of the caller's tenant.
	Artifact(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error)
}

// Error codes of the protocol.
const (
	CodeBadRequest   = "bad_request"
	CodeUnknownAgent = "unknown_agent"
	CodeNoModel      = "no_model"
	CodeBusy         = "busy"
	CodeStopped      = "stopped"
	CodeInternal     = "internal"
	CodeUnauthorized = "unauthorized"
)

// CodedError carries a protocol error code.
type CodedError struct {
	Code string
	Err  error
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// Server is the gateway's HTTP handler.
type Server struct {
	backend Backend
	key     string // "" = no authentication (embedded mode on loopback)
	ui      fs.FS
	log     *slog.Logger
	mux     *http.ServeMux
}

// New returns the gateway handler. ui may be nil (no web UI).
func New(b Backend, apiKey string, ui fs.FS, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{backend: b, key: apiKey, ui: ui, log: log, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /api/v1/health", s.health)
	s.mux.HandleFunc("GET /api/v1/agents", s.auth(s.agents))
	s.mux.HandleFunc("GET /api/v1/sessions", s.auth(s.sessions))
	s.mux.HandleFunc("GET /api/v1/sessions/{id}/messages", s.auth(s.messages))
	s.mux.HandleFunc("GET /api/v1/ws", s.auth(s.ws))
	s.mux.HandleFunc("GET /api/v1/artifacts/{id}", s.auth(s.artifact))
	if ui != nil {
		s.mux.Handle("GET /", http.FileServerFS(ui))
	}
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.key != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if got == "" {
				got = r.URL.Query().Get("key")
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.key)) != 1 {
				writeError(w, http.StatusUnauthorized, CodeUnauthorized, "missing or wrong API key")
				return
			}
		}
		next(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v map[string]any) {
	v["v"] = ProtocolVersion
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	checks := s.backend.Health(r.Context())
	status := "ok"
	for _, c := range checks {
		if !c.OK {
			status = "degraded"
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": status, "checks": checks})
}

func (s *Server) agents(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"agents": s.backend.Agents()})
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkChat(q.Get("agent"), q.Get("chat_id")); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	cur, list, err := s.backend.Sessions(r.Context(), q.Get("agent"), q.Get("chat_id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	out := make([]map[string]any, 0, len(list))
	for _, ss := range list {
		out = append(out, map[string]any{"id": ss.ID, "dialog_id": ss.DialogID, "title": ss.Title, "last_message_at": ss.LastMessageAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"current": cur, "sessions": out})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	last := defaultHistory
	if v := r.URL.Query().Get("last"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHistoryLimit {
			writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("last must be a number from 1 to %d", maxHistoryLimit))
			return
		}
		last = n
	}
	msgs, err := s.backend.Messages(r.Context(), r.PathValue("id"), last)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, map[string]any{"seq": m.Seq, "role": m.Role, "content": m.Content, "tool_calls": m.ToolCalls,
			"tool_call_id": m.ToolCallID, "name": m.Name, "is_error": m.IsError, "created_at": m.CreatedAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out})
}

// artifact serves a stored file. Only images and plain text render inline;
// everything else downloads, and nothing may run script in the UI's origin.
func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	rc, a, err := s.backend.Artifact(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	defer func() { _ = rc.Close() }()
	ct := a.MediaType
	disposition := "attachment"
	switch {
	case strings.HasPrefix(ct, "image/") && ct != "image/svg+xml":
		disposition = "inline"
	case strings.HasPrefix(ct, "text/"):
		ct, disposition = "text/plain; charset=utf-8", "inline"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", fmt.Sprintf("%s; filename=%q", disposition, a.Name))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	w.Header().Set("Content-Length", strconv.FormatInt(a.Size, 10))
	_, _ = io.Copy(w, rc)
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var ce *CodedError
	switch {
	case errors.As(err, &ce) && ce.Code == CodeUnknownAgent:
		writeError(w, http.StatusNotFound, ce.Code, err.Error())
	case errors.As(err, &ce):
		writeError(w, http.StatusBadRequest, ce.Code, err.Error())
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no such session")
	default:
		s.log.Error("Request failed", "err", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

func checkChat(agentName, chatID string) error {
	switch {
	case agentName == "" || chatID == "":
		return errors.New("agent and chat_id are required")
	case len(chatID) > maxChatIDBytes || strings.ContainsAny(chatID, ":/\x00\n\r") || strings.ContainsAny(agentName, ":/\x00\n\r"):
		return fmt.Errorf("agent and chat_id must not contain ':', '/' or control characters; chat_id at most %d bytes", maxChatIDBytes)
	}
	return nil
}

// frame is a WebSocket frame in either direction.
type frame struct {
	V       int        `json:"v"`
	Type    string     `json:"type"`
	ID      string     `json:"id,omitempty"`
	Agent   string     `json:"agent,omitempty"`
	ChatID  string     `json:"chat_id,omitempty"`
	Text    string     `json:"text,omitempty"`
	Session string     `json:"session,omitempty"`
	Event   *eventBody `json:"event,omitempty"`
	Code    string     `json:"code,omitempty"`
	Message string     `json:"message,omitempty"`
}

type eventBody struct {
	Kind         string `json:"kind"`
	Text         string `json:"text,omitempty"`
	CallID       string `json:"call_id,omitempty"`
	Name         string `json:"name,omitempty"`
	Arguments    string `json:"arguments,omitempty"`
	Content      string `json:"content,omitempty"`
	IsError      bool   `json:"is_error,omitempty"`
	InputTokens  int    `json:"input_tokens,omitempty"`
	OutputTokens int    `json:"output_tokens,omitempty"`
}

func toEventBody(e agent.Event) *eventBody {
	switch e.Kind {
	case agent.EventDelta, agent.EventFinal:
		return &eventBody{Kind: string(e.Kind), Text: e.Text}
	case agent.EventToolCall:
		return &eventBody{Kind: string(e.Kind), CallID: e.ToolCall.ID, Name: e.ToolCall.Name, Arguments: e.ToolCall.Arguments}
	case agent.EventToolResult:
		return &eventBody{Kind: string(e.Kind), CallID: e.ToolResult.CallID, Name: e.ToolResult.Name, Content: e.ToolResult.Content, IsError: e.ToolResult.IsError}
	case agent.EventUsage:
		return &eventBody{Kind: string(e.Kind), InputTokens: e.Usage.InputTokens, OutputTokens: e.Usage.OutputTokens}
	}
	return nil // compressed and future kinds are internal
}

// conn is one WebSocket client; writes are serialised.
type conn struct {
	ws  *websocket.Conn
	mu  sync.Mutex
	ctx context.Context
}

func (c *conn) send(f frame) {
	f.V = ProtocolVersion
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	_ = c.ws.Write(ctx, websocket.MessageText, b) // a failed write ends the read loop too
}

func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: []string{"localhost:*", "127.0.0.1:*"}})
	if err != nil {
		return
	}
	ws.SetReadLimit(MaxFrameBytes)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c := &conn{ws: ws, ctx: ctx}
	var turns sync.WaitGroup
	defer turns.Wait()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			cancel()
			_ = ws.CloseNow()
			return
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.send(frame{Type: "error", Code: CodeBadRequest, Message: "frame is not valid JSON: " + err.Error()})
			continue
		}
		switch {
		case f.V != ProtocolVersion:
			c.send(frame{Type: "error", ID: f.ID, Code: CodeBadRequest, Message: fmt.Sprintf("unsupported protocol version %d (want %d)", f.V, ProtocolVersion)})
		case f.Type == "stop":
			if err := checkChat(f.Agent, f.ChatID); err != nil {
				c.send(frame{Type: "error", ID: f.ID, Code: CodeBadRequest, Message: err.Error()})
				continue
			}
			s.backend.Stop(f.Agent, f.ChatID)
		case f.Type == "send":
			if msg := validateSend(f); msg != "" {
				c.send(frame{Type: "error", ID: f.ID, Code: CodeBadRequest, Message: msg})
				c.send(frame{Type: "done", ID: f.ID})
				continue
			}
			c.send(frame{Type: "ack", ID: f.ID})
			turns.Go(func() { s.turn(ctx, c, f) })
		default:
			c.send(frame{Type: "error", ID: f.ID, Code: CodeBadRequest, Message: fmt.Sprintf("unknown frame type %q (want send or stop)", f.Type)})
		}
	}
}

func validateSend(f frame) string {
	switch {
	case f.ID == "" || len(f.ID) > maxIDBytes:
		return fmt.Sprintf("id is required (at most %d bytes)", maxIDBytes)
	case strings.TrimSpace(f.Text) == "":
		return "text is required"
	case len(f.Text) > MaxTextBytes:
		return fmt.Sprintf("text is %d bytes; the limit is %d", len(f.Text), MaxTextBytes)
	}
	if err := checkChat(f.Agent, f.ChatID); err != nil {
		return err.Error()
	}
	return ""
}

func (s *Server) turn(ctx context.Context, c *conn, f frame) {
	var session string
	var smu sync.Mutex
	sink := func(e agent.Event) {
		if b := toEventBody(e); b != nil {
			smu.Lock()
			sid := session
			smu.Unlock()
			c.send(frame{Type: "event", ID: f.ID, Session: sid, Event: b})
		}
	}
	out, err := s.backend.Handle(ctx, Send{ID: f.ID, Agent: f.Agent, ChatID: f.ChatID, Text: f.Text, Sink: sink})
	smu.Lock()
	session = out.SessionID
	smu.Unlock()
	switch {
	case err != nil:
		code := CodeInternal
		var ce *CodedError
		if errors.As(err, &ce) {
			code = ce.Code
		}
		msg := err.Error()
		if code == CodeInternal {
			s.log.Error("Turn failed", "agent", f.Agent, "session", out.SessionID, "err", err)
		}
		c.send(frame{Type: "error", ID: f.ID, Session: out.SessionID, Code: code, Message: msg})
	case out.Command != "":
		c.send(frame{Type: "event", ID: f.ID, Session: out.SessionID, Event: &eventBody{Kind: "command", Text: out.Text}})
	}
	c.send(frame{Type: "done", ID: f.ID, Session: out.SessionID})
}
