package controller

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/test/services"
)

// runtimeEnv runs the Agent reconciler's runtime phase by hand against the
// suite's API server and a throwaway Redis. The suite's manager keeps status
// only, so nothing else makes session pods; with no kubelet the test plays
// the pods (their status) and the runtimes (their registry entries).
type runtimeEnv struct {
	r     *AgentReconciler
	rdb   *redis.Client
	agent *picobotv1alpha1.Agent
	// reg holds the pool's metrics.
	reg *prometheus.Registry
}

// startRuntimeEnv creates an agent with a warm pool of 2 and at most 2
// sessions in a fresh namespace, and a reconciler with session pods on.
func startRuntimeEnv(t *testing.T) *runtimeEnv {
	t.Helper()
	needAPIServer(t)
	url := services.RedisFor(t)
	b, err := redisbus.Open(url, redisbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ns := newNamespace(t)
	a := openAIAgent(ns, "helper", "openai")
	a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](2), MaxSessions: ptr[int32](2)}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	om, err := opmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := &AgentReconciler{Client: k8s, Runtime: &RuntimeConfig{Image: "registry.example/picobot:test", Redis: b.Client(), Bus: b,
		Connection: map[string]string{"PICOBOT_REDIS_URL": url}, APIReader: k8s, ResyncBusy: time.Second, Metrics: om}}
	return &runtimeEnv{r: r, rdb: b.Client(), agent: a, reg: reg}
}

// run runs the runtime phase once, as a reconcile with a usable model does.
func (e *runtimeEnv) run(t *testing.T) *runtimeResult {
	t.Helper()
	s := &agentScope{agent: e.agent.DeepCopy(), model: agentspec.ModelResolution{
		Effective: &picobotv1alpha1.EffectiveModel{Provider: picobotv1alpha1.ProviderOpenAI, Model: "gpt-5.2"}}}
	if err := e.r.runtimePhase(context.Background(), s); err != nil {
		t.Fatalf("runtime phase: %v", err)
	}
	return s.runtime
}

