package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// Remote reaches the nodes connected to other processes: the gateway
// replicas of cluster mode (package noderedis).
type Remote interface {
	// Invoke sends inv to the process holding the node and waits for the
	// result; ErrNotConnected when none holds it.
	Invoke(ctx context.Context, tenant, id string, inv Invoke, timeout time.Duration) (Result, error)
	// Apply tells the process holding the node its new state (a no-op
	// when none holds it).
	Apply(ctx context.Context, tenant, id string, state store.NodeState) error
	// Connected reports which of ids some process holds a connection to.
	Connected(ctx context.Context, tenant string, ids []string) (map[string]bool, error)
}

// Decisions a user makes on a node.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
	DecisionRevoke  = "revoke"
)

// ErrTransition means the decision does not apply to the node's state (reject
// an approved node: revoke it instead).
var ErrTransition = errors.New("decision does not apply to the node's state")

// Service is the nodes of the tenant in the context: pairing decisions,
// status, and calls. Every method reads the tenant from ctx
// (store.TenantFrom).
type Service struct {
	Store store.Store
	// Hub holds the connections of this process (nil in a session pod).
	Hub *Hub
	// Remote reaches connections held elsewhere (nil in embedded mode).
	Remote Remote
	Log    *slog.Logger
}

// Status is a node as the tool, the API and the UI show it.
type Status struct {
	store.Node
	Connected bool `json:"connected"`
}

// Connect records a node's hello and attaches its connection: a new node
// is pending, a known one keeps its state; a rejected or revoked node is
// refused (ErrRefused). detach is called when the connection ends.
func (s *Service) Connect(ctx context.Context, h Hello, p Peer) (store.Node, func(), error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return store.Node{}, nil, err
	}
	if s.Hub == nil {
		return store.Node{}, nil, errors.New("this process takes no node connections")
	}
	n, err := s.Store.RegisterNode(ctx, store.Node{ID: h.ID, Name: h.Name, Platform: h.Platform, Version: h.Version, Capabilities: h.Capabilities})
	if err != nil {
		return store.Node{}, nil, err
	}
	if n.State == store.NodeRejected || n.State == store.NodeRevoked {
		return n, nil, fmt.Errorf("node %q was %s by its user (pair again with a new id: picobot node --reset): %w", n.ID, n.State, ErrRefused)
	}
	return n, s.Hub.Attach(tenant, n.ID, n.State, p), nil
}

// List returns the tenant's nodes in state (all when empty) and whether
// each is connected now.
func (s *Service) List(ctx context.Context, state store.NodeState) ([]Status, error) {
	nodes, err := s.Store.ListNodes(ctx, state)
	if err != nil {
		return nil, err
	}
	return s.statuses(ctx, nodes)
}

// Get returns one node's status.
func (s *Service) Get(ctx context.Context, id string) (Status, error) {
	n, err := s.Store.GetNode(ctx, id)
	if err != nil {
		return Status{}, err
	}
	out, err := s.statuses(ctx, []store.Node{n})
	if err != nil {
		return Status{}, err
	}
	return out[0], nil
}

func (s *Service) statuses(ctx context.Context, nodes []store.Node) ([]Status, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(nodes))
	var elsewhere []string
	for i, n := range nodes {
		out[i] = Status{Node: n, Connected: s.Hub != nil && s.Hub.Connected(tenant, n.ID)}
		if !out[i].Connected {
			elsewhere = append(elsewhere, n.ID)
		}
	}
	if s.Remote != nil && len(elsewhere) > 0 {
		conn, err := s.Remote.Connected(ctx, tenant, elsewhere)
		if err != nil {
			s.log().WarnContext(ctx, "Could not learn which nodes are connected", "err", err)
		}
		for i := range out {
			out[i].Connected = out[i].Connected || conn[out[i].ID]
		}
	}
	return out, nil
}

// Decide applies a user's decision (DecisionApprove, DecisionReject,
// DecisionRevoke) to a node: approve takes a pending, rejected or revoked
// node; reject a pending one; revoke an approved or pending one. A node
// that is rejected or revoked is disconnected.
func (s *Service) Decide(ctx context.Context, id, decision string) (store.Node, error) {
	n, err := s.Store.GetNode(ctx, id)
	if err != nil {
		return store.Node{}, err
	}
	var to store.NodeState
	var from []store.NodeState
	switch decision {
	case DecisionApprove:
		to, from = store.NodeApproved, []store.NodeState{store.NodePending, store.NodeRejected, store.NodeRevoked}
	case DecisionReject:
		to, from = store.NodeRejected, []store.NodeState{store.NodePending}
	case DecisionRevoke:
		to, from = store.NodeRevoked, []store.NodeState{store.NodeApproved, store.NodePending}
	default:
		return store.Node{}, fmt.Errorf("%w: unknown decision %q (want approve, reject or revoke)", store.ErrInvalid, decision)
	}
	if n.State == to {
		return n, nil // the same decision twice changes nothing
	}
	if !slices.Contains(from, n.State) {
		hint := ""
		if decision == DecisionReject && n.State == store.NodeApproved {
			hint = " (revoke it instead)"
		}
		return n, fmt.Errorf("failed to %s node %q, which is %s%s: %w", decision, id, n.State, hint, ErrTransition)
	}
	n, err = s.Store.SetNodeState(ctx, id, to)
	if err != nil {
		return store.Node{}, err
	}
	s.apply(ctx, id, to)
	return n, nil
}

// apply tells the node's connection its new state, wherever it is.
func (s *Service) apply(ctx context.Context, id string, state store.NodeState) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return
	}
	if s.Hub != nil && s.Hub.Apply(tenant, id, state) {
		return
	}
	if s.Remote != nil {
		if err := s.Remote.Apply(ctx, tenant, id, state); err != nil {
			// The state is stored: a node that reconnects gets it then.
			s.log().WarnContext(ctx, "Could not tell a node its new state", "node", id, "state", state, "err", err)
		}
	}
}

// Invoke asks an approved node to act and waits for its result, at most
// timeout (DefaultInvokeTimeout when zero).
func (s *Service) Invoke(ctx context.Context, id string, inv Invoke, timeout time.Duration) (Result, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return Result{}, err
	}
	if timeout <= 0 {
		timeout = DefaultInvokeTimeout
	}
	n, err := s.Store.GetNode(ctx, id)
	if err != nil {
		return Result{}, err
	}
	if n.State != store.NodeApproved {
		return Result{}, fmt.Errorf("failed to reach node %q, which is %s: %w", id, n.State, ErrNotApproved)
	}
	if s.Hub != nil && s.Hub.Connected(tenant, id) {
		return s.Hub.Invoke(ctx, tenant, id, inv, timeout)
	}
	if s.Remote != nil {
		return s.Remote.Invoke(ctx, tenant, id, inv, timeout)
	}
	return Result{}, fmt.Errorf("failed to reach node %q: %w", id, ErrNotConnected)
}

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}
