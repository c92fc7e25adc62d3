package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Node is a paired device as GET /api/v1/nodes shows it (node.Status).
type Node struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Platform     string    `json:"platform"`
	Version      string    `json:"version"`
	Capabilities []string  `json:"capabilities"`
	State        string    `json:"state"`
	Connected    bool      `json:"connected"`
	CreatedAt    time.Time `json:"created_at"`
	LastSeenAt   time.Time `json:"last_seen_at"`
}

// Nodes lists the tenant's paired devices in state (all when empty).
func (c *Client) Nodes(ctx context.Context, state string) ([]Node, error) {
	var q url.Values
	if state != "" {
		q = url.Values{"state": {state}}
	}
	var out struct {
		Nodes []Node `json:"nodes"`
	}
	if err := c.get(ctx, "/api/v1/nodes", q, &out); err != nil {
		return nil, fmt.Errorf("failed to list the nodes: %w", err)
	}
	return out.Nodes, nil
}

// DecideNode approves, rejects or revokes a node (decision "approve",
// "reject" or "revoke").
func (c *Client) DecideNode(ctx context.Context, id, decision string) (Node, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint("/api/v1/nodes/"+url.PathEscape(id)+"/"+url.PathEscape(decision), nil), nil)
	if err != nil {
		return Node{}, fmt.Errorf("failed to build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	res, err := c.rest.Do(req)
	if err != nil {
		return Node{}, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.base, err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode >= 400 {
		return Node{}, fmt.Errorf("failed to %s node %q: %w", decision, id, replyError(res))
	}
	var out struct {
		Node Node `json:"node"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return Node{}, fmt.Errorf("failed to decode the reply of the %s of node %q: %w", decision, id, err)
	}
	return out.Node, nil
}