// pods lists the agent's session pods by name.
func (e *runtimeEnv) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := k8s.List(context.Background(), &l, client.InNamespace(e.agent.Namespace), client.MatchingLabels(podspec.SessionLabels(e.agent))); err != nil {
		t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

// register writes a runtime's registry entry, as a session pod does.
func (e *runtimeEnv) register(t *testing.T, pod, state string) {
	t.Helper()
	if err := e.rdb.HSet(context.Background(), wake.PodsKey(e.agent.Namespace, e.agent.Name), pod, state).Err(); err != nil {
		t.Fatal(err)
	}
}

// registry reads the agent's pod registry.
func (e *runtimeEnv) registry(t *testing.T) map[string]string {
	t.Helper()
	m, err := e.rdb.HGetAll(context.Background(), wake.PodsKey(e.agent.Namespace, e.agent.Name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wokenChats lists the chat keys of the wakes on the agent's wake stream.
func (e *runtimeEnv) wokenChats(t *testing.T) []string {
	t.Helper()
	msgs, err := e.rdb.XRange(context.Background(), wake.Stream(e.agent.Namespace, e.agent.Name), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		payload, _ := m.Values["p"].(string) // redisbus's payload field
		out = append(out, payload)
	}
	return out
}

// setPhase gives a pod a status, as its kubelet would.
func setPhase(t *testing.T, p *corev1.Pod, st corev1.PodStatus) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		cur := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Status = st
		return k8s.Status().Update(context.Background(), cur)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
}

// names lists the pods' names.
func names(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i := range pods {
		out[i] = pods[i].Name
	}
	return out
}

// TestRuntimePhaseKeepsSessionPods walks one agent through the runtime
// phase's cases against a real API server and Redis: filling the warm pool,
// pods for unclaimed wakes up to maxSessions, re-waking the chat of a pod
// that died mid-chat, and reaping a failed pod.
func TestRuntimePhaseKeepsSessionPods(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ns := e.agent.Namespace
	ready := func(msg string) metav1.Condition {
		return condition(picobotv1alpha1.ConditionRuntimeReady, true, picobotv1alpha1.ReasonPodsReady, msg)
	}
	// filling is the progress reported while fewer than warmPool (2) pods
	// are warm and some start (Reconciling's cause).
	filling := func(warm, starting int) *metav1.Condition {
		return ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, true, picobotv1alpha1.ReasonPodsStarting,
			fmt.Sprintf("Warm pool filling: %d of 2 warm, %d starting", warm, starting)))
	}

	// An empty pool is filled to warmPool; the namespace and agent objects
	// are written. Nothing is listed yet, so no resync is asked for.
	res := e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{cond: ready("0 active, 0 warm, 0 starting"), progress: filling(0, 2)}))
	g.Expect(e.pods(t)).To(HaveLen(2))
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podspec.ConnectionSecret}, &corev1.Secret{})).To(Succeed())
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podspec.NetworkPolicyName}, &networkingv1.NetworkPolicy{})).To(Succeed())
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podspec.ServiceAccountName("helper")}, &corev1.ServiceAccount{})).To(Succeed())

	// Starting pods count toward the pool: nothing more is created.
	res = e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{cond: ready("0 active, 0 warm, 2 starting"), progress: filling(0, 2), requeue: time.Second}))
	pods := e.pods(t)
	g.Expect(pods).To(HaveLen(2))

	// One pod registers warm and one takes a chat: the busy one is labelled
	// with its session and a pod is added to keep two warm. Both started:
	// their start latency is observed, once.
	e.register(t, pods[0].Name, "warm")
	e.register(t, pods[1].Name, "busy web chat-1")
	res = e.run(t)
	g.Expect(gathered(t, e.reg, "picobot_pool_pod_start_seconds", map[string]string{"namespace": ns, "agent": "helper"})).To(Equal(2.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_warm_target", map[string]string{"namespace": ns, "agent": "helper"})).To(Equal(2.0))
	g.Expect(*res).To(Equal(runtimeResult{cond: ready("1 active, 1 warm, 0 starting"), active: 1, warm: 1, requeue: time.Second}))
	busy := &corev1.Pod{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(&pods[1]), busy)).To(Succeed())
	g.Expect(busy.Labels[podspec.LabelSession]).To(Equal(podspec.SessionValue("web", "chat-1")))
	g.Expect(e.pods(t)).To(HaveLen(3))

	// A registered pod that no longer exists died mid-chat: its chat is woken
	// again, its entry dropped, and the unclaimed wake gets a pod.
	e.register(t, "helper-gone", "busy web chat-2")
	res = e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{cond: ready("1 active, 1 warm, 1 starting"), active: 1, warm: 1, requeue: time.Second}))
	g.Expect(e.registry(t)).To(Equal(map[string]string{pods[0].Name: "warm", pods[1].Name: "busy web chat-1"}))
	woken := e.wokenChats(t)
	g.Expect(woken).To(HaveLen(1))
	g.Expect(woken[0]).To(ContainSubstring(`"chat_key":"chat-2"`))
	g.Expect(e.pods(t)).To(HaveLen(4))

	// A second unclaimed wake would exceed maxSessions (1 active + 2
	// unclaimed > 2): no pod for it.
	g.Expect(wake.Publish(context.Background(), e.r.Runtime.Bus, wake.Wake{Tenant: ns, Agent: "helper", Channel: "web", ChatKey: "chat-3"})).To(Succeed())
	res = e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{cond: ready("1 active, 1 warm, 2 starting"), active: 1, warm: 1, requeue: time.Second}))
	g.Expect(e.pods(t)).To(HaveLen(4))

	// A starting pod fails before registering: it is reaped, the condition
	// says why, and no pod replaces it while the failure is reported.
	var failed corev1.Pod
	for _, p := range e.pods(t) {
		if p.Name != pods[0].Name && p.Name != pods[1].Name {
			failed = p
			break
		}
	}
	setPhase(t, &failed, corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "runtime",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "boom", FinishedAt: metav1.Now()}}}}})
	res = e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{active: 1, warm: 1, requeue: time.Second,
		cond: condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPodFailed,
			"session pod "+failed.Name+" failed before serving: exit code 1: boom")}))
	g.Expect(names(e.pods(t))).NotTo(ContainElement(failed.Name))
	g.Expect(e.pods(t)).To(HaveLen(3))

	// The busy pod finishes (its runtime exited without dropping its entry):
	// it is reaped, its chat woken again, and the pool refilled.
	setPhase(t, busy, corev1.PodStatus{Phase: corev1.PodSucceeded})
	res = e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{cond: ready("0 active, 1 warm, 1 starting"), progress: filling(1, 3), warm: 1, requeue: time.Second}))
	g.Expect(e.registry(t)).To(Equal(map[string]string{pods[0].Name: "warm"}))
	woken = e.wokenChats(t)
	g.Expect(woken).To(HaveLen(3))
	g.Expect(woken[2]).To(ContainSubstring(`"chat_key":"chat-1"`))
	// 0 active + 2 warm + 2 unclaimed (wakes of chat-2, chat-3 and chat-1
	// are three, capped by maxSessions at 2) = 4 pods.
	g.Expect(names(e.pods(t))).NotTo(ContainElement(busy.Name))
	g.Expect(e.pods(t)).To(HaveLen(4))

	// A pod that cannot pull its image stops the pool from growing.
	e.register(t, pods[0].Name, "busy web chat-4")
	setPhase(t, &pods[0], corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "runtime",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"}}}}})
	res = e.run(t)
	g.Expect(*res).To(Equal(runtimeResult{active: 1, requeue: time.Second,
		cond: condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonImagePullFailed,
			"session pod "+pods[0].Name+" cannot pull its image: not found")}))
	g.Expect(e.pods(t)).To(HaveLen(4))

	// The pool's metrics saw it all: 6 pods created, the failed and the
	// finished one reaped, the chats of the gone and the finished pod
	// woken again, and the last plan's counts.
	agent := map[string]string{"namespace": ns, "agent": "helper"}
	g.Expect(gathered(t, e.reg, "picobot_pool_pods_created_total", agent, "outcome", "ok")).To(Equal(6.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_pods_reaped_total", agent)).To(Equal(2.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_wake_misses_total", agent)).To(Equal(2.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_pods", agent, "state", "active")).To(Equal(1.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_pods", agent, "state", "warm")).To(Equal(0.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_pod_start_seconds", agent)).To(Equal(2.0), "each pod's start is observed once")

	// The Agent deleted: its pool's series go with it.
	e.r.Runtime.Metrics.PoolGone(ns, "helper")
	g.Expect(gathered(t, e.reg, "picobot_pool_pods", agent, "state", "active")).To(Equal(-1.0))
	g.Expect(gathered(t, e.reg, "picobot_pool_warm_target", agent)).To(Equal(-1.0))
}

// gathered is the value of the series of family name with labels and the
// extra label pairs kv (a counter or gauge; a histogram's sample count); -1
// when there is none.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, kv ...string) float64 {
	t.Helper()
	want := maps.Clone(labels)
	for i := 0; i+1 < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// TestColdStartsAreTheWarmPoolsMisses: a chat waiting with no warm or
// starting pod gets a pod of its own, counted as a miss of the warm pool;
// a chat a starting pod can take is none.
func TestColdStartsAreTheWarmPoolsMisses(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := e.agent.Namespace
	agent := map[string]string{"namespace": ns, "agent": "helper"}
	e.agent.Spec.Runtime.WarmPool = ptr(int32(0))
	e.run(t)
	g.Expect(e.pods(t)).To(BeEmpty())
	g.Expect(gathered(t, e.reg, "picobot_pool_cold_starts_total", agent)).To(Equal(-1.0))

	g.Expect(wake.Publish(ctx, e.r.Runtime.Bus, wake.Wake{Tenant: ns, Agent: "helper", Channel: "web", ChatKey: "chat-1"})).To(Succeed())
	e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(1))
	g.Expect(gathered(t, e.reg, "picobot_pool_cold_starts_total", agent)).To(Equal(1.0))

	// Still waiting for its starting pod: no second pod, no second miss.
	e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(1))
	g.Expect(gathered(t, e.reg, "picobot_pool_cold_starts_total", agent)).To(Equal(1.0))
}

