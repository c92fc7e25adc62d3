package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/store"
)

// delivered is what the relay handed its dispatcher, with the tenant of the
// context it delivered under.
type delivered struct {
	tenant string
	msg    outbound.Message
}

// recordingDeliverer stands in for the gateway's outbound dispatcher (whose
// own tests deliver to real channels): it records what it is asked to
// deliver and answers with a result naming the tenant and target.
type recordingDeliverer struct {
	mu  sync.Mutex
	got []delivered
}

func (d *recordingDeliverer) Deliver(ctx context.Context, m outbound.Message) (outbound.Result, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return outbound.Result{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, delivered{tenant: tenant, msg: m})
	return outbound.Result{DeliveryID: tenant + "|" + m.Target}, nil
}

// Act implements Deliverer; TestOutboundRelayRunsChannelActions runs
// actions on a real dispatcher instead.
func (d *recordingDeliverer) Act(context.Context, string, string, channel.ActionRequest) (channel.ActionResult, error) {
	return channel.ActionResult{}, errors.New("recordingDeliverer runs no actions")
}

func (d *recordingDeliverer) delivered() []delivered {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivered(nil), d.got...)
}

// tenantBus provisions tenant's own Redis ACL user (as the operator does)
// and returns a bus logged in as it, as the tenant's session pods are.
func tenantBus(t *testing.T, admin *redis.Client, tenant string) *redisbus.Bus {
	t.Helper()
	users := redisbus.NewTenantUsers(admin, "pbrelay-"+bus.NewID()[:6]+"-")
	if err := users.Ensure(t.Context(), tenant, "pw-"+tenant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = users.Drop(context.Background(), tenant) })
	// Options of their own: a copy of the admin client's would share its
	// live maintenance-notification settings, which go-redis updates while
	// the relay's connections start (a data race).
	opts := &redis.Options{Addr: admin.Options().Addr, Username: users.UserName(tenant), Password: "pw-" + tenant}
	b := redisbus.New(redis.NewClient(opts), redisbus.Options{})
	t.Cleanup(func() { _ = b.Close(); _ = b.Client().Close() })
	return b
}

// TestOutboundRelayReadsEachTenantsStream runs the gateway's relay over the
// outbound streams of tenants, one blocking read per tenant here
// (StreamsPerRead 1): a pod logged in as its tenant's own Redis user queues
// a message and gets the delivery result; the tenant is the stream's, and an
// entry naming another tenant is dropped; a tenant that gets its first
// Agent after the relay started is read too.
func TestOutboundRelayReadsEachTenantsStream(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	ta, tb, tc := f.tenant+"-a", f.tenant+"-b", f.tenant+"-c"
	tenants := NewTenantSet()
	tenants.Add(ta, "helper")
	tenants.Add(tb, "helper")
	del := &recordingDeliverer{}
	relay := &OutboundRelay{Bus: f.bus, Redis: f.rdb, Dispatcher: del, Tenants: tenants, Consumer: "gw-1", StreamsPerRead: 1}
	done := make(chan error, 1)
	go func() { done <- relay.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		g.Expect(<-done).To(Succeed())
	})

	podA := tenantBus(t, f.rdb, ta)
	sender := RemoteSender{Bus: podA, Redis: podA.Client()}
	res, err := sender.Deliver(store.WithTenant(ctx, ta), outbound.Message{Agent: "helper", Target: "web:alice", Text: "from a"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.DeliveryID).To(Equal(ta+"|web:alice"), "the result came back on a's result channel")
	g.Expect(QueueReply(store.WithTenant(ctx, tb), f.bus, tb, outbound.Message{Agent: "helper", Target: "telegram:1", Text: "from b"})).To(Succeed())

	// A's user cannot queue on b's stream, and a request it forges on its
	// own stream naming b is dropped.
	err = wake.QueueOutbound(ctx, podA, wake.OutboundRequest{ID: bus.NewID(), Tenant: tb, Message: wake.OutboundMessage{Target: "web:x", Text: "forged"}})
	g.Expect(err).To(MatchError(ContainSubstring("NOPERM")))
	forged, _ := json.Marshal(wake.OutboundRequest{ID: "forged", Tenant: tb, Message: wake.OutboundMessage{Target: "web:x", Text: "forged"}})
	g.Expect(podA.Publish(ctx, wake.OutboundStream(ta), bus.Message{ID: "forged", Payload: forged})).To(Succeed())

	// c gets its first Agent.
	tenants.Add(tc, "helper")
	g.Expect(QueueReply(ctx, f.bus, tc, outbound.Message{Agent: "helper", Target: "web:carol", Text: "from c"})).To(Succeed())

	g.Eventually(del.delivered).WithTimeout(15 * time.Second).Should(ConsistOf(
		delivered{tenant: ta, msg: outbound.Message{Agent: "helper", Target: "web:alice", Text: "from a"}},
		delivered{tenant: tb, msg: outbound.Message{Agent: "helper", Target: "telegram:1", Text: "from b"}},
		delivered{tenant: tc, msg: outbound.Message{Agent: "helper", Target: "web:carol", Text: "from c"}},
	))
	// Everything was acked, the forged entry included.
	g.Eventually(func(g Gomega) {
		for _, tenant := range []string{ta, tb, tc} {
			p, err := f.bus.Pending(ctx, wake.OutboundStream(tenant), groupGateway, 10)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p).To(BeEmpty(), fmt.Sprintf("pending on %s", tenant))
		}
	}).WithTimeout(5 * time.Second).Should(Succeed())
	g.Consistently(del.delivered).WithTimeout(500 * time.Millisecond).Should(HaveLen(3))
}

