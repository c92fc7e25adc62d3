package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// Dialog operations of the control channel.
const (
	OpCreate  = "create"
	OpSwitch  = "switch"
	OpRename  = "rename"
	OpArchive = "archive"
	OpDelete  = "delete"
	OpList    = "list"
)

// frame is a WebSocket frame in either direction.
type frame struct {
	V      int    `json:"v"`
	Type   string `json:"type"`
	ID     string `json:"id,omitempty"`
	Agent  string `json:"agent,omitempty"`
	ChatID string `json:"chat_id,omitempty"`
	Text   string `json:"text,omitempty"`
	// Files are the ids of the files a send attaches (uploads of the chat).
	Files   []string   `json:"files,omitempty"`
	Session string     `json:"session,omitempty"`
	Event   *eventBody `json:"event,omitempty"`
	Code    string     `json:"code,omitempty"`
	Message string     `json:"message,omitempty"`
	// Control channel.
	Op       string    `json:"op,omitempty"`
	DialogID string    `json:"dialog_id,omitempty"`
	Title    string    `json:"title,omitempty"`
	Current  *string   `json:"current,omitempty"`
	Dialog   *Dialog   `json:"dialog,omitempty"`
	Dialogs  *[]Dialog `json:"dialogs,omitempty"`
	Stopped  *bool     `json:"stopped,omitempty"`
	// Exec approvals: the answer (approve frame) and its result (approval
	// frame); Code is the request's code there.
	Decision string `json:"decision,omitempty"`
	Answered *bool  `json:"answered,omitempty"`
	// Canvas answers (canvas_result): the command answered, eval's value
	// and snapshot's image (a data: URL); Message is the client's error.
	CanvasID string `json:"canvas_id,omitempty"`
	Value    string `json:"value,omitempty"`
	Image    string `json:"image,omitempty"`
	// RetryAfterMS is set on rate_limited errors.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Node is the payload of the node_* frames (package node).
	Node json.RawMessage `json:"node,omitempty"`
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
	// Attachments are the files of a tool_result or final event (references
	// only: clients fetch GET /api/v1/artifacts/{id}).
	Attachments []Attachment `json:"attachments,omitempty"`
	// Approval events: the request's code, the command, why the user is
	// asked and how long it waits (approval), how it ended
	// (approval_result); Name is the tool.
	Code      string `json:"code,omitempty"`
	Command   string `json:"command,omitempty"`
	Reason    string `json:"reason,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	// Canvas is the command of a canvas event (docs/canvas.md).
	Canvas *turn.Canvas `json:"canvas,omitempty"`
}

// Attachment is a file shown with a turn event or a send's reply, as
// clients see it.
type Attachment struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	MediaType string `json:"media_type,omitempty"`
	URL       string `json:"url"`
}

// toAttachments converts the attachments of an event; an attachment without
// a url gets the gateway's artifact url.
func toAttachments(list []turn.Attachment) []Attachment {
	if len(list) == 0 {
		return nil
	}
	out := make([]Attachment, len(list))
	for i, a := range list {
		out[i] = Attachment{ID: a.ID, Name: a.Name, MediaType: a.MediaType, URL: artifactURL(a)}
	}
	return out
}

// artifactURL is where clients of this gateway fetch an attachment.
func artifactURL(a turn.Attachment) string {
	if a.URL != "" {
		return a.URL
	}
	return "/api/v1/artifacts/" + url.PathEscape(a.ID)
}

func toEventBody(e turn.Event) *eventBody {
	switch e.Kind {
	case turn.EventDelta:
		return &eventBody{Kind: string(e.Kind), Text: e.Text}
	case turn.EventFinal:
		return &eventBody{Kind: string(e.Kind), Text: e.Text, Attachments: toAttachments(e.Attachments)}
	case turn.EventToolCall:
		return &eventBody{Kind: string(e.Kind), CallID: e.ToolCall.ID, Name: e.ToolCall.Name, Arguments: e.ToolCall.Arguments}
	case turn.EventToolResult:
		return &eventBody{Kind: string(e.Kind), CallID: e.ToolResult.CallID, Name: e.ToolResult.Name, Content: e.ToolResult.Content,
			IsError: e.ToolResult.IsError, Attachments: toAttachments(e.Attachments)}
	case turn.EventUsage:
		return &eventBody{Kind: string(e.Kind), InputTokens: e.Usage.InputTokens, OutputTokens: e.Usage.OutputTokens}
	case turn.EventNotice:
		return &eventBody{Kind: string(e.Kind), Text: e.Text}
	case turn.EventApproval, turn.EventApprovalResult:
		if a := e.Approval; a != nil {
			return &eventBody{Kind: string(e.Kind), Code: a.Code, Name: a.Tool, Command: a.Command, Reason: a.Reason,
				TimeoutMS: a.TimeoutMS, Outcome: a.Outcome}
		}
	case turn.EventCanvas:
		if e.Canvas != nil {
			return &eventBody{Kind: string(e.Kind), Canvas: e.Canvas}
		}
	}
	return nil // compressed and future kinds are internal
}

// conn is one WebSocket client; writes are serialised.
type conn struct {
	ws      *websocket.Conn
	mu      sync.Mutex
	ctx     context.Context
	metrics *metrics.Metrics
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
	if c.ws.Write(ctx, websocket.MessageText, b) == nil { // a failed write ends the read loop too
		c.metrics.Frame(false)
	}
}

func (c *conn) fail(id, code, msg string) {
	c.send(frame{Type: "error", ID: id, Code: code, Message: msg})
}

func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.origins})
	if err != nil {
		return
	}
	ws.SetReadLimit(MaxFrameBytes)
	p, _ := PrincipalFrom(r.Context())
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c := &conn{ws: ws, ctx: ctx, metrics: s.metrics}
	defer s.metrics.ConnOpened(metrics.ConnWebSocket)()
	var turns sync.WaitGroup
	defer turns.Wait()
	var nc nodeConn
	defer nc.close()
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			cancel()
			_ = ws.CloseNow()
			return
		}
		s.metrics.Frame(true)
		if typ == websocket.MessageText && !utf8.Valid(data) {
			// RFC 6455 §8.1: a text frame that is not UTF-8 fails the
			// connection with 1007.
			cancel()
			_ = ws.Close(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8")
			return
		}
		var f frame
		jsonErr := json.Unmarshal(data, &f)
		if jsonErr == nil && s.answerNode(ctx, f, &nc) {
			continue
		}
		if ok, wait := s.limits.allow(p); !ok { // every other frame counts, valid or not
			s.metrics.RateLimited(metrics.RateLimitKey)
			c.send(frame{Type: "error", ID: f.ID, Code: CodeRateLimited, RetryAfterMS: wait.Milliseconds() + 1,
				Message: fmt.Sprintf("rate limit of this API key exceeded; retry in %dms", wait.Milliseconds()+1)})
			if f.Type == "send" {
				c.send(frame{Type: "done", ID: f.ID})
			}
			continue
		}
		if jsonErr != nil {
			c.fail("", CodeBadRequest, "frame is not valid JSON: "+jsonErr.Error())
			continue
		}
		switch {
		case f.V != ProtocolVersion:
			c.fail(f.ID, CodeBadRequest, fmt.Sprintf("unsupported protocol version %d (want %d)", f.V, ProtocolVersion))
		case f.Type == "stop":
			s.wsStop(ctx, c, f)
		case f.Type == "dialog":
			s.wsDialog(ctx, c, f)
		case f.Type == "approve":
			s.wsApprove(ctx, c, f)
		case f.Type == "canvas_result":
			s.wsCanvasResult(ctx, c, f)
		case f.Type == node.FrameHello:
			s.wsNodeHello(ctx, c, f, &nc)
		case f.Type == node.FrameResult:
			s.wsNodeResult(ctx, c, f, &nc)
		case f.Type == "send":
			if msg := validateSend(f); msg != "" {
				c.fail(f.ID, CodeBadRequest, msg)
				c.send(frame{Type: "done", ID: f.ID})
				continue
			}
			c.send(frame{Type: "ack", ID: f.ID})
			turns.Go(func() { s.turn(ctx, c, f) })
		default:
			c.fail(f.ID, CodeBadRequest, fmt.Sprintf("unknown frame type %q (want send, stop, dialog, approve, canvas_result, node_hello or node_result)", f.Type))
		}
	}
}

func validateSend(f frame) string {
	switch {
	case f.ID == "" || len(f.ID) > maxIDBytes:
		return fmt.Sprintf("id is required (at most %d bytes)", maxIDBytes)
	case strings.TrimSpace(f.Text) == "" && len(f.Files) == 0:
		return "text is required (or files)"
	case len(f.Files) > MaxFilesPerMessage:
		return fmt.Sprintf("a message may carry at most %d files (it names %d)", MaxFilesPerMessage, len(f.Files))
	case len(f.Text) > MaxTextBytes:
		return fmt.Sprintf("text is %d bytes; the limit is %d", len(f.Text), MaxTextBytes)
	case strings.ContainsRune(f.Text, 0):
		return "text must not contain NUL bytes"
	}
	if err := checkChat(Chat{Agent: f.Agent, ChatID: f.ChatID}); err != nil {
		return err.Error()
	}
	return ""
}

func (s *Server) wsStop(ctx context.Context, c *conn, f frame) {
	chat := Chat{Channel: ChannelWeb, Agent: f.Agent, ChatID: f.ChatID}
	if err := checkChat(chat); err != nil {
		c.fail(f.ID, CodeBadRequest, err.Error())
		return
	}
	stopped, err := s.backend.Stop(ctx, chat)
	if err != nil {
		s.wsError(c, f, err, CodeUnknownSession)
		return
	}
	c.send(frame{Type: "stopped", ID: f.ID, Stopped: &stopped})
}

// wsError answers a backend error on the socket.
func (s *Server) wsError(c *conn, f frame, err error, notFound string) {
	code := errorCode(err, notFound)
	if code == CodeInternal {
		s.log.Error("Request failed", "frame", f.Type, "op", f.Op, "agent", f.Agent, "err", err)
	}
	c.fail(f.ID, code, protocol.ClientMessage(code, err))
}

// wsDialog runs a control-channel operation. Every dialog frame gets one
// reply: a "dialog" frame or an "error" frame with the same id.
func (s *Server) wsDialog(ctx context.Context, c *conn, f frame) {
	chat := Chat{Channel: ChannelWeb, Agent: f.Agent, ChatID: f.ChatID}
	if err := checkChat(chat); err != nil {
		c.fail(f.ID, CodeBadRequest, err.Error())
		return
	}
	if f.Op != OpList && f.Op != OpCreate {
		if err := checkDialogID(f.DialogID); err != nil {
			c.fail(f.ID, CodeBadRequest, err.Error())
			return
		}
	}
	if f.Op == OpRename || f.Op == OpCreate && f.Title != "" {
		if err := checkTitle(f.Title); err != nil {
			c.fail(f.ID, CodeBadRequest, err.Error())
			return
		}
	}
	reply := frame{Type: "dialog", ID: f.ID, Op: f.Op}
	var err error
	one := func(d Dialog) { reply.Dialog = &d }
	switch f.Op {
	case OpList:
		var cur string
		var list []Dialog
		cur, raw, e := s.backend.Dialogs(ctx, chat)
		list, err = toDialogs(raw), e
		reply.Current, reply.Dialogs = &cur, &list
	case OpCreate:
		d, e := s.backend.CreateDialog(ctx, chat, f.Title)
		one(toDialog(d))
		reply.Current, err = &d.DialogID, e
	case OpSwitch:
		d, e := s.backend.SwitchDialog(ctx, chat, f.DialogID)
		one(toDialog(d))
		reply.Current, err = &d.DialogID, e
	case OpRename:
		d, e := s.backend.RenameDialog(ctx, chat, f.DialogID, strings.TrimSpace(f.Title))
		one(toDialog(d))
		err = e
	case OpArchive:
		d, e := s.backend.ArchiveDialog(ctx, chat, f.DialogID)
		one(toDialog(d))
		err = e
	case OpDelete:
		err = s.backend.DeleteDialog(ctx, chat, f.DialogID)
		reply.DialogID = f.DialogID
	default:
		c.fail(f.ID, CodeBadRequest, fmt.Sprintf("unknown dialog op %q (want create, switch, rename, archive, delete or list)", f.Op))
		return
	}
	if err != nil {
		s.wsError(c, f, err, CodeUnknownDialog)
		return
	}
	c.send(reply)
}

func (s *Server) turn(ctx context.Context, c *conn, f frame) {
	ctx, span := s.startTurn(ctx, nil, tracing.SpanWebSocketSend, f.Agent, f.ChatID)
	defer span.End()
	sink := func(e turn.Event) {
		if b := toEventBody(e); b != nil {
			c.send(frame{Type: "event", ID: f.ID, Session: e.Session, Event: b})
		}
	}
	chat := Chat{Channel: ChannelWeb, Agent: f.Agent, ChatID: f.ChatID}
	files, err := s.sendFiles(ctx, chat, f.Files)
	var out Outcome
	if err == nil {
		out, err = s.backend.Handle(ctx, Send{ID: f.ID, Channel: ChannelWeb, Agent: f.Agent, ChatID: f.ChatID, Text: f.Text, Files: files, Sink: sink})
	}
	switch {
	case err != nil:
		code := errorCode(err, CodeUnknownSession)
		if code == CodeInternal && !errors.Is(err, context.Canceled) {
			s.log.ErrorContext(ctx, "Turn failed", "agent", f.Agent, "session", out.SessionID, "err", err)
		}
		tracing.Fail(span, err)
		c.send(frame{Type: "error", ID: f.ID, Session: out.SessionID, Code: code, Message: protocol.ClientMessage(code, err), RetryAfterMS: retryAfterMS(err)})
	case out.Command != "":
		c.send(frame{Type: "event", ID: f.ID, Session: out.SessionID, Event: &eventBody{Kind: "command", Text: out.Text, IsError: out.Failed}})
	}
	c.send(frame{Type: "done", ID: f.ID, Session: out.SessionID})
}
