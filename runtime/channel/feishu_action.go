package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Feishu/Lark's actions, on the Open API (im/v1 messages, reactions, pins
// and chats; contact/v3 users). A bot cannot search messages (search is a
// user-token API) and there is no call that lists a chat's threads; a
// thread starts as a reply in thread to a message.

var feishuHints = map[string]string{
	ActionSearch:     "the Feishu/Lark Open API searches messages only with a user's token, which a bot does not have",
	ActionThreadList: "the Feishu/Lark Open API does not list a chat's threads; read with threadId reads one",
}

// feishuMessage is what the reading actions show of a message.
type feishuMessage struct {
	MessageID  string `json:"message_id"`
	Sender     string `json:"sender,omitempty"`
	SenderType string `json:"sender_type,omitempty"`
	Type       string `json:"msg_type"`
	Text       string `json:"text"`
	CreateTime string `json:"create_time,omitempty"`
	ThreadID   string `json:"thread_id,omitempty"`
}

// feishuItem is a message as im/v1/messages lists it.
type feishuItem struct {
	MessageID string `json:"message_id"`
	MsgType   string `json:"msg_type"`
	ThreadID  string `json:"thread_id"`
	Create    string `json:"create_time"`
	Sender    struct {
		ID         string `json:"id"`
		SenderType string `json:"sender_type"`
	} `json:"sender"`
	Body struct {
		Content string `json:"content"`
	} `json:"body"`
}

func (i feishuItem) view() feishuMessage {
	text, files := feishuContent(i.MessageID, i.MsgType, i.Body.Content)
	for _, f := range files {
		text += "[" + i.MsgType + ": " + f.Name + "]"
	}
	return feishuMessage{MessageID: i.MessageID, Sender: i.Sender.ID, SenderType: i.Sender.SenderType, Type: i.MsgType, Text: text,
		CreateTime: i.Create, ThreadID: i.ThreadID}
}

// jsonBody is a request body function for apiMethod.
func jsonBody(v any) func() (io.Reader, string, error) {
	return func() (io.Reader, string, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, "", fmt.Errorf("failed to encode feishu request: %w", err)
		}
		return bytes.NewReader(b), "application/json; charset=utf-8", nil
	}
}

// textContent is the content of a text message.
func textContent(text string) string {
	b, _ := json.Marshal(map[string]string{"text": text})
	return string(b)
}

