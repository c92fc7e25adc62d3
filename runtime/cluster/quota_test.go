package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
)

// TestBudgetExhaustedToldToAPlatformChatOnce: a session pod whose tenant's
// budget is spent refuses every message of a chat platform's chat with
// budget_exhausted (each refusal on the chat's event channel), and queues
// the chat one reply saying so, not one per message, whichever of two pods
// refuses it: the notice is claimed in the store.
func TestBudgetExhaustedToldToAPlatformChatOnce(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := context.Background()
	tctx := store.WithTenant(ctx, f.tenant)
	g.Expect(f.store.AddUsage(tctx, store.UsageDelta{Agent: "helper", Day: time.Now(), UsageCounts: store.UsageCounts{InputTokens: 5}})).To(Succeed())
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: f.llm.URL(), APIKey: "k"})
	g.Expect(err).NotTo(HaveOccurred())
	meter := &quota.Meter{Store: f.store, Tenant: f.tenant, Agent: "helper", Clock: clock.RealClock{}, Log: slog.New(slog.DiscardHandler),
		Budget: func(string) quota.Budget { return quota.Budget{DayTokens: 5} }}
	podRuntime := func(pod string) *Runtime {
		mgr := session.NewManager(session.Config{Store: f.store, Loop: &agent.Loop{Provider: meter.Guard(meter.Count("openai/m", p))},
			Agent: "helper", Holder: pod, Timeline: session.StoreTimeline{Store: f.store}, LeaseTTL: 3 * time.Second})
		return NewRuntime(RuntimeConfig{Tenant: f.tenant, Agent: "helper", Pod: pod, Bus: f.bus, Redis: f.rdb, Store: f.store,
			Manager: mgr, IdleTimeout: 500 * time.Millisecond, LeaseTTL: 3 * time.Second})
	}
	const channel, chat = "tg", "42"
	ps, events, err := signals{f.rdb}.subscribe(ctx, eventChannel(f.tenant, "helper", channel, chat))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = ps.Close() })

	// Two pods, one after the other, each refusing two messages.
	for i, pod := range []string{"pod-a", "pod-b"} {
		rt := podRuntime(pod)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rt.Run(runCtx) }()
		for j := range 2 {
			id := fmt.Sprintf("%s/%s/%d", channel, chat, 2*i+j)
			payload, _ := json.Marshal(Inbound{ID: id, Channel: channel, ChatKey: chat, Text: "status?"})
			g.Expect(f.bus.Publish(ctx, chatStream(f.tenant, "helper", channel, chat), bus.Message{ID: id, Payload: payload})).To(Succeed())
			g.Expect(wake.Publish(ctx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: channel, ChatKey: chat})).To(Succeed())
			var e received
			g.Eventually(events, 10*time.Second).Should(Receive(&e, HaveField("MessageID", id)))
			for e.Kind != protocol.FrameError {
				g.Eventually(events, 10*time.Second).Should(Receive(&e))
			}
			g.Expect(e.Code).To(Equal(protocol.CodeBudgetExhausted))
		}
		g.Eventually(done, 20*time.Second).Should(Receive(Not(HaveOccurred())), "idle: the pod exits")
		stop()
	}
	entries, err := f.rdb.XRange(ctx, wake.OutboundStream(f.tenant), "-", "+").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1), "one notice for four refused messages")
	var req wake.OutboundRequest
	g.Expect(json.Unmarshal([]byte(entries[0].Values["p"].(string)), &req)).To(Succeed())
	g.Expect(req.Message.Target).To(Equal("tg:42"))
	g.Expect(req.Message.Text).To(ContainSubstring("model budget exhausted: today's model budget of 5 tokens is spent (5 used)"))
	g.Expect(f.llm.Requests()).To(BeEmpty(), "the model is never asked")
}
