package channel

import (
	"context"
	"fmt"

	"github.com/slack-go/slack"
)

// Slack's actions, on the Web API through slack-go. Slack has no call that
// lists a channel's threads, and a thread starts by replying to a message
// (thread-reply), so thread-create and thread-list are not offered.

var slackHints = map[string]string{
	ActionThreadCreate: "a Slack thread starts when you reply to a message: use thread-reply with its messageId",
	ActionThreadList:   "the Slack Web API does not list a channel's threads; read with threadId reads one",
}

// slackMessage is what the reading actions show of a message.
type slackMessage struct {
	TS         string `json:"ts"`
	User       string `json:"user,omitempty"`
	BotID      string `json:"bot_id,omitempty"`
	Text       string `json:"text"`
	ThreadTS   string `json:"thread_ts,omitempty"`
	ReplyCount int    `json:"reply_count,omitempty"`
	Channel    string `json:"channel,omitempty"`
	Permalink  string `json:"permalink,omitempty"`
}

func slackMessages(msgs []slack.Message) []slackMessage {
	out := make([]slackMessage, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, slackMessage{TS: m.Timestamp, User: m.User, BotID: m.BotID, Text: m.Text, ThreadTS: m.ThreadTimestamp, ReplyCount: m.ReplyCount})
	}
	return out
}

// slackConversation is what channel-info and channel-list show of a channel.
type slackConversation struct {
	ID         string `json:"id"`
	Name       string `json:"name,omitempty"`
	Topic      string `json:"topic,omitempty"`
	Purpose    string `json:"purpose,omitempty"`
	IsPrivate  bool   `json:"is_private,omitempty"`
	IsIM       bool   `json:"is_im,omitempty"`
	IsArchived bool   `json:"is_archived,omitempty"`
	NumMembers int    `json:"num_members,omitempty"`
}

func slackConv(c slack.Channel) slackConversation {
	return slackConversation{ID: c.ID, Name: c.Name, Topic: c.Topic.Value, Purpose: c.Purpose.Value, IsPrivate: c.IsPrivate,
		IsIM: c.IsIM, IsArchived: c.IsArchived, NumMembers: c.NumMembers}
}