// TestDelegateTargetsWithUnclaimedWakesAreEnqueued: a session pod wakes the
// runtime of a delegated run on the target's wake stream alone (its Redis
// user cannot write the operator's notice stream); reconciling the busy
// delegating agent enqueues each target, once, whose stream holds a wake no
// pod claimed, and no other.
func TestDelegateTargetsWithUnclaimedWakesAreEnqueued(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	wakes := make(chan event.TypedGenericEvent[*picobotv1alpha1.Agent], 8)
	e.r.wakes = wakes
	lead := e.agent.DeepCopy()
	lead.Spec.Delegates = []picobotv1alpha1.Delegate{{Name: "r", AgentRef: corev1.LocalObjectReference{Name: "researcher"}},
		{Name: "r2", AgentRef: corev1.LocalObjectReference{Name: "researcher"}}, {Name: "w", AgentRef: corev1.LocalObjectReference{Name: "writer"}}}
	ns := lead.Namespace
	g.Expect(wake.Queue(context.Background(), e.r.Runtime.Bus, wake.Wake{Tenant: ns, Agent: "researcher", Channel: "delegate", ChatKey: "run-1"})).To(Succeed())
	e.r.delegateTargets(context.Background(), lead)
	g.Expect(wakes).To(HaveLen(1))
	got := <-wakes
	g.Expect(got.Object.Namespace).To(Equal(ns))
	g.Expect(got.Object.Name).To(Equal("researcher"))
}

