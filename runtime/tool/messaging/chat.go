package messaging

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Limits of chat_manager.
const (
	defaultCount = 20
	maxCount     = 100
	// sessionScan bounds how many sessions list_sessions and list_channels read.
	sessionScan = 1000
	// chatsPerChannel is how many recent chats list_channels names per channel.
	chatsPerChannel = 5
	// Long message texts are cut in listings.
	maxMessageRunes = 500
	maxToolRunes    = 200
)

// ChatArgs are the arguments of chat_manager.
type ChatArgs struct {
	Action     string `json:"action"`
	SessionID  string `json:"session_id,omitempty" jsonschema:"list_messages: the session"`
	Count      int    `json:"count,omitempty" jsonschema:"how many (default 20)"`
	Offset     int    `json:"offset,omitempty" jsonschema:"skip the N newest, to page back"`
	BeforeTime int64  `json:"before_time,omitempty" jsonschema:"only before this Unix time (s)"`
	AfterTime  int64  `json:"after_time,omitempty" jsonschema:"only after this Unix time (s)"`
}

const chatDescription = "List your sessions (list_sessions), the channels and chats you can send to (list_channels), " +
	"or a session's messages (list_messages, needs session_id)."

// NewChatManager returns chat_manager for one agent.
func NewChatManager(cfg toolConfig) tool.Tool {
	return tool.New("chat_manager", chatDescription, cfg.chat, tool.ReadOnly(),
		tool.Enum("action", "list_sessions", "list_channels", "list_messages"),
		tool.Range("count", tool.Bound(1), tool.Bound(maxCount)),
		tool.Range("offset", tool.Bound(0), nil),
		tool.Range("before_time", tool.Bound(0), nil),
		tool.Range("after_time", tool.Bound(0), nil))
}

func (c toolConfig) chat(ctx context.Context, env tool.Env, a ChatArgs) (tool.Result, error) {
	if a.Count == 0 {
		a.Count = defaultCount
	}
	if a.BeforeTime > 0 && a.AfterTime > 0 && a.AfterTime >= a.BeforeTime {
		return tool.Errorf("error: after_time (%d) must be before before_time (%d).", a.AfterTime, a.BeforeTime), nil
	}
	agent := env.Agent
	if agent == "" {
		agent = c.agent
	}
	switch a.Action {
	case "list_sessions":
		return c.listSessions(ctx, env, agent, a)
	case "list_channels":
		return c.listChannels(ctx, agent)
	case "list_messages":
		return c.listMessages(ctx, agent, a)
	}
	return tool.Errorf("error: unknown action %q", a.Action), nil
}

// ownSessions returns the agent's sessions, newest activity first.
func (c toolConfig) ownSessions(ctx context.Context, agent string) ([]store.Session, error) {
	all, err := c.store.ListSessions(ctx, store.SessionFilter{Limit: sessionScan})
	if err != nil {
		return nil, fmt.Errorf("failed to list sessions: %w", err)
	}
	out := all[:0]
	for _, s := range all {
		if s.Agent == agent || s.Agent == "" {
			out = append(out, s)
		}
	}
	return out, nil
}

