package noderedis_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/noderedis"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/test/services"
)

// answeringPeer stands for a node's WebSocket (the boundary the gateway
// writes frames to): it answers every invoke through the hub, as the
// gateway does with a node's result frame, and records what it is told.
type answeringPeer struct {
	hub        *node.Hub
	tenant, id string
	states     chan string
	closed     chan string
}

func (p *answeringPeer) Send(typ string, payload any) {
	switch typ {
	case node.FrameState:
		p.states <- payload.(node.State).State
	case node.FrameInvoke:
		inv := payload.(node.Invoke)
		go p.hub.Deliver(p.tenant, p.id, node.Result{ID: inv.ID, Text: "did " + inv.Action + " " + string(inv.Params)})
	}
}

func (p *answeringPeer) Close(reason string) { p.closed <- reason }

// TestCallsCrossReplicas has a session pod's service (store and Redis only)
// approve, call and revoke a node whose connection a gateway replica holds,
// over a real Redis: the state reaches the node's connection, the call its
// answer, presence says where it is connected, and a node that went is
// reported as not connected.
func TestCallsCrossReplicas(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	opt, err := redis.ParseURL(services.RedisFor(t))
	g.Expect(err).NotTo(HaveOccurred())
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()

	// The gateway replica: the hub, its relay, and its own service.
	hub := node.NewHub()
	relay := &noderedis.Relay{Redis: rdb, Hub: hub, Holder: "gateway-0"}
	relay.Follow(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	}()
	gw := &node.Service{Store: st, Hub: hub, Remote: noderedis.Remote{Redis: rdb}}
	// The session pod: no hub.
	pod := &node.Service{Store: st, Remote: noderedis.Remote{Redis: rdb}}

	tctx := store.WithTenant(ctx, "acme")
	peer := &answeringPeer{hub: hub, tenant: "acme", id: "laptop", states: make(chan string, 4), closed: make(chan string, 1)}
	n, detach, err := gw.Connect(tctx, node.Hello{ID: "laptop", Name: "Laptop", Capabilities: []string{node.ActionRun}}, peer)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.State).To(Equal(store.NodePending))
	g.Eventually(func() (bool, error) {
		s, err := pod.Get(tctx, "laptop")
		return s.Connected, err
	}).Should(BeTrue(), "the pod sees the node connected through its presence key")

	_, err = pod.Invoke(tctx, "laptop", node.Invoke{Action: node.ActionRun}, time.Second)
	g.Expect(err).To(MatchError(node.ErrNotApproved))

	_, err = pod.Decide(tctx, "laptop", node.DecisionApprove)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(peer.states).Should(Receive(Equal("approved")), "the decision reached the replica holding the node")

	res, err := pod.Invoke(tctx, "laptop", node.Invoke{Action: node.ActionRun, Params: []byte(`{"command":["true"]}`)}, 10*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Text).To(Equal(`did run {"command":["true"]}`))

	// Another tenant's pod does not reach it.
	_, err = pod.Invoke(store.WithTenant(ctx, "other"), "laptop", node.Invoke{Action: node.ActionRun}, time.Second)
	g.Expect(err).To(MatchError(store.ErrNotFound))

	// Once the node went, calls say it is not connected.
	detach()
	g.Eventually(func() (bool, error) {
		s, err := pod.Get(tctx, "laptop")
		return s.Connected, err
	}).Should(BeFalse())
	_, err = pod.Invoke(tctx, "laptop", node.Invoke{Action: node.ActionRun}, time.Second)
	g.Expect(err).To(MatchError(node.ErrNotConnected))

	// Revoked from the pod while connected again: the connection closes.
	peer2 := &answeringPeer{hub: hub, tenant: "acme", id: "laptop", states: make(chan string, 4), closed: make(chan string, 1)}
	_, detach2, err := gw.Connect(tctx, node.Hello{ID: "laptop", Name: "Laptop", Capabilities: []string{node.ActionRun}}, peer2)
	g.Expect(err).NotTo(HaveOccurred())
	defer detach2()
	g.Eventually(func() (bool, error) {
		s, err := pod.Get(tctx, "laptop")
		return s.Connected, err
	}).Should(BeTrue())
	_, err = pod.Decide(tctx, "laptop", node.DecisionRevoke)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(peer2.closed).Should(Receive(ContainSubstring("revoked")))
	_, _, err = gw.Connect(tctx, node.Hello{ID: "laptop"}, peer2)
	g.Expect(err).To(MatchError(node.ErrRefused), "a revoked node may not come back")
}
