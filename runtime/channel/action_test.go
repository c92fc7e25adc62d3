package channel

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// actionCase is one action against a fake platform: the API call it must
// make (key), what that call must carry, and what the result must say.
type actionCase struct {
	req     ActionRequest
	key     string
	body    map[string]any // fields of the JSON or form body
	query   map[string]string
	summary string
	data    string // a substring of ActionResult.Data
}

// runActions runs each case's action on c and checks the request the
// platform got and the result.
func runActions(t *testing.T, api *fakeAPI, c Channel, body func(recorded) map[string]any, cases []actionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.req.Action, func(t *testing.T) {
			g := NewWithT(t)
			before := len(api.requests(tc.key))
			res, err := c.(Actor).Act(t.Context(), tc.req)
			g.Expect(err).NotTo(HaveOccurred())
			reqs := api.requests(tc.key)
			g.Expect(reqs).To(HaveLen(before+1), "one call of %s", tc.key)
			got := reqs[len(reqs)-1]
			b := body(got)
			for k, v := range tc.body {
				g.Expect(b).To(HaveKeyWithValue(k, v), "%s body", tc.key)
			}
			for k, v := range tc.query {
				g.Expect(got.Query).To(HaveKeyWithValue(k, v), "%s query", tc.key)
			}
			g.Expect(res.Summary).To(Equal(tc.summary))
			if tc.data != "" {
				g.Expect(string(res.Data)).To(ContainSubstring(tc.data))
				g.Expect(json.Valid(res.Data)).To(BeTrue())
			} else {
				g.Expect(res.Data).To(BeEmpty())
			}
		})
	}
}

// tgOK answers a Bot API method with result.
func tgOK(result any) func(recorded) canned {
	return func(recorded) canned { return canned{body: map[string]any{"ok": true, "result": result}} }
}

