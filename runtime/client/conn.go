package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// Event kinds of the protocol. Kinds this client does not know arrive as
// Events with their Kind and Raw set.
const (
	KindDelta      = "delta"
	KindToolCall   = "tool_call"
	KindToolResult = "tool_result"
	KindUsage      = "usage"
	KindFinal      = "final"
	KindCommand    = "command"
	// KindApproval asks the user to approve a command (Code, Name,
	// Command, Reason, TimeoutMS); answer it with Conn.Approve.
	// KindApprovalResult says how it ended (Code, Outcome).
	KindApproval       = "approval"
	KindApprovalResult = "approval_result"
)

// readLimit bounds one server frame (tool results can be large).
const readLimit = 16 << 20

// ErrConnectionLost is wrapped by the error of a turn, or of Conn.Err, when
// the WebSocket broke before the turn was done.
var ErrConnectionLost = errors.New("connection to the gateway lost")

// lostError is a broken connection. It matches ErrConnectionLost but does
// not unwrap to the transport's error, which is often io.EOF: that must not
// read as a turn that ended well.
type lostError struct{ cause error }

func (e *lostError) Error() string        { return ErrConnectionLost.Error() + ": " + e.cause.Error() }
func (e *lostError) Is(target error) bool { return target == ErrConnectionLost }

// ErrClosed is returned by calls on a Conn closed by Close.
var ErrClosed = errors.New("connection closed")

// Event is one event of a turn.
type Event struct {
	Kind string `json:"kind"`
	// Text of delta, final and command events.
	Text string `json:"text,omitempty"`
	// CallID and Name of tool_call and tool_result events.
	CallID string `json:"call_id,omitempty"`
	Name   string `json:"name,omitempty"`
	// Arguments of a tool_call (JSON text).
	Arguments string `json:"arguments,omitempty"`
	// Content and IsError of a tool_result; IsError also marks the reply
	// of a slash command that failed (command).
	Content string `json:"content,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Token counts of a usage event.
	InputTokens  int `json:"input_tokens,omitempty"`
	OutputTokens int `json:"output_tokens,omitempty"`
	// Exec approvals: the request's code, command, why the user is asked
	// and how long it waits (approval; Name is the tool), and how it ended
	// (approval_result: approved, denied or timed_out).
	Code      string `json:"code,omitempty"`
	Command   string `json:"command,omitempty"`
	Reason    string `json:"reason,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	Outcome   string `json:"outcome,omitempty"`

	// Session is the session id the frame named ("" when it named none).
	Session string `json:"-"`
	// Raw is the event object as received, for kinds this client does not
	// know.
	Raw json.RawMessage `json:"-"`
}

// Send is a message to an agent.
type Send struct {
	// ID identifies the message; a resend with the same id is processed
	// once. A random id is chosen when empty.
	ID     string
	Agent  string
	ChatID string
	// Text is the message, or a slash command (/new, /sessions, ...).
	Text string
}

