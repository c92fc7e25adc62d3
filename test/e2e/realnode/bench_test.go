package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// benchTenant is tenant with the session pods' idle timeout (%[4]s) and
// warm pool (%[5]d) of the benchmark.
func benchTenant(ns, key, llmURL, idle string, pool int) string {
	m := fmt.Sprintf(tenant, ns, key, llmURL)
	m = strings.Replace(m, "idleTimeout: 5m", "idleTimeout: "+idle, 1)
	return strings.Replace(m, "warmPool: 1", fmt.Sprintf("warmPool: %d", pool), 1)
}

// quantile is the nearest-rank quantile q of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// BenchmarkRealnodeWakeToFirstToken measures, on the real node, a message
// to a chat that has no runtime, from send through the gateway Service to
// the first streamed token: with a warm pod waiting (the operator refills
// the pool between samples) and with none (kubelet starts a new pod from the
// image: sandbox, CNI, two containers, the runtime's start). Each sample is
// a new chat, so each one is a wake. A cold sample starts after the agent's
// pods are deleted (the last one holds its answered chat for its idle
// timeout), and a warm one when at least one pod waits.
func BenchmarkRealnodeWakeToFirstToken(b *testing.B) {
	needStack(b)
	ctx := context.Background()
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "first token and more"} })
	for _, tc := range []struct {
		name string
		pool int
	}{{"warm", 1}, {"cold", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			g := NewWithT(b)
			ns, key := "bench-"+tc.name, "bench-key-"+tc.name
			_, err := st.node.KubectlIn(ctx, benchTenant(ns, key, st.llmURL, "2s", tc.pool), "apply", "-f", "-")
			g.Expect(err).NotTo(HaveOccurred())
			gw := st.portForward(b, systemNamespace, "svc/"+release+"-gateway", "80")
			ws := gatewaytest.Client{URL: "http://" + gw, Key: key}.Dial(b)
			ready := func(g Gomega) {
				out, err := st.node.Kubectl(ctx, "get", "agent", "-n", ns, "helper", "-o",
					`jsonpath={.status.warmPods} {.status.activeSessions}`)
				g.Expect(err).NotTo(HaveOccurred())
				var warm, active int
				_, err = fmt.Sscan(out, &warm, &active)
				g.Expect(err).NotTo(HaveOccurred(), out)
				g.Expect(active).To(BeZero())
				if tc.pool == 0 {
					g.Expect(warm).To(BeZero())
				} else {
					g.Expect(warm).To(BeNumerically(">=", tc.pool))
				}
			}
			samples := max(b.N, 8)
			var lat []time.Duration
			for i := range samples {
				b.StopTimer()
				if tc.pool == 0 {
					_, err := st.node.Kubectl(ctx, "delete", "pods", "-n", ns, "-l", "agents.picobot.io/agent=helper", "--wait=true")
					g.Expect(err).NotTo(HaveOccurred())
				}
				g.Eventually(ready, 3*time.Minute, 200*time.Millisecond).Should(Succeed())
				b.StartTimer()
				id := fmt.Sprintf("w%d", i)
				start := time.Now()
				ws.Write(b, gatewaytest.Frame{"type": "send", "id": id, "agent": "helper", "chat_id": fmt.Sprintf("c%d", i), "text": "hi"})
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
				g.Expect(first).NotTo(BeZero(), "no delta before done")
				lat = append(lat, first)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(quantile(lat, 0.5).Milliseconds()), "p50-ms")
			b.ReportMetric(float64(quantile(lat, 0.99).Milliseconds()), "p99-ms")
		})
	}
}

// podStats is the part of kubelet's summary API (/stats/summary) read here.
type podStats struct {
	Pods []struct {
		PodRef     struct{ Name, Namespace string }
		Containers []struct {
			Name   string
			Memory struct {
				WorkingSetBytes uint64
				RSSBytes        uint64
			}
		}
	}
}

// BenchmarkRealnodeSessionPodMemory measures a session pod serving one idle
// session (after its first turn) as kubelet reports it from the pod's
// cgroups (the summary API; cgroup v1 here): the working set and the RSS of
// its runtime and sandbox containers.
func BenchmarkRealnodeSessionPodMemory(b *testing.B) {
	needStack(b)
	g := NewWithT(b)
	ctx := context.Background()
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	ns, key := "bench-memory", "bench-memory-key"
	_, err := st.node.KubectlIn(ctx, benchTenant(ns, key, st.llmURL, "5m", 0), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.node.Kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "agent/helper", "--timeout=120s")
	g.Expect(err).NotTo(HaveOccurred())
	gw := st.portForward(b, systemNamespace, "svc/"+release+"-gateway", "80")
	ws := gatewaytest.Client{URL: "http://" + gw, Key: key}.Dial(b)
	metrics := map[string][]float64{}
	for i := range max(b.N, 3) {
		chat := fmt.Sprintf("mem%d", i)
		frames := ws.Exchange(b, gatewaytest.Frame{"id": chat, "agent": "helper", "chat_id": chat, "text": "hello"})
		g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
		pod := busyPod(ctx, ns, "helper/"+chat)
		g.Expect(pod).NotTo(BeEmpty())
		time.Sleep(2 * time.Second) // idle: let the turn's garbage go
		// kubelet's cgroup stats are up to its housekeeping interval old:
		// wait for the pod to appear in them.
		g.Eventually(func(g Gomega) {
			raw, err := st.node.Kubectl(ctx, "get", "--raw", "/api/v1/nodes/picobot-node/proxy/stats/summary")
			g.Expect(err).NotTo(HaveOccurred())
			var s podStats
			g.Expect(json.Unmarshal([]byte(raw), &s)).To(Succeed())
			found := 0
			for _, p := range s.Pods {
				if p.PodRef.Namespace != ns || p.PodRef.Name != pod {
					continue
				}
				for _, c := range p.Containers {
					if c.Memory.WorkingSetBytes == 0 {
						continue
					}
					metrics[c.Name+"-ws-MiB"] = append(metrics[c.Name+"-ws-MiB"], float64(c.Memory.WorkingSetBytes)/(1<<20))
					metrics[c.Name+"-rss-MiB"] = append(metrics[c.Name+"-rss-MiB"], float64(c.Memory.RSSBytes)/(1<<20))
					found++
				}
			}
			g.Expect(found).To(BeNumerically(">=", 1), "pod %s in kubelet's summary", pod)
		}, time.Minute, time.Second).Should(Succeed())
	}
	for name, v := range metrics {
		slices.Sort(v)
		b.ReportMetric(v[len(v)/2], name)
	}
}
