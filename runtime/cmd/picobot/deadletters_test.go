package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/test/services"
)

// TestDeadLettersListAndRequeue lists and requeues a tenant's dead letters
// on a real Redis: the requeued message is back on its chat's stream as it
// was first queued, gone from the dead-letter stream, and another tenant's
// dead letters are not touched.
func TestDeadLettersListAndRequeue(t *testing.T) {
	g := NewWithT(t)
	url := services.RedisFor(t)
	b, err := redisbus.Open(url, redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = b.Close() }()
	ctx := context.Background()
	letter := func(tenant, id, text string) {
		stream := protocol.ChatStream(tenant, "helper", protocol.ChannelWeb, "helper/u1")
		payload, err := protocol.EncodeInbound(protocol.Inbound{ID: id, Channel: protocol.ChannelWeb, ChatKey: "helper/u1", Text: text})
		g.Expect(err).NotTo(HaveOccurred())
		dl, _ := json.Marshal(sessionrt.DeadLetter{Stream: stream, MessageID: id, Deliveries: 6, Payload: payload})
		g.Expect(b.Publish(ctx, sessionrt.DeadLetterStream(tenant), bus.Message{ID: id, Payload: dl})).To(Succeed())
	}
	letter("team-a", "helper/u1/m1", "crash the runtime")
	letter("team-a", "helper/u1/m2", "again")
	letter("team-b", "helper/u1/m9", "other tenant")

	var out bytes.Buffer
	g.Expect(deadLetters([]string{"--tenant", "team-a", "--redis-url", url}, &out)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("helper/u1/m1  6"))
	g.Expect(out.String()).To(ContainSubstring(`"crash the runtime"`))
	g.Expect(out.String()).To(ContainSubstring("2 dead letters of tenant team-a"))
	g.Expect(out.String()).NotTo(ContainSubstring("m9"))

	out.Reset()
	g.Expect(deadLetters([]string{"--tenant", "team-a", "--redis-url", url, "requeue", "helper/u1/m1"}, &out)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("1 requeued"))
	chat := protocol.ChatStream("team-a", "helper", protocol.ChannelWeb, "helper/u1")
	back, err := b.Range(ctx, chat, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back).To(HaveLen(1))
	g.Expect(back[0].ID).To(Equal("helper/u1/m1"))
	in, err := protocol.DecodeInbound(back[0].Payload)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Text).To(Equal("crash the runtime"))
	left, err := b.Len(ctx, sessionrt.DeadLetterStream("team-a"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(Equal(int64(1)))

	err = deadLetters([]string{"--tenant", "team-a", "--redis-url", url, "requeue", "helper/u1/nope"}, &out)
	g.Expect(err).To(MatchError(ContainSubstring(`no dead letter of tenant team-a has message id ["helper/u1/nope"]`)))
	g.Expect(deadLetters([]string{"--tenant", "team-a", "--redis-url", url, "requeue", "--all"}, &out)).To(Succeed())
	for tenant, want := range map[string]int64{"team-a": 0, "team-b": 1} {
		n, err := b.Len(ctx, sessionrt.DeadLetterStream(tenant))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(want), tenant)
	}
	g.Expect(deadLetters([]string{"--redis-url", url}, &out)).To(MatchError(ContainSubstring("--tenant")))
}
