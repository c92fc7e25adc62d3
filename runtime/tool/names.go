package tool

import "strings"

// toolAliases are OpenClaw's names of tools PicoBot has under its own
// names, so that a policy copied from OpenClaw resolves to the same tools.
var toolAliases = map[string]string{"read": "file_read", "write": "file_write", "edit": "file_edit"}

// Canonical returns PicoBot's name of a tool named by an alias: OpenClaw's
// read, write and edit, and mcp__<server>__<tool> (the spelling Claude's
// tools and dsh use) for the MCP tool registered as mcp_<server>_<tool>.
// Other names are returned trimmed and lower-cased; '*' passes through, so
// mcp__<server>__* becomes the pattern mcp_<server>_*.
func Canonical(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := toolAliases[n]; ok {
		return a
	}
	if rest, ok := strings.CutPrefix(n, "mcp__"); ok {
		if server, tool, ok := strings.Cut(rest, "__"); ok && server != "" && tool != "" {
			return "mcp_" + server + "_" + tool
		}
	}
	return n
}