// TestWakesAreCountedWhenRedisCannotTellTheLag: Redis reports a group's lag
// as unknown (nil) when it cannot count the entries after the group's
// position (entries deleted there, or a position set without its count; the
// crash campaign met it after Redis restarts). The wakes after the position
// are counted instead: an unknown lag read as -1 cancelled a pod of the warm
// pool, and with one warm pod no pod was ever created again.
func TestWakesAreCountedWhenRedisCannotTellTheLag(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns, stream := e.agent.Namespace, wake.Stream(e.agent.Namespace, e.agent.Name)
	for _, chat := range []string{"chat-1", "chat-2", "chat-3"} {
		g.Expect(wake.Publish(ctx, e.r.Runtime.Bus, wake.Wake{Tenant: ns, Agent: e.agent.Name, Channel: "web", ChatKey: chat})).To(Succeed())
	}
	wakes, err := e.rdb.XRange(ctx, stream, "-", "+").Result()
	g.Expect(err).NotTo(HaveOccurred())
	// The pods' group stands after the second wake, its read count unknown.
	g.Expect(e.rdb.XGroupCreateMkStream(ctx, stream, wake.GroupPods, "0").Err()).To(Succeed())
	g.Expect(e.rdb.Do(ctx, "XGROUP", "SETID", stream, wake.GroupPods, wakes[1].ID).Err()).To(Succeed())
	groups, err := e.rdb.XInfoGroups(ctx, stream).Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(HaveLen(1))
	g.Expect(groups[0].Lag).To(Equal(int64(-1)), "Redis must report the lag as unknown for this test to mean anything")

	chats, err := e.r.unclaimedWakes(ctx, e.agent)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(chats).To(Equal([]string{"web chat-3"}))
	// 0 active + 2 warm + 1 unclaimed = 3 pods.
	e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(3))
}

