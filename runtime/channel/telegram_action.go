package channel

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// Telegram's actions, on the Bot API. A bot cannot read a chat's history,
// search it, list its chats or its forum topics, or see who reacted: the
// Bot API has no method for these.

var telegramHints = map[string]string{
	ActionRead:        "a Telegram bot cannot read a chat's history (the Bot API has no such method); it sees only messages sent to it",
	ActionSearch:      "the Bot API has no search",
	ActionReactions:   "the Bot API does not list a message's reactions",
	ActionThreadList:  "the Bot API does not list forum topics",
	ActionChannelList: "the Bot API does not list the chats a bot is in",
}

func (t *telegram) actions() actionTable {
	ok := func(summary string) func(error) (ActionResult, error) {
		return func(err error) (ActionResult, error) {
			if err != nil {
				return ActionResult{}, err
			}
			return ActionResult{Summary: summary}, nil
		}
	}
	read := func(method string, body map[string]any) func(context.Context) (ActionResult, error) {
		return func(ctx context.Context) (ActionResult, error) {
			var out json.RawMessage
			if err := t.callJSON(ctx, method, body, &out); err != nil {
				return ActionResult{}, err
			}
			return ActionResult{Summary: "telegram " + method, Data: out}, nil
		}
	}
	return actionTable{
		ActionReact: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			id, err := tgMessageID(r.MessageID)
			if err != nil {
				return ActionResult{}, err
			}
			reaction := []map[string]string{{"type": "emoji", "emoji": r.Emoji}}
			summary := fmt.Sprintf("reacted %s to message %d", r.Emoji, id)
			if r.Remove {
				reaction, summary = []map[string]string{}, fmt.Sprintf("removed the bot's reaction from message %d", id)
			}
			return ok(summary)(t.callJSON(ctx, "setMessageReaction", map[string]any{"chat_id": r.ChatID, "message_id": id, "reaction": reaction}, nil))
		},
		ActionEdit: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			id, err := tgMessageID(r.MessageID)
			if err != nil {
				return ActionResult{}, err
			}
			return ok(fmt.Sprintf("edited message %d", id))(t.callJSON(ctx, "editMessageText", map[string]any{"chat_id": r.ChatID, "message_id": id, "text": r.Text}, nil))
		},
		ActionDelete: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			id, err := tgMessageID(r.MessageID)
			if err != nil {
				return ActionResult{}, err
			}
			return ok(fmt.Sprintf("deleted message %d", id))(t.callJSON(ctx, "deleteMessage", map[string]any{"chat_id": r.ChatID, "message_id": id}, nil))
		},
		ActionPin: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			id, err := tgMessageID(r.MessageID)
			if err != nil {
				return ActionResult{}, err
			}
			return ok(fmt.Sprintf("pinned message %d", id))(t.callJSON(ctx, "pinChatMessage", map[string]any{"chat_id": r.ChatID, "message_id": id, "disable_notification": true}, nil))
		},
		ActionUnpin: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			id, err := tgMessageID(r.MessageID)
			if err != nil {
				return ActionResult{}, err
			}
			return ok(fmt.Sprintf("unpinned message %d", id))(t.callJSON(ctx, "unpinChatMessage", map[string]any{"chat_id": r.ChatID, "message_id": id}, nil))
		},
		// getChat carries the most recent pinned message, the only one the
		// Bot API shows.
		ActionListPins: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			var chat struct {
				Pinned json.RawMessage `json:"pinned_message"`
			}
			if err := t.callJSON(ctx, "getChat", map[string]any{"chat_id": r.ChatID}, &chat); err != nil {
				return ActionResult{}, err
			}
			if len(chat.Pinned) == 0 {
				return ActionResult{Summary: "no pinned message"}, nil
			}
			return ActionResult{Summary: "the most recent pinned message (the Bot API shows only that one)", Data: chat.Pinned}, nil
		},
		ActionThreadCreate: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			name := r.Name
			if name == "" {
				name = r.Text
			}
			if name == "" {
				return ActionResult{}, fmt.Errorf("action %s on channel %q: missing threadName", r.Action, t.name)
			}
			var topic struct {
				ThreadID int64 `json:"message_thread_id"`
			}
			if err := t.callJSON(ctx, "createForumTopic", map[string]any{"chat_id": r.ChatID, "name": name}, &topic); err != nil {
				return ActionResult{}, err
			}
			id := strconv.FormatInt(topic.ThreadID, 10)
			return ActionResult{Summary: fmt.Sprintf("created forum topic %q (threadId %s)", name, id), MessageID: id}, nil
		},
		ActionThreadReply: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			body := map[string]any{"chat_id": r.ChatID, "text": r.Text}
			switch {
			case r.ThreadID != "":
				id, err := tgMessageID(r.ThreadID)
				if err != nil {
					return ActionResult{}, err
				}
				body["message_thread_id"] = id
			case r.MessageID != "":
				id, err := tgMessageID(r.MessageID)
				if err != nil {
					return ActionResult{}, err
				}
				body["reply_parameters"] = map[string]any{"message_id": id}
			default:
				return ActionResult{}, fmt.Errorf("action %s on channel %q: missing threadId (a forum topic) or messageId (the message to reply to)", r.Action, t.name)
			}
			var sent struct {
				MessageID int64 `json:"message_id"`
			}
			if err := t.callJSON(ctx, "sendMessage", body, &sent); err != nil {
				return ActionResult{}, err
			}
			id := strconv.FormatInt(sent.MessageID, 10)
			return ActionResult{Summary: "replied as message " + id, MessageID: id}, nil
		},
		ActionMemberInfo: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			uid, err := strconv.ParseInt(r.UserID, 10, 64)
			if err != nil {
				return ActionResult{}, fmt.Errorf("telegram user id %q is not a number", r.UserID)
			}
			return read("getChatMember", map[string]any{"chat_id": r.ChatID, "user_id": uid})(ctx)
		},
		ActionChannelInfo: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return read("getChat", map[string]any{"chat_id": r.ChatID})(ctx)
		},
	}
}

// tgMessageID reads a Telegram message or thread id.
func tgMessageID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("telegram message id %q is not a positive number", s)
	}
	return id, nil
}

// Actions implements Actor.
func (t *telegram) Actions() []string { return t.actions().names() }

// Act implements Actor.
func (t *telegram) Act(ctx context.Context, r ActionRequest) (ActionResult, error) {
	return t.actions().run(ctx, t, r, telegramHints)
}
