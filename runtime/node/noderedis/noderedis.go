// Package noderedis carries node calls between the processes of cluster
// mode over Redis Pub/Sub: a node connects to one gateway replica, and a
// session pod's nodes tool (or another replica's API) reaches it through
// that replica. Each replica subscribes to the channel of every node it
// holds and keeps a presence key for it; a caller publishes the request on
// the node's channel (PUBLISH's count says whether any replica holds it)
// and waits for the answer on a reply channel of its own. Pub/Sub is
// fire-and-forget, which suits calls with a deadline: a lost message is a
// timeout the model is told about. Every channel and key is the tenant's
// (bus.Key), inside its Redis ACL.
package noderedis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/store"
)

// Presence keys live this long unless refreshed; the relay refreshes them
// at a third of it.
const presenceTTL = time.Minute

// replyMargin is how much longer a caller waits than the node may take,
// for the answer's way back.
const replyMargin = 5 * time.Second

// Request kinds.
const (
	kindInvoke = "invoke"
	kindState  = "state"
)

// request is a message on a node's channel.
type request struct {
	Kind      string          `json:"kind"`
	Reply     string          `json:"reply,omitempty"`
	Invoke    node.Invoke     `json:"invoke,omitzero"`
	TimeoutMS int64           `json:"timeout_ms,omitempty"`
	State     store.NodeState `json:"state,omitempty"`
}

// response is the answer on the caller's reply channel.
type response struct {
	Result node.Result `json:"result"`
	// Error is set when the holding replica could not make the call:
	// not_connected, not_approved, timeout or failed, with Message.
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// nodeChannel is the channel of a node's requests.
func nodeChannel(tenant, id string) string { return bus.Key(tenant, "nodes", id, "calls") }

// presenceKey says which replica holds a node.
func presenceKey(tenant, id string) string { return bus.Key(tenant, "nodes", id, "holder") }

// Remote implements node.Remote for the callers: session pods and the
// replicas that do not hold the node.
type Remote struct {
	Redis *redis.Client
}

var _ node.Remote = Remote{}

// Invoke implements node.Remote.
func (r Remote) Invoke(ctx context.Context, tenant, id string, inv node.Invoke, timeout time.Duration) (node.Result, error) {
	reply := bus.Key(tenant, "nodes", "reply", newID())
	ps := r.Redis.Subscribe(ctx, reply)
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(ctx); err != nil { // the subscription is confirmed before the request goes
		return node.Result{}, fmt.Errorf("failed to subscribe to the reply of node %q: %w", id, err)
	}
	b, err := json.Marshal(request{Kind: kindInvoke, Reply: reply, Invoke: inv, TimeoutMS: timeout.Milliseconds()})
	if err != nil {
		return node.Result{}, err
	}
	n, err := r.Redis.Publish(ctx, nodeChannel(tenant, id), b).Result()
	if err != nil {
		return node.Result{}, fmt.Errorf("failed to reach node %q: %w", id, err)
	}
	if n == 0 {
		return node.Result{}, fmt.Errorf("failed to reach node %q: %w", id, node.ErrNotConnected)
	}
	wait := time.NewTimer(timeout + replyMargin)
	defer wait.Stop()
	select {
	case m, ok := <-ps.Channel():
		if !ok {
			return node.Result{}, fmt.Errorf("failed to reach node %q: the reply subscription closed", id)
		}
		var resp response
		if err := json.Unmarshal([]byte(m.Payload), &resp); err != nil {
			return node.Result{}, fmt.Errorf("failed to read the answer of node %q: %w", id, err)
		}
		switch resp.Error {
		case "":
			return resp.Result, nil
		case "not_connected":
			return node.Result{}, fmt.Errorf("%s: %w", resp.Message, node.ErrNotConnected)
		case "not_approved":
			return node.Result{}, fmt.Errorf("%s: %w", resp.Message, node.ErrNotApproved)
		case "timeout":
			return node.Result{}, fmt.Errorf("%s: %w", resp.Message, node.ErrTimeout)
		}
		return node.Result{}, errors.New(resp.Message)
	case <-wait.C:
		return node.Result{}, fmt.Errorf("failed to reach node %q: %w (%s)", id, node.ErrTimeout, timeout)
	case <-ctx.Done():
		return node.Result{}, ctx.Err()
	}
}

// Apply implements node.Remote.
func (r Remote) Apply(ctx context.Context, tenant, id string, state store.NodeState) error {
	b, err := json.Marshal(request{Kind: kindState, State: state})
	if err != nil {
		return err
	}
	if err := r.Redis.Publish(ctx, nodeChannel(tenant, id), b).Err(); err != nil {
		return fmt.Errorf("failed to tell node %q its state: %w", id, err)
	}
	return nil
}

// Connected implements node.Remote.
func (r Remote) Connected(ctx context.Context, tenant string, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// One key per node: the keys of one tenant's nodes share a hash tag
	// ({tenant:nodes}), so MGET works on a Redis Cluster too.
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = presenceKey(tenant, id)
	}
	vals, err := r.Redis.MGet(ctx, keys...).Result()
	if err != nil {
		return out, fmt.Errorf("failed to read which nodes are connected: %w", err)
	}
	for i, v := range vals {
		out[ids[i]] = v != nil
	}
	return out, nil
}