func (f *feishu) actions() actionTable {
	esc := url.PathEscape
	done := func(summary string, err error) (ActionResult, error) {
		if err != nil {
			return ActionResult{}, err
		}
		return ActionResult{Summary: summary}, nil
	}
	get := func(ctx context.Context, path string, summary string) (ActionResult, error) {
		var data json.RawMessage
		if err := f.apiMethod(ctx, http.MethodGet, path, nil, &data); err != nil {
			return ActionResult{}, err
		}
		return ActionResult{Summary: summary, Data: data}, nil
	}
	reply := func(ctx context.Context, r ActionRequest) (ActionResult, error) {
		if r.MessageID == "" {
			return ActionResult{}, fmt.Errorf("action %s on channel %q: missing messageId (the message the thread hangs on)", r.Action, f.name)
		}
		var sent struct {
			MessageID string `json:"message_id"`
			ThreadID  string `json:"thread_id"`
		}
		err := f.apiMethod(ctx, http.MethodPost, "/open-apis/im/v1/messages/"+esc(r.MessageID)+"/reply",
			jsonBody(map[string]any{"msg_type": "text", "content": textContent(r.Text), "reply_in_thread": true}), &sent)
		if err != nil {
			return ActionResult{}, err
		}
		return ActionResult{Summary: fmt.Sprintf("replied in thread %s as message %s", sent.ThreadID, sent.MessageID), MessageID: sent.MessageID}, nil
	}
	return actionTable{
		ActionReact: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			path := "/open-apis/im/v1/messages/" + esc(r.MessageID) + "/reactions"
			if !r.Remove {
				return done(fmt.Sprintf("reacted %s to message %s", r.Emoji, r.MessageID),
					f.apiMethod(ctx, http.MethodPost, path, jsonBody(map[string]any{"reaction_type": map[string]string{"emoji_type": r.Emoji}}), nil))
			}
			// Removing needs the reaction's id: the app's own reactions of
			// that type.
			var list struct {
				Items []struct {
					ReactionID string `json:"reaction_id"`
					Operator   struct {
						OperatorType string `json:"operator_type"`
					} `json:"operator"`
				} `json:"items"`
			}
			if err := f.apiMethod(ctx, http.MethodGet, path+"?page_size=50&reaction_type="+url.QueryEscape(r.Emoji), nil, &list); err != nil {
				return ActionResult{}, err
			}
			n := 0
			for _, it := range list.Items {
				if it.Operator.OperatorType != "app" {
					continue
				}
				if err := f.apiMethod(ctx, http.MethodDelete, path+"/"+esc(it.ReactionID), nil, nil); err != nil {
					return ActionResult{}, err
				}
				n++
			}
			if n == 0 {
				return ActionResult{Summary: fmt.Sprintf("the bot had no %s reaction on message %s", r.Emoji, r.MessageID)}, nil
			}
			return ActionResult{Summary: fmt.Sprintf("removed the bot's %s reaction from message %s", r.Emoji, r.MessageID)}, nil
		},
		ActionReactions: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return get(ctx, "/open-apis/im/v1/messages/"+esc(r.MessageID)+"/reactions?page_size="+strconv.Itoa(r.limit()), "reactions on message "+r.MessageID)
		},
		ActionRead: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			q := url.Values{"container_id_type": {"chat"}, "container_id": {r.ChatID}, "sort_type": {"ByCreateTimeDesc"},
				"page_size": {strconv.Itoa(min(r.limit(), 50))}}
			if r.ThreadID != "" {
				q.Set("container_id_type", "thread")
				q.Set("container_id", r.ThreadID)
			}
			var list struct {
				Items []feishuItem `json:"items"`
			}
			if err := f.apiMethod(ctx, http.MethodGet, "/open-apis/im/v1/messages?"+q.Encode(), nil, &list); err != nil {
				return ActionResult{}, err
			}
			out := make([]feishuMessage, 0, len(list.Items))
			for _, it := range list.Items {
				out = append(out, it.view())
			}
			return ActionResult{Summary: fmt.Sprintf("%d latest message(s), newest first", len(out)), Data: rawJSON(out)}, nil
		},
		ActionEdit: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return done("edited message "+r.MessageID, f.apiMethod(ctx, http.MethodPut, "/open-apis/im/v1/messages/"+esc(r.MessageID),
				jsonBody(map[string]string{"msg_type": "text", "content": textContent(r.Text)}), nil))
		},
		ActionDelete: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return done("deleted message "+r.MessageID, f.apiMethod(ctx, http.MethodDelete, "/open-apis/im/v1/messages/"+esc(r.MessageID), nil, nil))
		},
		ActionPin: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return done("pinned message "+r.MessageID, f.apiMethod(ctx, http.MethodPost, "/open-apis/im/v1/pins",
				jsonBody(map[string]string{"message_id": r.MessageID}), nil))
		},
		ActionUnpin: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return done("unpinned message "+r.MessageID, f.apiMethod(ctx, http.MethodDelete, "/open-apis/im/v1/pins/"+esc(r.MessageID), nil, nil))
		},
		ActionListPins: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return get(ctx, "/open-apis/im/v1/pins?chat_id="+url.QueryEscape(r.ChatID)+"&page_size="+strconv.Itoa(min(r.limit(), 50)), "pinned messages of "+r.ChatID)
		},
		ActionThreadCreate: reply,
		ActionThreadReply:  reply,
		ActionMemberInfo: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return get(ctx, "/open-apis/contact/v3/users/"+esc(r.UserID)+"?user_id_type="+feishuUserIDType(r.UserID), "user "+r.UserID)
		},
		ActionChannelInfo: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return get(ctx, "/open-apis/im/v1/chats/"+esc(r.ChatID), "chat "+r.ChatID)
		},
		ActionChannelList: func(ctx context.Context, r ActionRequest) (ActionResult, error) {
			return get(ctx, "/open-apis/im/v1/chats?page_size="+strconv.Itoa(r.limit()), "chats the bot is in")
		},
	}
}

// feishuUserIDType picks user_id_type from the shape of a user id.
func feishuUserIDType(id string) string {
	switch t := receiveIDType(id); t {
	case "open_id", "union_id":
		return t
	}
	return "user_id"
}

// Actions implements Actor.
func (f *feishu) Actions() []string { return f.actions().names() }

// Act implements Actor.
func (f *feishu) Act(ctx context.Context, r ActionRequest) (ActionResult, error) {
	return f.actions().run(ctx, f, r, feishuHints)
}