func (c toolConfig) listSessions(ctx context.Context, env tool.Env, agent string, a ChatArgs) (tool.Result, error) {
	all, err := c.ownSessions(ctx, agent)
	if err != nil {
		return tool.Result{}, err
	}
	var sel []store.Session
	for _, s := range all {
		if inWindow(s.LastMessageAt, a) {
			sel = append(sel, s)
		}
	}
	total := len(sel)
	sel = page(sel, a.Offset, a.Count)
	if len(sel) == 0 {
		return tool.Text(fmt.Sprintf("No sessions (of %d matching).", total)), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Sessions %d-%d of %d, latest activity first:\n", a.Offset+1, a.Offset+len(sel), total)
	for _, s := range sel {
		fmt.Fprintf(&b, "- %s %q last %s", s.ID, s.Title, stamp(s.LastMessageAt))
		if s.ID == env.SessionID {
			b.WriteString(" (this session)")
		}
		if s.ArchivedAt != nil {
			b.WriteString(" (archived)")
		}
		b.WriteByte('\n')
	}
	return tool.Text(strings.TrimRight(b.String(), "\n")), nil
}

func (c toolConfig) listChannels(ctx context.Context, agent string) (tool.Result, error) {
	sessions, err := c.ownSessions(ctx, agent)
	if err != nil {
		return tool.Result{}, err
	}
	chats := map[string][]string{}
	clientChannel := map[string]bool{}
	for _, s := range sessions { // newest first
		client, seen := clientChannel[s.Channel]
		if !seen {
			client = agentKeyed(s.Channel) && !c.platformChannel(ctx, s.Channel)
			clientChannel[s.Channel] = client
		}
		// A client's chat is keyed "<agent>/<chat_id>"; one keyed otherwise
		// is an orphan no client can open (sent to before send_message
		// resolved the bare form), and naming it would invite the bare
		// form, which now means the agent's own chat.
		if client && !strings.HasPrefix(s.ChatID, agent+"/") {
			continue
		}
		cs := chats[s.Channel]
		if len(cs) < chatsPerChannel && !contains(cs, s.ChatID) {
			chats[s.Channel] = append(cs, s.ChatID)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Channels (target: <channel>:<chat_id>[:<dialog_id>]; web:px-art means your web chat %s/px-art):\n", agent)
	listed := map[string]bool{}
	for _, st := range c.channels(ctx) {
		listed[st.Name] = true
		state := "ready"
		if !st.Ready {
			state = "NOT ready: " + st.Message
		}
		fmt.Fprintf(&b, "- %s (%s, %s)", st.Name, st.Type, state)
		writeChats(&b, chats[st.Name])
	}
	// Chats of gateway clients that keep a connection (web, terminal) can
	// be sent to also when the spec does not name their channel; OpenAI
	// clients and scheduled runs cannot (the dispatcher has no way to them).
	var others []string
	for ch := range chats {
		if !listed[ch] && slices.Contains(protocol.PushChannels(), ch) {
			others = append(others, ch)
		}
	}
	sort.Strings(others)
	for _, ch := range others {
		fmt.Fprintf(&b, "- %s (gateway clients)", ch)
		writeChats(&b, chats[ch])
	}
	if len(listed) == 0 && len(others) == 0 {
		b.WriteString("- none: this agent has no channels and no chats yet\n")
	}
	return tool.Text(strings.TrimRight(b.String(), "\n")), nil
}

func writeChats(b *strings.Builder, chats []string) {
	if len(chats) > 0 {
		b.WriteString(" recent chats: " + strings.Join(chats, ", "))
	}
	b.WriteByte('\n')
}

func (c toolConfig) listMessages(ctx context.Context, agent string, a ChatArgs) (tool.Result, error) {
	if a.SessionID == "" {
		return tool.Errorf("error: list_messages needs session_id; list_sessions shows them."), nil
	}
	s, err := c.store.GetSession(ctx, a.SessionID)
	if errors.Is(err, store.ErrNotFound) || err == nil && s.Agent != agent && s.Agent != "" {
		return tool.Errorf("error: no session %q; list_sessions shows yours.", a.SessionID), nil
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to read session %q: %w", a.SessionID, err)
	}
	opts := store.LoadOptions{}
	if a.AfterTime > 0 {
		opts.Since = time.Unix(a.AfterTime, 0)
	}
	if a.BeforeTime == 0 && a.AfterTime == 0 {
		opts.Last = a.Offset + a.Count
	}
	msgs, err := c.store.LoadMessages(ctx, s.ID, opts)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to load messages of session %q: %w", s.ID, err)
	}
	var sel []store.Message
	for _, m := range msgs {
		if inWindow(m.CreatedAt, a) {
			sel = append(sel, m)
		}
	}
	// Newest first for paging, shown oldest first.
	for i, j := 0, len(sel)-1; i < j; i, j = i+1, j-1 {
		sel[i], sel[j] = sel[j], sel[i]
	}
	sel = page(sel, a.Offset, a.Count)
	for i, j := 0, len(sel)-1; i < j; i, j = i+1, j-1 {
		sel[i], sel[j] = sel[j], sel[i]
	}
	total, err := c.store.CountMessages(ctx, s.ID)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to count messages of session %q: %w", s.ID, err)
	}
	if len(sel) == 0 {
		return tool.Text(fmt.Sprintf("No messages selected in session %s (%d in total).", s.ID, total)), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s) of session %s (%d in total), oldest first:\n", len(sel), s.ID, total)
	for _, m := range sel {
		fmt.Fprintf(&b, "[%s] ", stamp(m.CreatedAt))
		switch {
		case m.Role == llm.RoleTool:
			status := ""
			if m.IsError {
				status = " (error)"
			}
			fmt.Fprintf(&b, "tool %s%s: %s", m.Name, status, cut(m.Content, maxToolRunes))
		case len(m.ToolCalls) > 0:
			names := make([]string, len(m.ToolCalls))
			for i, tc := range m.ToolCalls {
				names[i] = tc.Name
			}
			fmt.Fprintf(&b, "%s: %s[called %s]", m.Role, prefix(cut(m.Content, maxMessageRunes)), strings.Join(names, ", "))
		default:
			fmt.Fprintf(&b, "%s: %s", m.Role, cut(m.Content, maxMessageRunes))
		}
		b.WriteByte('\n')
	}
	return tool.Text(strings.TrimRight(b.String(), "\n")), nil
}

// inWindow applies after_time/before_time (Unix seconds, exclusive).
func inWindow(t time.Time, a ChatArgs) bool {
	if a.AfterTime > 0 && !t.After(time.Unix(a.AfterTime, 0)) {
		return false
	}
	if a.BeforeTime > 0 && !t.Before(time.Unix(a.BeforeTime, 0)) {
		return false
	}
	return true
}

func page[T any](s []T, offset, count int) []T {
	if offset >= len(s) {
		return nil
	}
	s = s[offset:]
	if len(s) > count {
		s = s[:count]
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// cut shortens s to n runes on one line.
func cut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

func prefix(s string) string {
	if s == "" {
		return ""
	}
	return s + " "
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
