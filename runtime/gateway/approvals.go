package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/picobot/picobot/runtime/approval"
)

// Decisions of an approval answer (the "decision" of the approve frame and
// of POST /api/v1/approvals).
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// ApprovalReply is what the user reads after answering an exec approval
// request (the reply to /approve CODE, /deny CODE).
func ApprovalReply(code string, approve, answered bool) string {
	switch {
	case !answered:
		return "No command is waiting for approval " + strings.ToUpper(code) + " in this chat (it was answered, timed out, or its turn ended)."
	case approve:
		return "Approved " + strings.ToUpper(code) + ": the command runs."
	}
	return "Denied " + strings.ToUpper(code) + ": the command is not run."
}

// checkApproval validates an approval answer's code and decision.
func checkApproval(code, decision string) string {
	if _, _, ok := approval.ParseAnswer("/" + DecisionApprove + " " + code); !ok {
		return "code must be the 4-character code of the approval request"
	}
	if decision != DecisionApprove && decision != DecisionDeny {
		return `decision must be "approve" or "deny"`
	}
	return ""
}

// approvalRequest is the body of POST /api/v1/approvals.
type approvalRequest struct {
	// Channel is web (the default) or openai: an OpenAI client's chat
	// has no other way to answer.
	Channel  string `json:"channel,omitempty"`
	Agent    string `json:"agent"`
	ChatID   string `json:"chat_id"`
	Code     string `json:"code"`
	Decision string `json:"decision"`
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	var req approvalRequest
	if !decode(w, r, &req, false) {
		return
	}
	answered, err := s.answerApproval(r.Context(), Chat{Channel: req.Channel, Agent: req.Agent, ChatID: req.ChatID}, req.Code, req.Decision)
	if err != nil {
		s.fail(w, r, err, CodeUnknownSession)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"answered": answered, "code": strings.ToUpper(req.Code), "decision": req.Decision})
}

// answerApproval checks an answer (bad input is a bad_request error) and
// gives it to the backend.
func (s *Server) answerApproval(ctx context.Context, c Chat, code, decision string) (bool, error) {
	if err := checkChat(c); err != nil {
		return false, Errorf(CodeBadRequest, "%v", err)
	}
	if msg := checkApproval(code, decision); msg != "" {
		return false, Errorf(CodeBadRequest, "%s", msg)
	}
	return s.backend.Approve(ctx, c, code, decision == DecisionApprove)
}

func (s *Server) wsApprove(ctx context.Context, c *conn, f frame) {
	answered, err := s.answerApproval(ctx, Chat{Channel: ChannelWeb, Agent: f.Agent, ChatID: f.ChatID}, f.Code, f.Decision)
	if err != nil {
		s.wsError(c, f, err, CodeUnknownSession)
		return
	}
	c.send(frame{Type: "approval", ID: f.ID, Code: strings.ToUpper(f.Code), Decision: f.Decision, Answered: &answered})
}