func TestTelegramActions(t *testing.T) {
	api := newFakeTelegram(t)
	for _, m := range []string{"setMessageReaction", "deleteMessage", "pinChatMessage", "unpinChatMessage"} {
		api.route(m, tgOK(true))
	}
	api.route("editMessageText", tgOK(map[string]any{"message_id": 42, "chat": map[string]any{"id": -100123, "type": "supergroup"}, "date": 1700000000, "text": "fixed"}))
	api.route("getChat", tgOK(map[string]any{"id": -100123, "type": "supergroup", "title": "Ops room", "is_forum": true,
		"pinned_message": map[string]any{"message_id": 7, "date": 1700000000, "chat": map[string]any{"id": -100123, "type": "supergroup"}, "text": "Runbook: restart the pod"}}))
	api.route("getChatMember", tgOK(map[string]any{"status": "administrator", "user": map[string]any{"id": 555, "is_bot": false, "first_name": "Ada"}}))
	api.route("createForumTopic", tgOK(map[string]any{"message_thread_id": 88, "name": "Incident 12", "icon_color": 7322096}))
	e := telegramEnv(t, api, "", Options{})
	c, err := e.m.Lookup(tenant, agentName, "telegram")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(c.(Actor).Actions()).To(Equal([]string{ActionReact, ActionEdit, ActionDelete, ActionPin, ActionUnpin,
		ActionListPins, ActionThreadCreate, ActionThreadReply, ActionMemberInfo, ActionChannelInfo}))

	chat := "-100123"
	runActions(t, api, c, recorded.JSON, []actionCase{
		{req: ActionRequest{Action: ActionReact, ChatID: chat, MessageID: "42", Emoji: "👍"}, key: "setMessageReaction",
			body:    map[string]any{"chat_id": chat, "message_id": 42.0, "reaction": []any{map[string]any{"type": "emoji", "emoji": "👍"}}},
			summary: "reacted 👍 to message 42"},
		{req: ActionRequest{Action: ActionEdit, ChatID: chat, MessageID: "42", Text: "fixed"}, key: "editMessageText",
			body: map[string]any{"chat_id": chat, "message_id": 42.0, "text": "fixed"}, summary: "edited message 42"},
		{req: ActionRequest{Action: ActionDelete, ChatID: chat, MessageID: "42"}, key: "deleteMessage",
			body: map[string]any{"chat_id": chat, "message_id": 42.0}, summary: "deleted message 42"},
		{req: ActionRequest{Action: ActionPin, ChatID: chat, MessageID: "7"}, key: "pinChatMessage",
			body: map[string]any{"chat_id": chat, "message_id": 7.0}, summary: "pinned message 7"},
		{req: ActionRequest{Action: ActionUnpin, ChatID: chat, MessageID: "7"}, key: "unpinChatMessage",
			body: map[string]any{"chat_id": chat, "message_id": 7.0}, summary: "unpinned message 7"},
		{req: ActionRequest{Action: ActionListPins, ChatID: chat}, key: "getChat", body: map[string]any{"chat_id": chat},
			summary: "the most recent pinned message (the Bot API shows only that one)", data: "Runbook: restart the pod"},
		{req: ActionRequest{Action: ActionThreadCreate, ChatID: chat, Name: "Incident 12"}, key: "createForumTopic",
			body: map[string]any{"chat_id": chat, "name": "Incident 12"}, summary: `created forum topic "Incident 12" (threadId 88)`},
		{req: ActionRequest{Action: ActionThreadReply, ChatID: chat, ThreadID: "88", Text: "on it"}, key: "sendMessage",
			body: map[string]any{"chat_id": chat, "message_thread_id": 88.0, "text": "on it"}, summary: "replied as message 101"},
		{req: ActionRequest{Action: ActionMemberInfo, ChatID: chat, UserID: "555"}, key: "getChatMember",
			body: map[string]any{"chat_id": chat, "user_id": 555.0}, summary: "telegram getChatMember", data: `"status":"administrator"`},
		{req: ActionRequest{Action: ActionChannelInfo, ChatID: chat}, key: "getChat", body: map[string]any{"chat_id": chat},
			summary: "telegram getChat", data: `"title":"Ops room"`},
	})

	t.Run("remove reaction", func(t *testing.T) {
		g := NewWithT(t)
		_, err := c.(Actor).Act(t.Context(), ActionRequest{Action: ActionReact, ChatID: chat, MessageID: "42", Emoji: "👍", Remove: true})
		g.Expect(err).NotTo(HaveOccurred())
		reqs := api.requests("setMessageReaction")
		g.Expect(reqs[len(reqs)-1].JSON()).To(HaveKeyWithValue("reaction", []any{}))
	})
	t.Run("platform refusal", func(t *testing.T) {
		g := NewWithT(t)
		api.failNext("editMessageText", canned{status: 400, body: map[string]any{"ok": false, "error_code": 400,
			"description": "Bad Request: message to edit not found"}})
		_, err := c.(Actor).Act(t.Context(), ActionRequest{Action: ActionEdit, ChatID: chat, MessageID: "9999", Text: "x"})
		g.Expect(err).To(MatchError(ContainSubstring("message to edit not found")))
	})
	t.Run("bad input", func(t *testing.T) {
		g := NewWithT(t)
		_, err := c.(Actor).Act(t.Context(), ActionRequest{Action: ActionPin, ChatID: chat, MessageID: "abc"})
		g.Expect(err).To(MatchError(`telegram message id "abc" is not a positive number`))
		_, err = c.(Actor).Act(t.Context(), ActionRequest{Action: ActionEdit, ChatID: chat})
		g.Expect(err).To(MatchError(`action edit on channel "telegram": missing messageId, message`))
		g.Expect(api.requests("pinChatMessage")).To(HaveLen(1), "nothing reached the platform")
	})
}

