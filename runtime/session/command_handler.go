package session

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// command handles a slash command. Commands act on the chat's current dialog;
// /stop does not take the session lock, so it can interrupt a running turn.
func (m *Manager) command(ctx context.Context, in Inbound, cmd Command) (Reply, error) {
	reply := func(id ID, format string, args ...any) (Reply, error) {
		return Reply{SessionID: id.String(), Command: cmd.Name, Text: fmt.Sprintf(format, args...)}, nil
	}
	// refuse answers a command that did not do what was asked (a usage
	// error, an unknown dialog): clients exit or show it as a failure.
	refuse := func(id *ID, format string, args ...any) (Reply, error) {
		r := Reply{Command: cmd.Name, Text: fmt.Sprintf(format, args...), Failed: true}
		if id != nil {
			r.SessionID = id.String()
		}
		return r, nil
	}
	if cmd.Unknown {
		return refuse(nil, "Unknown command /%s.\n%s", cmd.Name, HelpText())
	}
	switch cmd.Name {
	case "help":
		return Reply{Command: cmd.Name, Text: HelpText()}, nil
	case "health":
		if m.cfg.Health == nil {
			return refuse(nil, "No health service runs here.")
		}
		return Reply{Command: cmd.Name, Text: m.cfg.Health(ctx)}, nil
	case "new":
		id, err := m.Create(ctx, in.Channel, in.ChatID)
		if err != nil {
			return Reply{}, err
		}
		return reply(id, "Started a new conversation (%s).", id.DialogID)
	case "sessions":
		text, err := m.sessionsText(ctx, in)
		if err != nil {
			return Reply{}, err
		}
		return Reply{Command: cmd.Name, Text: text}, nil
	case "switch":
		if cmd.Args == "" {
			return refuse(nil, "Usage: /switch <dialog_id> (see /sessions)")
		}
		s, err := m.Switch(ctx, in.Channel, in.ChatID, cmd.Args)
		if err != nil {
			return refuse(nil, "%v", err)
		}
		return Reply{SessionID: s.ID, Command: cmd.Name, Text: fmt.Sprintf("Switched to %s: %s", s.DialogID, s.Title)}, nil
	case "stop":
		id, err := m.Resolve(ctx, in.Channel, in.ChatID)
		if err != nil {
			return Reply{}, err
		}
		if m.Stop(id.String()) {
			return reply(id, "Stopped.")
		}
		return reply(id, "Nothing is running.")
	}

	id, err := m.Resolve(ctx, in.Channel, in.ChatID)
	if err != nil {
		return Reply{}, err
	}
	unlock := m.lock(id.String())
	defer unlock()
	switch cmd.Name {
	case "rename":
		if err := m.Rename(ctx, id, cmd.Args); err != nil {
			return refuse(&id, "Usage: /rename <title> (%v)", err)
		}
		return reply(id, "Renamed to %q.", strings.TrimSpace(cmd.Args))
	case "delete":
		if err := m.Delete(ctx, id); err != nil {
			return Reply{}, err
		}
		return reply(id, "Deleted conversation %s.", id.DialogID)
	case "info":
		text, err := m.infoText(ctx, id)
		if err != nil {
			return Reply{}, err
		}
		return reply(id, "%s", text)
	case "compact":
		if m.generation().Compressor == nil {
			return reply(id, "Context compression is not configured for this agent.")
		}
		done, err := m.compact(ctx, id)
		if err != nil {
			return Reply{}, err
		}
		if !done {
			return reply(id, "Nothing to compress yet: %s has no messages.", id.DialogID)
		}
		return reply(id, "Compressed the context of %s; earlier details stay reachable through timeline memory.", id.DialogID)
	case "dump":
		return m.dump(ctx, id, reply)
	case "mcp":
		mcpStatus := m.generation().MCPStatus
		if mcpStatus == nil {
			return reply(id, "No MCP servers configured.")
		}
		return reply(id, "%s", mcpStatus())
	}
	return Reply{}, fmt.Errorf("unhandled command /%s", cmd.Name)
}

