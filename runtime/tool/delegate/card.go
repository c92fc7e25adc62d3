package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
)

// Card is a run as a chat's clients (the web UI, the terminal) show it: a
// card under the delegate or sessions_spawn call that started it, with its
// target, task, status, progress and result, and a cancel button while it
// runs. A background run's result also arrives as the chat's continuation
// turn; the card is the live view.
type Card struct {
	RunID      string `json:"run_id"`
	Target     string `json:"target"`
	Agent      string `json:"agent"`
	Task       string `json:"task,omitempty"`
	Label      string `json:"label,omitempty"`
	Mode       string `json:"mode"`
	Status     string `json:"status"`
	Completion string `json:"completion,omitempty"`
	Result     string `json:"result,omitempty"`
	// Steps counts the tool calls the run's session has stored so far and
	// LastTool names the latest: its progress.
	Steps     int       `json:"steps"`
	LastTool  string    `json:"last_tool,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CardStore is what run cards need of the store.
type CardStore interface {
	TaskStore
	LoadMessages(ctx context.Context, sessionID string, opts store.LoadOptions) ([]store.Message, error)
}

// maxCardResult bounds a card's result (the continuation and agent_task
// get_result have all of it).
const maxCardResult = 8000

// ChatRun returns run id if a session of chat c started it; any other run —
// another chat's, another tenant's, a sub-agent's nested run — is
// store.ErrNotFound, like one that does not exist.
func ChatRun(ctx context.Context, s TaskStore, c protocol.Chat, id string) (store.AgentRun, error) {
	r, err := s.GetAgentRun(ctx, id)
	if err != nil {
		return store.AgentRun{}, err
	}
	if r.ParentRunID != "" || !strings.HasPrefix(r.SessionID, c.ChannelName()+":"+c.Key()+":") || r.ParentAgent != c.Agent {
		return store.AgentRun{}, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
	}
	return r, nil
}

// CardOf is run r's card, with its progress read from its session.
func CardOf(ctx context.Context, s CardStore, r store.AgentRun) (Card, error) {
	var rec runRecord
	_ = json.Unmarshal([]byte(r.Input), &rec)
	c := Card{RunID: r.ID, Target: rec.Target, Agent: r.Agent, Task: rec.Task, Mode: string(r.Mode), Status: string(r.Status),
		Completion: string(r.Completion), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if c.Target == "" {
		c.Target = r.Agent
	}
	if c.Mode == "" {
		c.Mode = string(store.RunForeground)
	}
	if rec.Spawn != nil {
		c.Label = rec.Spawn.Label
	}
	if r.Terminal() {
		c.Result = r.Result
		if len(c.Result) > maxCardResult {
			c.Result = strings.ToValidUTF8(c.Result[:maxCardResult], "") + "…"
		}
	}
	sid := session.ID{Channel: protocol.ChannelDelegate, ChatID: r.ID, DialogID: session.DefaultDialog}.String()
	msgs, err := s.LoadMessages(ctx, sid, store.LoadOptions{})
	if errors.Is(err, store.ErrNotFound) {
		return c, nil // no pod has taken it yet
	}
	if err != nil {
		return c, fmt.Errorf("failed to read the progress of run %q: %w", r.ID, err)
	}
	for _, m := range msgs {
		if m.Role != llm.RoleAssistant {
			continue
		}
		for _, tc := range m.ToolCalls {
			c.Steps++
			c.LastTool = tc.Name
		}
	}
	return c, nil
}