func TestSlackActions(t *testing.T) {
	api := newFakeSlack(t)
	ok := func(extra map[string]any) func(recorded) canned {
		return func(r recorded) canned {
			if r.Header.Get("Authorization") != "Bearer xoxb-test" && form(r).Get("token") != "xoxb-test" {
				return canned{body: map[string]any{"ok": false, "error": "invalid_auth"}}
			}
			b := map[string]any{"ok": true}
			for k, v := range extra {
				b[k] = v
			}
			return canned{body: b}
		}
	}
	msg := func(ts, user, text string) map[string]any {
		return map[string]any{"type": "message", "ts": ts, "user": user, "text": text}
	}
	for _, m := range []string{"reactions.add", "reactions.remove", "pins.add", "pins.remove"} {
		api.route(m, ok(nil))
	}
	api.route("reactions.get", ok(map[string]any{"type": "message", "channel": "C1", "message": map[string]any{"type": "message", "ts": "1700000000.000100",
		"text": "ship it", "reactions": []any{map[string]any{"name": "thumbsup", "count": 2, "users": []string{"U1", "U2"}}}}}))
	api.route("conversations.history", ok(map[string]any{"has_more": false, "messages": []any{msg("1700000000.000200", "U2", "deploy done"),
		msg("1700000000.000100", "U1", "ship it")}}))
	api.route("conversations.replies", ok(map[string]any{"has_more": false, "messages": []any{msg("1700000000.000100", "U1", "ship it"),
		msg("1700000000.000300", "U3", "in the thread")}}))
	api.route("chat.update", ok(map[string]any{"channel": "C1", "ts": "1700000000.000100", "text": "ship it now"}))
	api.route("chat.delete", ok(map[string]any{"channel": "C1", "ts": "1700000000.000100"}))
	api.route("pins.list", ok(map[string]any{"items": []any{map[string]any{"type": "message", "channel": "C1",
		"message": msg("1700000000.000100", "U1", "ship it")}}}))
	api.route("search.messages", ok(map[string]any{"query": "deploy", "messages": map[string]any{"total": 1,
		"matches": []any{map[string]any{"type": "message", "channel": map[string]any{"id": "C1", "name": "ops"}, "user": "U2",
			"ts": "1700000000.000200", "text": "deploy done", "permalink": "https://example.slack.com/archives/C1/p1700000000000200"}},
		"paging": map[string]any{"count": 20, "total": 1, "page": 1, "pages": 1}}}))
	api.route("users.info", ok(map[string]any{"user": map[string]any{"id": "U1", "name": "ada", "real_name": "Ada L", "tz": "Europe/London",
		"profile": map[string]any{"display_name": "ada", "title": "SRE"}}}))
	api.route("conversations.info", ok(map[string]any{"channel": map[string]any{"id": "C1", "name": "ops", "is_channel": true,
		"topic": map[string]any{"value": "on call"}, "purpose": map[string]any{"value": "operations"}, "num_members": 12}}))
	api.route("conversations.list", ok(map[string]any{"channels": []any{map[string]any{"id": "C1", "name": "ops", "is_channel": true},
		map[string]any{"id": "C2", "name": "random", "is_channel": true}}, "response_metadata": map[string]any{"next_cursor": ""}}))
	e := slackEnv(t, api)
	c, err := e.m.Lookup(tenant, agentName, "slack")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(c.(Actor).Actions()).To(Equal([]string{ActionReact, ActionReactions, ActionRead, ActionEdit, ActionDelete, ActionPin,
		ActionUnpin, ActionListPins, ActionThreadReply, ActionSearch, ActionMemberInfo, ActionChannelInfo, ActionChannelList}))

	ts := "1700000000.000100"
	fields := func(r recorded) map[string]any {
		out := map[string]any{}
		for k, v := range form(r) {
			out[k] = v[0]
		}
		for k, v := range r.Query {
			out[k] = v
		}
		return out
	}
	runActions(t, api, c, fields, []actionCase{
		{req: ActionRequest{Action: ActionReact, ChatID: "C1", MessageID: ts, Emoji: "thumbsup"}, key: "reactions.add",
			body: map[string]any{"channel": "C1", "timestamp": ts, "name": "thumbsup"}, summary: "reacted :thumbsup: to message " + ts},
		{req: ActionRequest{Action: ActionReactions, ChatID: "C1", MessageID: ts}, key: "reactions.get",
			body: map[string]any{"channel": "C1", "timestamp": ts}, summary: "1 reaction(s) on message " + ts, data: `"name":"thumbsup"`},
		{req: ActionRequest{Action: ActionRead, ChatID: "C1", Limit: 5}, key: "conversations.history",
			body: map[string]any{"channel": "C1", "limit": "5"}, summary: "2 latest message(s), newest first", data: `"text":"deploy done"`},
		{req: ActionRequest{Action: ActionRead, ChatID: "C1", ThreadID: ts}, key: "conversations.replies",
			body: map[string]any{"channel": "C1", "ts": ts}, summary: "2 message(s) of thread " + ts, data: `"text":"in the thread"`},
		{req: ActionRequest{Action: ActionEdit, ChatID: "C1", MessageID: ts, Text: "ship it now"}, key: "chat.update",
			body: map[string]any{"channel": "C1", "ts": ts, "text": "ship it now"}, summary: "edited message " + ts},
		{req: ActionRequest{Action: ActionDelete, ChatID: "C1", MessageID: ts}, key: "chat.delete",
			body: map[string]any{"channel": "C1", "ts": ts}, summary: "deleted message " + ts},
		{req: ActionRequest{Action: ActionPin, ChatID: "C1", MessageID: ts}, key: "pins.add",
			body: map[string]any{"channel": "C1", "timestamp": ts}, summary: "pinned message " + ts},
		{req: ActionRequest{Action: ActionUnpin, ChatID: "C1", MessageID: ts}, key: "pins.remove",
			body: map[string]any{"channel": "C1", "timestamp": ts}, summary: "unpinned message " + ts},
		{req: ActionRequest{Action: ActionListPins, ChatID: "C1"}, key: "pins.list",
			body: map[string]any{"channel": "C1"}, summary: "1 pinned message(s)", data: `"text":"ship it"`},
		{req: ActionRequest{Action: ActionThreadReply, ChatID: "C1", MessageID: ts, Text: "looking"}, key: "chat.postMessage",
			body: map[string]any{"channel": "C1", "thread_ts": ts, "text": "looking"}, summary: "replied in thread " + ts + " as message 1700000000.000001"},
		{req: ActionRequest{Action: ActionSearch, ChatID: "C1", Query: "deploy"}, key: "search.messages",
			body: map[string]any{"query": "deploy in:<#C1>", "sort": "timestamp"}, summary: "1 of 1 match(es)", data: `"permalink":"https://example.slack.com/archives/C1/p1700000000000200"`},
		{req: ActionRequest{Action: ActionMemberInfo, ChatID: "C1", UserID: "U1"}, key: "users.info",
			body: map[string]any{"user": "U1"}, summary: "slack user U1", data: `"title":"SRE"`},
		{req: ActionRequest{Action: ActionChannelInfo, ChatID: "C1"}, key: "conversations.info",
			body: map[string]any{"channel": "C1"}, summary: "slack channel C1", data: `"topic":"on call"`},
		{req: ActionRequest{Action: ActionChannelList}, key: "conversations.list",
			body: map[string]any{"exclude_archived": "true"}, summary: "2 channel(s)", data: `"name":"random"`},
	})

	t.Run("platform refusal", func(t *testing.T) {
		g := NewWithT(t)
		api.failNext("search.messages", canned{body: map[string]any{"ok": false, "error": "not_allowed_token_type"}})
		_, err := c.(Actor).Act(t.Context(), ActionRequest{Action: ActionSearch, Query: "x"})
		var se *SendError
		g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
		g.Expect(se.Code).To(Equal("not_allowed_token_type"))
	})
}

