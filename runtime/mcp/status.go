package mcp

import (
	"fmt"
	"strings"
)

// ServerStatus is what /mcp reports about one server.
type ServerStatus struct {
	Name      string
	Transport string
	// Connected is true while a session is live.
	Connected bool
	// Error says why the server is not connected ("" when it is, or before
	// Connect).
	Error string
	// Tools are the registered names (mcp_<server>_<tool>) of the server's
	// tools, the names the model and tool policies use.
	Tools []string
	// ToolNames maps a registered name to the server's own name where the two
	// differ beyond the prefix, since tools[] settings use the server's name.
	ToolNames map[string]string
}

// Status reports every configured server, in configuration order.
func (m *Manager) Status() []ServerStatus {
	m.mu.Lock()
	tools := m.tools
	m.mu.Unlock()
	out := make([]ServerStatus, 0, len(m.servers))
	for _, s := range m.servers {
		s.mu.Lock()
		st := ServerStatus{
			Name:      s.spec.Name,
			Transport: string(s.spec.Transport),
			Connected: s.conn != nil,
			Error:     s.err,
		}
		s.mu.Unlock()
		for _, t := range tools {
			if t.srv != s {
				continue
			}
			st.Tools = append(st.Tools, t.name)
			if t.name != "mcp_"+sanitize(s.spec.Name)+"_"+t.original {
				if st.ToolNames == nil {
					st.ToolNames = map[string]string{}
				}
				st.ToolNames[t.name] = t.original
			}
		}
		out = append(out, st)
	}
	return out
}

// StatusText is the reply to the /mcp command: one block per server with its
// state and tools.
func (m *Manager) StatusText() string {
	statuses := m.Status()
	if len(statuses) == 0 {
		return "No MCP servers configured."
	}
	connected := 0
	for _, st := range statuses {
		if st.Connected {
			connected++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "MCP servers: %d of %d connected.\n", connected, len(statuses))
	for _, st := range statuses {
		b.WriteString("\n")
		switch {
		case st.Connected:
			fmt.Fprintf(&b, "%s (%s): connected, %s\n", st.Name, st.Transport, plural(len(st.Tools), "tool"))
		case st.Error == "":
			fmt.Fprintf(&b, "%s (%s): not connected yet\n", st.Name, st.Transport)
		case len(st.Tools) > 0:
			// It was up once: its tools stay registered and the next call
			// reconnects.
			fmt.Fprintf(&b, "%s (%s): %s; reconnects on the next call\n", st.Name, st.Transport, st.Error)
		default:
			fmt.Fprintf(&b, "%s (%s): failed: %s\n", st.Name, st.Transport, st.Error)
		}
		for _, name := range st.Tools {
			if orig, ok := st.ToolNames[name]; ok {
				fmt.Fprintf(&b, "  - %s (%s)\n", name, orig)
			} else {
				fmt.Fprintf(&b, "  - %s\n", name)
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
