package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// Channel actions beyond sending, named as OpenClaw's message tool names
// them. Send itself goes through Channel.Send (the outbound dispatcher
// records and retries it); the others are one platform API call each, run
// by an Actor.
const (
	ActionSend         = "send"
	ActionReact        = "react"
	ActionReactions    = "reactions"
	ActionRead         = "read"
	ActionEdit         = "edit"
	ActionDelete       = "delete"
	ActionPin          = "pin"
	ActionUnpin        = "unpin"
	ActionListPins     = "list-pins"
	ActionThreadCreate = "thread-create"
	ActionThreadList   = "thread-list"
	ActionThreadReply  = "thread-reply"
	ActionSearch       = "search"
	ActionMemberInfo   = "member-info"
	ActionChannelInfo  = "channel-info"
	ActionChannelList  = "channel-list"
)

// Actions lists every action in documentation order.
func Actions() []string {
	return []string{ActionSend, ActionReact, ActionReactions, ActionRead, ActionEdit, ActionDelete, ActionPin, ActionUnpin,
		ActionListPins, ActionThreadCreate, ActionThreadList, ActionThreadReply, ActionSearch, ActionMemberInfo,
		ActionChannelInfo, ActionChannelList}
}

// ReadingActions are the actions whose result carries what people wrote
// on the platform: callers hand it on as untrusted content.
func ReadingActions() []string {
	return []string{ActionReactions, ActionRead, ActionListPins, ActionThreadList, ActionSearch, ActionMemberInfo,
		ActionChannelInfo, ActionChannelList}
}

// ActionRequest is one action on a chat of a channel. Which fields an
// action needs depends on it (see each channel's action table).
type ActionRequest struct {
	Action string `json:"action"`
	// ChatID is the platform's chat (Telegram chat id, Slack channel id,
	// Feishu chat_id).
	ChatID string `json:"chat_id,omitempty"`
	// MessageID is the platform's message id (Telegram message_id, Slack
	// ts, Feishu message_id).
	MessageID string `json:"message_id,omitempty"`
	// ThreadID is a thread (Telegram message_thread_id, Slack thread_ts).
	ThreadID string `json:"thread_id,omitempty"`
	Text     string `json:"text,omitempty"`
	// Emoji is a reaction: the emoji itself on Telegram, its name on Slack
	// ("thumbsup"), its emoji_type on Feishu ("THUMBSUP").
	Emoji string `json:"emoji,omitempty"`
	// Remove takes the reaction away instead of adding it.
	Remove bool   `json:"remove,omitempty"`
	Query  string `json:"query,omitempty"`
	// Limit bounds listed items (DefaultActionLimit when 0).
	Limit  int    `json:"limit,omitempty"`
	UserID string `json:"user_id,omitempty"`
	// Name names a new thread (a Telegram forum topic).
	Name string `json:"name,omitempty"`
}

// Limits of listing actions.
const (
	DefaultActionLimit = 20
	MaxActionLimit     = 100
)

// limit is r.Limit within [1, MaxActionLimit], DefaultActionLimit when unset.
func (r ActionRequest) limit() int {
	switch {
	case r.Limit <= 0:
		return DefaultActionLimit
	case r.Limit > MaxActionLimit:
		return MaxActionLimit
	}
	return r.Limit
}

// ActionResult is what an action did.
type ActionResult struct {
	// Summary says what happened, in our words ("pinned message 42").
	Summary string `json:"summary"`
	// Data is the platform's answer (JSON) for the reading actions: text
	// people wrote, to be shown as untrusted content.
	Data json.RawMessage `json:"data,omitempty"`
	// MessageID is the id of a message the action created.
	MessageID string `json:"message_id,omitempty"`
}

// Actor is implemented by channels that run actions besides Send.
type Actor interface {
	// Actions lists the actions the channel supports.
	Actions() []string
	// Act runs one action; an action the channel lacks is an
	// *UnsupportedActionError, a platform failure a *SendError.
	Act(ctx context.Context, r ActionRequest) (ActionResult, error)
}

// ErrUnsupportedAction marks an action a channel's platform does not offer.
var ErrUnsupportedAction = errors.New("unsupported action")

// UnsupportedActionError is an action a channel does not offer.
type UnsupportedActionError struct {
	Channel   string
	Type      picobotv1alpha1.ChannelType
	Action    string
	Supported []string
	// Hint says what to do instead, when there is something.
	Hint string
}

func (e *UnsupportedActionError) Error() string {
	msg := fmt.Sprintf("channel %q (%s) does not support action %q", e.Channel, e.Type, e.Action)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	if len(e.Supported) > 0 {
		msg += "; it supports " + strings.Join(e.Supported, ", ")
	}
	return msg
}

func (e *UnsupportedActionError) Unwrap() error { return ErrUnsupportedAction }

// Unsupported returns the error of an action c lacks, listing what it has.
func Unsupported(c Channel, action, hint string) error {
	e := &UnsupportedActionError{Channel: c.Name(), Type: c.Type(), Action: action, Supported: []string{ActionSend}, Hint: hint}
	if a, ok := c.(Actor); ok {
		e.Supported = append(e.Supported, a.Actions()...)
	}
	return e
}

// actionTable maps a channel's actions to the functions that run them.
type actionTable map[string]func(ctx context.Context, r ActionRequest) (ActionResult, error)

// names lists the table's actions in documentation order.
func (t actionTable) names() []string {
	var out []string
	for _, a := range Actions() {
		if _, ok := t[a]; ok {
			out = append(out, a)
		}
	}
	return out
}

// run runs r.Action from t, or says c lacks it (with hints[action]).
func (t actionTable) run(ctx context.Context, c Channel, r ActionRequest, hints map[string]string) (ActionResult, error) {
	fn, ok := t[r.Action]
	if !ok {
		if !slices.Contains(Actions(), r.Action) {
			return ActionResult{}, fmt.Errorf("unknown action %q; actions are %s", r.Action, strings.Join(Actions(), ", "))
		}
		return ActionResult{}, Unsupported(c, r.Action, hints[r.Action])
	}
	if err := r.need(); err != nil {
		return ActionResult{}, fmt.Errorf("action %s on channel %q: %w", r.Action, c.Name(), err)
	}
	return fn(ctx, r)
}

// need checks the fields every platform needs for r.Action.
func (r ActionRequest) need() error {
	var missing []string
	req := func(ok bool, name string) {
		if !ok {
			missing = append(missing, name)
		}
	}
	switch r.Action {
	case ActionChannelList, ActionSearch:
	default:
		req(r.ChatID != "", "target")
	}
	switch r.Action {
	case ActionReact:
		req(r.MessageID != "", "messageId")
		req(r.Emoji != "", "emoji")
	case ActionReactions, ActionDelete, ActionPin, ActionUnpin:
		req(r.MessageID != "", "messageId")
	case ActionEdit:
		req(r.MessageID != "", "messageId")
		req(r.Text != "", "message")
	case ActionThreadReply:
		req(r.Text != "", "message")
	case ActionSearch:
		req(r.Query != "", "query")
	case ActionMemberInfo:
		req(r.UserID != "", "userId")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// rawJSON marshals v for ActionResult.Data.
func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