// newFakeFeishuActions is the Open API's message, reaction, pin, chat and
// user endpoints, routed on method and path, checking the bearer token.
func newFakeFeishuActions(t *testing.T) *fakeAPI {
	f := newFakeAPI(t, func(r *http.Request) string { return r.Method + " " + r.URL.Path })
	f.route("POST /open-apis/auth/v3/tenant_access_token/internal", func(recorded) canned {
		return canned{body: map[string]any{"code": 0, "msg": "ok", "tenant_access_token": "t-1", "expire": 7200}}
	})
	ok := func(data any) func(recorded) canned {
		return func(r recorded) canned {
			if r.Header.Get("Authorization") != "Bearer t-1" {
				return canned{status: 400, body: map[string]any{"code": 99991663, "msg": "Invalid access token for authorization"}}
			}
			b := map[string]any{"code": 0, "msg": "success"}
			if data != nil {
				b["data"] = data
			}
			return canned{body: b}
		}
	}
	item := func(id, sender, text string) map[string]any {
		c, _ := json.Marshal(map[string]string{"text": text})
		return map[string]any{"message_id": id, "msg_type": "text", "create_time": "1700000000000", "chat_id": "oc_1",
			"sender": map[string]any{"id": sender, "id_type": "open_id", "sender_type": "user"}, "body": map[string]any{"content": string(c)}}
	}
	const msgs = "/open-apis/im/v1/messages"
	f.route("POST "+msgs+"/om_1/reactions", ok(map[string]any{"reaction_id": "r_bot", "reaction_type": map[string]any{"emoji_type": "THUMBSUP"}}))
	f.route("GET "+msgs+"/om_1/reactions", ok(map[string]any{"has_more": false, "items": []any{
		map[string]any{"reaction_id": "r_user", "operator": map[string]any{"operator_id": "ou_1", "operator_type": "user"}, "reaction_type": map[string]any{"emoji_type": "THUMBSUP"}},
		map[string]any{"reaction_id": "r_bot", "operator": map[string]any{"operator_id": "cli_1", "operator_type": "app"}, "reaction_type": map[string]any{"emoji_type": "THUMBSUP"}},
	}}))
	f.route("DELETE "+msgs+"/om_1/reactions/r_bot", ok(map[string]any{"reaction_id": "r_bot"}))
	f.route("GET "+msgs, ok(map[string]any{"has_more": false, "items": []any{item("om_2", "ou_2", "deploy done"), item("om_1", "ou_1", "ship it")}}))
	f.route("PUT "+msgs+"/om_1", ok(map[string]any{"message_id": "om_1"}))
	f.route("DELETE "+msgs+"/om_1", ok(nil))
	f.route("POST /open-apis/im/v1/pins", ok(map[string]any{"pin": map[string]any{"message_id": "om_1", "chat_id": "oc_1"}}))
	f.route("DELETE /open-apis/im/v1/pins/om_1", ok(nil))
	f.route("GET /open-apis/im/v1/pins", ok(map[string]any{"has_more": false, "items": []any{map[string]any{"message_id": "om_1", "chat_id": "oc_1", "operator_id": "ou_1"}}}))
	f.route("POST "+msgs+"/om_1/reply", ok(map[string]any{"message_id": "om_9", "thread_id": "omt_1", "chat_id": "oc_1"}))
	f.route("GET /open-apis/contact/v3/users/ou_1", ok(map[string]any{"user": map[string]any{"open_id": "ou_1", "name": "Ada", "job_title": "SRE"}}))
	f.route("GET /open-apis/im/v1/chats/oc_1", ok(map[string]any{"name": "Ops room", "description": "operations", "chat_mode": "group", "user_count": "12"}))
	f.route("GET /open-apis/im/v1/chats", ok(map[string]any{"has_more": false, "items": []any{map[string]any{"chat_id": "oc_1", "name": "Ops room"},
		map[string]any{"chat_id": "oc_2", "name": "Random"}}}))
	return f
}

