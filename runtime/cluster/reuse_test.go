package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
)

// TestPodServesRunAfterRun: a session pod that answered a delegated run's
// one message goes back to the pool (registered warm again) instead of
// exiting, and serves the next run of its agent; one that gets no wake
// within the idle timeout exits then, as after a chat, leaving the
// registry.
func TestPodServesRunAfterRun(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	f.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "done"} })
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: f.llm.URL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	cfg := session.Config{Store: f.store, Loop: &agent.Loop{Provider: p}, Agent: "helper", Holder: "pod-a",
		Timeline: session.StoreTimeline{Store: f.store}, LeaseTTL: 3 * time.Second}
	rt := NewRuntime(RuntimeConfig{Tenant: f.tenant, Agent: "helper", Pod: "pod-a", Bus: f.bus, Redis: f.rdb, Store: f.store,
		Manager: session.NewManager(cfg), IdleTimeout: 3 * time.Second, LeaseTTL: 3 * time.Second,
		Delegated: func(ctx context.Context, _ protocol.Delegation) (context.Context, *session.Manager, error) {
			return ctx, session.NewManager(cfg), nil
		}})
	done := make(chan error, 1)
	ended := false
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stop()
		if !ended {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("runtime ended: %v", err)
			}
		}
	})
	go func() { done <- rt.Run(runCtx) }()
	state := func() string {
		return f.rdb.HGet(context.Background(), wake.PodsKey(f.tenant, "helper"), "pod-a").Val()
	}
	g.Eventually(state).Should(Equal("warm"))

	for i := range 3 {
		run := fmt.Sprintf("run-%d", i)
		ps, events, err := signals{f.rdb}.subscribe(runCtx, eventChannel(f.tenant, "helper", protocol.ChannelDelegate, run))
		g.Expect(err).NotTo(HaveOccurred())
		payload, err := protocol.EncodeInbound(protocol.Inbound{ID: run, Channel: protocol.ChannelDelegate, ChatKey: run, Text: "task",
			Delegation: &protocol.Delegation{RunID: run, ParentAgent: "lead", ParentSession: "web:c:default", Depth: 1}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(f.bus.Publish(runCtx, chatStream(f.tenant, "helper", protocol.ChannelDelegate, run), bus.Message{ID: run, Payload: payload})).To(Succeed())
		g.Expect(wake.Queue(runCtx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: protocol.ChannelDelegate, ChatKey: run})).To(Succeed())
		g.Eventually(events, 10*time.Second).Should(Receive(HaveField("Frame.Kind", protocol.FrameDone)), run)
		_ = ps.Close()
		g.Eventually(state, 10*time.Second).Should(Equal("warm"), "back in the pool after %s", run)
		g.Expect(done).NotTo(Receive(), "the pod is still running after %s", run)
	}

	g.Eventually(done, 20*time.Second).Should(Receive(BeNil()), "no wake within the idle timeout: the pod exits")
	g.Expect(f.rdb.HExists(context.Background(), wake.PodsKey(f.tenant, "helper"), "pod-a").Val()).To(BeFalse())
	ended = true
}
