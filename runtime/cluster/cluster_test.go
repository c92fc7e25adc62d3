package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/turn"
	"github.com/picobot/picobot/test/services"
)

var redisURL, skipReason string

func TestMain(m *testing.M) {
	url, stop, err := services.Redis()
	if err != nil {
		reason, fatal := services.Unavailable("Redis", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipReason = reason
	} else {
		redisURL = url
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	// Every runtime, backend and subscription a test started must have
	// ended: a leaked heartbeat or consumer would keep a chat's lease.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type fixture struct {
	bus    *redisbus.Bus
	rdb    *redis.Client
	store  store.Store
	llm    *fakellm.Server
	tenant string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED LOUDLY: " + skipReason)
	}
	g := NewWithT(t)
	b, err := redisbus.Open(redisURL, redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = b.Close() })
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	return &fixture{bus: b, rdb: b.Client(), store: st, llm: llm, tenant: fmt.Sprintf("t%d", time.Now().UnixNano())}
}

func (f *fixture) runtime(t *testing.T, pod string, idle, ttl time.Duration) *Runtime {
	t.Helper()
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: f.llm.URL(), APIKey: "k"})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	mgr := session.NewManager(session.Config{Store: f.store, Loop: &agent.Loop{Provider: p}, Agent: "helper", Holder: pod,
		Timeline: session.StoreTimeline{Store: f.store}, LeaseTTL: ttl})
	return NewRuntime(RuntimeConfig{Tenant: f.tenant, Agent: "helper", Pod: pod, Bus: f.bus, Redis: f.rdb, Store: f.store,
		Manager: mgr, IdleTimeout: idle, LeaseTTL: ttl})
}

// queue publishes a user message to the chat and a wake, as the gateway does.
func (f *fixture) queue(t *testing.T, chat, id, text string) {
	t.Helper()
	ctx := context.Background()
	payload, _ := json.Marshal(Inbound{ID: id, Channel: "web", ChatKey: chat, Text: text})
	g := NewWithT(t)
	g.Expect(f.bus.Publish(ctx, chatStream(f.tenant, "helper", "web", chat), bus.Message{ID: id, Payload: payload})).To(Succeed())
	g.Expect(wake.Publish(ctx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: "web", ChatKey: chat})).To(Succeed())
}

// events collects a chat's event channel.
func (f *fixture) events(t *testing.T, chat string) func() []protocol.Frame {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ps, ch, err := signals{f.rdb}.subscribe(ctx, eventChannel(f.tenant, "helper", "web", chat))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	var got []protocol.Frame
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range ch {
			mu.Lock()
			got = append(got, e.Frame)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = ps.Close(); <-done })
	return func() []protocol.Frame {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

func kinds(es []protocol.Frame) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Kind)
	}
	return out
}