// Relay serves the calls of the nodes connected to this gateway replica:
// it follows the hub (Hub.OnChange), subscribes to the channel of each node
// it holds, keeps their presence keys, and answers requests from the hub.
type Relay struct {
	Redis *redis.Client
	Hub   *node.Hub
	// Holder names this replica in presence keys (its pod name).
	Holder string
	Log    *slog.Logger

	mu    sync.Mutex
	ps    *redis.PubSub
	nodes map[string]held // by channel
}

type held struct{ tenant, id string }

// Follow makes the relay follow hub's connections; call it before the
// gateway serves, and Start to serve.
func (r *Relay) Follow(ctx context.Context) {
	r.mu.Lock()
	r.nodes = map[string]held{}
	r.ps = r.Redis.Subscribe(ctx)
	r.mu.Unlock()
	r.Hub.OnChange = func(tenant, id string, connected bool) {
		ch := nodeChannel(tenant, id)
		r.mu.Lock()
		defer r.mu.Unlock()
		var err error
		if connected {
			r.nodes[ch] = held{tenant, id}
			err = errors.Join(r.ps.Subscribe(ctx, ch), r.Redis.Set(ctx, presenceKey(tenant, id), r.Holder, presenceTTL).Err())
		} else {
			delete(r.nodes, ch)
			err = errors.Join(r.ps.Unsubscribe(ctx, ch), r.Redis.Del(ctx, presenceKey(tenant, id)).Err())
		}
		if err != nil {
			r.log().Warn("Could not follow a node's connection in Redis", "node", id, "connected", connected, "err", err)
		}
	}
}

// Start serves requests until ctx ends (a manager.Runnable's shape).
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	ps := r.ps
	r.mu.Unlock()
	if ps == nil {
		return errors.New("noderedis: Start before Follow")
	}
	defer func() { _ = ps.Close() }()
	refresh := time.NewTicker(presenceTTL / 3)
	defer refresh.Stop()
	var calls sync.WaitGroup
	defer calls.Wait()
	msgs := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			r.refresh(ctx)
		case m, ok := <-msgs:
			if !ok {
				return errors.New("noderedis: the subscription closed")
			}
			r.mu.Lock()
			h, known := r.nodes[m.Channel]
			r.mu.Unlock()
			var req request
			if !known || json.Unmarshal([]byte(m.Payload), &req) != nil {
				continue
			}
			switch req.Kind {
			case kindState:
				r.Hub.Apply(h.tenant, h.id, req.State)
			case kindInvoke:
				calls.Go(func() { r.serve(ctx, h, req) })
			}
		}
	}
}

// serve makes one call on the hub and publishes its answer.
func (r *Relay) serve(ctx context.Context, h held, req request) {
	var resp response
	res, err := r.Hub.Invoke(ctx, h.tenant, h.id, req.Invoke, time.Duration(req.TimeoutMS)*time.Millisecond)
	switch {
	case err == nil:
		resp.Result = res
	case errors.Is(err, node.ErrNotConnected):
		resp.Error, resp.Message = "not_connected", err.Error()
	case errors.Is(err, node.ErrNotApproved):
		resp.Error, resp.Message = "not_approved", err.Error()
	case errors.Is(err, node.ErrTimeout):
		resp.Error, resp.Message = "timeout", err.Error()
	default:
		resp.Error, resp.Message = "failed", err.Error()
	}
	b, err := json.Marshal(resp)
	if err == nil {
		err = r.Redis.Publish(context.WithoutCancel(ctx), req.Reply, b).Err()
	}
	if err != nil {
		r.log().Warn("Could not answer a node call", "node", h.id, "err", err)
	}
}

// refresh renews the presence keys of the nodes held here.
func (r *Relay) refresh(ctx context.Context) {
	r.mu.Lock()
	list := make([]held, 0, len(r.nodes))
	for _, h := range r.nodes {
		list = append(list, h)
	}
	r.mu.Unlock()
	for _, h := range list {
		if err := r.Redis.Set(ctx, presenceKey(h.tenant, h.id), r.Holder, presenceTTL).Err(); err != nil {
			r.log().Warn("Could not renew a node's presence", "node", h.id, "err", err)
		}
	}
}

func (r *Relay) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
