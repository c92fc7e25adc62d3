package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// RunCard is a sub-agent run a chat started, as GET /api/v1/runs/{id}
// shows it (delegate.Card).
type RunCard struct {
	RunID      string `json:"run_id"`
	Target     string `json:"target"`
	Task       string `json:"task"`
	Label      string `json:"label"`
	Mode       string `json:"mode"`
	Status     string `json:"status"`
	Completion string `json:"completion"`
	Result     string `json:"result"`
	Steps      int    `json:"steps"`
	LastTool   string `json:"last_tool"`
}

// Ended reports whether the run has ended.
func (r RunCard) Ended() bool {
	return r.Status == "succeeded" || r.Status == "failed" || r.Status == "cancelled"
}

// RunCard reads a run the chat of agent started.
func (c *Client) RunCard(ctx context.Context, agent, chatID, runID string) (RunCard, error) {
	var out struct {
		Run RunCard `json:"run"`
	}
	if err := c.get(ctx, "/api/v1/runs/"+url.PathEscape(runID), url.Values{"agent": {agent}, "chat_id": {chatID}}, &out); err != nil {
		return RunCard{}, fmt.Errorf("failed to read run %q: %w", runID, err)
	}
	return out.Run, nil
}

// CancelRun cancels a run the chat of agent started that has not ended.
func (c *Client) CancelRun(ctx context.Context, agent, chatID, runID string) (RunCard, error) {
	q := url.Values{"agent": {agent}, "chat_id": {chatID}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint("/api/v1/runs/"+url.PathEscape(runID)+"/cancel", q), nil)
	if err != nil {
		return RunCard{}, fmt.Errorf("failed to build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	res, err := c.rest.Do(req)
	if err != nil {
		return RunCard{}, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.base, err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode >= 400 {
		return RunCard{}, fmt.Errorf("failed to cancel run %q: %w", runID, replyError(res))
	}
	var out struct {
		Run RunCard `json:"run"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return RunCard{}, fmt.Errorf("failed to decode the reply of the cancel of run %q: %w", runID, err)
	}
	return out.Run, nil
}
