package redisbus_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/bustest"
	"github.com/picobot/picobot/runtime/bus/redisbus"
)

func TestConformance(t *testing.T) {
	url := needRedis(t)
	bustest.Run(t, func(t *testing.T) bus.Bus {
		b, err := redisbus.Open(url, redisbus.Options{MaxLen: bustest.MaxLen})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestGroupRecreatedAfterStreamVanished covers a stream that disappears under
// its consumers (deleted, or lost by a Redis restart without AOF): the next
// fetch meets NOGROUP, creates stream and group again and reads what is new.
func TestGroupRecreatedAfterStreamVanished(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	b, err := redisbus.Open(needRedis(t), redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = b.Close() }()
	s := bus.Key("redisbus", t.Name()+bus.NewID()[:8], "in")

	g.Expect(b.Publish(ctx, s, bus.Message{ID: "before"})).To(Succeed())
	got, err := b.Fetch(ctx, s, "g", "c", bus.FetchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))

	g.Expect(b.Client().Del(ctx, s).Err()).To(Succeed())
	g.Expect(b.Publish(ctx, s, bus.Message{ID: "after"})).To(Succeed())
	got, err = b.Fetch(ctx, s, "g", "c", bus.FetchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].ID).To(Equal("after"))
	g.Expect(b.Ack(ctx, s, "g", got[0].Seq)).To(Succeed())

	g.Expect(b.Client().Del(ctx, s).Err()).To(Succeed())
	g.Expect(b.Claim(ctx, s, "g", "c", 0, 10)).To(BeEmpty(), "a vanished group has nothing to claim")
	g.Expect(b.Pending(ctx, s, "g", 10)).To(BeEmpty())
	g.Expect(b.Ack(ctx, s, "g", got[0].Seq)).To(Succeed())
}

// TestEntryLayout pins the stored fields, which other tools (redis-cli, a
// future reader in another language) see.
func TestEntryLayout(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	b, err := redisbus.Open(needRedis(t), redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = b.Close() }()
	s := bus.Key("redisbus", t.Name()+bus.NewID()[:8], "in")
	g.Expect(b.Publish(ctx, s, bus.Message{ID: "m1", Payload: []byte("hi"), Headers: map[string]string{bus.HeaderTraceparent: "tp"}})).To(Succeed())
	entries, err := b.Client().XRange(ctx, s, "-", "+").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1))
	g.Expect(entries[0].Values).To(Equal(map[string]any{"id": "m1", "p": "hi", "h:traceparent": "tp"}))
}