// TestAChatWokenWhileItsPodStartsGetsOnePod plays what a real node showed: a
// wake's pod takes seconds to start, and meanwhile the gateway wakes the
// chat again every Rewake (it has no owner yet). Each re-wake is one more
// entry on the wake stream; counted as a chat each, they made the operator
// create another pod per re-wake, which then stayed as surplus idle pods.
// One chat gets one pod, and the warm pool keeps its size, however often
// the chat is woken and whether or not its pod has started.
func TestAChatWokenWhileItsPodStartsGetsOnePod(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	e.agent.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](1)}
	w := wake.Wake{Tenant: e.agent.Namespace, Agent: e.agent.Name, Channel: "web", ChatKey: "c1"}
	g.Expect(wake.Publish(ctx, e.r.Runtime.Bus, w)).To(Succeed())
	e.run(t)
	// One pod for the warm pool, one for the chat; neither starts (no
	// kubelet), as on a node where pods take seconds.
	g.Expect(e.pods(t)).To(HaveLen(2))
	for range 4 {
		g.Expect(wake.Publish(ctx, e.r.Runtime.Bus, w)).To(Succeed()) // the gateway's re-wake
		e.run(t)
		g.Expect(e.pods(t)).To(HaveLen(2), "a re-wake of a chat whose pod starts")
	}

	// A pod starts and reads the first wake, taking the chat; the re-wakes
	// behind it are the served chat's (whoever reads them acks them).
	stream := wake.Stream(e.agent.Namespace, e.agent.Name)
	g.Expect(e.rdb.XGroupCreateMkStream(ctx, stream, wake.GroupPods, "0").Err()).To(Succeed())
	pods := e.pods(t)
	read, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: wake.GroupPods, Consumer: pods[0].Name, Streams: []string{stream, ">"}, Count: 1}).Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(read[0].Messages).To(HaveLen(1))
	setPhase(t, &pods[0], corev1.PodStatus{Phase: corev1.PodRunning})
	e.register(t, pods[0].Name, "busy web c1")
	res := e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(2), "one pod serves the chat, one is the warm pool")
	g.Expect(res.active).To(Equal(int32(1)))

	// The other pod starts and takes nothing: the pool is full.
	setPhase(t, &pods[1], corev1.PodStatus{Phase: corev1.PodRunning})
	e.register(t, pods[1].Name, "warm")
	res = e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(2))
	g.Expect(res.warm).To(Equal(int32(1)))
}

// TestStaleWakesOfAServedChatGetNoPod: the re-wakes left on the stream once
// a chat was served (its pod read the first wake, answered and exited) wake
// nothing; they made a pod that found nothing to serve and stayed idle with
// a warm pool of 0. A message the chat gets later is waited for again.
func TestStaleWakesOfAServedChatGetNoPod(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	e.agent.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](0)}
	ns, name := e.agent.Namespace, e.agent.Name
	chat := wake.ChatStream(ns, name, "web", "c1")
	b := e.r.Runtime.Bus
	g.Expect(b.Publish(ctx, chat, bus.Message{ID: "c1/m1", Payload: []byte("hi")})).To(Succeed())
	w := wake.Wake{Tenant: ns, Agent: name, Channel: "web", ChatKey: "c1"}
	for range 3 { // the send's wake and two re-wakes while its pod started
		g.Expect(wake.Publish(ctx, b, w)).To(Succeed())
	}
	e.run(t)
	pods := e.pods(t)
	g.Expect(pods).To(HaveLen(1))

	// The pod reads the first wake, answers the message and exits.
	stream := wake.Stream(ns, name)
	g.Expect(e.rdb.XGroupCreateMkStream(ctx, stream, wake.GroupPods, "0").Err()).To(Succeed())
	_, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: wake.GroupPods, Consumer: pods[0].Name, Streams: []string{stream, ">"}, Count: 1}).Result()
	g.Expect(err).NotTo(HaveOccurred())
	msgs, err := b.Fetch(ctx, chat, protocol.ChatGroup, pods[0].Name, bus.FetchOptions{Count: 1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(1))
	g.Expect(b.Ack(ctx, chat, protocol.ChatGroup, msgs[0].Seq)).To(Succeed())
	setPhase(t, &pods[0], corev1.PodStatus{Phase: corev1.PodSucceeded})
	e.run(t) // reaps it
	g.Eventually(func() []string { return names(e.pods(t)) }).WithTimeout(eventually).WithPolling(poll).ShouldNot(ContainElement(pods[0].Name))
	e.run(t)
	g.Expect(e.pods(t)).To(BeEmpty(), "the re-wakes of a served chat")

	// A later message of the chat, its wake lost: the stale wakes stand for it.
	g.Expect(b.Publish(ctx, chat, bus.Message{ID: "c1/m2", Payload: []byte("again")})).To(Succeed())
	e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(1))
}

