package protocol

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// Each kind of message that crosses between components has its own version,
// so a change to one does not make old readers refuse the others. Readers
// accept every version up to the one they write (a message without "v" is
// version 0, the format before it was versioned, read as version 1) and
// refuse newer ones with ErrUnknownVersion, so during a rolling upgrade a
// component older than its peer gets a clear error instead of a misread
// message. A change that old readers would misread bumps the version;
// adding an optional field does not.
const (
	// InboundVersion is the version of Inbound. Version 2 added
	// Delegation, which a version-1 reader would drop (running a sub-agent's
	// task with all of its tools and no depth): a message carrying it is
	// stamped 2, every other message still 1, so older runtimes read them.
	// Version 3 added Files, which a reader before it drops (answering the
	// text alone, the files silently lost): a message carrying files is
	// stamped 3, so such a runtime refuses it and the sender hears why.
	InboundVersion = 3
	// FrameVersion is the version of Frame. Version 1 carried the turn
	// event with Go field names ("ToolCall"); version 2 with the JSON tags
	// of runtime/turn ("tool_call"), and turn.Event still reads version 1.
	FrameVersion = 2
)

// Inbound is a queued user message on a chat stream (ChatStream): what the
// gateway (or a chat platform's channel) hands to the session runtime.
type Inbound struct {
	// V is the wire version (InboundVersion when written by this build).
	V int `json:"v"`
	// ID is the message id, the idempotency key of the turn (the bus
	// message carries it too).
	ID      string `json:"id"`
	Channel string `json:"channel"`
	// ChatKey is the chat as sessions know it (ChatKey).
	ChatKey string `json:"chat_key"`
	Text    string `json:"text"`
	// Delegation, when set, makes the message a delegated task: the only
	// message of a sub-agent run's chat (channel ChannelDelegate, chat key
	// the run id).
	Delegation *Delegation `json:"delegation,omitempty"`
	// DialogID, when set, names the dialog of the chat the message is for
	// (a background run's continuation goes to the session that started
	// the run); otherwise, or when that dialog is gone, the chat's current
	// dialog takes it.
	DialogID string `json:"dialog_id,omitempty"`
	// Files are the files the user attached to the message, uploaded to
	// the artifact store before it was sent (POST /api/v1/uploads): the
	// message carries their references, never their bytes. A message with
	// files is version 3, which a reader older than the field refuses
	// (see InboundVersion).
	Files []File `json:"files,omitempty"`
	// Actor is who the message came from as the gateway knows it (the
	// API key "key:<id>", a chat platform's user "<channel>:<user>"),
	// for the audit log of the turn's tool calls; "" when unknown.
	Actor string `json:"actor,omitempty"`
}

// File is a file attached to a user message: an artifact of the tenant.
type File struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	MediaType string `json:"media_type,omitempty"`
	Size      int64  `json:"size,omitempty"`
}

// Delegation is what the runtime of a sub-agent needs to know of the run it
// serves, beyond the task's text: it travels in the queued message, so the
// pod that takes the run over after another died knows it too.
type Delegation struct {
	// RunID is the run's agent_runs record (and its chat key).
	RunID string `json:"run_id"`
	// ParentAgent delegated the run from session ParentSession.
	ParentAgent   string `json:"parent_agent"`
	ParentSession string `json:"parent_session"`
	// Depth is the run's depth in its delegation chain (1 for a task a
	// root agent delegated): the sub-agent's own delegations count from it.
	Depth int `json:"depth"`
	// Tools, when not null, narrows the sub-agent's tools to these (an
	// empty list to none).
	Tools []string `json:"tools"`
}

// EncodeInbound returns the bus payload of a message, stamped with the
// oldest version that carries it: 3 with Files, 2 with a Delegation, 1
// otherwise.
func EncodeInbound(in Inbound) ([]byte, error) {
	in.V = 1
	if in.Delegation != nil {
		in.V = 2
	}
	if len(in.Files) > 0 {
		in.V = 3
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("failed to encode message %q: %w", in.ID, err)
	}
	return b, nil
}

