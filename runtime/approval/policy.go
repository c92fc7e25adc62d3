// Package approval decides whether a command the model asked the shell tools
// to run may run (the reference's exec `security` and `ask` modes, an
// allowlist of command patterns, dangerous-command interception), and holds
// the approval requests a running turn waits on until the user answers, in
// the chat the turn belongs to, or the request times out as a denial.
//
// It imports nothing of ours: the shell tools ask through tool.Approver, the
// session runtime implements that with a Broker, and the gateway and the
// chat channels carry the user's answer back to the Broker.
package approval

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Security is how much the shell tools may run (the reference's `security`).
type Security string

// Security modes.
const (
	// SecurityDeny refuses every command.
	SecurityDeny Security = "deny"
	// SecurityAllowlist runs commands the allowlist matches; the others
	// are asked about (Ask on-miss or always) or refused (Ask off).
	SecurityAllowlist Security = "allowlist"
	// SecurityFull runs every command (the default: the sandbox, not this
	// policy, is the boundary).
	SecurityFull Security = "full"
)

// Ask is when the user is asked before a command runs (the reference's
// `ask`).
type Ask string

// Ask modes.
const (
	// AskOff never asks: what the security mode does not run is refused.
	AskOff Ask = "off"
	// AskOnMiss asks for commands the allowlist does not match.
	AskOnMiss Ask = "on-miss"
	// AskAlways asks for every command.
	AskAlways Ask = "always"
)

// DefaultTimeout is how long a request waits for the user before it is a
// denial.
const DefaultTimeout = 2 * time.Minute

// Policy is an Agent's exec approval settings.
type Policy struct {
	Security Security
	Ask      Ask
	// Allowlist are command patterns: a command runs when every simple
	// command of it (split at |, ||, && and ;) matches one pattern, where
	// * stands for any text ("git status", "git *", "ls*"). A command with
	// what the split cannot see through ($(...), backticks, redirections,
	// a lone &, a newline) matches nothing.
	Allowlist []string
	// Timeout is how long a request waits for the user (DefaultTimeout
	// when zero).
	Timeout time.Duration
}

// Validate checks the modes and patterns.
func (p Policy) Validate() error {
	var errs []error
	switch p.Security {
	case "", SecurityDeny, SecurityAllowlist, SecurityFull:
	default:
		errs = append(errs, fmt.Errorf("security %q: want deny, allowlist or full", p.Security))
	}
	switch p.Ask {
	case "", AskOff, AskOnMiss, AskAlways:
	default:
		errs = append(errs, fmt.Errorf("ask %q: want off, on-miss or always", p.Ask))
	}
	for _, pat := range p.Allowlist {
		if _, err := path.Match(globOf(pat), ""); err != nil || strings.TrimSpace(pat) == "" {
			errs = append(errs, fmt.Errorf("allowlist pattern %q is not a valid pattern", pat))
		}
	}
	return errors.Join(errs...)
}

// Verdict is what the policy says about one command.
type Verdict int

// Verdicts.
const (
	// Run the command.
	Run Verdict = iota
	// AskUser before running it.
	AskUser
	// Refuse it.
	Refuse
)

// Decision is a Verdict and why (the text the model or the user reads).
type Decision struct {
	Verdict Verdict
	Reason  string
}

// Decide says whether command may run under p. Dangerous commands are
// refused in every mode, before anyone is asked.
func (p Policy) Decide(command string) Decision {
	if d := Dangerous(command); d != "" {
		return Decision{Refuse, fmt.Sprintf("refused before running: the command looks like %s. This check only catches "+
			"well-known destructive commands; it is no sandbox, and the command was not run", d)}
	}
	sec, ask := p.Security, p.Ask
	if sec == "" {
		sec = SecurityFull
	}
	if ask == "" {
		ask = AskOff
	}
	if sec == SecurityDeny {
		return Decision{Refuse, "refused: this agent's exec policy is security: deny, so no command runs"}
	}
	if ask == AskAlways {
		return Decision{AskUser, "this agent asks before every command (ask: always)"}
	}
	if sec == SecurityFull || p.Allowed(command) {
		return Decision{Verdict: Run}
	}
	if ask == AskOnMiss {
		return Decision{AskUser, "the command is not in this agent's allowlist (ask: on-miss)"}
	}
	return Decision{Refuse, "refused: the command is not in this agent's allowlist (security: allowlist, ask: off); " +
		"run only commands the allowlist names: " + strings.Join(p.Allowlist, ", ")}
}

// Allowed reports whether every simple command of command matches a pattern
// of the allowlist.
func (p Policy) Allowed(command string) bool {
	parts, ok := simpleCommands(command)
	if !ok || len(parts) == 0 {
		return false
	}
	for _, part := range parts {
		if !p.matches(part) {
			return false
		}
	}
	return true
}

func (p Policy) matches(simple string) bool {
	for _, pat := range p.Allowlist {
		if ok, _ := path.Match(globOf(pat), simple); ok {
			return true
		}
	}
	return false
}

// globOf turns a pattern into path.Match syntax where * also crosses "/"
// (a command's arguments are paths): "/" is not special in the text we
// match because it is replaced, on both sides, by a character commands
// cannot contain.
func globOf(pat string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(pat), " "), "/", "\x00")
}

// simpleCommands splits a command line at |, ||, && and ; into its simple
// commands (spaces normalised, "/" mapped as in globOf). ok is false for a
// line the split cannot see through: command substitution, backticks,
// redirections, a lone & (background), newlines, subshells and braces.
func simpleCommands(command string) (parts []string, ok bool) {
	if strings.ContainsAny(command, "`<>\n(){}") || strings.Contains(command, "$(") {
		return nil, false
	}
	s := strings.NewReplacer("||", "\x01", "&&", "\x01", "|", "\x01", ";", "\x01").Replace(command)
	if strings.Contains(s, "&") {
		return nil, false
	}
	for _, part := range strings.Split(s, "\x01") {
		part = strings.Join(strings.Fields(part), " ")
		if part == "" {
			return nil, false
		}
		parts = append(parts, strings.ReplaceAll(part, "/", "\x00"))
	}
	return parts, true
}