// TestPodsTheCacheHasNotSeenCountTowardThePool: the pool is planned from
// the informer cache, which lists a new pod a moment after its creation; a
// reconcile in between (a wake notice, a pod event) saw the pool short and
// created the pod again. The reconciler here reads pods through a real
// informer cache that never lists them (a selector no pod matches): the
// longest lag there is. Pods it created count until the cache lists them,
// or for expectTimeout.
func TestPodsTheCacheHasNotSeenCountTowardThePool(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	never, err := labels.Parse("picobot.test/never-listed=true")
	g.Expect(err).NotTo(HaveOccurred())
	c, err := cache.New(restConfig, cache.Options{Scheme: testScheme, ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: never}}})
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	lagging, err := client.New(restConfig, client.Options{Scheme: testScheme, Cache: &client.CacheOptions{Reader: c}})
	g.Expect(err).NotTo(HaveOccurred())
	e.r.Client = lagging
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.r.expected.now = func() time.Time { return now }

	e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(2), "the warm pool")
	res := e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(2), "a pass the cache has not caught up with")
	g.Expect(res.cond.Message).To(Equal("0 active, 0 warm, 2 starting"))

	// A pod the cache never lists (deleted before it could) stops counting.
	now = now.Add(expectTimeout)
	e.run(t)
	g.Expect(e.pods(t)).To(HaveLen(4))
}

// TestAPodDeletedAfterAnsweringIsNotReWoken: a pod deleted while it holds a
// chat it has answered (during its idle timeout; the cold benchmark deletes
// pods so) is seen gone while the registry says busy. Its chat has nothing
// to reclaim: a re-wake started a pod that found nothing and stayed idle,
// with a warm pool of 0.
func TestAPodDeletedAfterAnsweringIsNotReWoken(t *testing.T) {
	e := startRuntimeEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	e.agent.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](0)}
	ns, name := e.agent.Namespace, e.agent.Name
	chat := wake.ChatStream(ns, name, "web", "c1")
	b := e.r.Runtime.Bus
	g.Expect(b.Publish(ctx, chat, bus.Message{ID: "c1/m1", Payload: []byte("hi")})).To(Succeed())
	g.Expect(wake.Publish(ctx, b, wake.Wake{Tenant: ns, Agent: name, Channel: "web", ChatKey: "c1"})).To(Succeed())
	e.run(t)
	pods := e.pods(t)
	g.Expect(pods).To(HaveLen(1))
	stream := wake.Stream(ns, name)
	g.Expect(e.rdb.XGroupCreateMkStream(ctx, stream, wake.GroupPods, "0").Err()).To(Succeed())
	_, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: wake.GroupPods, Consumer: pods[0].Name, Streams: []string{stream, ">"}, Count: 1}).Result()
	g.Expect(err).NotTo(HaveOccurred())
	e.register(t, pods[0].Name, "busy web c1")
	msgs, err := b.Fetch(ctx, chat, protocol.ChatGroup, pods[0].Name, bus.FetchOptions{Count: 1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Ack(ctx, chat, protocol.ChatGroup, msgs[0].Seq)).To(Succeed())
	woken := len(e.wokenChats(t))

	// The pod goes with its entry still busy.
	setPhase(t, &pods[0], corev1.PodStatus{Phase: corev1.PodSucceeded})
	e.run(t)
	g.Expect(e.registry(t)).To(BeEmpty())
	g.Expect(e.wokenChats(t)).To(HaveLen(woken), "no re-wake")
	g.Eventually(func() []string { return names(e.pods(t)) }).WithTimeout(eventually).WithPolling(poll).ShouldNot(ContainElement(pods[0].Name))
	e.run(t)
	g.Expect(e.pods(t)).To(BeEmpty())
}