func TestWarmRuntimeServesAChatUntilIdle(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	f.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: fmt.Sprintf("answer %d", len(r.Messages))}
	})
	got := f.events(t, "helper/bob")
	rt := f.runtime(t, "pod-a", 1500*time.Millisecond, 3*time.Second)
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("runtime ended: %v", err)
		}
	})
	go func() { done <- rt.Run(runCtx); done <- nil }()
	g.Eventually(func() string {
		return f.rdb.HGet(context.Background(), wake.PodsKey(f.tenant, "helper"), "pod-a").Val()
	}).Should(Equal("warm"))

	f.queue(t, "helper/bob", "helper/bob/1", "hi")
	g.Eventually(got, 10*time.Second).Should(ContainElement(HaveField("Kind", protocol.FrameDone)))
	g.Expect(f.rdb.HGet(context.Background(), wake.PodsKey(f.tenant, "helper"), "pod-a").Val()).To(Equal("busy web helper/bob"))
	owner := f.rdb.Get(context.Background(), ownerKey(f.tenant, "helper", "web", "helper/bob")).Val()
	g.Expect(owner).To(Equal("pod-a"))
	f.queue(t, "helper/bob", "helper/bob/2", "again")
	g.Eventually(func() int {
		n := 0
		for _, e := range got() {
			if e.Kind == protocol.FrameDone {
				n++
			}
		}
		return n
	}, 10*time.Second).Should(Equal(2))
	es := got()
	g.Expect(kinds(es)).To(ContainElements("delta", "final", protocol.FrameDone))
	last := es[len(es)-1]
	g.Expect(last.MessageID).To(Equal("helper/bob/2"))
	g.Expect(last.Outcome.Text).To(Equal("answer 3")) // no system prompt: hi, answer 1, again
	for _, e := range es {
		g.Expect(e.V).To(Equal(protocol.FrameVersion), "every frame says its wire version")
	}

	// Idle: the runtime gives the chat up and returns; the registry entry,
	// owner hint and lease go with it.
	g.Eventually(done, 20*time.Second).Should(Receive(BeNil()))
	g.Expect(f.rdb.Exists(context.Background(), ownerKey(f.tenant, "helper", "web", "helper/bob")).Val()).To(BeZero())
	g.Expect(f.rdb.HExists(context.Background(), wake.PodsKey(f.tenant, "helper"), "pod-a").Val()).To(BeFalse())
	ok, err := f.store.AcquireLease(store.WithTenant(context.Background(), f.tenant), leaseKey("web", "helper/bob"), "someone-else", time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
}

// A gateway newer than the session pod (a rolling upgrade) queues a message
// of a wire version the pod does not read: the pod answers it with a clear
// error instead of misreading it, and goes on with the chat's next message,
// which an older gateway wrote without a version.
func TestRuntimeRefusesANewerWireFormat(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	f.llm.Script(fakellm.Turn{Text: "read you"})
	got := f.events(t, "helper/eve")
	ctx := context.Background()
	stream := chatStream(f.tenant, "helper", "web", "helper/eve")
	newer := []byte(`{"v":4,"id":"helper/eve/1","channel":"web","chat_key":"helper/eve","text":"hi","attachments":[{"id":"a1"}]}`)
	older := []byte(`{"id":"helper/eve/2","channel":"web","chat_key":"helper/eve","text":"hi"}`)
	g.Expect(f.bus.Publish(ctx, stream, bus.Message{ID: "helper/eve/1", Payload: newer}, bus.Message{ID: "helper/eve/2", Payload: older})).To(Succeed())
	g.Expect(wake.Publish(ctx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: "web", ChatKey: "helper/eve"})).To(Succeed())
	rt := f.runtime(t, "pod-a", 200*time.Millisecond, 3*time.Second)
	g.Expect(rt.Run(ctx)).To(Succeed())
	g.Eventually(func() []string { return kinds(got()) }, 10*time.Second).Should(ContainElement(protocol.FrameDone))
	var refused, answered *protocol.Frame
	for _, e := range got() {
		switch {
		case e.MessageID == "helper/eve/1" && e.Kind == protocol.FrameError:
			refused = &e
		case e.MessageID == "helper/eve/2" && e.Kind == protocol.FrameDone:
			answered = &e
		}
	}
	g.Expect(refused).NotTo(BeNil())
	g.Expect(refused.Code).To(Equal(protocol.CodeUnavailable))
	g.Expect(refused.Message).To(ContainSubstring("unknown wire format version 4 (this build reads up to 3)"))
	g.Expect(answered).NotTo(BeNil())
	g.Expect(answered.Outcome.Text).To(Equal("read you"))
	g.Expect(f.llm.Requests()).To(HaveLen(1), "the refused message never reached the model")
	pending, err := f.bus.Pending(ctx, stream, groupRuntime, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(BeEmpty())
}

