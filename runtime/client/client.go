// Package client is a small Go client of PicoBot's gateway protocol
// (docs/protocol.md): the REST calls (agents, sessions, messages, health) and
// a WebSocket connection that sends messages and streams their turn events.
// `picobot ask` and `picobot chat` are built on it.
//
// The client is tolerant of protocol growth: frame types and event kinds it
// does not know are passed through (events) or ignored (frames), and unknown
// JSON fields are ignored.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/buildinfo"
	"github.com/picobot/picobot/runtime/protocol"
)

// ProtocolVersion is the protocol version this client speaks.
const ProtocolVersion = 1

// Error codes of the protocol, as carried by Error.Code (runtime/protocol).
const (
	CodeBadRequest       = protocol.CodeBadRequest
	CodeUnknownAgent     = protocol.CodeUnknownAgent
	CodeNoModel          = protocol.CodeNoModel
	CodeBusy             = protocol.CodeBusy
	CodeStopped          = protocol.CodeStopped
	CodeInternal         = protocol.CodeInternal
	CodeUnauthorized     = protocol.CodeUnauthorized
	CodeForbidden        = protocol.CodeForbidden
	CodeNotFound         = protocol.CodeNotFound
	CodeRateLimited      = protocol.CodeRateLimited
	CodeTooLarge         = protocol.CodeTooLarge
	CodeTimeout          = protocol.CodeTimeout
	CodeUnsupportedMedia = protocol.CodeUnsupportedMedia
	CodeMisdirected      = protocol.CodeMisdirected
	// Unknown-thing codes of the REST API (404).
	CodeUnknownSession  = protocol.CodeUnknownSession
	CodeUnknownDialog   = protocol.CodeUnknownDialog
	CodeUnknownArtifact = protocol.CodeUnknownArtifact
)

// maxErrorBody bounds how much of a non-JSON error reply is quoted.
const maxErrorBody = 512

// ErrUnreachable is wrapped by errors of calls that got no answer from the
// gateway at all (connection refused, DNS failure, timeout), so a caller can
// tell "the server is down" from "the server said no".
var ErrUnreachable = errors.New("gateway unreachable")

// Error is an error reported by the gateway: an `error` frame of a turn or the
// error body of a REST reply.
type Error struct {
	// Code is the protocol's error code (CodeNoModel, ...); it may be one
	// this client does not know, or empty when the reply had none.
	Code string
	// Message is the gateway's explanation.
	Message string
	// Status is the HTTP status of a REST or handshake reply; 0 on a frame.
	Status int
}