// TestOutboundRelayRunsChannelActions: a session pod, logged in as its
// tenant's Redis user, has no channel credentials; the message tool's
// actions and sends go over the tenant's outbound stream to the gateway's
// relay, whose real dispatcher runs them on the tenant's channel against a
// local Telegram Bot API. Another tenant's pod naming the same agent and
// channel reaches nothing.
func TestOutboundRelayRunsChannelActions(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	ta, tb := f.tenant+"-a", f.tenant+"-b"

	var mu sync.Mutex
	var calls []string
	bot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, r.URL.Path+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch path.Base(r.URL.Path) {
		case "setMessageReaction":
			_, _ = io.WriteString(w, `{"ok":true,"result":true}`)
		case "sendMessage":
			_, _ = io.WriteString(w, `{"ok":true,"result":{"message_id":43,"date":1700000000,"chat":{"id":555,"type":"private"},"text":"hi"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
		}
	}))
	t.Cleanup(bot.Close)
	mgr := channel.NewManager(channel.Options{BaseURLs: channel.BaseURLs{Telegram: bot.URL}})
	agent := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: ta},
		Spec: picobotv1alpha1.AgentSpec{Channels: []picobotv1alpha1.Channel{{Type: channel.TypeTelegram, Name: "tg",
			SecretRef: &corev1.LocalObjectReference{Name: "tg"}}}}}
	g.Expect(mgr.SetAgent(ta, agent, func(string) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{channel.KeyTelegramToken: []byte("123:tenant-a-token")}}
	})).To(Succeed())
	disp, err := outbound.New(outbound.Config{Store: f.store, Channels: mgr, Web: outbound.StoredOnly{}})
	g.Expect(err).NotTo(HaveOccurred())

	tenants := NewTenantSet()
	tenants.Add(ta, "helper")
	tenants.Add(tb, "helper")
	relay := &OutboundRelay{Bus: f.bus, Redis: f.rdb, Dispatcher: disp, Tenants: tenants, Consumer: "gw-1"}
	done := make(chan error, 1)
	go func() { done <- relay.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		g.Expect(<-done).To(Succeed())
	})

	podA := tenantBus(t, f.rdb, ta)
	sender := RemoteSender{Bus: podA, Redis: podA.Client()}
	actx := store.WithTenant(ctx, ta)
	res, err := sender.Act(actx, "helper", "tg", channel.ActionRequest{Action: channel.ActionReact, ChatID: "555", MessageID: "42", Emoji: "👍"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Summary).To(Equal("reacted 👍 to message 42"))
	sent, err := sender.Deliver(actx, outbound.Message{Agent: "helper", Target: "tg:555", Text: "hi"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sent.Receipt.MessageIDs).To(Equal([]string{"43"}))
	mu.Lock()
	g.Expect(calls).To(Equal([]string{
		`/bot123:tenant-a-token/setMessageReaction {"chat_id":"555","message_id":42,"reaction":[{"emoji":"👍","type":"emoji"}]}`,
		`/bot123:tenant-a-token/sendMessage {"chat_id":"555","text":"hi"}`,
	}), "the gateway called the platform with the tenant's bot token, which the pod never had")
	mu.Unlock()

	// What the platform lacks comes back as an error naming the channel.
	_, err = sender.Act(actx, "helper", "tg", channel.ActionRequest{Action: channel.ActionRead, ChatID: "555"})
	g.Expect(err).To(MatchError(ContainSubstring(`channel "tg" (telegram) does not support action "read"`)))

	// Tenant b has no such channel: its request is run as b's, not a's.
	podB := tenantBus(t, f.rdb, tb)
	_, err = RemoteSender{Bus: podB, Redis: podB.Client()}.Act(store.WithTenant(ctx, tb), "helper", "tg",
		channel.ActionRequest{Action: channel.ActionReact, ChatID: "555", MessageID: "42", Emoji: "👎"})
	g.Expect(err).To(MatchError(ContainSubstring(`unknown channel: unknown agent "helper"`)))
	mu.Lock()
	g.Expect(calls).To(HaveLen(2), "nothing reached the platform for tenant b")
	mu.Unlock()
}

// TestStaleActionsAreDropped: of the requests a dead replica left pending,
// channel actions are dropped (their callers gave up), deliveries are not.
func TestStaleActionsAreDropped(t *testing.T) {
	g := NewWithT(t)
	action, _ := json.Marshal(wake.OutboundRequest{ID: "a", Tenant: "t", Wait: true, Message: wake.OutboundMessage{Agent: "helper"},
		Action: &wake.OutboundAction{Channel: "tg", Request: json.RawMessage(`{"action":"thread-reply","chat_id":"1","text":"x"}`)}})
	delivery, _ := json.Marshal(wake.OutboundRequest{ID: "d", Tenant: "t", Wait: true, Message: wake.OutboundMessage{Agent: "helper", Target: "tg:1", Text: "x"}})
	g.Expect(staleAction(bus.Message{Payload: action})).To(BeTrue())
	g.Expect(staleAction(bus.Message{Payload: delivery})).To(BeFalse())
	g.Expect(staleAction(bus.Message{Payload: []byte("{")})).To(BeFalse(), "a malformed request is left to deliver, which drops it with a log")
}
