package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// BenchmarkWakeToFirstToken measures a message to a chat that has no
// runtime, from send to the first streamed token, with a warm pod waiting
// and with none (the operator creates a pod; the pod runner starts the
// process). Each sample is a new chat, so each one is a wake.
func BenchmarkWakeToFirstToken(b *testing.B) {
	needStack(b)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "first token and more"} })
	for _, tc := range []struct {
		name string
		pool int
	}{{"warm", 1}, {"cold", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			run := invocation()
			g := NewWithT(b)
			ns, key := "bench-"+tc.name, "bench-key-"+tc.name
			st.apply(b, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "2s", tc.pool))
			ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(b)
			agent := &picobotv1alpha1.Agent{}
			ready := func(g Gomega) {
				g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, agent)).To(Succeed())
				g.Expect(agent.Status.WarmPods).To(HaveValue(Equal(int32(tc.pool))))
				g.Expect(agent.Status.ActiveSessions).To(HaveValue(BeZero()))
			}
			samples := max(b.N, 8)
			var lat []time.Duration
			for i := range samples {
				b.StopTimer()
				g.Eventually(ready, 120*time.Second, 100*time.Millisecond).Should(Succeed())
				b.StartTimer()
				id := fmt.Sprintf("w%s-%d", run, i)
				start := time.Now()
				ws.Write(b, gatewaytest.Frame{"type": "send", "id": id, "agent": "helper", "chat_id": fmt.Sprintf("c%s-%d", run, i), "text": "hi"})
				first := time.Duration(0)
				for {
					f := ws.Read(b)
					if f["id"] != id {
						continue
					}
					if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == "delta" && first == 0 {
						first = time.Since(start)
					}
					if f["type"] == "error" {
						b.Fatalf("error frame: %v", f)
					}
					if f["type"] == "done" {
						break
					}
				}
				lat = append(lat, first)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
		})
	}
}

// BenchmarkSessionPodRSS measures the resident memory of a session pod's
// process serving one idle session (after its first turn). Besides VmRSS it
// reports its two parts: anonymous memory (heap, stacks: what each pod costs
// on its own) and the mapped pages of the picobot binary (page cache that
// every pod on a node shares; how much of the binary a process maps depends
// on the kernel's page-cache folio sizes as well as on the code it runs).
func BenchmarkSessionPodRSS(b *testing.B) {
	needStack(b)
	run := invocation()
	g := NewWithT(b)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	ns, key := "bench-rss", "bench-rss-key"
	st.apply(b, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "5m", 0))
	st.waitReady(b, ns, "helper")
	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(b)
	var rss, anon, file []float64
	for i := range max(b.N, 3) {
		frames := ws.Exchange(b, gatewaytest.Frame{"id": fmt.Sprintf("r%s-%d", run, i), "agent": "helper", "chat_id": fmt.Sprintf("rss%s-%d", run, i), "text": "hello"})
		g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
		pod := st.busyPod(ns, "helper", fmt.Sprintf("helper/rss%s-%d", run, i))
		g.Expect(pod).NotTo(BeEmpty())
		var pid int
		for _, p := range st.pods(b, ns, "helper") {
			if p.Name == pod {
				pid = st.runner.PID(p.UID)
			}
		}
		g.Expect(pid).NotTo(BeZero())
		time.Sleep(2 * time.Second) // idle: let the turn's garbage go
		mem := procStatusMB(b, pid, "VmRSS", "RssAnon", "RssFile")
		rss, anon, file = append(rss, mem[0]), append(anon, mem[1]), append(file, mem[2])
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(rss), "rss-MB")
	b.ReportMetric(median(anon), "anon-MB")
	b.ReportMetric(median(file), "file-MB")
}

// procStatusMB reads the named kB fields of /proc/<pid>/status, in MB.
func procStatusMB(tb testing.TB, pid int, names ...string) []float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]float64, len(names))
	for i, name := range names {
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == name+":" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				out[i], found = kb/1024, true
			}
		}
		if !found {
			tb.Fatalf("no %s for pid %d", name, pid)
		}
	}
	return out
}

