package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Names of the listing tools (OpenClaw's session tools of the same names).
const (
	NameList    = "sessions_list"
	NameHistory = "sessions_history"
)

// Limits of the listing tools.
const (
	defaultListLimit    = 20
	maxListLimit        = 100
	maxMessageLimit     = 20
	defaultHistoryLimit = 20
	maxHistoryLimit     = 200
	// maxMessageChars shortens each message a listing shows; the model
	// reads one whole with sessions_history.
	maxMessageChars = 2000
)

// ListStore is what sessions_list and sessions_history read: sessions and
// messages of the caller's tenant (from ctx: no other tenant's can be named).
type ListStore interface {
	Store
	ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error)
	LoadMessages(ctx context.Context, sessionID string, o store.LoadOptions) ([]store.Message, error)
}

// ListArgs are the arguments of sessions_list.
type ListArgs struct {
	Kinds         []string `json:"kinds,omitempty" jsonschema:"channels to list (web, telegram, feishu, slack, webhook, cron, delegate, ...); default all"`
	Limit         int      `json:"limit,omitempty" jsonschema:"most sessions to list, 1-100 (default 20)"`
	ActiveMinutes int      `json:"activeMinutes,omitempty" jsonschema:"only sessions with a message in the last N minutes"`
	MessageLimit  int      `json:"messageLimit,omitempty" jsonschema:"0 = none; N > 0 adds each session's last N user and assistant messages (at most 20)"`
}

// HistoryArgs are the arguments of sessions_history.
type HistoryArgs struct {
	SessionKey   string `json:"sessionKey,omitempty" jsonschema:"the session to read (default: the current one)"`
	SessionID    string `json:"sessionId,omitempty" jsonschema:"same as sessionKey"`
	Limit        int    `json:"limit,omitempty" jsonschema:"the last N messages, 1-200 (default 20)"`
	IncludeTools bool   `json:"includeTools,omitempty" jsonschema:"also show tool calls and tool results (default: only user and assistant text)"`
}

// Listed is one session of sessions_list's answer.
type Listed struct {
	Session    string       `json:"session"`
	Kind       string       `json:"kind"`
	Chat       string       `json:"chat"`
	Title      string       `json:"title"`
	Current    bool         `json:"current"`
	LastActive time.Time    `json:"last_active"`
	Messages   []ShownEntry `json:"messages,omitempty"`
}

// ShownEntry is one message as the listing tools show it.
type ShownEntry struct {
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Error   bool   `json:"error,omitempty"`
	At      string `json:"at"`
}

// NewList returns sessions_list over st: the sessions of the calling agent
// in its tenant, most recently active first, clock telling the time.
func NewList(st ListStore, clock func() time.Time) tool.Tool {
	return tool.New(NameList, "List this agent's sessions (conversations on every channel), most recently active first, optionally with their last messages",
		func(ctx context.Context, env tool.Env, a ListArgs) (tool.Result, error) {
			return list(ctx, st, clock, env, a)
		},
		tool.ReadOnly())
}

// NewHistory returns sessions_history over st.
func NewHistory(st ListStore) tool.Tool {
	return tool.New(NameHistory, "Read the transcript of one of this agent's sessions (default: this one): its last messages",
		func(ctx context.Context, env tool.Env, a HistoryArgs) (tool.Result, error) {
			return history(ctx, st, env, a)
		},
		tool.ReadOnly())
}

func list(ctx context.Context, st ListStore, clock func() time.Time, env tool.Env, a ListArgs) (tool.Result, error) {
	switch {
	case a.Limit < 0 || a.Limit > maxListLimit:
		return tool.Errorf("error: limit must be 1-%d (default %d), got %d", maxListLimit, defaultListLimit, a.Limit), nil
	case a.ActiveMinutes < 0:
		return tool.Errorf("error: activeMinutes must be positive (or 0 for any), got %d", a.ActiveMinutes), nil
	case a.MessageLimit < 0 || a.MessageLimit > maxMessageLimit:
		return tool.Errorf("error: messageLimit must be 0-%d, got %d", maxMessageLimit, a.MessageLimit), nil
	}
	limit := a.Limit
	if limit == 0 {
		limit = defaultListLimit
	}
	kinds := map[string]bool{}
	for _, k := range a.Kinds {
		if k = strings.TrimSpace(strings.ToLower(k)); k != "" {
			kinds[k] = true
		}
	}
	// Newest first, so the kinds and activeMinutes filters keep a prefix;
	// ask for the most when filtering by kind.
	ask := limit
	if len(kinds) > 0 {
		ask = maxListLimit
	}
	all, err := st.ListSessions(ctx, store.SessionFilter{Agent: env.Agent, Limit: ask})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to list the sessions of agent %s: %w", env.Agent, err)
	}
	var since time.Time
	if a.ActiveMinutes > 0 {
		since = clock().Add(-time.Duration(a.ActiveMinutes) * time.Minute)
	}
	out := []Listed{}
	for _, s := range all {
		if len(out) == limit || (!since.IsZero() && s.LastMessageAt.Before(since)) {
			break
		}
		if len(kinds) > 0 && !kinds[s.Channel] {
			continue
		}
		l := Listed{Session: s.ID, Kind: s.Channel, Chat: s.ChatID, Title: s.Title, Current: s.ID == env.SessionID, LastActive: s.LastMessageAt.UTC()}
		if a.MessageLimit > 0 {
			// Read more than asked: tool messages are left out.
			msgs, err := st.LoadMessages(ctx, s.ID, store.LoadOptions{Last: a.MessageLimit * 4})
			if err != nil {
				return tool.Result{}, fmt.Errorf("failed to load the messages of session %q: %w", s.ID, err)
			}
			l.Messages = shown(msgs, false, a.MessageLimit, maxMessageChars)
		}
		out = append(out, l)
	}
	return jsonResult(map[string]any{"sessions": out, "count": len(out)})
}

