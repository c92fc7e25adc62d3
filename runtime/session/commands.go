package session

import "strings"

// Command is a parsed slash command.
type Command struct {
	Name string // without the slash, lower-case: "new", "switch", ...
	Args string // the rest of the line, trimmed
	// Unknown: "/word" that names no command; answered with the help
	// (the model never sees it).
	Unknown bool
}

// maxCommandName bounds what looks like a command name.
const maxCommandName = 32

// commandHelp lists the slash commands, in the order /help shows them.
var commandHelp = []struct{ name, usage, help string }{
	{"new", "/new", "start a new conversation"},
	{"sessions", "/sessions", "list the 10 most recent conversations"},
	{"switch", "/switch <dialog_id>", "switch to a conversation"},
	{"rename", "/rename <title>", "rename the current conversation"},
	{"delete", "/delete", "delete the current conversation"},
	{"compact", "/compact", "compress the context of the current conversation now"},
	{"info", "/info", "show the current conversation"},
	{"dump", "/dump", "save the current conversation as markdown"},
	{"mcp", "/mcp", "show MCP server status"},
	{"health", "/health", "check requirements (model, browser, sandbox, ...) and how to fix what is missing"},
	{"stop", "/stop", "stop the running task and drop queued messages"},
	{"help", "/help, /?", "show this help"},
}

// ParseCommand recognises a slash command: text starting with "/" followed by
// a known command name. A "/word" that names no command ("/nonsense") is
// Unknown, answered with the help as chat apps do; text where the slash does
// not start a word of letters, digits, '-' and '_' ("/etc/hosts is broken",
// "/ 2") is an ordinary message for the model. /approve and /deny are the
// approval broker's (runtime/approval), answered before a session sees them.
func ParseCommand(text string) (Command, bool) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "/") {
		return Command{}, false
	}
	name, args, _ := strings.Cut(t[1:], " ")
	name = strings.ToLower(name)
	if name == "?" {
		name = "help"
	}
	for _, c := range commandHelp {
		if c.name == name {
			return Command{Name: name, Args: strings.TrimSpace(args)}, true
		}
	}
	if name == "approve" || name == "deny" || !commandWord(name) {
		return Command{}, false
	}
	return Command{Name: name, Args: strings.TrimSpace(args), Unknown: true}, true
}

// commandWord reports whether s could be a command's name.
func commandWord(s string) bool {
	if s == "" || len(s) > maxCommandName || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// HelpText is the reply to /help.
func HelpText() string {
	var b strings.Builder
	b.WriteString("Commands:\n")
	for _, c := range commandHelp {
		b.WriteString("  " + c.usage)
		b.WriteString(strings.Repeat(" ", max(1, 22-len(c.usage))))
		b.WriteString(c.help + "\n")
	}
	return b.String()
}