// BenchmarkDelegateRoundTrip measures, in cluster mode, a chat turn whose
// model delegates one task to another Agent, with a fake model that answers
// at once and a warm pod of each Agent waiting: the lead's pod queues the
// run on the run's chat stream and wakes the researcher's warm pod, which
// runs the sub-agent's turn and publishes its outcome; three model calls in
// all, the run's session and its agent_runs record. It reports p50/p99 of
// the whole turn (send to answer, through the gateway) and of the delegate
// call alone (from the lead model's tool call to its result coming back),
// and for comparison a message sent straight to researcher's warm pod
// through the gateway (plain-turn), what the delegated run costs at least.
// Each sample is a new chat, so each one is a wake of each Agent.
func BenchmarkDelegateRoundTrip(b *testing.B) {
	needStack(b)
	run := invocation()
	g := NewWithT(b)
	ns := "bench-delegate"
	var mu sync.Mutex
	var called time.Time
	var calls []time.Duration
	c := observedDelegateTenant(b, ns, delegateManifestFor(ns, 1, 1, "1s", "", ""), func(agent, _ string, _ fakellm.Recorded) fakellm.Turn {
		if agent == "researcher" {
			return fakellm.Turn{Text: "Paris"}
		}
		mu.Lock()
		called = time.Now()
		mu.Unlock()
		return delegateCall(`{"target":"researcher","task":"Find the capital of France."}`)
	}, func() {
		// The result came back to lead's model: the delegate call ended.
		mu.Lock()
		calls = append(calls, time.Since(called))
		mu.Unlock()
	})
	// A warm pod of each waits for every sample: at least one (the
	// operator refills a pool as soon as its pod turns busy, so it may
	// hold two for a while).
	warm := func(name string) func(g Gomega) {
		return func(g Gomega) {
			a := &picobotv1alpha1.Agent{}
			g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a)).To(Succeed())
			g.Expect(a.Status.WarmPods).To(HaveValue(BeNumerically(">=", 1)))
			g.Expect(a.Status.ActiveSessions).To(HaveValue(BeZero()))
		}
	}
	var turns, plain []time.Duration
	for i := range max(b.N, 12) {
		b.StopTimer()
		g.Eventually(warm("lead"), 120*time.Second, 100*time.Millisecond).Should(Succeed())
		g.Eventually(warm("researcher"), 120*time.Second, 100*time.Millisecond).Should(Succeed())
		b.StartTimer()
		start := time.Now()
		answer, _ := sendLead(b, c, fmt.Sprintf("b%s-%d", run, i), fmt.Sprintf("bench%s-%d", run, i), "Where?")
		turns = append(turns, time.Since(start))
		g.Expect(answer).To(ContainSubstring(`"result": "Paris"`))
		b.StopTimer()
		g.Eventually(warm("researcher"), 120*time.Second, 100*time.Millisecond).Should(Succeed())
		start = time.Now()
		answer, _, err := trySend(c, "researcher", fmt.Sprintf("p%s-%d", run, i), fmt.Sprintf("plain%s-%d", run, i), "Where?")
		plain = append(plain, time.Since(start))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(answer).To(Equal("Paris"))
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	// One delegate call per turn, or the figure would be of nothing.
	g.Expect(calls).To(HaveLen(len(turns)), "delegate calls timed")
	b.ReportMetric(float64(quantile(turns, 0.50).Milliseconds()), "ms-turn-p50")
	b.ReportMetric(float64(quantile(turns, 0.99).Milliseconds()), "ms-turn-p99")
	b.ReportMetric(float64(quantile(calls, 0.50).Milliseconds()), "ms-delegate-p50")
	b.ReportMetric(float64(quantile(calls, 0.99).Milliseconds()), "ms-delegate-p99")
	b.ReportMetric(float64(quantile(plain, 0.50).Milliseconds()), "ms-plain-turn-p50")
	b.ReportMetric(float64(quantile(plain, 0.99).Milliseconds()), "ms-plain-turn-p99")
}

// invocation names one call of a benchmark function, for its message ids
// and chats: the testing package calls it more than once (b.N 1, then
// -benchtime's N), and a message id sent again is answered from the store
// as a duplicate, without a turn, so a second call would time nothing.
func invocation() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// quantile is the q-quantile of d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}
