package todo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/picobot/picobot/runtime/store"
)

// PlanStatus is the state of a plan.
type PlanStatus string

// Plan states: a session has at most one active plan; closed plans stay
// stored (done or cancelled) until the next create replaces them.
const (
	PlanActive    PlanStatus = "active"
	PlanDone      PlanStatus = "done"
	PlanCancelled PlanStatus = "cancelled"
)

// ItemStatus is the state of one step of a plan.
type ItemStatus string

// Item states, as the model sets them with update.
const (
	ItemPending    ItemStatus = "pending"
	ItemInProgress ItemStatus = "in_progress"
	ItemDone       ItemStatus = "done"
	ItemCancelled  ItemStatus = "cancelled"
)

// Item is one step of a plan.
type Item struct {
	ID     int        `json:"id"`
	Text   string     `json:"text"`
	Status ItemStatus `json:"status"`
	Note   string     `json:"note,omitempty"`
}

// Plan is a session's task plan.
type Plan struct {
	Title  string     `json:"title"`
	Status PlanStatus `json:"status"`
	Items  []Item     `json:"items"`
	// Note is what the model said when it closed the plan.
	Note string `json:"note,omitempty"`
}

// Active reports whether the plan is still being worked on.
func (p Plan) Active() bool { return p.Status == PlanActive }

// Store keeps one plan per session. It is an interface so the in-memory
// store can be swapped for a persistent one without touching the tool.
type Store interface {
	// Get returns the session's latest plan; ok is false when the session
	// never had one.
	Get(ctx context.Context, sessionID string) (plan Plan, ok bool, err error)
	// Put replaces the session's plan.
	Put(ctx context.Context, sessionID string, plan Plan) error
}

// MemoryStore is a Store in process memory, safe for concurrent use. Plans
// are lost when the process exits.
type MemoryStore struct {
	mu    sync.Mutex
	plans map[string]Plan
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{plans: map[string]Plan{}}
}

// Get implements Store. The plan is a copy the caller may change.
func (s *MemoryStore) Get(_ context.Context, sessionID string) (Plan, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.plans[sessionID]
	p.Items = slices.Clone(p.Items)
	return p, ok, nil
}

// Put implements Store. It keeps a copy, so later changes to plan by the
// caller do not leak into the store.
func (s *MemoryStore) Put(_ context.Context, sessionID string, plan Plan) error {
	plan.Items = slices.Clone(plan.Items)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plans[sessionID] = plan
	return nil
}

// PlanStore is where Persistent keeps plans: the store's session plans
// (store.Store), in PostgreSQL or SQLite, scoped to the tenant in ctx.
type PlanStore interface {
	GetSessionPlan(ctx context.Context, sessionID string) ([]byte, error)
	PutSessionPlan(ctx context.Context, sessionID string, plan []byte) error
}

// Persistent returns a Store keeping plans in s: they survive a restart
// and, in cluster mode, the session moving to another pod.
func Persistent(s PlanStore) Store { return persistent{s} }

type persistent struct{ s PlanStore }

// Get implements Store.
func (p persistent) Get(ctx context.Context, sessionID string) (Plan, bool, error) {
	raw, err := p.s.GetSessionPlan(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return Plan{}, false, nil
	}
	if err != nil {
		return Plan{}, false, err
	}
	var plan Plan
	if err := json.Unmarshal(raw, &plan); err != nil {
		return Plan{}, false, fmt.Errorf("failed to read the plan of session %q: %w", sessionID, err)
	}
	return plan, true, nil
}

// Put implements Store.
func (p persistent) Put(ctx context.Context, sessionID string, plan Plan) error {
	raw, err := json.Marshal(plan)
	if err != nil {
		return fmt.Errorf("failed to encode the plan of session %q: %w", sessionID, err)
	}
	return p.s.PutSessionPlan(ctx, sessionID, raw)
}
