package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/coder/websocket"

	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/store"
)

// nodeConn is the node side of one WebSocket: set by its node_hello.
type nodeConn struct {
	id     string
	detach func()
}

func (n *nodeConn) close() {
	if n.detach != nil {
		n.detach()
	}
}

// nodePeer is a node's WebSocket as the hub uses it.
type nodePeer struct{ c *conn }

func (p nodePeer) Send(typ string, payload any) {
	b, err := json.Marshal(payload)
	if err != nil {
		return
	}
	p.c.send(frame{Type: typ, Node: b})
}

func (p nodePeer) Close(reason string) {
	_ = p.c.ws.Close(websocket.StatusPolicyViolation, reason)
}

// wsNodeHello pairs the connection with the node it introduces: the node is
// recorded (pending when new) and told its state; a rejected or revoked
// node is told so and disconnected.
func (s *Server) wsNodeHello(ctx context.Context, c *conn, f frame, nc *nodeConn) {
	if s.nodes == nil {
		c.fail(f.ID, CodeNotFound, "this gateway pairs no nodes")
		return
	}
	if nc.id != "" {
		c.fail(f.ID, CodeBadRequest, fmt.Sprintf("this connection is node %q already", nc.id))
		return
	}
	h, err := node.ParseHello(f.Node)
	if err != nil {
		c.fail(f.ID, CodeBadRequest, err.Error())
		return
	}
	n, detach, err := s.nodes.Connect(ctx, h, nodePeer{c: c})
	switch {
	case errors.Is(err, node.ErrRefused):
		b, _ := json.Marshal(node.State{State: string(n.State), Message: err.Error()})
		c.send(frame{Type: node.FrameState, ID: f.ID, Node: b})
		_ = c.ws.Close(websocket.StatusPolicyViolation, "node "+string(n.State))
		return
	case errors.Is(err, store.ErrInvalid):
		c.fail(f.ID, CodeBadRequest, err.Error())
		return
	case err != nil:
		s.wsError(c, f, err, CodeNotFound)
		return
	}
	nc.id, nc.detach = n.ID, detach
	c.ws.SetReadLimit(node.MaxResultBytes) // results carry captured media
	s.log.Info("Node connected", "node", n.ID, "state", n.State, "platform", n.Platform)
	b, _ := json.Marshal(node.State{State: string(n.State), Message: node.StateMessage(n.State)})
	c.send(frame{Type: node.FrameState, ID: f.ID, Node: b})
}

// answerNode hands a node_result frame to the call of this gateway waiting
// on it and reports whether one did. Such an answer is no new work: the
// read loop delivers it before the key's rate limit, since dropping it
// would leave the call waiting out its whole timeout (an answer nobody
// waits for counts like any frame).
func (s *Server) answerNode(ctx context.Context, f frame, nc *nodeConn) bool {
	if s.nodes == nil || nc.id == "" || f.Type != node.FrameResult || f.V != ProtocolVersion {
		return false
	}
	var r node.Result
	if json.Unmarshal(f.Node, &r) != nil || r.ID == "" {
		return false
	}
	p, _ := PrincipalFrom(ctx)
	return s.nodes.Hub.Deliver(p.Tenant, nc.id, r)
}

// wsNodeResult hands a node's answer to the call waiting on it.
func (s *Server) wsNodeResult(ctx context.Context, c *conn, f frame, nc *nodeConn) {
	if nc.id == "" {
		c.fail(f.ID, CodeBadRequest, "a node_result needs a node_hello first")
		return
	}
	var r node.Result
	if err := json.Unmarshal(f.Node, &r); err != nil || r.ID == "" {
		c.fail(f.ID, CodeBadRequest, "a node_result needs a node object with the invoke's id")
		return
	}
	p, _ := PrincipalFrom(ctx)
	s.nodes.Hub.Deliver(p.Tenant, nc.id, r)
}

// listNodes answers GET /api/v1/nodes?state=: the tenant's nodes, whether
// each is connected now.
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if s.nodes == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "this gateway pairs no nodes")
		return
	}
	state := store.NodeState(r.URL.Query().Get("state"))
	if state != "" && !store.ValidNodeState(state) {
		writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("state must be pending, approved, rejected or revoked, got %q", state))
		return
	}
	list, err := s.nodes.List(r.Context(), state)
	if err != nil {
		s.fail(w, r, err, CodeNotFound)
		return
	}
	if list == nil {
		list = []node.Status{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": list})
}

// decideNode answers POST /api/v1/nodes/{id}/{decision}: approve, reject
// or revoke a node.
func (s *Server) decideNode(w http.ResponseWriter, r *http.Request) {
	if s.nodes == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "this gateway pairs no nodes")
		return
	}
	id, decision := r.PathValue("id"), r.PathValue("decision")
	if err := store.ValidateNodeID(id); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	switch decision {
	case node.DecisionApprove, node.DecisionReject, node.DecisionRevoke:
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no node decision %q (want approve, reject or revoke)", decision))
		return
	}
	n, err := s.nodes.Decide(r.Context(), id, decision)
	switch {
	case errors.Is(err, node.ErrTransition):
		writeError(w, http.StatusConflict, CodeBadRequest, err.Error())
		return
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no node %q", id))
		return
	case err != nil:
		s.fail(w, r, err, CodeNotFound)
		return
	}
	st, err := s.nodes.Get(r.Context(), n.ID)
	if err != nil {
		st = node.Status{Node: n}
	}
	writeJSON(w, http.StatusOK, map[string]any{"node": st})
}