func (e *Error) Error() string {
	switch {
	case e.Code != "":
		return e.Code + ": " + e.Message
	case e.Status != 0:
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return e.Message
}

// HasCode reports whether err is (or wraps) a gateway Error with this code.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Options configure a Client.
type Options struct {
	// APIKey is sent as `Authorization: Bearer <key>`; empty sends none.
	APIKey string
	// KeyInQuery sends the key of the WebSocket as `?key=` instead of the
	// header (what browsers must do); REST calls always use the header.
	KeyInQuery bool
	// HTTPClient makes the REST calls and the WebSocket handshake
	// (a client with a 30 s timeout for REST when nil).
	HTTPClient *http.Client
}

// Client talks to one gateway. It is safe for concurrent use.
type Client struct {
	base *url.URL
	opts Options
	rest *http.Client
}

// New returns a client of the gateway at baseURL (http:// or https://, with
// an optional path prefix).
func New(baseURL string, opts Options) (*Client, error) {
	baseURL = strings.TrimSpace(baseURL)
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("gateway URL %q must start with http:// or https://, like http://127.0.0.1:8080", baseURL)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("failed to parse gateway URL %q: %w", baseURL, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("gateway URL %q has no host; use one like http://127.0.0.1:8080", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	rest := opts.HTTPClient
	if rest == nil {
		rest = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, opts: opts, rest: rest}, nil
}

// URL is the gateway's base URL.
func (c *Client) URL() string { return c.base.String() }

// Agent is an agent as the gateway lists it.
type Agent = protocol.AgentInfo

// Model is an agent's effective model.
type Model = protocol.ModelInfo

// Session is one dialog of a chat.
type Session struct {
	ID            string    `json:"id"`
	DialogID      string    `json:"dialog_id"`
	Title         string    `json:"title"`
	LastMessageAt time.Time `json:"last_message_at"`
}

// Sessions are a chat's dialogs, most recent first.
type Sessions struct {
	// Current is the dialog id new messages go to ("" before the first).
	Current  string    `json:"current"`
	Sessions []Session `json:"sessions"`
}

// CurrentSession returns the entry of the current dialog, if listed.
func (s *Sessions) CurrentSession() (Session, bool) {
	for _, x := range s.Sessions {
		if x.DialogID == s.Current {
			return x, true
		}
	}
	return Session{}, false
}

// ToolCall is a tool call stored with an assistant message.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is a stored message of a session.
type Message struct {
	Seq        int64      `json:"seq"`
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`
	Name       string     `json:"name"`
	IsError    bool       `json:"is_error"`
	CreatedAt  time.Time  `json:"created_at"`
	// Error is, on a user message whose turn failed without an answer,
	// what the gateway told the client then.
	Error *Error `json:"error,omitempty"`
}

// Check is one line of the health report.
type Check struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
	// Kind is "core" (required), "feature" (required by an enabled
	// feature) or "optional" (never fails the report).
	Kind string `json:"kind"`
}

// HealthGroup is the checks of one source of the report.
type HealthGroup struct {
	Kind   string  `json:"kind"`
	Name   string  `json:"name"`
	Checks []Check `json:"checks"`
}

// Health is the gateway's health report. Without a valid key only Status
// is filled.
type Health struct {
	Status string `json:"status"`
	// OK is false when a core or feature check failed.
	OK     bool          `json:"ok"`
	Groups []HealthGroup `json:"groups"`
	// Checks is every check of Groups in one list, each name prefixed
	// with its group's.
	Checks []Check `json:"checks"`
}

// Agents lists the agents the key may talk to, sorted by name.
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	var out struct {
		Agents []Agent `json:"agents"`
	}
	if err := c.get(ctx, "/api/v1/agents", nil, &out); err != nil {
		return nil, fmt.Errorf("failed to list agents: %w", err)
	}
	return out.Agents, nil
}

// Sessions lists the dialogs of an agent's chat.
func (c *Client) Sessions(ctx context.Context, agent, chatID string) (*Sessions, error) {
	out := &Sessions{}
	q := url.Values{"agent": {agent}, "chat_id": {chatID}}
	if err := c.get(ctx, "/api/v1/sessions", q, out); err != nil {
		return nil, fmt.Errorf("failed to list sessions of chat %q of agent %q: %w", chatID, agent, err)
	}
	return out, nil
}

// Messages returns the last messages of a session (last <= 0: the gateway's
// default of 50), oldest first.
func (c *Client) Messages(ctx context.Context, sessionID string, last int) ([]Message, error) {
	var q url.Values
	if last > 0 {
		q = url.Values{"last": {strconv.Itoa(last)}}
	}
	var out struct {
		Messages []Message `json:"messages"`
	}
	if err := c.get(ctx, "/api/v1/sessions/"+url.PathEscape(sessionID)+"/messages", q, &out); err != nil {
		return nil, fmt.Errorf("failed to load messages of session %q: %w", sessionID, err)
	}
	return out.Messages, nil
}

// Version returns the build of the gateway (GET /api/v1/version).
func (c *Client) Version(ctx context.Context) (buildinfo.Info, error) {
	var out buildinfo.Info
	if err := c.get(ctx, "/api/v1/version", nil, &out); err != nil {
		return out, fmt.Errorf("failed to get the gateway's version: %w", err)
	}
	return out, nil
}

// Health returns the gateway's health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	out := &Health{}
	if err := c.get(ctx, "/api/v1/health", nil, out); err != nil {
		return nil, fmt.Errorf("failed to get health: %w", err)
	}
	return out, nil
}

// endpoint is the URL of path (already escaped) below the base URL.
func (c *Client) endpoint(path string, q url.Values) string {
	u := c.base.String() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint(path, q), nil)
	if err != nil {
		return fmt.Errorf("failed to build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	res, err := c.rest.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.base, err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode >= 400 {
		return replyError(res)
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("failed to decode the reply of %s: %w", path, err)
	}
	return nil
}

// replyError turns an HTTP error reply into an *Error, from the protocol's
// envelope `{"v":1,"error":{"code","message"}}` when the body is one.
func replyError(res *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var env struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil {
		return &Error{Code: env.Error.Code, Message: env.Error.Message, Status: res.StatusCode}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > maxErrorBody {
		msg = msg[:maxErrorBody] + "…"
	}
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	code := ""
	if res.StatusCode == http.StatusUnauthorized {
		code = CodeUnauthorized
	}
	return &Error{Code: code, Message: msg, Status: res.StatusCode}
}

// CheckName validates an agent name or chat id as the protocol requires:
// non-empty, at most 200 bytes, without ':', '/' or control characters
// (they are parts of session ids).
func CheckName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > 200:
		return fmt.Errorf("%s is %d bytes; at most 200", what, len(s))
	case strings.ContainsAny(s, ":/"):
		return fmt.Errorf("%s %q must not contain ':' or '/'", what, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s %q must not contain control characters", what, s)
		}
	}
	return nil
}