func history(ctx context.Context, st ListStore, env tool.Env, a HistoryArgs) (tool.Result, error) {
	if a.Limit < 0 || a.Limit > maxHistoryLimit {
		return tool.Errorf("error: limit must be 1-%d (default %d), got %d", maxHistoryLimit, defaultHistoryLimit, a.Limit), nil
	}
	limit := a.Limit
	if limit == 0 {
		limit = defaultHistoryLimit
	}
	key := strings.TrimSpace(a.SessionKey)
	if key == "" {
		key = strings.TrimSpace(a.SessionID)
	}
	if key == "" {
		key = env.SessionID
	}
	if key == "" {
		return tool.Errorf("error: this call belongs to no session; name one with sessionKey (sessions_list shows them)"), nil
	}
	s, err := st.GetSession(ctx, key)
	// Another agent's session reads as missing, like another tenant's.
	if errors.Is(err, store.ErrNotFound) || (err == nil && (s.Agent != env.Agent || s.DeletedAt != nil)) {
		return tool.Errorf("error: no session %q of agent %s (sessions_list shows them)", key, env.Agent), nil
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to get session %q: %w", key, err)
	}
	load := limit
	if !a.IncludeTools {
		load = limit * 4
	}
	msgs, err := st.LoadMessages(ctx, key, store.LoadOptions{Last: load})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to load the messages of session %q: %w", key, err)
	}
	return jsonResult(map[string]any{"session": s.ID, "title": s.Title, "messages": shown(msgs, a.IncludeTools, limit, 0)})
}

// shown keeps the last n messages worth showing, oldest first: user and
// assistant text, and with tools their calls and results; each shortened to
// maxChars when that is set.
func shown(msgs []store.Message, tools bool, n, maxChars int) []ShownEntry {
	out := []ShownEntry{}
	for _, m := range slices.Backward(msgs) {
		if len(out) == n {
			break
		}
		at := m.CreatedAt.UTC().Format(time.RFC3339)
		switch {
		case m.Role == llm.RoleTool:
			if tools {
				out = append(out, ShownEntry{Role: "tool", Tool: m.Name, Content: shorten(m.Content, maxChars), Error: m.IsError, At: at})
			}
		case (m.Role == llm.RoleUser || m.Role == llm.RoleAssistant) && len(m.ToolCalls) > 0:
			if tools {
				var b strings.Builder
				for _, c := range m.ToolCalls {
					fmt.Fprintf(&b, "%s %s\n", c.Name, c.Arguments)
				}
				out = append(out, ShownEntry{Role: "tool_call", Content: shorten(strings.TrimSpace(m.Content+"\n"+b.String()), maxChars), At: at})
			} else if strings.TrimSpace(m.Content) != "" {
				out = append(out, ShownEntry{Role: string(m.Role), Content: shorten(m.Content, maxChars), At: at})
			}
		case m.Role == llm.RoleUser || m.Role == llm.RoleAssistant:
			out = append(out, ShownEntry{Role: string(m.Role), Content: shorten(m.Content, maxChars), At: at})
		}
	}
	slices.Reverse(out)
	return out
}

func shorten(s string, maxChars int) string {
	if maxChars <= 0 || len(s) <= maxChars {
		return s
	}
	for maxChars > 0 && !utf8.RuneStart(s[maxChars]) {
		maxChars-- // cut between characters
	}
	return s[:maxChars] + " …"
}

func jsonResult(v any) (tool.Result, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode the answer: %w", err)
	}
	return tool.Text(string(b)), nil
}