func TestFeishuActions(t *testing.T) {
	api := newFakeFeishuActions(t)
	e := feishuEnv(t, api, "")
	c, err := e.m.Lookup(tenant, agentName, "lark")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(c.(Actor).Actions()).To(Equal([]string{ActionReact, ActionReactions, ActionRead, ActionEdit, ActionDelete, ActionPin,
		ActionUnpin, ActionListPins, ActionThreadCreate, ActionThreadReply, ActionMemberInfo, ActionChannelInfo, ActionChannelList}))

	const msgs = "/open-apis/im/v1/messages"
	runActions(t, api, c, recorded.JSON, []actionCase{
		{req: ActionRequest{Action: ActionReact, ChatID: "oc_1", MessageID: "om_1", Emoji: "THUMBSUP"}, key: "POST " + msgs + "/om_1/reactions",
			body: map[string]any{"reaction_type": map[string]any{"emoji_type": "THUMBSUP"}}, summary: "reacted THUMBSUP to message om_1"},
		{req: ActionRequest{Action: ActionReact, ChatID: "oc_1", MessageID: "om_1", Emoji: "THUMBSUP", Remove: true}, key: "DELETE " + msgs + "/om_1/reactions/r_bot",
			summary: "removed the bot's THUMBSUP reaction from message om_1"},
		{req: ActionRequest{Action: ActionReactions, ChatID: "oc_1", MessageID: "om_1"}, key: "GET " + msgs + "/om_1/reactions",
			query: map[string]string{"page_size": "20"}, summary: "reactions on message om_1", data: `"operator_type":"user"`},
		{req: ActionRequest{Action: ActionRead, ChatID: "oc_1", Limit: 2}, key: "GET " + msgs,
			query:   map[string]string{"container_id_type": "chat", "container_id": "oc_1", "sort_type": "ByCreateTimeDesc", "page_size": "2"},
			summary: "2 latest message(s), newest first", data: `"text":"deploy done"`},
		{req: ActionRequest{Action: ActionEdit, ChatID: "oc_1", MessageID: "om_1", Text: "ship it now"}, key: "PUT " + msgs + "/om_1",
			body: map[string]any{"msg_type": "text", "content": `{"text":"ship it now"}`}, summary: "edited message om_1"},
		{req: ActionRequest{Action: ActionDelete, ChatID: "oc_1", MessageID: "om_1"}, key: "DELETE " + msgs + "/om_1", summary: "deleted message om_1"},
		{req: ActionRequest{Action: ActionPin, ChatID: "oc_1", MessageID: "om_1"}, key: "POST /open-apis/im/v1/pins",
			body: map[string]any{"message_id": "om_1"}, summary: "pinned message om_1"},
		{req: ActionRequest{Action: ActionUnpin, ChatID: "oc_1", MessageID: "om_1"}, key: "DELETE /open-apis/im/v1/pins/om_1", summary: "unpinned message om_1"},
		{req: ActionRequest{Action: ActionListPins, ChatID: "oc_1"}, key: "GET /open-apis/im/v1/pins",
			query: map[string]string{"chat_id": "oc_1"}, summary: "pinned messages of oc_1", data: `"message_id":"om_1"`},
		{req: ActionRequest{Action: ActionThreadCreate, ChatID: "oc_1", MessageID: "om_1", Text: "let's discuss"}, key: "POST " + msgs + "/om_1/reply",
			body: map[string]any{"reply_in_thread": true, "msg_type": "text", "content": `{"text":"let's discuss"}`}, summary: "replied in thread omt_1 as message om_9"},
		{req: ActionRequest{Action: ActionMemberInfo, ChatID: "oc_1", UserID: "ou_1"}, key: "GET /open-apis/contact/v3/users/ou_1",
			query: map[string]string{"user_id_type": "open_id"}, summary: "user ou_1", data: `"job_title":"SRE"`},
		{req: ActionRequest{Action: ActionChannelInfo, ChatID: "oc_1"}, key: "GET /open-apis/im/v1/chats/oc_1", summary: "chat oc_1", data: `"name":"Ops room"`},
		{req: ActionRequest{Action: ActionChannelList}, key: "GET /open-apis/im/v1/chats", query: map[string]string{"page_size": "20"},
			summary: "chats the bot is in", data: `"name":"Random"`},
	})
	// Removing a reaction looked the bot's own up and left the user's alone.
	NewWithT(t).Expect(api.requests("DELETE " + msgs + "/om_1/reactions/r_user")).To(BeEmpty())
	NewWithT(t).Expect(api.requests("GET " + msgs + "/om_1/reactions")[0].Query).To(HaveKeyWithValue("reaction_type", "THUMBSUP"))

	t.Run("platform refusal", func(t *testing.T) {
		g := NewWithT(t)
		api.failNext("DELETE "+msgs+"/om_1", canned{status: 400, body: map[string]any{"code": 230011, "msg": "The message is recalled."}})
		_, err := c.(Actor).Act(t.Context(), ActionRequest{Action: ActionDelete, ChatID: "oc_1", MessageID: "om_1"})
		g.Expect(err).To(MatchError(ContainSubstring("The message is recalled.")))
	})
}

