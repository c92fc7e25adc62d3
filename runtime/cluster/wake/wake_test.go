package wake_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
)

// The keys are the protocol between the gateway, session pods and the
// operator: each side builds them from these functions, so their exact form
// (the tenant first, the tenant and agent as the hash tag, escaped parts) is
// what this pins down.
func TestKeys(t *testing.T) {
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"chat stream", wake.ChatStream("acme", "helper", "web", "alice:1"), "{acme:helper}:chat:web:alice%3A1"},
		{"wake stream", wake.Stream("acme", "helper"), "{acme:helper}:wake"},
		{"event channel", wake.EventChannel("acme", "helper", "telegram", "42"), "{acme:helper}:events:telegram:42"},
		{"control channel", wake.ControlChannel("acme", "helper", "web", "a{b}"), "{acme:helper}:control:web:a%7Bb%7D"},
		{"owner key", wake.OwnerKey("acme", "helper", "web", "alice"), "{acme:helper}:owner:web:alice"},
		{"pods key", wake.PodsKey("acme", "helper"), "{acme:helper}:pods"},
		{"agent names are escaped too", wake.Stream("acme", "a:b"), "{acme:a%3Ab}:wake"},
		{"chat lease", wake.LeaseKey("web", "alice:1"), "chat:web:alice:1"},
		{"delivery result", wake.ResultChannel("acme", "r1"), "{acme:outbound-result}:r1"},
		{"run result", wake.RunResultChannel("acme", "run-7"), "{acme:run-result}:run-7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.got).To(Equal(tc.want))
		})
	}
}

// The chat stream and its group are the session runtime's (package
// protocol): the gateway writes where the runtime reads.
func TestChatStreamIsTheProtocols(t *testing.T) {
	g := NewWithT(t)
	g.Expect(wake.ChatStream("acme", "helper", "web", "alice:1")).To(Equal(protocol.ChatStream("acme", "helper", "web", "alice:1")))
	g.Expect(wake.GroupRuntime).To(Equal(protocol.ChatGroup))
	g.Expect(wake.RunChannel).To(Equal(protocol.ChannelCron))
	// One agent's keys never collide with another agent's.
	g.Expect(wake.Stream("acme", "a")).NotTo(Equal(wake.Stream("acme", "a:wake")))
	g.Expect(wake.PodsKey("acme", "a")).NotTo(Equal(wake.PodsKey("acme", "a}:pods")))
}

func fetchAll(t *testing.T, b bus.Bus, stream string) []bus.Message {
	t.Helper()
	msgs, err := b.Fetch(context.Background(), stream, "test", "c", bus.FetchOptions{Count: 10})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return msgs
}

