package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// Peer is a node's connection as the hub uses it: the gateway's WebSocket.
type Peer interface {
	// Send writes one frame of type typ with payload to the node.
	Send(typ string, payload any)
	// Close ends the connection, telling the node why.
	Close(reason string)
}

// Hub holds the node connections of this process and the calls waiting on
// their answers. It knows nothing of the store: Service decides who may
// connect and what a call may do.
type Hub struct {
	// OnChange, when set, is told when a node connects (true) or goes
	// (false) here: cluster mode's relay follows it (noderedis).
	OnChange func(tenant, id string, connected bool)

	mu    sync.Mutex
	links map[linkKey]*link
}

type linkKey struct{ tenant, id string }

type link struct {
	peer    Peer
	state   store.NodeState
	pending map[string]chan Result
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{links: map[linkKey]*link{}} }

// Attach makes p the connection of node id of tenant in state, replacing
// (and closing) an older one; detach undoes it if p is still the node's
// connection, failing the calls that wait on it.
func (h *Hub) Attach(tenant, id string, state store.NodeState, p Peer) (detach func()) {
	k := linkKey{tenant, id}
	l := &link{peer: p, state: state, pending: map[string]chan Result{}}
	h.mu.Lock()
	old := h.links[k]
	h.links[k] = l
	h.mu.Unlock()
	if old != nil {
		old.peer.Close("replaced by a newer connection of the same node")
		h.failAll(old)
	} else if h.OnChange != nil {
		h.OnChange(tenant, id, true)
	}
	return func() {
		h.mu.Lock()
		mine := h.links[k] == l
		if mine {
			delete(h.links, k)
		}
		h.mu.Unlock()
		h.failAll(l)
		if mine && h.OnChange != nil {
			h.OnChange(tenant, id, false)
		}
	}
}

// failAll ends the calls waiting on a link that went.
func (h *Hub) failAll(l *link) {
	h.mu.Lock()
	pending := l.pending
	l.pending = map[string]chan Result{}
	h.mu.Unlock()
	for id, ch := range pending {
		ch <- Result{ID: id, Code: CodeFailed, Error: "the node disconnected before it answered"}
	}
}

// Connected reports whether the node has a connection here.
func (h *Hub) Connected(tenant, id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.links[linkKey{tenant, id}]
	return ok
}

// Apply tells a node connected here its new state: it is sent to the node,
// and a rejected or revoked node is disconnected. It reports whether the
// node was connected here.
func (h *Hub) Apply(tenant, id string, state store.NodeState) bool {
	h.mu.Lock()
	l := h.links[linkKey{tenant, id}]
	if l != nil {
		l.state = state
	}
	h.mu.Unlock()
	if l == nil {
		return false
	}
	l.peer.Send(FrameState, State{State: string(state), Message: StateMessage(state)})
	if state == store.NodeRejected || state == store.NodeRevoked {
		l.peer.Close("node " + string(state))
	}
	return true
}

// Deliver hands a node's result to the call waiting on it and reports
// whether one did; a result nobody waits for (late, or unknown id) is
// dropped.
func (h *Hub) Deliver(tenant, id string, r Result) bool {
	h.mu.Lock()
	var ch chan Result
	if l := h.links[linkKey{tenant, id}]; l != nil {
		ch = l.pending[r.ID]
		delete(l.pending, r.ID)
	}
	h.mu.Unlock()
	if ch != nil {
		ch <- r
	}
	return ch != nil
}

// Invoke sends inv to a node connected here and waits for its result, at
// most timeout. The node must be approved.
func (h *Hub) Invoke(ctx context.Context, tenant, id string, inv Invoke, timeout time.Duration) (Result, error) {
	if inv.ID == "" {
		inv.ID = newCallID()
	}
	inv.TimeoutMS = timeout.Milliseconds()
	ch := make(chan Result, 1)
	h.mu.Lock()
	l := h.links[linkKey{tenant, id}]
	switch {
	case l == nil:
		h.mu.Unlock()
		return Result{}, fmt.Errorf("failed to reach node %q: %w", id, ErrNotConnected)
	case l.state != store.NodeApproved:
		h.mu.Unlock()
		return Result{}, fmt.Errorf("failed to reach node %q (%s): %w", id, l.state, ErrNotApproved)
	}
	l.pending[inv.ID] = ch
	peer := l.peer
	h.mu.Unlock()
	forget := func() {
		h.mu.Lock()
		delete(l.pending, inv.ID)
		h.mu.Unlock()
	}
	peer.Send(FrameInvoke, inv)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r, nil
	case <-timer.C:
		forget()
		return Result{}, fmt.Errorf("failed to reach node %q: %w (%s)", id, ErrTimeout, timeout)
	case <-ctx.Done():
		forget()
		return Result{}, ctx.Err()
	}
}

// StateMessage is what a node is told of its state.
func StateMessage(s store.NodeState) string {
	switch s {
	case store.NodePending:
		return "waiting for approval: approve this node in the web UI, with `picobot nodes approve <id>`, or ask the agent"
	case store.NodeApproved:
		return "approved: the tenant's agents can reach this node"
	case store.NodeRejected:
		return "rejected by the user"
	case store.NodeRevoked:
		return "revoked by the user"
	}
	return ""
}

func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