// A runtime that died after fetching a message (never acknowledged) leaves it
// pending; once its lease expires the next runtime reclaims it and the turn
// runs exactly once.
// A gateway newer than a session pod reads the pod's frames of the previous
// version (turn events with Go field names) through a real Redis channel,
// tool calls included; a frame of a version newer than the gateway ends the
// wait with a clear, retryable error instead of a misread turn.
func TestGatewayReadsOlderFramesAndRefusesNewerOnes(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := eventChannel(f.tenant, "helper", "web", "helper/old")
	ps, frames, err := signals{f.rdb}.subscribe(ctx, ch)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ps.Close() }()
	publish := func(payload string) { g.Expect(f.rdb.Publish(ctx, ch, payload).Err()).To(Succeed()) }
	next := func() received {
		var r received
		g.Eventually(frames, 5*time.Second).Should(Receive(&r))
		return r
	}
	var sunk []turn.Event
	sink := func(e turn.Event) { sunk = append(sunk, e) }

	publish(`{"v":1,"message_id":"m1","kind":"tool_call","event":{"Kind":"tool_call","Step":1,"Text":"","ToolCall":{"id":"c1","name":"bash","arguments":"{}"},"ToolResult":null,"Usage":null,"Attachments":null}}`)
	_, err, done := relay(next(), sink)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeFalse())
	g.Expect(sunk).To(HaveLen(1))
	g.Expect(sunk[0].ToolCall).To(Equal(&llm.ToolCall{ID: "c1", Name: "bash", Arguments: "{}"}))

	publish(`{"v":1,"message_id":"m1","kind":"done","outcome":{"SessionID":"web:helper/old:default","Text":"ok"}}`)
	out, err, done := relay(next(), sink)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeTrue())
	g.Expect(out).To(Equal(gateway.Outcome{SessionID: "web:helper/old:default", Text: "ok"}))

	publish(`{"v":3,"message_id":"m2","kind":"done","outcome":{"text":"?"}}`)
	r := next()
	g.Expect(r.MessageID).To(Equal("m2"), "the refused frame still says whose it was, so only its waiter ends")
	_, err, done = relay(r, sink)
	g.Expect(done).To(BeTrue())
	var coded *gateway.CodedError
	g.Expect(errors.As(err, &coded)).To(BeTrue())
	g.Expect(coded.Code).To(Equal(protocol.CodeUnavailable))
	g.Expect(err).To(MatchError(ContainSubstring("unknown wire format version 3 (this build reads up to 2)")))
}

func TestNextRuntimeReclaimsTheMessageOfADeadOne(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), f.tenant)
	f.llm.Respond(func(r fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "done once"} })
	got := f.events(t, "helper/eve")
	ttl := 2 * time.Second

	// The dead runtime: took the lease, fetched the message, stored the user
	// message (phase 1), then vanished.
	chat := "helper/eve"
	payload, _ := json.Marshal(Inbound{ID: "helper/eve/1", Channel: "web", ChatKey: chat, Text: "do it"})
	stream := chatStream(f.tenant, "helper", "web", chat)
	g.Expect(f.bus.Publish(ctx, stream, bus.Message{ID: "helper/eve/1", Payload: payload})).To(Succeed())
	ok, err := f.store.AcquireLease(ctx, leaseKey("web", chat), "pod-dead", ttl)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	fetched, err := f.bus.Fetch(ctx, stream, groupRuntime, "pod-dead", bus.FetchOptions{Count: 1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fetched).To(HaveLen(1))
	_, err = f.store.CreateSession(ctx, store.Session{Channel: "web", ChatID: chat, DialogID: "default", Agent: "helper", Title: "New conversation", TitleIsDefault: true})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.store.AppendMessages(ctx, "web:helper/eve:default", store.Message{ID: "helper/eve/1", Role: "user", Content: "do it"})
	g.Expect(err).NotTo(HaveOccurred())

	rt := f.runtime(t, "pod-next", time.Second, ttl)
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("runtime ended: %v", err)
		}
	})
	go func() { done <- rt.Run(runCtx); done <- nil }()
	// Wakes arrive (the operator's and the gateway's re-wakes); the first
	// ones find the dead pod's lease and are set aside.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && !slices.Contains(kinds(got()), protocol.FrameDone) {
		g.Expect(wake.Publish(ctx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: "web", ChatKey: chat})).To(Succeed())
		time.Sleep(500 * time.Millisecond)
	}
	es := got()
	g.Expect(kinds(es)).To(ContainElement(protocol.FrameDone))
	g.Eventually(done, 20*time.Second).Should(Receive(BeNil()))
	msgs, err := f.store.LoadMessages(ctx, "web:helper/eve:default", store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(2))
	g.Expect(msgs[1].Content).To(Equal("done once"))
	g.Expect(f.llm.Requests()).To(HaveLen(1))
	pending, err := f.bus.Pending(ctx, stream, groupRuntime, 10)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(BeEmpty())
}

