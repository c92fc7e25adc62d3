package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
	g := NewWithT(b)
	st.llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	ns, key := "bench-rss", "bench-rss-key"
	st.apply(b, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "5m", 0))
	st.waitReady(b, ns, "helper")
	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(b)
	var rss, anon, file []float64
	for i := range max(b.N, 3) {
		frames := ws.Exchange(b, gatewaytest.Frame{"id": fmt.Sprintf("r%d", i), "agent": "helper", "chat_id": fmt.Sprintf("rss%d", i), "text": "hello"})
		g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
		pod := st.busyPod(ns, "helper", fmt.Sprintf("helper/rss%d", i))
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