// TestUnsupportedActions: an action a platform lacks is refused before any
// call, naming the channel, its type, the action and what it supports.
func TestUnsupportedActions(t *testing.T) {
	tg := newFakeTelegram(t)
	sl := newFakeSlack(t)
	fs := newFakeFeishuActions(t)
	e := newEnv(t, Options{BaseURLs: BaseURLs{Telegram: tg.URL, Slack: sl.URL + "/api/", Feishu: fs.URL}}, []picobotv1alpha1.Channel{
		ch(TypeTelegram, "tg", "tg"), ch(TypeSlack, "sl", "sl"), ch(TypeFeishu, "lark", "fs"), ch(TypeWebhook, "tickets", "wh"),
	}, map[string]map[string]string{"tg": {KeyTelegramToken: tgToken}, "sl": {KeySlackBotToken: "xoxb-test", KeySlackSigningSecret: slackSecret},
		"fs": {KeyFeishuAppID: "cli_1", KeyFeishuAppSecret: "app-secret", KeyFeishuVerifyToken: fsVerifyToken},
		"wh": {KeyWebhookSigningSecret: "s"}})
	for _, tc := range []struct {
		channel, action, want string
	}{
		{"tg", ActionRead, `channel "tg" (telegram) does not support action "read": a Telegram bot cannot read a chat's history`},
		{"tg", ActionSearch, `channel "tg" (telegram) does not support action "search": the Bot API has no search; it supports send, react, edit`},
		{"tg", ActionChannelList, `channel "tg" (telegram) does not support action "channel-list"`},
		{"sl", ActionThreadCreate, `channel "sl" (slack) does not support action "thread-create": a Slack thread starts when you reply to a message`},
		{"sl", ActionThreadList, `channel "sl" (slack) does not support action "thread-list"`},
		{"lark", ActionSearch, `channel "lark" (feishu) does not support action "search"`},
		{"lark", ActionThreadList, `channel "lark" (feishu) does not support action "thread-list"`},
	} {
		t.Run(tc.channel+" "+tc.action, func(t *testing.T) {
			g := NewWithT(t)
			c, err := e.m.Lookup(tenant, agentName, tc.channel)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = c.(Actor).Act(t.Context(), ActionRequest{Action: tc.action, ChatID: "1", Query: "q"})
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(errors.Is(err, ErrUnsupportedAction)).To(BeTrue())
		})
	}
	wh, err := e.m.Lookup(tenant, agentName, "tickets")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_, isActor := wh.(Actor)
	NewWithT(t).Expect(isActor).To(BeFalse(), "the generic webhook only sends")
	NewWithT(t).Expect(Unsupported(wh, ActionReact, "")).To(MatchError(`channel "tickets" (webhook) does not support action "react"; it supports send`))
	tgc, _ := e.m.Lookup(tenant, agentName, "tg")
	_, err = tgc.(Actor).Act(t.Context(), ActionRequest{Action: "poll", ChatID: "1"})
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring(`unknown action "poll"; actions are send, react`)))
	NewWithT(t).Expect(tg.requests("")).To(BeEmpty(), "no refused action reached a platform")
	NewWithT(t).Expect(sl.requests("")).To(BeEmpty())
	NewWithT(t).Expect(fs.requests("")).To(BeEmpty())
}
