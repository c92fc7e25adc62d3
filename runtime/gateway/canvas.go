package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// CanvasBackend is a Backend whose web chats have a canvas panel
// (docs/canvas.md): the canvas tool's eval and snapshot wait for the web
// client's answer, which CanvasAnswer hands to the chat's running turn.
type CanvasBackend interface {
	// CanvasAnswer gives the answer to the canvas command id of the chat's
	// running turn; it reports whether a turn of the chat was waiting on
	// it.
	CanvasAnswer(ctx context.Context, c Chat, id string, a tool.CanvasAnswer) (bool, error)
}

// Limits of a canvas answer.
const (
	maxCanvasID    = 64
	maxCanvasValue = 64 << 10
)

// canvasFramePath is the document of the canvas panel's sandboxed frame:
// the only page of the gateway that may be framed (by the UI itself), with
// its own Content-Security-Policy that lets the agent's code run there and
// reach nothing (docs/canvas.md).
const canvasFramePath = "/canvas-frame.html"

// canvasFramePolicy is the frame's CSP: inline and eval'd script (the
// agent's eval) and inline styles, images from anywhere the page is shown
// (data: and https:), and no fetch, WebSocket, form or plugin. The frame is
// also sandboxed without allow-same-origin by the UI, so it runs in an
// opaque origin: no cookies, storage or DOM of the chat page.
const canvasFramePolicy = "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; " +
	"img-src data: blob: https:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'self'"

// wsCanvasResult hands a web client's answer to a canvas command to the
// chat's turn. It answers with a canvas_result frame saying whether a turn
// was waiting on it.
func (s *Server) wsCanvasResult(ctx context.Context, c *conn, f frame) {
	chat := Chat{Channel: ChannelWeb, Agent: f.Agent, ChatID: f.ChatID}
	a, err := canvasAnswer(f)
	if err == nil {
		err = checkChat(chat)
	}
	if err != nil {
		c.fail(f.ID, CodeBadRequest, err.Error())
		return
	}
	cb, ok := s.backend.(CanvasBackend)
	if !ok {
		c.fail(f.ID, CodeBadRequest, "this gateway's runtime has no canvas")
		return
	}
	answered, err := cb.CanvasAnswer(ctx, chat, f.CanvasID, a)
	if err != nil {
		s.wsError(c, f, err, CodeUnknownSession)
		return
	}
	c.send(frame{Type: "canvas_result", ID: f.ID, CanvasID: f.CanvasID, Answered: &answered})
}

// canvasAnswer reads and checks the answer of a canvas_result frame.
func canvasAnswer(f frame) (tool.CanvasAnswer, error) {
	var a tool.CanvasAnswer
	switch {
	case f.CanvasID == "" || len(f.CanvasID) > maxCanvasID || strings.ContainsAny(f.CanvasID, "\x00\n\r/:"):
		return a, fmt.Errorf("canvas_id is required: the id of the canvas command answered (at most %d bytes)", maxCanvasID)
	case len(f.Value) > maxCanvasValue || len(f.Message) > maxCanvasValue:
		return a, fmt.Errorf("value and message must have at most %d bytes", maxCanvasValue)
	}
	a.Value, a.Error = f.Value, f.Message
	if f.Image == "" {
		return a, nil
	}
	head, data, ok := strings.Cut(f.Image, ",")
	mt, isBase64 := strings.CutSuffix(strings.TrimPrefix(head, "data:"), ";base64")
	if !ok || !strings.HasPrefix(head, "data:") || !isBase64 || (mt != "image/png" && mt != "image/jpeg") {
		return a, fmt.Errorf("image must be a data: URL of a PNG or JPEG image in base64 (data:image/png;base64,...)")
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return a, fmt.Errorf("image is not valid base64: %w", err)
	}
	if ct := http.DetectContentType(b); ct != mt {
		return a, fmt.Errorf("image says it is %s but its bytes are %s", mt, ct)
	}
	a.Image, a.MediaType = b, mt
	return a, nil
}
