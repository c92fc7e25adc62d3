package mcp

import (
	"context"
	"encoding/json"

	"github.com/picobot/picobot/runtime/tool"
)

// Test hooks into the unexported helpers.
var (
	ToolName      = toolName
	UniqueName    = uniqueName
	ObjectSchema  = objectSchema
	ConvertResult = convertResult
)

// ProcessIDs returns the pid (which is also the process group id) of each
// live stdio server, by server name.
func ProcessIDs(m *Manager) map[string]int {
	out := map[string]int{}
	for _, s := range m.servers {
		s.mu.Lock()
		if s.conn != nil && s.conn.cmd != nil && s.conn.cmd.Process != nil {
			out[s.spec.Name] = s.conn.cmd.Process.Pid
		}
		s.mu.Unlock()
	}
	return out
}

// CallByOriginalName calls a tool by the server's own name, even one the
// server did not list (as if it vanished after a restart).
func CallByOriginalName(ctx context.Context, m *Manager, serverName, toolName, args string) (tool.Result, error) {
	for _, s := range m.servers {
		if s.spec.Name == serverName {
			return s.call(ctx, toolName, json.RawMessage(args))
		}
	}
	return tool.Errorf("no server %s", serverName), nil
}
