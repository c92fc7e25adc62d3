package shell

import (
	"context"
	"fmt"

	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/tool"
)

// WithApprovals applies an Agent's exec approval policy (spec.tools.exec:
// security, ask, allowlist) to bash, exec and pty spawns. Without it every
// command runs (security full, ask off); dangerous commands are refused
// either way.
func WithApprovals(p approval.Policy) Option { return func(c *config) { c.approvals = p } }

// ExecForeground makes exec run every command to its end (its timeout), as
// when the process tool is denied by the Agent's policy: a command left in
// the background could then never be polled or killed, so yieldMs and
// background are ignored.
func ExecForeground() Option { return func(c *config) { c.foreground = true } }

// permit applies the approval policy to a command the tool toolName is about
// to run. It returns nil when the command may run, else the result the model
// gets instead (refused, denied by the user, not answered in time); err is
// set when the turn ended while the user was being asked.
func (c *config) permit(ctx context.Context, env tool.Env, toolName, command string) (*tool.Result, error) {
	d := c.approvals.Decide(command)
	switch d.Verdict {
	case approval.Run:
		return nil, nil
	case approval.Refuse:
		r := tool.Errorf("error: %s.", d.Reason)
		return &r, nil
	}
	if env.Approver == nil {
		r := tool.Errorf("error: refused: %s, and this turn has no user to ask (a scheduled or stateless run); the command was not run.", d.Reason)
		return &r, nil
	}
	ok, why, err := env.Approver.Approve(ctx, tool.ApprovalRequest{Tool: toolName, Command: command, Reason: d.Reason, Timeout: c.approvals.Timeout,
		SessionID: env.SessionID})
	if err != nil {
		return nil, fmt.Errorf("failed to get an approval for the command: %w", err)
	}
	if !ok {
		r := tool.Errorf("error: the command was not run: %s. Do not retry it unchanged; ask the user what to do instead.", why)
		return &r, nil
	}
	return nil, nil
}