// sessionsText lists the chat's dialogs for /sessions, the current one
// marked.
func (m *Manager) sessionsText(ctx context.Context, in Inbound) (string, error) {
	cur, _ := m.cfg.Store.CurrentDialog(ctx, in.Channel, in.ChatID)
	list, err := m.List(ctx, in.Channel, in.ChatID)
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "No conversations yet.", nil
	}
	var b strings.Builder
	b.WriteString("Recent conversations:\n")
	for _, s := range list {
		mark := " "
		if s.DialogID == cur {
			mark = "*"
		}
		fmt.Fprintf(&b, "%s %s  %s  (%s)\n", mark, s.DialogID, s.Title, s.LastMessageAt.UTC().Format(time.DateTime))
	}
	b.WriteString("Switch with /switch <dialog_id>.")
	return b.String(), nil
}

// infoText describes the session for /info.
func (m *Manager) infoText(ctx context.Context, id ID) (string, error) {
	s, err := m.cfg.Store.GetSession(ctx, id.String())
	if err != nil {
		return "", err
	}
	n, err := m.cfg.Store.CountMessages(ctx, id.String())
	if err != nil {
		return "", err
	}
	compressed := "never"
	if s.LastCompressedAt != nil {
		compressed = s.LastCompressedAt.UTC().Format(time.DateTime)
	}
	return fmt.Sprintf("Session %s\nTitle: %s\nAgent: %s\nMessages: %d\nCreated: %s\nLast active: %s\nCompressed: %s",
		s.ID, s.Title, s.Agent, n, s.CreatedAt.UTC().Format(time.DateTime), s.LastMessageAt.UTC().Format(time.DateTime), compressed), nil
}

// compact compresses the session's history now (/compact), under its lock.
// compact compresses the dialog's history now; false when it has none.
func (m *Manager) compact(ctx context.Context, id ID) (bool, error) {
	history, err := m.History(ctx, id)
	if err != nil || len(history) == 0 {
		return false, err
	}
	g := m.generation()
	if _, _, err := m.compress(ctx, g, id, g.System, history, true); err != nil {
		return false, err
	}
	return true, m.markCompressed(ctx, id.String(), m.cfg.Clock.Now())
}

// dump saves the conversation as a markdown artifact.
func (m *Manager) dump(ctx context.Context, id ID, reply func(ID, string, ...any) (Reply, error)) (Reply, error) {
	if m.cfg.Artifacts == nil {
		return reply(id, "/dump needs an artifact store, which this runtime does not have.")
	}
	s, err := m.cfg.Store.GetSession(ctx, id.String())
	if err != nil {
		return Reply{}, err
	}
	msgs, err := m.cfg.Store.LoadMessages(ctx, id.String(), store.LoadOptions{})
	if err != nil {
		return Reply{}, err
	}
	md := Transcript(s, msgs, m.cfg.Clock.Now())
	a, err := m.cfg.Artifacts.Save(ctx, id.String(), id.DialogID+".md", "text/markdown; charset=utf-8", []byte(md))
	if err != nil {
		return Reply{}, err
	}
	where := a.ID
	if m.cfg.ArtifactURL != nil {
		where = m.cfg.ArtifactURL(a)
	}
	return reply(id, "Saved %d messages as markdown: [%s](%s)", len(msgs), a.Name, where)
}

// Transcript renders a conversation as markdown: user and assistant turns,
// tool calls and results folded in <details>.
func Transcript(s store.Session, msgs []store.Message, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nSession `%s` · agent %s · exported %s\n\n", s.Title, s.ID, s.Agent, now.UTC().Format(time.RFC3339))
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			fmt.Fprintf(&b, "**User:** %s\n\n", m.Content)
		case llm.RoleTool:
			status := "result"
			if m.IsError {
				status = "error"
			}
			fmt.Fprintf(&b, "<details><summary>%s %s</summary>\n\n```\n%s\n```\n</details>\n\n", m.Name, status, m.Content)
		default:
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(&b, "_calls `%s` with `%s`_\n\n", tc.Name, tc.Arguments)
			}
			if m.Content != "" {
				fmt.Fprintf(&b, "**Assistant:** %s\n\n", m.Content)
			}
		}
	}
	return b.String()
}
