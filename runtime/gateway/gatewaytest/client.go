// Package gatewaytest holds reusable tests of a running gateway: the
// tenant-isolation suite (RunIsolation), which proves one tenant's key can
// neither read nor change another tenant's sessions, messages, dialogs or
// artifacts through any endpoint, and a small client for the protocol of
// docs/protocol.md that tests and benchmarks share.
package gatewaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// hangGuard bounds every call of the client, so a broken gateway fails a test
// instead of hanging it. It is not a performance assertion.
const hangGuard = 60 * time.Second

// Client calls a gateway with one API key.
type Client struct {
	// URL is the gateway's base URL (http://host:port).
	URL string
	// Key is sent as "Authorization: Bearer <Key>" ("" sends none).
	Key string
}

// Frame is a decoded WebSocket frame or JSON body.
type Frame = map[string]any

// Do sends a JSON request (body nil for none) and returns the status and the
// decoded JSON answer (nil when the answer is not JSON).
func (c Client) Do(tb testing.TB, method, path string, body any) (int, Frame) {
	tb.Helper()
	status, raw := c.Raw(tb, method, path, body)
	var out Frame
	if json.Unmarshal(raw, &out) != nil {
		out = nil
	}
	return status, out
}

// Raw sends a request and returns the status and the raw answer. A string or
// []byte body is sent as is; anything else as JSON.
func (c Client) Raw(tb testing.TB, method, path string, body any) (int, []byte) {
	tb.Helper()
	res, err := c.Request(method, path, body, nil)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return res.Status, res.Body
}

// Response is a read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Request sends a request with extra headers and reads the response.
func (c Client) Request(method, path string, body any, header http.Header) (Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, rd)
	if err != nil {
		return Response{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer func() { _ = res.Body.Close() }()
	data, err := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Header: res.Header, Body: data}, err
}

// WS is a WebSocket connection to the gateway.
type WS struct {
	Conn *websocket.Conn
}

// Dial opens the gateway's WebSocket with the client's key (as ?key=, the
// way browsers send it). It is closed when the test ends.
func (c Client) Dial(tb testing.TB) *WS {
	tb.Helper()
	ws, err := c.DialErr(context.Background())
	if err != nil {
		tb.Fatalf("failed to open WebSocket: %v", err)
	}
	tb.Cleanup(func() { _ = ws.Conn.CloseNow() })
	return ws
}

// DialErr opens the WebSocket, returning the error.
func (c Client) DialErr(ctx context.Context) (*WS, error) {
	u := strings.Replace(c.URL, "http", "ws", 1) + "/api/v1/ws"
	if c.Key != "" {
		u += "?key=" + url.QueryEscape(c.Key)
	}
	conn, res, err := websocket.Dial(ctx, u, nil)
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(4 << 20)
	return &WS{Conn: conn}, nil
}

// Write sends a frame; "v": 1 is added when missing.
func (w *WS) Write(tb testing.TB, f Frame) {
	tb.Helper()
	if _, ok := f["v"]; !ok {
		f["v"] = 1
	}
	b, _ := json.Marshal(f)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := w.Conn.Write(ctx, websocket.MessageText, b); err != nil {
		tb.Fatalf("failed to write frame: %v", err)
	}
}

// Read returns the next frame.
func (w *WS) Read(tb testing.TB) Frame {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, data, err := w.Conn.Read(ctx)
	if err != nil {
		tb.Fatalf("failed to read frame: %v", err)
	}
	var f Frame
	if err := json.Unmarshal(data, &f); err != nil {
		tb.Fatalf("frame is not JSON: %v: %s", err, data)
	}
	return f
}

// Exchange sends a send frame and returns the frames of its id up to and
// including "done".
func (w *WS) Exchange(tb testing.TB, f Frame) []Frame {
	tb.Helper()
	f["type"] = "send"
	w.Write(tb, f)
	return w.Until(tb, f["id"], "done")
}

// Until reads frames of id until one of type typ (or an error frame when
// typ is not "done") and returns them.
func (w *WS) Until(tb testing.TB, id any, typ string) []Frame {
	tb.Helper()
	var got []Frame
	for {
		fr := w.Read(tb)
		if fr["id"] != id {
			continue
		}
		got = append(got, fr)
		if fr["type"] == typ || typ != "done" && fr["type"] == "error" {
			return got
		}
	}
}

// replyType is the type of the reply to a control frame of type t.
func replyType(t any) string {
	switch t {
	case "dialog":
		return "dialog"
	case "stop":
		return "stopped"
	case "approve":
		return "approval"
	case "canvas_result":
		return "canvas_result"
	}
	return ""
}

// Request sends a control frame (dialog, stop, approve) and returns its one
// reply.
func (w *WS) Request(tb testing.TB, f Frame) Frame {
	tb.Helper()
	w.Write(tb, f)
	fs := w.Until(tb, f["id"], replyType(f["type"]))
	return fs[len(fs)-1]
}

// RequestDuring sends a control frame (approve, stop) that acts on the
// running turn of message id and returns the control's reply and id's frames
// up to "done". Request then Until would drop the turn's frames that come
// before the reply (an approval's result can).
func (w *WS) RequestDuring(tb testing.TB, f Frame, id any) (reply Frame, frames []Frame) {
	tb.Helper()
	w.Write(tb, f)
	want := replyType(f["type"])
	for reply == nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		fr := w.Read(tb)
		switch {
		case fr["id"] == f["id"] && (fr["type"] == want || fr["type"] == "error"):
			reply = fr
		case fr["id"] == id:
			frames = append(frames, fr)
		}
	}
	return reply, frames
}

// UntilApproval reads the frames of message id until its turn asks the
// user for an approval, and returns that approval event; a turn that ends
// without asking fails the test.
func (w *WS) UntilApproval(tb testing.TB, id any) Frame {
	tb.Helper()
	for {
		f := w.Read(tb)
		if f["id"] != id {
			continue
		}
		if ev := Event([]Frame{f}, "approval"); ev != nil {
			return ev
		}
		if f["type"] == "done" {
			tb.Fatalf("the turn of %v ended without asking for an approval: %v", id, f)
		}
	}
}

// SendAnswering sends a message to agent's chat, answers the approval its
// turn asks for with decision (approve or deny) as the chat's user, and
// returns the approval request and the turn's frames after the answer, up
// to "done".
func (w *WS) SendAnswering(tb testing.TB, id, agent, chat, text, decision string) (approval Frame, frames []Frame) {
	tb.Helper()
	w.Write(tb, Frame{"type": "send", "id": id, "agent": agent, "chat_id": chat, "text": text})
	approval = w.UntilApproval(tb, id)
	_, frames = w.RequestDuring(tb, Frame{"type": "approve", "id": "a-" + id, "agent": agent, "chat_id": chat,
		"code": approval["code"], "decision": decision}, id)
	return approval, frames
}

// Event returns the body of the first event of kind in frames, nil if none.
func Event(frames []Frame, kind string) Frame {
	for _, f := range frames {
		if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == kind {
			return ev
		}
	}
	return nil
}

// ErrorFrame returns the first error frame, nil if none.
func ErrorFrame(frames []Frame) Frame {
	for _, f := range frames {
		if f["type"] == "error" {
			return f
		}
	}
	return nil
}
