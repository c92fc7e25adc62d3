// Package sessions holds the tools that look at an agent's sessions:
// session_status, sessions_list and sessions_history (OpenClaw's session
// tools of the same names). Each sees only the calling agent's sessions in
// its tenant: another agent's or tenant's session reads as missing.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// NameStatus is the tool's name.
const NameStatus = "session_status"

// Store is what session_status reads: sessions of the caller's tenant (the
// tenant comes from ctx, so no other tenant's session can be named).
type Store interface {
	GetSession(ctx context.Context, id string) (store.Session, error)
	CountMessages(ctx context.Context, sessionID string) (int64, error)
}

// StatusArgs are the arguments of session_status.
type StatusArgs struct {
	SessionKey string `json:"sessionKey,omitempty" jsonschema:"the session to describe (default: the current one)"`
	SessionID  string `json:"sessionId,omitempty" jsonschema:"same as sessionKey"`
	Model      string `json:"model,omitempty" jsonschema:"'default' clears a model override; naming a model to override it is not available yet"`
}

// Status is session_status's answer.
type Status struct {
	Session    string     `json:"session"`
	Current    bool       `json:"current"`
	Agent      string     `json:"agent"`
	Title      string     `json:"title"`
	Model      string     `json:"model"`
	Messages   int64      `json:"messages"`
	Created    time.Time  `json:"created"`
	LastActive time.Time  `json:"last_active"`
	Compressed *time.Time `json:"last_compressed,omitempty"`
	Deleted    bool       `json:"deleted,omitempty"`
}

// NewStatus returns session_status over st for an agent whose sessions use
// model ("provider/model", "" when it has none).
func NewStatus(st Store, model string) tool.Tool {
	return tool.New(NameStatus, "Show a session's status: agent, model, title, message count and activity times (default: this session)",
		func(ctx context.Context, env tool.Env, a StatusArgs) (tool.Result, error) {
			return status(ctx, st, model, env, a)
		}, tool.ReadOnly())
}

func status(ctx context.Context, st Store, model string, env tool.Env, a StatusArgs) (tool.Result, error) {
	key := strings.TrimSpace(a.SessionKey)
	if key == "" {
		key = strings.TrimSpace(a.SessionID)
	}
	if key == "" {
		key = env.SessionID
	}
	if key == "" {
		return tool.Errorf("error: this call belongs to no session; name one with sessionKey"), nil
	}
	switch m := strings.TrimSpace(a.Model); {
	case m == "", strings.EqualFold(m, "default"):
		// No override exists, so clearing one changes nothing.
	default:
		return tool.Errorf("error: per-session model overrides are not available yet; the session keeps %s (use model=default to clear an override)", orNone(model)), nil
	}
	s, err := st.GetSession(ctx, key)
	// Another agent's session is not this agent's to look at: it reads as
	// missing, like one of another tenant.
	if errors.Is(err, store.ErrNotFound) || (err == nil && s.Agent != env.Agent) {
		return tool.Errorf("error: no session %q of agent %s", key, env.Agent), nil
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to get session %q: %w", key, err)
	}
	n, err := st.CountMessages(ctx, key)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to count the messages of session %q: %w", key, err)
	}
	out := Status{Session: s.ID, Current: s.ID == env.SessionID, Agent: s.Agent, Title: s.Title, Model: orNone(model), Messages: n,
		Created: s.CreatedAt.UTC(), LastActive: s.LastMessageAt.UTC(), Compressed: s.LastCompressedAt, Deleted: s.DeletedAt != nil}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode the status of session %q: %w", key, err)
	}
	return tool.Text(string(b)), nil
}

func orNone(model string) string {
	if model == "" {
		return "no model"
	}
	return model
}