// DecodeInbound reads a bus payload written by EncodeInbound of this or an
// earlier version.
func DecodeInbound(payload []byte) (Inbound, error) {
	var in Inbound
	if err := json.Unmarshal(payload, &in); err != nil {
		return Inbound{}, fmt.Errorf("malformed queued message: %w", err)
	}
	if err := checkVersion(in.V, InboundVersion); err != nil {
		return Inbound{}, err
	}
	if in.Channel == "" || in.ChatKey == "" {
		return Inbound{}, errors.New("malformed queued message: no channel or chat_key")
	}
	return in, nil
}

// Frame kinds besides the turn event kinds (runtime/turn).
const (
	// FrameDone ends a turn: Outcome is set.
	FrameDone = "done"
	// FrameError ends a turn that failed: Code and Message are set, and
	// Outcome when the turn stored a partial answer.
	FrameError = "error"
	// FrameStop asks the runtime serving a chat to stop its turn (on the
	// chat's control channel).
	FrameStop = "stop"
	// FrameApprove answers an exec approval request of the chat's running
	// turn (on the chat's control channel): Approval is set.
	FrameApprove = "approve"
	// FrameCanvasAnswer carries a web client's answer to a canvas command
	// of the chat's running turn (on the chat's control channel):
	// CanvasAnswer is set.
	FrameCanvasAnswer = "canvas_answer"
)

// CanvasAnswer is a web client's answer to the canvas command with ID.
type CanvasAnswer struct {
	ID     string            `json:"id"`
	Answer tool.CanvasAnswer `json:"answer"`
}

// ApprovalAnswer is the user's answer to an exec approval request.
type ApprovalAnswer struct {
	Code    string `json:"code"`
	Approve bool   `json:"approve"`
}

// Frame is one message on a chat's event channel (the session runtime's
// turn events and outcome, relayed by the gateway to the client) or control
// channel (a stop, an approval answer).
type Frame struct {
	// V is the wire version (FrameVersion when written by this build).
	V int `json:"v"`
	// MessageID is the inbound message the frame belongs to.
	MessageID string `json:"message_id,omitempty"`
	// Kind is a turn event kind or one of the Frame kinds.
	Kind string `json:"kind"`
	// Event is set for turn events (deltas, tool calls and results, final).
	Event *turn.Event `json:"event,omitempty"`
	// Outcome is set on done.
	Outcome *Outcome `json:"outcome,omitempty"`
	// Code and Message are set on error, and Status and RetryAfterMS
	// when the error carries them (CodedError).
	Code         string `json:"code,omitempty"`
	Message      string `json:"message,omitempty"`
	Status       int    `json:"status,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// Approval is set on approve.
	Approval *ApprovalAnswer `json:"approval,omitempty"`
	// CanvasAnswer is set on canvas_answer.
	CanvasAnswer *CanvasAnswer `json:"canvas_answer,omitempty"`
}

// EncodeFrame returns the payload of a frame, stamped with FrameVersion.
// What must not travel does not: a tool result's artifact bytes (they are
// in the artifact store; the event's attachments point at them).
func EncodeFrame(f Frame) ([]byte, error) {
	f.V = FrameVersion
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("failed to encode %s frame of message %q: %w", f.Kind, f.MessageID, err)
	}
	return b, nil
}

// DecodeFrame reads a payload written by EncodeFrame of this or an earlier
// version; a frame of a newer version is refused with ErrUnknownVersion
// (its message id is still returned, so the reader knows whose it was).
func DecodeFrame(payload []byte) (Frame, error) {
	var f Frame
	if err := json.Unmarshal(payload, &f); err != nil {
		return Frame{}, fmt.Errorf("malformed event frame: %w", err)
	}
	if err := checkVersion(f.V, FrameVersion); err != nil {
		return Frame{V: f.V, MessageID: f.MessageID, Kind: f.Kind}, err
	}
	if f.Kind == "" {
		return Frame{}, errors.New("malformed event frame: no kind")
	}
	if f.Kind == FrameDone && f.Outcome == nil {
		return Frame{}, fmt.Errorf("malformed event frame: done without an outcome (message %q)", f.MessageID)
	}
	return f, nil
}

// checkVersion accepts the wire versions up to newest (0 means before
// versioning).
func checkVersion(v, newest int) error {
	if v < 0 || v > newest {
		return fmt.Errorf("%w %d (this build reads up to %d): the sender is newer; upgrade this component", ErrUnknownVersion, v, newest)
	}
	return nil
}