func (s *slackChannel) actions() actionTable {
	done := func(summary string, err error) (ActionResult, error) {
		if err != nil {
			return ActionResult{}, slackError(err)
		}
		return ActionResult{Summary: summary}, nil
	}
	return actionTable{
		ActionReact: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			ref := slack.NewRefToMessage(r.ChatID, r.MessageID)
			if r.Remove {
				return done(fmt.Sprintf("removed :%s: from message %s", r.Emoji, r.MessageID), s.api.RemoveReactionContext(ctx, r.Emoji, ref))
			}
			return done(fmt.Sprintf("reacted :%s: to message %s", r.Emoji, r.MessageID), s.api.AddReactionContext(ctx, r.Emoji, ref))
		},
		ActionReactions: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			item, err := s.api.GetReactionsContext(ctx, slack.NewRefToMessage(r.ChatID, r.MessageID), slack.GetReactionsParameters{Full: true})
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			return ActionResult{Summary: fmt.Sprintf("%d reaction(s) on message %s", len(item.Reactions), r.MessageID), Data: rawJSON(item.Reactions)}, nil
		},
		ActionRead: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			thread := r.ThreadID
			if thread != "" {
				msgs, _, _, err := s.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: r.ChatID, Timestamp: thread, Limit: r.limit()})
				if err != nil {
					return ActionResult{}, slackError(err)
				}
				return ActionResult{Summary: fmt.Sprintf("%d message(s) of thread %s", len(msgs), thread), Data: rawJSON(slackMessages(msgs))}, nil
			}
			h, err := s.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: r.ChatID, Limit: r.limit()})
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			return ActionResult{Summary: fmt.Sprintf("%d latest message(s), newest first", len(h.Messages)), Data: rawJSON(slackMessages(h.Messages))}, nil
		},
		ActionEdit: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			_, _, _, err := s.api.UpdateMessageContext(ctx, r.ChatID, r.MessageID, slack.MsgOptionText(r.Text, false))
			return done("edited message "+r.MessageID, err)
		},
		ActionDelete: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			_, _, err := s.api.DeleteMessageContext(ctx, r.ChatID, r.MessageID)
			return done("deleted message "+r.MessageID, err)
		},
		ActionPin: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return done("pinned message "+r.MessageID, s.api.AddPinContext(ctx, r.ChatID, slack.NewRefToMessage(r.ChatID, r.MessageID)))
		},
		ActionUnpin: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return done("unpinned message "+r.MessageID, s.api.RemovePinContext(ctx, r.ChatID, slack.NewRefToMessage(r.ChatID, r.MessageID)))
		},
		ActionListPins: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			items, _, err := s.api.ListPinsContext(ctx, r.ChatID)
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			var msgs []slack.Message
			for _, it := range items {
				if it.Message != nil {
					msgs = append(msgs, *it.Message)
				}
			}
			return ActionResult{Summary: fmt.Sprintf("%d pinned message(s)", len(msgs)), Data: rawJSON(slackMessages(msgs))}, nil
		},
		ActionThreadReply: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			thread := r.ThreadID
			if thread == "" {
				thread = r.MessageID
			}
			if thread == "" {
				return ActionResult{}, fmt.Errorf("action %s on channel %q: missing threadId or messageId (the thread's first message)", r.Action, s.name)
			}
			_, ts, err := s.api.PostMessageContext(ctx, r.ChatID, slack.MsgOptionText(r.Text, false), slack.MsgOptionTS(thread))
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			return ActionResult{Summary: fmt.Sprintf("replied in thread %s as message %s", thread, ts), MessageID: ts}, nil
		},
		// search.messages searches what the token's user can see; with a
		// target it is confined to that channel.
		ActionSearch: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			q := r.Query
			if r.ChatID != "" {
				q += " in:<#" + r.ChatID + ">"
			}
			res, err := s.api.SearchMessagesContext(ctx, q, slack.SearchParameters{Sort: "timestamp", SortDirection: "desc", Count: r.limit(), Page: 1})
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			out := make([]slackMessage, 0, len(res.Matches))
			for _, m := range res.Matches {
				out = append(out, slackMessage{TS: m.Timestamp, User: m.User, Text: m.Text, Channel: m.Channel.ID, Permalink: m.Permalink})
			}
			return ActionResult{Summary: fmt.Sprintf("%d of %d match(es)", len(out), res.Total), Data: rawJSON(out)}, nil
		},
		ActionMemberInfo: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			u, err := s.api.GetUserInfoContext(ctx, r.UserID)
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			return ActionResult{Summary: "slack user " + u.ID, Data: rawJSON(map[string]any{"id": u.ID, "name": u.Name, "real_name": u.RealName,
				"display_name": u.Profile.DisplayName, "title": u.Profile.Title, "tz": u.TZ, "is_bot": u.IsBot, "is_admin": u.IsAdmin, "deleted": u.Deleted})}, nil
		},
		ActionChannelInfo: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			c, err := s.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: r.ChatID, IncludeNumMembers: true})
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			return ActionResult{Summary: "slack channel " + c.ID, Data: rawJSON(slackConv(*c))}, nil
		},
		ActionChannelList: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			chans, _, err := s.api.GetConversationsContext(ctx, &slack.GetConversationsParameters{ExcludeArchived: true, Limit: r.limit(),
				Types: []string{"public_channel", "private_channel"}})
			if err != nil {
				return ActionResult{}, slackError(err)
			}
			out := make([]slackConversation, 0, len(chans))
			for _, c := range chans {
				out = append(out, slackConv(c))
			}
			return ActionResult{Summary: fmt.Sprintf("%d channel(s)", len(out)), Data: rawJSON(out)}, nil
		},
	}
}

// Actions implements Actor.
func (s *slackChannel) Actions() []string { return s.actions().names() }

// Act implements Actor.
func (s *slackChannel) Act(ctx context.Context, r ActionRequest) (ActionResult, error) {
	return s.actions().run(ctx, s, r, slackHints)
}
