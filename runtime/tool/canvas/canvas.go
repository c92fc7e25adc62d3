// Package canvas is the canvas tool (OpenClaw's canvas): the agent drives a
// panel of the chat's web UI — shows or hides it, points its sandboxed frame
// at a web page (through the browser's URL policy), runs JavaScript there,
// takes a snapshot of it, and renders A2UI v0.8 surfaces whose buttons come
// back to the agent as messages. The panel itself is the web UI's
// (runtime/gateway/web/canvas.js); the tool reaches it through tool.Env's
// Canvas (docs/canvas.md).
package canvas

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/tool"
)

// Name is the tool's name.
const Name = "canvas"

// Actions of the tool, as OpenClaw names them.
const (
	ActionPresent   = "present"
	ActionHide      = "hide"
	ActionNavigate  = "navigate"
	ActionEval      = "eval"
	ActionSnapshot  = "snapshot"
	ActionA2UIPush  = "a2ui_push"
	ActionA2UIReset = "a2ui_reset"
)

// Timeouts of the actions the web client answers.
const (
	DefaultTimeout = 15 * time.Second
	MaxTimeout     = 2 * time.Minute
	// MaxJavaScriptBytes bounds eval's code.
	MaxJavaScriptBytes = 32 << 10
	// MaxTextBytes bounds a2ui_push's text.
	MaxTextBytes = 8 << 10
)

// URLPolicy decides which pages the canvas may show: the browser tool's
// (browser.Policy), so the canvas opens nothing the browser would not.
type URLPolicy interface {
	CheckURL(ctx context.Context, raw string) (*url.URL, error)
}

// args are the tool's arguments. The web UI replays them from a chat's
// history to restore its canvas after a reload (docs/canvas.md): keep the
// JSON names stable.
type args struct {
	Action     string `json:"action" jsonschema:"present (show the panel; optional url), hide, navigate (url), eval (javaScript, returns its value), snapshot (image of the panel), a2ui_push (jsonl of A2UI v0.8 messages, or text), a2ui_reset (surfaceId, or all)"`
	URL        string `json:"url,omitempty" jsonschema:"http(s) page for present or navigate (public hosts only); navigate without url returns to the canvas's own document"`
	JavaScript string `json:"javaScript,omitempty" jsonschema:"eval: code run in the canvas frame (a sandbox without the chat page); the value of its last expression (or of a returned promise) is the result"`
	JSONL      string `json:"jsonl,omitempty" jsonschema:"a2ui_push: A2UI v0.8 messages, one JSON object a line (surfaceUpdate, dataModelUpdate, beginRendering, deleteSurface)"`
	Text       string `json:"text,omitempty" jsonschema:"a2ui_push: show this text as surface main instead of jsonl"`
	SurfaceID  string `json:"surfaceId,omitempty" jsonschema:"a2ui_reset: the surface to remove (every surface when omitted)"`
	Format     string `json:"outputFormat,omitempty" jsonschema:"snapshot: png (default) or jpeg"`
	TimeoutMS  int    `json:"timeoutMs,omitempty" jsonschema:"eval, snapshot: how long to wait for the web client (default 15000)"`
}

// New returns the canvas tool; navigate and present check URLs with policy.
func New(policy URLPolicy, now func() time.Time) tool.Tool {
	if now == nil {
		now = time.Now
	}
	t := canvasTool{policy: policy, now: now}
	return tool.New(Name, "Drive the canvas panel of the user's web chat: present/hide it, navigate it to a page, eval JavaScript in it, "+
		"snapshot it, and render A2UI v0.8 surfaces (a2ui_push/a2ui_reset). A button the user clicks on a surface comes back as a "+
		"message starting with [canvas action]. Flow: present, a2ui_push, snapshot.",
		t.run, tool.Exclusive(),
		tool.Enum("action", ActionPresent, ActionHide, ActionNavigate, ActionEval, ActionSnapshot, ActionA2UIPush, ActionA2UIReset),
		tool.Enum("outputFormat", "png", "jpeg"),
		tool.Range("timeoutMs", tool.Bound(100), tool.Bound(float64(MaxTimeout.Milliseconds()))))
}

type canvasTool struct {
	policy URLPolicy
	now    func() time.Time
}

func (t canvasTool) run(ctx context.Context, env tool.Env, a args) (tool.Result, error) {
	cmd, err := t.command(ctx, a)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if env.Canvas == nil {
		return tool.Errorf("error: this turn has no chat with a canvas (the canvas is a panel of PicoBot's web UI; scheduled and API turns have none)"), nil
	}
	cmd.SessionID = env.SessionID
	ans, err := env.Canvas.Canvas(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, err
		}
		return tool.Errorf("error: %v", err), nil
	}
	if ans.Error != "" {
		return tool.Errorf("error: the canvas says: %s", ans.Error), nil
	}
	switch cmd.Action {
	case ActionPresent:
		if cmd.URL != "" {
			return tool.Text("The canvas is shown, at " + cmd.URL + "."), nil
		}
		return tool.Text("The canvas is shown."), nil
	case ActionHide:
		return tool.Text("The canvas is hidden."), nil
	case ActionNavigate:
		if cmd.URL == "" {
			return tool.Text("The canvas shows its own document again (where eval runs)."), nil
		}
		return tool.Text("The canvas shows " + cmd.URL + ". eval and snapshot work on the canvas's own document only, not on another site's page: navigate without url returns to it."), nil
	case ActionEval:
		return tool.Text("Result (from code run in the canvas; untrusted):\n" + ans.Value), nil
	case ActionSnapshot:
		return t.snapshot(ans)
	case ActionA2UIPush:
		return tool.Text(fmt.Sprintf("Pushed %d A2UI message(s) to the canvas.", len(cmd.Messages))), nil
	}
	if cmd.SurfaceID != "" {
		return tool.Text("Removed surface " + cmd.SurfaceID + " from the canvas."), nil
	}
	return tool.Text("Removed every surface from the canvas."), nil
}

