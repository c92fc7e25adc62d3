package messaging

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
)

// Limits of the reader check (clientWrote).
const (
	// readerDialogs is how many of a chat's dialogs, most recent first, are
	// looked at.
	readerDialogs = 20
	// readerRecent is how many of a dialog's newest messages are read before
	// all of them are.
	readerRecent = 50
)

// target is a resolved send_message target.
type target struct {
	outbound.Target
	// client says the chat is a gateway client's (web, terminal): the
	// message is stored in the chat's history and seen by a client that
	// loads the chat, not handed to a chat platform.
	client bool
	// noPush names the channel of a gateway client that only gets answers
	// to its own requests (openai): it can be this conversation (files
	// attached to the reply), never another chat.
	noPush string
}

// resolveTarget reads a send_message target for agent.
//
// On a chat platform's channel the chat id is the platform's and is used as
// given. On the gateway's client channels a chat belongs to one client and
// one agent and sessions key it "<agent>/<chat_id>" (protocol.ChatKey), so
// "web:px-art" is agent's own chat "web:<agent>/px-art" — the chat a web
// client opened as px-art — and "web:<agent>/px-art" says the same. A key
// that names another agent is refused: an agent may send to its own channels
// (the dispatcher routes by them) and sees only its own sessions
// (chat_manager), and another agent's chat is neither. Without this the bare
// form went to a chat keyed "px-art" that no client can ever open.
func (c toolConfig) resolveTarget(ctx context.Context, agent, raw string) (target, error) {
	t, err := outbound.ParseTarget(raw)
	if err != nil {
		return target{}, err
	}
	if !agentKeyed(t.Channel) || c.platformChannel(ctx, t.Channel) {
		return target{Target: t}, nil
	}
	noPush := ""
	if !slices.Contains(protocol.PushChannels(), t.Channel) {
		noPush = fmt.Sprintf("%s clients only get answers to their own requests; nothing can be sent to them", t.Channel)
	}
	owner, chat, keyed := strings.Cut(t.ChatID, "/")
	if !keyed {
		owner, chat = agent, t.ChatID
	}
	switch {
	case owner == "" || chat == "" || strings.Contains(chat, "/"):
		return target{}, fmt.Errorf("%w %q: a %s chat is <chat_id> or %s/<chat_id>", outbound.ErrBadTarget, raw, t.Channel, agent)
	case owner != agent:
		return target{}, fmt.Errorf("%w %q: %s/%s is a chat of agent %q, not yours (%s); you can only send to your own chats",
			outbound.ErrBadTarget, raw, owner, chat, owner, agent)
	}
	t.ChatID = protocol.ChatKey(t.Channel, agent, chat)
	return target{Target: t, client: true, noPush: noPush}, nil
}

// targetForms is what a refused target is told: the accepted forms, with
// examples.
func targetForms(agent string) string {
	return fmt.Sprintf("Accepted targets: <channel>:<chat_id> or <channel>:<chat_id>:<dialog_id>. "+
		"On a chat platform the chat id is the platform's: telegram:123456789, telegram:123456789:d_k3x9qa2m. "+
		"On web and terminal it is one of your own chats, which a user has written in: "+
		"web:px-art (your chat web:%[1]s/px-art, which may be written so too), web:px-art:default (one of its dialogs). "+
		"chat_manager list_channels shows your channels and chats.", agent)
}

// agentKeyed reports whether sessions key the chats of ch "<agent>/<chat_id>"
// (the gateway's client channels); protocol.ChatKey decides it.
func agentKeyed(ch string) bool { return protocol.ChatKey(ch, "a", "c") == "a/c" }

// platformChannel reports whether the agent has a working chat platform
// channel named name, which the dispatcher picks before the gateway's
// clients (a webhook named "web").
func (c toolConfig) platformChannel(ctx context.Context, name string) bool {
	for _, s := range c.channels(ctx) {
		if s.Name == name {
			return s.Ready && s.Type != channel.TypeWeb && s.Type != channel.TypeTerminal
		}
	}
	return false
}

// clientWrote reports whether a client has written in a gateway client's
// chat: whether one of its dialogs (archived ones too, deleted ones not)
// holds a user message.
//
// This is what "has a reader" can honestly mean here. A message to such a
// chat is stored in its history, and a client sees it when it loads the
// chat; whether a client is connected right now the runtime cannot know (in
// cluster mode the connection may be on another gateway replica, and nothing
// is pushed to it). A client that has written in the chat has it in its list
// and will load it. A chat nobody has written in was never opened — or holds
// only messages sent to it, like the "web:px-art" orphans of the bare form —
// and nobody would ever see what is stored there. send_message refuses such
// a chat rather than store into it: storing would create exactly that orphan
// session and still tell the model nothing true, while a refusal leaves the
// message with the model, which can pick a chat someone reads or say it in
// its reply. A dialog a client created without writing in it does not count;
// the check errs towards refusing.
func (c toolConfig) clientWrote(ctx context.Context, t outbound.Target) (bool, error) {
	dialogs, err := c.store.ListSessions(ctx, store.SessionFilter{Channel: t.Channel, ChatID: t.ChatID,
		IncludeArchived: true, Limit: readerDialogs})
	if err != nil {
		return false, fmt.Errorf("failed to list the dialogs of %s:%s: %w", t.Channel, t.ChatID, err)
	}
	for _, s := range dialogs {
		msgs, err := c.store.LoadMessages(ctx, s.ID, store.LoadOptions{Last: readerRecent})
		if err == nil && !hasUserMessage(msgs) && len(msgs) == readerRecent {
			msgs, err = c.store.LoadMessages(ctx, s.ID, store.LoadOptions{})
		}
		if err != nil {
			return false, fmt.Errorf("failed to load messages of session %q: %w", s.ID, err)
		}
		if hasUserMessage(msgs) {
			return true, nil
		}
	}
	return false, nil
}

func hasUserMessage(msgs []store.Message) bool {
	return slices.ContainsFunc(msgs, func(m store.Message) bool { return m.Role == llm.RoleUser })
}
