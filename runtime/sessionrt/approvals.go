package sessionrt

import (
	"context"
	"fmt"

	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// Notifier is implemented by Reporters that can send a chat platform's chat
// a message while its turn runs (the approval prompt: chat platforms have no
// buttons, the user answers with the code).
type Notifier interface {
	Notify(ctx context.Context, c Chat, text string) error
}

// Answer gives the user's answer to the approval request of chat c with
// code; it reports whether a running turn of the chat was waiting on it. It
// is called in the process that serves the chat.
func (r *Runtime) Answer(c Chat, code string, approve bool) bool {
	return r.approvals.Answer(c.Channel+"/"+c.Key, code, approve)
}

// approver asks the user of one message's turn: the request travels as a
// turn event to gateway clients (web UI, terminal), and as a message to a
// chat platform's chat; the answer comes back through Answer.
type approver struct {
	r     *Runtime
	c     Chat
	msgID string
}

// Approve implements tool.Approver.
func (a approver) Approve(ctx context.Context, req tool.ApprovalRequest) (bool, string, error) {
	ev := turn.Approval{Tool: req.Tool, Command: req.Command, Reason: req.Reason, TimeoutMS: req.Timeout.Milliseconds()}
	if req.Timeout <= 0 {
		ev.TimeoutMS = approval.DefaultTimeout.Milliseconds()
	}
	out, err := a.r.approvals.Ask(ctx, a.c.Channel+"/"+a.c.Key, req.Timeout, func(code string) {
		ev.Code = code
		a.r.cfg.Reporter.Event(ctx, a.c, a.msgID, turn.Event{Kind: turn.EventApproval, Approval: &ev, Session: req.SessionID})
		if n, ok := a.r.cfg.Reporter.(Notifier); ok && !protocol.GatewayClient(a.c.Channel) {
			if err := n.Notify(ctx, a.c, approval.Prompt(code, req.Tool, req.Command, req.Reason, req.Timeout)); err != nil {
				a.r.cfg.Log.ErrorContext(ctx, "Failed to send the approval request to the chat", "chat", a.c.Key, "err", err)
			}
		}
	})
	if err != nil {
		return false, "", err
	}
	res := ev
	res.Outcome = string(out)
	a.r.cfg.Reporter.Event(ctx, a.c, a.msgID, turn.Event{Kind: turn.EventApprovalResult, Approval: &res, Session: req.SessionID})
	a.r.cfg.Log.InfoContext(ctx, "Exec approval answered", "chat", a.c.Key, "code", ev.Code, "tool", req.Tool, "outcome", out)
	switch out {
	case approval.Approved:
		return true, "", nil
	case approval.TimedOut:
		return false, fmt.Sprintf("the user did not answer the approval request within %s, which counts as a denial", approvalTimeout(req)), nil
	}
	return false, "the user denied it", nil
}

func approvalTimeout(req tool.ApprovalRequest) string {
	if req.Timeout <= 0 {
		return approval.DefaultTimeout.String()
	}
	return req.Timeout.String()
}