// BenchmarkWakeClaim measures a wake's trip through Redis to a warm pod:
// XADD by the gateway to XREADGROUP returning in one of the waiting pods.
func BenchmarkWakeClaim(b *testing.B) {
	if skipReason != "" {
		b.Skip(skipReason)
	}
	bs, err := redisbus.Open(redisURL, redisbus.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bs.Close() }()
	tenant := fmt.Sprintf("bench%d", time.Now().UnixNano())
	stream := wakeStream(tenant, "helper")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lat := make(chan time.Duration, b.N+16)
	var wg sync.WaitGroup
	for i := range 8 { // eight warm pods
		wg.Go(func() {
			for ctx.Err() == nil {
				msgs, err := bs.Fetch(ctx, stream, groupPods, fmt.Sprintf("pod-%d", i), bus.FetchOptions{Count: 1, Block: time.Second})
				if err != nil {
					continue
				}
				for _, m := range msgs {
					var w Wake
					_ = json.Unmarshal(m.Payload, &w)
					lat <- time.Since(w.At)
					_ = bs.Ack(ctx, stream, groupPods, m.Seq)
				}
			}
		})
	}
	// Let every pod join the group before timing.
	_ = wake.Publish(ctx, bs, Wake{Tenant: tenant, Agent: "helper", ChatKey: "warmup"})
	<-lat
	b.ResetTimer()
	all := make([]time.Duration, 0, b.N)
	for i := range b.N {
		if err := wake.Publish(ctx, bs, Wake{Tenant: tenant, Agent: "helper", Channel: "web", ChatKey: fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
		all = append(all, <-lat)
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}

// TestPodRegistersOnceRedisKnowsItsUser: right after a Redis restart the
// tenant's user is gone until the operator sets it again. A pod starting
// then is refused (WRONGPASS) and retries its registration instead of
// exiting, and registers once the user exists.
func TestPodRegistersOnceRedisKnowsItsUser(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := context.Background()
	user := "pod-user-" + f.tenant
	opts, err := redis.ParseURL(redisURL)
	g.Expect(err).NotTo(HaveOccurred())
	opts.Username, opts.Password = user, "pw-"+f.tenant
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	t.Cleanup(func() { _ = f.rdb.Do(ctx, "ACL", "DELUSER", user).Err() })

	rt := f.runtime(t, "pod-late", time.Minute, 3*time.Second)
	rt.cfg.Redis = rdb // the pod's own credentials, not yet known to Redis
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() {
		cancel()
		select { // a pod that already exited (without the retry) sent its error
		case err := <-done:
			_ = err // the pod ends with its context
		case <-time.After(10 * time.Second):
			t.Error("the pod did not stop")
		}
	}()
	pods := podsKey(f.tenant, "helper")
	g.Consistently(func() string { return f.rdb.HGet(ctx, pods, "pod-late").Val() }).
		WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(BeEmpty())
	g.Expect(done).NotTo(Receive(), "the pod waits for its user instead of exiting")

	g.Expect(f.rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">pw-"+f.tenant, "~*", "&*", "+@all").Err()).To(Succeed())
	g.Eventually(func() string { return f.rdb.HGet(ctx, pods, "pod-late").Val() }).
		WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal("warm"))
}

// A session pod counts the wakes it claims as warm (queued while it waited
// for one) or cold (queued before it was ready), and its session manager
// the sessions whose lease it holds until the chat goes idle.
func TestPodCountsItsClaimsAndLeases(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	met, err := metrics.New(reg, metrics.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	release := make(chan struct{})
	f.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		<-release
		return fakellm.Turn{Text: "answer"}
	})
	claims := func(kind string) float64 {
		return sampleValue(t, reg, "picobot_pool_claims_total", map[string]string{"tenant": f.tenant, "agent": "helper", "kind": kind})
	}
	leased := func() float64 {
		return sampleValue(t, reg, "picobot_sessions_leased", map[string]string{"tenant": f.tenant, "agent": "helper"})
	}
	run := func(pod string) chan error {
		rt := f.meteredRuntime(t, pod, time.Second, 3*time.Second, met)
		done, ended := make(chan error, 1), make(chan struct{})
		ctx, stop := context.WithCancel(context.Background())
		go func() {
			defer close(ended)
			done <- rt.Run(ctx)
		}()
		t.Cleanup(func() {
			stop()
			select {
			case <-ended:
			case <-time.After(20 * time.Second):
				t.Errorf("runtime of %s did not end", pod)
			}
		})
		return done
	}

	// A warm pod: its series are there at zero before it claims anything.
	doneA := run("pod-a")
	g.Eventually(func() string {
		return f.rdb.HGet(context.Background(), wake.PodsKey(f.tenant, "helper"), "pod-a").Val()
	}).Should(Equal("warm"))
	g.Expect(claims(metrics.ClaimWarm)).To(Equal(0.0))
	g.Expect(claims(metrics.ClaimCold)).To(Equal(0.0))
	gotBob := f.events(t, "helper/bob")
	f.queue(t, "helper/bob", "helper/bob/1", "hi")
	// Mid-turn the session's lease is held.
	g.Eventually(leased, 10*time.Second).Should(Equal(1.0))
	g.Expect(claims(metrics.ClaimWarm)).To(Equal(1.0))
	g.Expect(claims(metrics.ClaimCold)).To(Equal(0.0))
	release <- struct{}{}
	g.Eventually(gotBob, 10*time.Second).Should(ContainElement(HaveField("Kind", protocol.FrameDone)))
	// Idle: the pod gives the chat and its session's lease up.
	g.Eventually(doneA, 20*time.Second).Should(Receive(BeNil()))
	g.Expect(leased()).To(Equal(0.0))

	// A wake queued with no pod waiting is a cold claim of the pod that
	// starts next.
	gotCarol := f.events(t, "helper/carol")
	f.queue(t, "helper/carol", "helper/carol/1", "hi")
	doneB := run("pod-b")
	g.Eventually(leased, 10*time.Second).Should(Equal(1.0))
	g.Expect(claims(metrics.ClaimCold)).To(Equal(1.0))
	g.Expect(claims(metrics.ClaimWarm)).To(Equal(1.0))
	release <- struct{}{}
	g.Eventually(gotCarol, 10*time.Second).Should(ContainElement(HaveField("Kind", protocol.FrameDone)))
	g.Eventually(doneB, 20*time.Second).Should(Receive(BeNil()))
	g.Expect(leased()).To(Equal(0.0))
}

// meteredRuntime is runtime recording into met.
func (f *fixture) meteredRuntime(t *testing.T, pod string, idle, ttl time.Duration, met *metrics.Metrics) *Runtime {
	t.Helper()
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: f.llm.URL(), APIKey: "k"})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	mgr := session.NewManager(session.Config{Store: f.store, Loop: &agent.Loop{Provider: p}, Agent: "helper", Holder: pod,
		Timeline: session.StoreTimeline{Store: f.store}, LeaseTTL: ttl, Leased: met.SessionsLeased(f.tenant, "helper")})
	return NewRuntime(RuntimeConfig{Tenant: f.tenant, Agent: "helper", Pod: pod, Bus: f.bus, Redis: f.rdb, Store: f.store,
		Manager: mgr, IdleTimeout: idle, LeaseTTL: ttl, Metrics: met})
}

// sampleValue is the value of the series of metric name with labels in
// reg; -1 when it has none.
func sampleValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	series:
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
