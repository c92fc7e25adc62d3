package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/picobot/picobot/runtime/store"
)

const (
	nodeColumns = `id, name, platform, version, capabilities, state, created_at, updated_at, last_seen_at`
	// sqlRegisterNode inserts a pending node or refreshes a known one's
	// hello, keeping its state and creation time.
	sqlRegisterNode = `INSERT INTO nodes (tenant, id, name, platform, version, capabilities, state, created_at, updated_at, last_seen_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?7, ?7)
ON CONFLICT (tenant, id) DO UPDATE SET name = excluded.name, platform = excluded.platform, version = excluded.version,
	capabilities = excluded.capabilities, last_seen_at = excluded.last_seen_at
RETURNING ` + nodeColumns
	sqlGetNode      = `SELECT ` + nodeColumns + ` FROM nodes WHERE tenant = ?1 AND id = ?2`
	sqlListNodes    = `SELECT ` + nodeColumns + ` FROM nodes WHERE tenant = ?1 AND (?2 = '' OR state = ?2) ORDER BY created_at, id LIMIT ?3`
	sqlSetNodeState = `UPDATE nodes SET state = ?3, updated_at = ?4 WHERE tenant = ?1 AND id = ?2 RETURNING ` + nodeColumns
)

func scanNode(row scanner) (store.Node, error) {
	var n store.Node
	var caps string
	var created, updated, seen int64
	if err := row.Scan(&n.ID, &n.Name, &n.Platform, &n.Version, &caps, &n.State, &created, &updated, &seen); err != nil {
		return n, err
	}
	n.CreatedAt, n.UpdatedAt, n.LastSeenAt = fromMicros(created), fromMicros(updated), fromMicros(seen)
	if err := json.Unmarshal([]byte(caps), &n.Capabilities); err != nil {
		return n, fmt.Errorf("failed to read the capabilities of node %q: %w", n.ID, err)
	}
	return n, nil
}

// RegisterNode implements store.Store.
func (s *Store) RegisterNode(ctx context.Context, n store.Node) (store.Node, error) {
	if err := store.ValidateNode(n); err != nil {
		return store.Node{}, fmt.Errorf("failed to register node %q: %w", n.ID, err)
	}
	caps := n.Capabilities
	if caps == nil {
		caps = []string{}
	}
	b, err := json.Marshal(caps)
	if err != nil {
		return store.Node{}, fmt.Errorf("failed to register node %q: %w", n.ID, err)
	}
	out, err := one(ctx, s, true, scanNode, sqlRegisterNode, n.ID, n.Name, n.Platform, n.Version, string(b), s.now())
	if err != nil {
		return store.Node{}, fmt.Errorf("failed to register node %q: %w", n.ID, err)
	}
	return out, nil
}

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	out, err := one(ctx, s, false, scanNode, sqlGetNode, id)
	if err != nil {
		return store.Node{}, fmt.Errorf("failed to get node %q: %w", id, err)
	}
	return out, nil
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context, state store.NodeState) ([]store.Node, error) {
	if state != "" && !store.ValidNodeState(state) {
		return nil, fmt.Errorf("failed to list nodes: %w: unknown node state %q", store.ErrInvalid, state)
	}
	out, err := many(ctx, s, scanNode, sqlListNodes, string(state), store.MaxListNodes)
	if err != nil {
		return nil, fmt.Errorf("failed to list nodes: %w", err)
	}
	return out, nil
}

// SetNodeState implements store.Store.
func (s *Store) SetNodeState(ctx context.Context, id string, state store.NodeState) (store.Node, error) {
	if !store.ValidNodeState(state) {
		return store.Node{}, fmt.Errorf("failed to set the state of node %q: %w: unknown node state %q", id, store.ErrInvalid, state)
	}
	out, err := one(ctx, s, true, scanNode, sqlSetNodeState, id, string(state), s.now())
	if err != nil {
		return store.Node{}, fmt.Errorf("failed to set the state of node %q: %w", id, err)
	}
	return out, nil
}