func TestPublish(t *testing.T) {
	g := NewWithT(t)
	b := membus.New(membus.Options{})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()

	before := time.Now()
	g.Expect(wake.Publish(ctx, b, wake.Wake{Tenant: "acme", Agent: "helper", Channel: "web", ChatKey: "alice"})).To(Succeed())
	after := time.Now()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	run := &wake.Run{RunID: "r1", Job: "acme/disk", JobName: "Disk", ScheduledTime: at, Prompt: "Check the disk."}
	g.Expect(wake.Publish(ctx, b, wake.Wake{Tenant: "acme", Agent: "helper", Channel: wake.RunChannel, ChatKey: "run-r1", At: at, Run: run})).To(Succeed())

	// The agent's pods get both wakes, in order; the operator a copy of each.
	pods := fetchAll(t, b, wake.Stream("acme", "helper"))
	notices := fetchAll(t, b, wake.Notices)
	g.Expect(pods).To(HaveLen(2))
	g.Expect(notices).To(HaveLen(2))
	for i := range pods {
		g.Expect(notices[i].Payload).To(MatchJSON(pods[i].Payload))
		g.Expect(pods[i].ID).NotTo(BeEmpty())
		g.Expect(notices[i].ID).NotTo(Equal(pods[i].ID), "each stream's entry has an id of its own")
	}
	g.Expect(fetchAll(t, b, wake.Stream("acme", "other"))).To(BeEmpty(), "another agent's pods are not woken")

	var chat wake.Wake
	g.Expect(json.Unmarshal(pods[0].Payload, &chat)).To(Succeed())
	g.Expect(chat.At).To(BeTemporally(">=", before.Truncate(time.Second)), "a wake without a time is stamped now")
	g.Expect(chat.At).To(BeTemporally("<=", after))
	chat.At = time.Time{}
	g.Expect(chat).To(Equal(wake.Wake{Tenant: "acme", Agent: "helper", Channel: "web", ChatKey: "alice"}))
	g.Expect(pods[0].Payload).NotTo(ContainSubstring(`"run"`), "a chat's wake carries no run")

	var scheduled wake.Wake
	g.Expect(json.Unmarshal(pods[1].Payload, &scheduled)).To(Succeed())
	g.Expect(scheduled).To(Equal(wake.Wake{Tenant: "acme", Agent: "helper", Channel: "cron", ChatKey: "run-r1", At: at, Run: run}))
	g.Expect(pods[1].Payload).To(MatchJSON(`{"tenant":"acme","agent":"helper","channel":"cron","chat_key":"run-r1","at":"2030-01-02T03:04:05Z",
		"run":{"run_id":"r1","job":"acme/disk","job_name":"Disk","scheduled_time":"2030-01-02T03:04:05Z","prompt":"Check the disk."}}`))
}

func TestPublishOnAClosedBus(t *testing.T) {
	g := NewWithT(t)
	b := membus.New(membus.Options{})
	g.Expect(b.Close()).To(Succeed())
	err := wake.Publish(context.Background(), b, wake.Wake{Tenant: "acme", Agent: "helper", Channel: "web", ChatKey: "alice"})
	g.Expect(err).To(MatchError(ContainSubstring("failed to wake a runtime")))
	g.Expect(err).To(MatchError(bus.ErrClosed))
	err = wake.QueueOutbound(context.Background(), b, wake.OutboundRequest{ID: "x", Tenant: "acme"})
	g.Expect(err).To(MatchError(ContainSubstring("failed to queue outbound message")))
	g.Expect(err).To(MatchError(bus.ErrClosed))
	err = wake.QueueOutbound(context.Background(), b, wake.OutboundRequest{ID: "x"})
	g.Expect(err).To(MatchError(`failed to queue outbound message "x": no tenant`))
}

func TestQueueOutbound(t *testing.T) {
	g := NewWithT(t)
	b := membus.New(membus.Options{})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	req := wake.OutboundRequest{ID: "req-1", Tenant: "acme", Wait: true,
		Message: wake.OutboundMessage{Agent: "helper", Target: "telegram:42", Text: "Disk at 95%", Origin: "notice-1", Stored: true},
		Files:   []wake.OutboundFile{{Name: "df.txt", MediaType: "text/plain", Data: []byte("95%")}}}
	g.Expect(wake.QueueOutbound(ctx, b, req)).To(Succeed())
	g.Expect(wake.QueueOutbound(ctx, b, wake.OutboundRequest{ID: "req-2", Tenant: "acme", Message: wake.OutboundMessage{Target: "web:alice", Text: "hi"}})).To(Succeed())

	msgs := fetchAll(t, b, wake.OutboundStream("acme"))
	g.Expect(msgs).To(HaveLen(2))
	g.Expect(msgs[0].ID).To(Equal("req-1"), "the request's id is the message's, so a retried request is delivered once")
	var got wake.OutboundRequest
	g.Expect(json.Unmarshal(msgs[0].Payload, &got)).To(Succeed())
	g.Expect(got).To(Equal(req))
	g.Expect(msgs[0].Payload).To(ContainSubstring(`"data":"OTUl"`), "files travel base64-encoded")
	g.Expect(msgs[1].ID).To(Equal("req-2"))
	g.Expect(msgs[1].Payload).NotTo(ContainSubstring(`"files"`))
	g.Expect(msgs[1].Payload).To(ContainSubstring(`"wait":false`))
}