// frame is a WebSocket frame in either direction.
type frame struct {
	V       int             `json:"v"`
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Agent   string          `json:"agent,omitempty"`
	ChatID  string          `json:"chat_id,omitempty"`
	Text    string          `json:"text,omitempty"`
	Session string          `json:"session,omitempty"`
	Event   json.RawMessage `json:"event,omitempty"`
	Code    string          `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
	Stopped *bool           `json:"stopped,omitempty"`
	// Decision and Answered of approve and approval frames.
	Decision string `json:"decision,omitempty"`
	Answered *bool  `json:"answered,omitempty"`
}

// Conn is a WebSocket connection to the gateway. Several turns may run on it
// at once; it is safe for concurrent use.
type Conn struct {
	ws     *websocket.Conn
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	turns map[string]*Turn
	// calls are requests answered by one frame (stop), by id.
	calls  map[string]chan frame
	err    error
	closed bool
}

// Dial opens a WebSocket to the gateway.
func (c *Client) Dial(ctx context.Context) (*Conn, error) {
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += "/api/v1/ws"
	opts := &websocket.DialOptions{HTTPClient: c.opts.HTTPClient}
	if opts.HTTPClient != nil && opts.HTTPClient.Timeout != 0 {
		// A timeout on the client would end the connection itself.
		hc := *opts.HTTPClient
		hc.Timeout = 0
		opts.HTTPClient = &hc
	}
	if c.opts.APIKey != "" {
		if c.opts.KeyInQuery {
			u.RawQuery = url.Values{"key": {c.opts.APIKey}}.Encode()
		} else {
			opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + c.opts.APIKey}}
		}
	}
	ws, res, err := websocket.Dial(ctx, u.String(), opts)
	if err != nil {
		if res != nil && res.StatusCode >= 400 {
			defer func() { _ = res.Body.Close() }()
			return nil, fmt.Errorf("failed to open a WebSocket to %s: %w", c.base, replyError(res))
		}
		if res != nil {
			_ = res.Body.Close()
		}
		return nil, fmt.Errorf("%w at %s: failed to open a WebSocket: %w", ErrUnreachable, c.base, err)
	}
	ws.SetReadLimit(readLimit)
	rctx, cancel := context.WithCancel(context.Background())
	conn := &Conn{ws: ws, cancel: cancel, done: make(chan struct{}), turns: map[string]*Turn{}, calls: map[string]chan frame{}}
	go conn.read(rctx)
	return conn, nil
}

// Done is closed when the connection has ended (see Err).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended: ErrClosed after Close, an error
// wrapping ErrConnectionLost otherwise; nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection; turns still running end with ErrClosed (the
// gateway keeps running them). It implements io.Closer and always returns
// nil: a failed close handshake leaves nothing to do.
func (c *Conn) Close() error {
	c.mu.Lock()
	open := c.err == nil
	c.closed = true
	c.mu.Unlock()
	if open {
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
	}
	c.cancel()
	<-c.done
	return nil
}

// Send sends a message and returns its turn, whose events arrive through
// Turn.Recv until the gateway says the turn is done.
func (c *Conn) Send(ctx context.Context, s Send) (*Turn, error) {
	if err := CheckName("agent", s.Agent); err != nil {
		return nil, err
	}
	if err := CheckName("chat id", s.ChatID); err != nil {
		return nil, err
	}
	if strings.TrimSpace(s.Text) == "" {
		return nil, errors.New("message text is empty")
	}
	if s.ID == "" {
		s.ID = NewID()
	}
	t := &Turn{ID: s.ID, notify: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	if _, dup := c.turns[s.ID]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("message %q is already running on this connection", s.ID)
	}
	c.turns[s.ID] = t
	c.mu.Unlock()
	if err := c.write(ctx, frame{Type: "send", ID: s.ID, Agent: s.Agent, ChatID: s.ChatID, Text: s.Text}); err != nil {
		c.mu.Lock()
		delete(c.turns, s.ID)
		c.mu.Unlock()
		return nil, fmt.Errorf("failed to send message %q: %w", s.ID, err)
	}
	return t, nil
}

// Stop asks the gateway to stop the chat's running turn (which then ends
// with an Error of code CodeStopped) and drop its queued messages. It returns
// the gateway's answer: whether a turn was running.
func (c *Conn) Stop(ctx context.Context, agent, chatID string) (bool, error) {
	if err := errors.Join(CheckName("agent", agent), CheckName("chat id", chatID)); err != nil {
		return false, err
	}
	f, err := c.call(ctx, frame{Type: "stop", Agent: agent, ChatID: chatID})
	if err != nil {
		return false, fmt.Errorf("failed to stop chat %q: %w", chatID, err)
	}
	return f.Stopped != nil && *f.Stopped, nil
}

// Approve answers the exec approval request with code of the chat's running
// turn: approve runs the command, !approve refuses it. It returns whether a
// turn of the chat was waiting on that code.
func (c *Conn) Approve(ctx context.Context, agent, chatID, code string, approve bool) (bool, error) {
	if err := errors.Join(CheckName("agent", agent), CheckName("chat id", chatID)); err != nil {
		return false, err
	}
	decision := "deny"
	if approve {
		decision = "approve"
	}
	f, err := c.call(ctx, frame{Type: "approve", Agent: agent, ChatID: chatID, Code: code, Decision: decision})
	if err != nil {
		return false, fmt.Errorf("failed to answer approval %q: %w", code, err)
	}
	return f.Answered != nil && *f.Answered, nil
}

// call sends a request answered by one frame (stop, approve) and returns
// that frame; an error frame is returned as an *Error.
func (c *Conn) call(ctx context.Context, req frame) (frame, error) {
	req.ID = NewID()
	reply := make(chan frame, 1)
	c.mu.Lock()
	c.calls[req.ID] = reply
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, req.ID)
		c.mu.Unlock()
	}()
	if err := c.write(ctx, req); err != nil {
		return frame{}, err
	}
	select {
	case f := <-reply:
		if f.Type == "error" {
			return frame{}, &Error{Code: f.Code, Message: f.Message}
		}
		return f, nil
	case <-c.done:
		return frame{}, c.Err()
	case <-ctx.Done():
		return frame{}, fmt.Errorf("no answer: %w", ctx.Err())
	}
}

func (c *Conn) write(ctx context.Context, f frame) error {
	if err := c.Err(); err != nil {
		return err
	}
	f.V = ProtocolVersion
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("failed to encode %s frame: %w", f.Type, err)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		if cerr := c.Err(); cerr != nil {
			return cerr
		}
		return &lostError{cause: err}
	}
	return nil
}

// read routes the server's frames to their turns until the connection ends.
func (c *Conn) read(ctx context.Context) {
	var end error
	for {
		_, data, err := c.ws.Read(ctx)
		if err != nil {
			end = err
			break
		}
		var f frame
		if json.Unmarshal(data, &f) != nil {
			continue // not ours to judge: a broken frame ends nothing
		}
		c.route(f)
	}
	c.mu.Lock()
	if c.closed {
		c.err = ErrClosed
	} else {
		c.err = &lostError{cause: end}
	}
	turns := c.turns
	c.turns = map[string]*Turn{}
	err := c.err
	c.mu.Unlock()
	for _, t := range turns {
		t.finish(err)
	}
	_ = c.ws.CloseNow()
	close(c.done)
}

func (c *Conn) route(f frame) {
	c.mu.Lock()
	if call := c.calls[f.ID]; call != nil && f.ID != "" {
		delete(c.calls, f.ID)
		c.mu.Unlock()
		call <- f
		return
	}
	t := c.turns[f.ID]
	if t != nil && f.Type == "done" {
		delete(c.turns, f.ID)
	}
	c.mu.Unlock()
	if t == nil {
		return // a frame of no turn of ours (or a kind we do not know)
	}
	if f.Session != "" {
		t.setSession(f.Session)
	}
	switch f.Type {
	case "event":
		var e Event
		if json.Unmarshal(f.Event, &e) != nil || e.Kind == "" {
			return
		}
		e.Session, e.Raw = f.Session, f.Event
		t.push(e)
	case "error":
		t.fail(&Error{Code: f.Code, Message: f.Message})
	case "done":
		t.finish(nil)
	}
	// ack and frame types added later are ignored.
}

// Turn is one sent message and its stream of events.
type Turn struct {
	// ID is the message id.
	ID string

	mu      sync.Mutex
	queue   []Event
	session string
	failed  error // an error frame, reported at the end
	ended   bool
	end     error
	notify  chan struct{}
}

func (t *Turn) wake() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

func (t *Turn) push(e Event) {
	t.mu.Lock()
	if !t.ended {
		t.queue = append(t.queue, e)
	}
	t.mu.Unlock()
	t.wake()
}

func (t *Turn) setSession(s string) {
	t.mu.Lock()
	t.session = s
	t.mu.Unlock()
}

func (t *Turn) fail(err error) {
	t.mu.Lock()
	if t.failed == nil {
		t.failed = err
	}
	t.mu.Unlock()
}

// finish ends the turn: with the error frame's error if there was one, else
// with err (nil: done cleanly).
func (t *Turn) finish(err error) {
	t.mu.Lock()
	if !t.ended {
		t.ended = true
		switch {
		case t.failed != nil:
			t.end = t.failed
		case err != nil:
			t.end = err
		default:
			t.end = io.EOF
		}
	}
	t.mu.Unlock()
	t.wake()
}

// Session is the session id the gateway named for the turn so far.
func (t *Turn) Session() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.session
}

// Recv returns the turn's next event. When the turn is over it returns
// io.EOF if it ended well, the gateway's *Error if it reported one (e.g.
// CodeStopped, CodeNoModel), or an error wrapping ErrConnectionLost or
// ErrClosed. It returns ctx's error when ctx ends first.
func (t *Turn) Recv(ctx context.Context) (Event, error) {
	for {
		t.mu.Lock()
		if len(t.queue) > 0 {
			e := t.queue[0]
			t.queue = t.queue[1:]
			t.mu.Unlock()
			return e, nil
		}
		if t.ended {
			err := t.end
			t.mu.Unlock()
			return Event{}, err
		}
		t.mu.Unlock()
		select {
		case <-t.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Reply is the outcome of a finished turn.
type Reply struct {
	Session string
	// Text is the final answer, or the reply to a slash command.
	Text string
	// Command is true when Text answers a slash command; Failed when that
	// command did not do what was asked (Text says why).
	Command, Failed bool
	// Streamed is the text of the delta events, in order.
	Streamed string
}

// Ask sends a message, calls on (if not nil) with every event as it arrives,
// and returns the reply when the turn is done.
func (c *Conn) Ask(ctx context.Context, s Send, on func(Event)) (Reply, error) {
	t, err := c.Send(ctx, s)
	if err != nil {
		return Reply{}, err
	}
	return t.Wait(ctx, on)
}

// Wait receives the rest of the turn, calling on (if not nil) with every
// event, and returns its reply.
func (t *Turn) Wait(ctx context.Context, on func(Event)) (Reply, error) {
	var r Reply
	var streamed strings.Builder
	for {
		e, err := t.Recv(ctx)
		if err != nil {
			r.Session, r.Streamed = t.Session(), streamed.String()
			if errors.Is(err, io.EOF) {
				return r, nil
			}
			return r, err
		}
		switch e.Kind {
		case KindDelta:
			streamed.WriteString(e.Text)
		case KindFinal:
			r.Text, r.Command = e.Text, false
		case KindCommand:
			r.Text, r.Command, r.Failed = e.Text, true, e.IsError
		}
		if on != nil {
			on(e)
		}
	}
}

// NewID returns a random message id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}
