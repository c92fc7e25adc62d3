package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool/bot"
)

// bot_status in cluster mode reads what a real session pod keeps in Redis:
// a warm pod with no heartbeat, then the pod busy with a chat whose
// heartbeat is younger than the lease, its turn running, and a wake for
// another chat that no pod has taken waiting.
func TestBotStatusReadsThePods(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := context.Background()
	release := make(chan struct{})
	f.llm.Respond(func(fakellm.Recorded) fakellm.Turn { <-release; return fakellm.Turn{Text: "done"} })
	const ttl = 3 * time.Second
	rt := f.runtime(t, "pod-a", 2*time.Second, ttl)
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- rt.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("runtime ended: %v", err)
		}
	})
	status := BotStatus{Redis: f.rdb, LeaseTTL: ttl}

	g.Eventually(func() ([]bot.Instance, error) { return status.Instances(ctx, f.tenant, "helper") }).
		Should(Equal([]bot.Instance{{ID: "pod-a", Kind: "session pod", State: "warm"}}))
	g.Expect(status.Queue(ctx, f.tenant, "helper")).To(Equal(bot.Queue{}))

	f.queue(t, "helper/bob", "helper/bob/1", "hi")
	var in []bot.Instance
	g.Eventually(func() string {
		in, _ = status.Instances(ctx, f.tenant, "helper")
		if len(in) != 1 {
			return ""
		}
		return in[0].State
	}, 10*time.Second).Should(Equal("busy web helper/bob"))
	g.Expect(in[0].HeartbeatAge).NotTo(BeNil())
	g.Expect(*in[0].HeartbeatAge).To(And(BeNumerically(">=", 0), BeNumerically("<", ttl.Seconds())))
	g.Expect(wake.Publish(ctx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: "web", ChatKey: "helper/carol"})).To(Succeed())
	g.Expect(status.Queue(ctx, f.tenant, "helper")).To(Equal(bot.Queue{Waiting: 1, Running: 1}))
	close(release)
}
