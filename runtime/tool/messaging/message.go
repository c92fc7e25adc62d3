package messaging

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/web"
)

// Actor runs channel actions (react, edit, read...) with the channel's own
// credentials: *outbound.Dispatcher where the channels live (embedded mode,
// the gateway), cluster.RemoteSender in a session pod, which asks the
// gateway over the tenant's outbound stream.
type Actor interface {
	Act(ctx context.Context, agent, name string, r channel.ActionRequest) (channel.ActionResult, error)
}

// maxActionData caps the platform text a reading action hands the model.
const maxActionData = 32 << 10

// MessageArgs are the arguments of message, with OpenClaw's names.
type MessageArgs struct {
	Action     string   `json:"action"`
	Channel    string   `json:"channel,omitempty" jsonschema:"channel name; default: this chat's"`
	Target     string   `json:"target,omitempty" jsonschema:"platform chat id; default: this chat"`
	Message    string   `json:"message,omitempty" jsonschema:"text (send, edit, thread-reply)"`
	Media      []string `json:"media,omitempty" jsonschema:"workspace files to send"`
	MessageID  string   `json:"messageId,omitempty" jsonschema:"platform message id (Slack ts)"`
	Emoji      string   `json:"emoji,omitempty" jsonschema:"Telegram: the emoji; Slack: name; Feishu: emoji_type"`
	Remove     bool     `json:"remove,omitempty" jsonschema:"react: remove it"`
	ThreadID   string   `json:"threadId,omitempty"`
	ThreadName string   `json:"threadName,omitempty"`
	Query      string   `json:"query,omitempty"`
	UserID     string   `json:"userId,omitempty"`
	Limit      int      `json:"limit,omitempty"`
}

// messageDescription does not list the actions: the schema's enum does.
const messageDescription = "Send messages and act on your chat platform channels (Telegram, Slack, Feishu/Lark). " +
	"An action a platform lacks returns an error saying so."

// NewMessage returns the message tool for one agent.
func NewMessage(cfg toolConfig) tool.Tool {
	return tool.New("message", messageDescription, cfg.message, tool.Exclusive(),
		tool.Adjust(func(s *jsonschema.Schema) {
			if p := s.Properties["action"]; p != nil {
				for _, a := range channel.Actions() {
					p.Enum = append(p.Enum, a)
				}
			}
			if p := s.Properties["media"]; p != nil {
				n := maxFiles
				p.MaxItems = &n
			}
			if p := s.Properties["limit"]; p != nil {
				lo, hi := 1.0, float64(channel.MaxActionLimit)
				p.Minimum, p.Maximum = &lo, &hi
			}
		}))
}

// hasChatChannel reports whether the agent has a chat platform channel,
// the condition for offering message.
func (c toolConfig) hasChatChannel() bool {
	return c.spec != nil && agentspec.HasChatPlatformChannel(c.spec)
}

// crossChat reports whether the Agent lets message reach other chats than
// a chat session's own (spec.tools.message.crossChat).
func (c toolConfig) crossChat() bool {
	if c.spec == nil || c.spec.Spec.Tools == nil || c.spec.Spec.Tools.Message == nil {
		return false
	}
	v := c.spec.Spec.Tools.Message.CrossChat
	return v != nil && *v
}

// message resolves the channel and chat (defaults: the live chat session's
// own), applies the cross-chat rule, and runs the action: send through
// send_message's path (the outbound dispatcher, which records and retries
// it), everything else through the Actor, one platform call.
func (c toolConfig) message(ctx context.Context, env tool.Env, a MessageArgs) (tool.Result, error) {
	agent := env.Agent
	if agent == "" {
		agent = c.agent
	}
	action := strings.TrimSpace(a.Action)
	if !slices.Contains(channel.Actions(), action) {
		return tool.Errorf("error: unknown action %q; actions are %s", a.Action, strings.Join(channel.Actions(), ", ")), nil
	}
	var chats []channel.Status
	for _, s := range c.channels(ctx) {
		if agentspec.IsChatPlatform(s.Type) {
			chats = append(chats, s)
		}
	}
	names := make([]string, len(chats))
	for i, s := range chats {
		names[i] = s.Name
	}
	// A live chat session: one that came from one of the agent's chat
	// platform channels.
	cur, err := session.ParseID(env.SessionID)
	live := err == nil && slices.Contains(names, cur.Channel)

	name := strings.TrimSpace(a.Channel)
	switch {
	case name == "" && live:
		name = cur.Channel
	case name == "" && len(names) == 1:
		name = names[0]
	case name == "":
		return tool.Errorf("error: channel is required: one of %s", strings.Join(names, ", ")), nil
	case !slices.Contains(names, name):
		return tool.Errorf("error: %q is not one of your chat platform channels (%s). send_message reaches web and terminal chats.",
			name, strings.Join(names, ", ")), nil
	}
	target := strings.TrimSpace(strings.TrimPrefix(a.Target, name+":"))
	if target == "" && live && name == cur.Channel && action != channel.ActionChannelList {
		target = cur.ChatID
	}
	if live && !c.crossChat() && (name != cur.Channel || target != cur.ChatID) {
		what := fmt.Sprintf("%s:%s", name, target)
		if target == "" {
			what = "all chats of " + name
		}
		return tool.Errorf("error: this conversation is the chat %s:%s, and here message reaches only that chat, not %s "+
			"(the Agent's spec.tools.message.crossChat allows other chats). Nothing was done.", cur.Channel, cur.ChatID, what), nil
	}

	if action == channel.ActionSend && a.ThreadID == "" {
		if target == "" {
			return tool.Errorf("error: send needs a target (a chat id of %s)", name), nil
		}
		return c.sendWith(ctx, env, SendArgs{TargetChatID: name + ":" + target, Content: a.Message, Files: a.Media}, true)
	}
	if action == channel.ActionSend {
		if len(a.Media) > 0 {
			return tool.Errorf("error: media cannot be sent into a thread; send them without threadId"), nil
		}
		action = channel.ActionThreadReply
	}
	if c.opts.Actor == nil {
		return tool.Errorf("error: this runtime cannot run channel actions (no outbound dispatcher)."), nil
	}
	req := channel.ActionRequest{Action: action, ChatID: target, MessageID: a.MessageID, ThreadID: a.ThreadID, Text: a.Message,
		Emoji: a.Emoji, Remove: a.Remove, Query: a.Query, Limit: a.Limit, UserID: a.UserID, Name: a.ThreadName}
	res, err := c.opts.Actor.Act(ctx, agent, name, req)
	switch {
	case err == nil:
	case errors.Is(err, channel.ErrUnsupportedAction), errors.Is(err, outbound.ErrUnknownChannel):
		return tool.Errorf("error: %v. Nothing was done.", err), nil
	case ctx.Err() != nil:
		return tool.Result{}, err
	default:
		return tool.Errorf("error: %s on %s failed: %v", action, where(name, target), err), nil
	}
	text := fmt.Sprintf("%s on %s: %s.", action, where(name, target), res.Summary)
	if res.MessageID != "" && !strings.Contains(res.Summary, res.MessageID) {
		text += " id: " + res.MessageID
	}
	if len(res.Data) > 0 {
		data := string(res.Data)
		if len(data) > maxActionData {
			data = data[:maxActionData] + "…[truncated]"
		}
		text += "\n" + web.WrapUntrusted(name+" "+action, data)
	}
	return tool.Text(text), nil
}

// where names a channel's chat, or the channel alone.
func where(name, target string) string {
	if target == "" {
		return name
	}
	return name + ":" + target
}
