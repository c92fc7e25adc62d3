// Package turn holds what a turn reports while it runs: its events and the
// files shown with them. It is the contract between the agent loop that emits
// events, the session runtime that stores and forwards them, the cluster's
// event channel that carries them between pods, and the gateway that turns
// them into client frames; so it imports nothing of ours but the model and
// tool types, and every type has JSON tags (the cluster's wire format).
package turn

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
)

// EventKind names what a turn event reports.
type EventKind string

// Turn events, in the order a client sees them.
const (
	EventDelta      EventKind = "delta"       // streamed answer text
	EventToolCall   EventKind = "tool_call"   // the model asked for a tool
	EventToolResult EventKind = "tool_result" // a tool finished
	EventUsage      EventKind = "usage"       // tokens of one model call
	EventCompressed EventKind = "compressed"  // history was compressed
	EventFinal      EventKind = "final"       // the final answer
	// EventNotice is a message of the platform to the user, not of the
	// model: a model budget's soft limit was reached (Notify).
	EventNotice EventKind = "notice"
	// EventApproval asks the user to approve a command before it runs;
	// EventApprovalResult says how the request ended.
	EventApproval       EventKind = "approval"
	EventApprovalResult EventKind = "approval_result"
	// EventCanvas tells the chat's web client to change its canvas panel
	// (the canvas tool; docs/canvas.md) or, when the command has an ID, to
	// run something there and answer with that ID.
	EventCanvas EventKind = "canvas"
)

// Event is one thing that happened during a turn.
type Event struct {
	Kind       EventKind     `json:"kind"`
	Step       int           `json:"step"`
	Text       string        `json:"text,omitempty"`
	ToolCall   *llm.ToolCall `json:"tool_call,omitempty"`
	ToolResult *ToolResult   `json:"tool_result,omitempty"`
	Usage      *llm.Usage    `json:"usage,omitempty"`
	// Approval is set on approval and approval_result events.
	Approval *Approval `json:"approval,omitempty"`
	// Canvas is set on canvas events.
	Canvas *Canvas `json:"canvas,omitempty"`
	// Attachments are the stored files shown with a tool_result (the files
	// its tool presented) or a final event (every file of the turn). The
	// loop stores nothing and leaves it empty; the session runtime fills it
	// in as it stores the tools' artifacts.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Session is the id of the session the turn runs in; the loop leaves
	// it empty and the session manager stamps it, so clients learn the
	// session from the first event (an optional field: readers of frame
	// version 2 that do not know it ignore it).
	Session string `json:"session,omitempty"`
}

// UnmarshalJSON reads an Event, also as session pods before the event
// format was tagged wrote it (Go field names: encoding/json matches "Kind",
// "Step", "Text", "Usage" and "Attachments" to the tags case-insensitively,
// but not "ToolCall" and "ToolResult"), so a gateway newer than a session pod
// keeps the tool calls and results of its turns during a rolling upgrade.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var v struct {
		plain
		LegacyToolCall   *llm.ToolCall `json:"ToolCall"`
		LegacyToolResult *ToolResult   `json:"ToolResult"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Event(v.plain)
	if e.ToolCall == nil {
		e.ToolCall = v.LegacyToolCall
	}
	if e.ToolResult == nil {
		e.ToolResult = v.LegacyToolResult
	}
	return nil
}

// Approval is a command waiting for the user's approval (exec approvals):
// the user answers with its Code in the chat the turn belongs to.
type Approval struct {
	Code    string `json:"code"`
	Tool    string `json:"tool"`
	Command string `json:"command"`
	// Reason says why the user is asked.
	Reason string `json:"reason,omitempty"`
	// TimeoutMS is how long the request waits before it is a denial.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Outcome is set on approval_result: approved, denied or timed_out.
	Outcome string `json:"outcome,omitempty"`
}

// Canvas is a command of the canvas tool for the chat's web canvas panel
// (docs/canvas.md).
type Canvas struct {
	// ID is set when the tool waits for the client's answer (eval,
	// snapshot): the client answers with it.
	ID     string `json:"id,omitempty"`
	Action string `json:"action"`
	URL    string `json:"url,omitempty"`
	// JavaScript is the code of eval.
	JavaScript string `json:"javascript,omitempty"`
	// Messages are the A2UI v0.8 messages of a2ui_push, one JSON object
	// each.
	Messages []json.RawMessage `json:"messages,omitempty"`
	// SurfaceID is the surface a2ui_reset removes (all when empty).
	SurfaceID string `json:"surface_id,omitempty"`
	// Format is snapshot's image format (png or jpeg).
	Format string `json:"format,omitempty"`
	// TimeoutMS is how long the tool waits for the answer.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// ToolResult is a finished tool call as the client sees it.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
	// Artifacts are the files the tool produced, bytes included; they never
	// travel (the session runtime stores them and sets the event's
	// Attachments instead).
	Artifacts []tool.Artifact `json:"-"`
}

// UnmarshalJSON reads a ToolResult, also in the untagged format of Event's
// UnmarshalJSON ("CallID" and "IsError" do not match their tags).
func (r *ToolResult) UnmarshalJSON(b []byte) error {
	type plain ToolResult
	var v struct {
		plain
		LegacyCallID  string `json:"CallID"`
		LegacyIsError bool   `json:"IsError"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = ToolResult(v.plain)
	if r.CallID == "" {
		r.CallID = v.LegacyCallID
	}
	r.IsError = r.IsError || v.LegacyIsError
	return nil
}

// Attachment is a reference to a stored file (an artifact) shown to the user
// with a turn's events and reply; the bytes stay in the artifact store.
type Attachment struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	MediaType string `json:"media_type,omitempty"`
	// URL is where clients fetch the file ("/api/v1/artifacts/<id>"); empty
	// when the runtime has no artifact URLs.
	URL string `json:"url,omitempty"`
}

// Image reports whether clients show the file inline as an image (SVG is
// not: it can carry script).
func (a Attachment) Image() bool {
	mt := strings.ToLower(a.MediaType)
	return strings.HasPrefix(mt, "image/") && !strings.HasPrefix(mt, "image/svg")
}

// Markdown is the attachment as a markdown link, an image link for images:
// how stored messages and plain-text clients show it.
func (a Attachment) Markdown() string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r == '[' || r == ']':
			return '_'
		case r < ' ' || r == 0x7f:
			return -1
		}
		return r
	}, a.Name)
	if name == "" {
		name = "file"
	}
	if a.URL == "" {
		return fmt.Sprintf("%s (artifact %s)", name, a.ID)
	}
	link := "[" + name + "](" + a.URL + ")"
	if a.Image() {
		return "!" + link
	}
	return link
}

// AttachmentsMarkdown lists attachments as markdown, one per line.
func AttachmentsMarkdown(list []Attachment) string {
	lines := make([]string, len(list))
	for i, a := range list {
		lines[i] = a.Markdown()
	}
	return strings.Join(lines, "\n")
}

// noticesKey carries the function that emits a turn's notices.
type noticesKey struct{}

// WithNotices returns ctx with emit, which the agent loop sets around each
// model call so that what wraps the model (the budget check) can tell the
// turn's client something as a notice event.
func WithNotices(ctx context.Context, emit func(text string)) context.Context {
	return context.WithValue(ctx, noticesKey{}, emit)
}

// Notify emits text as a notice event of the turn ctx belongs to; it
// reports false when ctx is not a turn's (nobody to tell).
func Notify(ctx context.Context, text string) bool {
	emit, ok := ctx.Value(noticesKey{}).(func(string))
	if !ok || emit == nil {
		return false
	}
	emit(text)
	return true
}
