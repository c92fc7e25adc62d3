package sessionrt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// canvasWaits holds the canvas commands of running turns that wait for an
// answer of their chat's web client. A command belongs to one chat: only an
// answer given for that chat reaches it, and its id is random, so another
// chat's client cannot answer it.
type canvasWaits struct {
	mu      sync.Mutex
	pending map[string]chan tool.CanvasAnswer // chat + "\x00" + id → answer
}

func newCanvasWaits() *canvasWaits {
	return &canvasWaits{pending: map[string]chan tool.CanvasAnswer{}}
}

func (w *canvasWaits) open(chat string) (string, chan tool.CanvasAnswer) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ch := make(chan tool.CanvasAnswer, 1)
	w.mu.Lock()
	w.pending[chat+"\x00"+id] = ch
	w.mu.Unlock()
	return id, ch
}

func (w *canvasWaits) close(chat, id string) {
	w.mu.Lock()
	delete(w.pending, chat+"\x00"+id)
	w.mu.Unlock()
}

func (w *canvasWaits) answer(chat, id string, a tool.CanvasAnswer) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.pending[chat+"\x00"+id]
	if !ok {
		return false
	}
	select {
	case ch <- a:
		return true
	default:
		return false // answered already
	}
}

// CanvasAnswer gives a web client's answer to the canvas command id of chat
// c; it reports whether a running turn of the chat was waiting on it. It is
// called in the process that serves the chat.
func (r *Runtime) CanvasAnswer(c Chat, id string, a tool.CanvasAnswer) bool {
	return r.canvas.answer(c.Channel+"/"+c.Key, id, a)
}

// canvasHost is the canvas of one message's turn: commands travel as
// canvas events to the gateway client that sent the message (the web UI),
// and answers come back through CanvasAnswer.
type canvasHost struct {
	r     *Runtime
	c     Chat
	msgID string
}

// Canvas implements tool.Canvas.
func (h canvasHost) Canvas(ctx context.Context, cmd tool.CanvasCommand) (tool.CanvasAnswer, error) {
	if h.c.Channel != protocol.ChannelWeb {
		return tool.CanvasAnswer{}, fmt.Errorf("this chat is on %s, which has no canvas: the canvas is a panel of PicoBot's web UI", h.c.Channel)
	}
	ev := turn.Canvas{Action: cmd.Action, URL: cmd.URL, JavaScript: cmd.JavaScript, SurfaceID: cmd.SurfaceID, Format: cmd.Format}
	for _, m := range cmd.Messages {
		ev.Messages = append(ev.Messages, json.RawMessage(m))
	}
	if cmd.Wait <= 0 {
		h.r.cfg.Reporter.Event(ctx, h.c, h.msgID, turn.Event{Kind: turn.EventCanvas, Canvas: &ev, Session: cmd.SessionID})
		return tool.CanvasAnswer{}, nil
	}
	chat := h.c.Channel + "/" + h.c.Key
	id, answer := h.r.canvas.open(chat)
	defer h.r.canvas.close(chat, id)
	ev.ID, ev.TimeoutMS = id, cmd.Wait.Milliseconds()
	h.r.cfg.Reporter.Event(ctx, h.c, h.msgID, turn.Event{Kind: turn.EventCanvas, Canvas: &ev, Session: cmd.SessionID})
	t := time.NewTimer(cmd.Wait)
	defer t.Stop()
	select {
	case a := <-answer:
		return a, nil
	case <-t.C:
		return tool.CanvasAnswer{}, fmt.Errorf("no web client answered within %s: %s needs this chat open in PicoBot's web UI "+
			"(the browser tab that sent the message); ask the user to open it, then try again", cmd.Wait, cmd.Action)
	case <-ctx.Done():
		return tool.CanvasAnswer{}, ctx.Err()
	}
}