func (t canvasTool) snapshot(ans tool.CanvasAnswer) (tool.Result, error) {
	if len(ans.Image) == 0 {
		return tool.Errorf("error: the web client answered the snapshot without an image"), nil
	}
	ext := "png"
	if ans.MediaType == "image/jpeg" {
		ext = "jpg"
	}
	name := fmt.Sprintf("canvas-%s.%s", t.now().UTC().Format("20060102-150405.000"), ext)
	return tool.Result{Content: fmt.Sprintf("Snapshot of the canvas %s (%d KiB), attached to the reply.\nMEDIA:%s", name, len(ans.Image)>>10, name),
		Artifacts: []tool.Artifact{{Name: name, MediaType: ans.MediaType, Data: ans.Image, PresentToUser: true}}}, nil
}

// command checks the arguments of the action (a parameter another action
// takes is an error, so the model learns what it got wrong) and builds the
// canvas command.
func (t canvasTool) command(ctx context.Context, a args) (tool.CanvasCommand, error) {
	cmd := tool.CanvasCommand{Action: a.Action}
	allowed := map[string][]string{
		ActionPresent: {"url"}, ActionHide: nil, ActionNavigate: {"url"}, ActionEval: {"javaScript", "timeoutMs"},
		ActionSnapshot: {"outputFormat", "timeoutMs"}, ActionA2UIPush: {"jsonl", "text"}, ActionA2UIReset: {"surfaceId"},
	}[a.Action]
	set := map[string]bool{"url": a.URL != "", "javaScript": a.JavaScript != "", "jsonl": a.JSONL != "", "text": a.Text != "",
		"surfaceId": a.SurfaceID != "", "outputFormat": a.Format != "", "timeoutMs": a.TimeoutMS != 0}
	for _, p := range []string{"url", "javaScript", "jsonl", "text", "surfaceId", "outputFormat", "timeoutMs"} {
		if set[p] && !slices.Contains(allowed, p) {
			return cmd, fmt.Errorf("%s is not a parameter of %s (it takes %s)", p, a.Action, orNothing(allowed))
		}
	}
	wait := DefaultTimeout
	if a.TimeoutMS > 0 {
		wait = time.Duration(a.TimeoutMS) * time.Millisecond
	}
	switch a.Action {
	case ActionPresent, ActionNavigate:
		if a.URL == "" {
			return cmd, nil // navigate: back to the canvas document
		}
		u, err := t.policy.CheckURL(ctx, a.URL)
		if err != nil {
			return cmd, fmt.Errorf("url %q: %w", a.URL, err)
		}
		cmd.URL = u.String()
	case ActionEval:
		switch {
		case strings.TrimSpace(a.JavaScript) == "":
			return cmd, fmt.Errorf("eval needs javaScript")
		case len(a.JavaScript) > MaxJavaScriptBytes:
			return cmd, fmt.Errorf("javaScript is %d bytes; the limit is %d", len(a.JavaScript), MaxJavaScriptBytes)
		}
		cmd.JavaScript, cmd.Wait = a.JavaScript, wait
	case ActionSnapshot:
		cmd.Format, cmd.Wait = a.Format, wait
		if cmd.Format == "" {
			cmd.Format = "png"
		}
	case ActionA2UIPush:
		switch {
		case (a.JSONL == "") == (a.Text == ""):
			return cmd, fmt.Errorf("a2ui_push needs jsonl (A2UI v0.8 messages, one a line) or text, not both")
		case a.Text != "":
			if len(a.Text) > MaxTextBytes {
				return cmd, fmt.Errorf("text is %d bytes; the limit is %d", len(a.Text), MaxTextBytes)
			}
			cmd.Messages = TextSurface(a.Text)
		default:
			msgs, err := ParseJSONL(a.JSONL)
			if err != nil {
				return cmd, fmt.Errorf("jsonl refused: %w", err)
			}
			cmd.Messages = msgs
		}
	case ActionA2UIReset:
		if len(a.SurfaceID) > maxIDBytes {
			return cmd, fmt.Errorf("surfaceId has more than %d bytes", maxIDBytes)
		}
		cmd.SurfaceID = a.SurfaceID
	}
	return cmd, nil
}

func orNothing(list []string) string {
	if len(list) == 0 {
		return "no other parameter"
	}
	return strings.Join(list, ", ")
}
