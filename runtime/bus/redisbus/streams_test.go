package redisbus_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
)

// TestFetchStreams reads three streams in one XREADGROUP: each message says
// which stream it came from, groups are created where missing (a stream
// written before the group existed is read from its start), a blocked read
// wakes for a message on any of them, and a stream that vanished with its
// group is recreated.
func TestFetchStreams(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	b, err := redisbus.Open(needRedis(t), redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = b.Close() }()
	id := bus.NewID()[:8]
	streams := []string{bus.Key("fs-a"+id, "out"), bus.Key("fs-b"+id, "out"), bus.Key("fs-c"+id, "out")}

	g.Expect(b.Publish(ctx, streams[0], bus.Message{ID: "a1"}, bus.Message{ID: "a2"})).To(Succeed())
	g.Expect(b.Publish(ctx, streams[2], bus.Message{ID: "c1"})).To(Succeed())
	got, err := b.FetchStreams(ctx, streams, "gw", "r1", bus.FetchOptions{Count: 10})
	g.Expect(err).NotTo(HaveOccurred())
	from := map[string]string{}
	for _, m := range got {
		from[m.ID] = m.Stream
		g.Expect(b.Ack(ctx, m.Stream, "gw", m.Seq)).To(Succeed())
	}
	g.Expect(from).To(Equal(map[string]string{"a1": streams[0], "a2": streams[0], "c1": streams[2]}))

	// A blocked read over all three returns the message of the middle one.
	done := make(chan []bus.Message, 1)
	go func() {
		msgs, _ := b.FetchStreams(ctx, streams, "gw", "r1", bus.FetchOptions{Block: 10 * time.Second})
		done <- msgs
	}()
	g.Consistently(done).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())
	g.Expect(b.Publish(ctx, streams[1], bus.Message{ID: "b1"})).To(Succeed())
	var woke []bus.Message
	g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(&woke))
	g.Expect(woke).To(HaveLen(1))
	g.Expect(woke[0].ID).To(Equal("b1"))
	g.Expect(woke[0].Stream).To(Equal(streams[1]))

	// One stream vanishes, group and all: the read recreates it.
	g.Expect(b.Client().Del(ctx, streams[2]).Err()).To(Succeed())
	g.Expect(b.Publish(ctx, streams[2], bus.Message{ID: "c2"})).To(Succeed())
	got, err = b.FetchStreams(ctx, streams, "gw", "r1", bus.FetchOptions{Count: 10})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].ID).To(Equal("c2"))

	// Cancelling a blocked read ends it at once.
	cctx, cancel := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() {
		_, err := b.FetchStreams(cctx, streams, "gw", "r1", bus.FetchOptions{Block: time.Minute})
		ended <- err
	}()
	cancel()
	g.Eventually(ended).WithTimeout(5 * time.Second).Should(Receive(MatchError(context.Canceled)))
}
