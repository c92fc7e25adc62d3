package embedded

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// gatewayInProcess serves an embedded runtime behind the gateway over real
// HTTP on loopback, with a fake model that answers at once.
func gatewayInProcess(b *testing.B) gatewaytest.Client {
	return gatewayWith(b, "")
}

// gatewayWith is gatewayInProcess with extra manifests (a TenantQuota) in
// the folder. The fake model reports usage on every call, so each call is
// accounted with or without a quota.
func gatewayWith(b *testing.B, manifests string) gatewaytest.Client {
	b.Helper()
	s := fakellm.New()
	b.Cleanup(s.Close)
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 40, OutputTokens: 2}}
	})
	s.SetRequestLimit(0) // thousands of turns: keep no request bodies
	dir := b.TempDir()
	writeAgent(b, dir, s.URL(), codingTools)
	if manifests != "" {
		if err := os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(manifests), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Env: func(name string) string {
		if name == embedded.SecretEnvName("model-api-key", "apiKey") {
			return "sk-test"
		}
		return ""
	}})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(gateway.New(rt, "", nil, nil))
	b.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rt.Close()
	})
	return gatewaytest.Client{URL: hs.URL}
}

// turn sends one message and waits for its final reply.
func turn(b *testing.B, ws *gatewaytest.WS, chat, id string) {
	fs := ws.Exchange(b, gatewaytest.Frame{"id": id, "agent": "assistant", "chat_id": chat, "text": "hello"})
	if gatewaytest.Event(fs, "final") == nil {
		b.Fatalf("turn %s of %s had no final reply: %v", id, chat, fs)
	}
}

// cpuTime is the CPU time this process has used (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(sorted []time.Duration, p float64) float64 {
	i := min(len(sorted)-1, int(float64(len(sorted))*p))
	return float64(sorted[i].Microseconds()) / 1000
}

// The turn benchmarks run the client, the gateway, the runtime and the fake
// model in this one process; cpu-ms/turn is the CPU all of them used per
// turn, which bounds throughput on an idle machine (cores / cpu-ms/turn)
// whatever else loads it meanwhile.

// BenchmarkGatewayTurnLatency measures message in over WebSocket → final
// reply out in embedded mode, the model answering at once: 1,000 turns one
// after another over one connection, round-robin over 10 chats (100 turns
// each, so histories grow to 200 messages). Target: p99 under 10 ms.
func BenchmarkGatewayTurnLatency(b *testing.B) {
	c := gatewayInProcess(b)
	ws := c.Dial(b)
	const turns, chats = 1000, 10
	for i := range chats { // warm-up: sessions exist, connections pooled
		turn(b, ws, fmt.Sprintf("chat%d", i), "warm")
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		lat := make([]time.Duration, 0, turns)
		start, cpu := time.Now(), cpuTime()
		for i := range turns {
			t0 := time.Now()
			turn(b, ws, fmt.Sprintf("chat%d", i%chats), fmt.Sprintf("m%d-%d", n, i))
			lat = append(lat, time.Since(t0))
		}
		elapsed := time.Since(start)
		slices.Sort(lat)
		b.ReportMetric(percentile(lat, 0.50), "p50-ms")
		b.ReportMetric(percentile(lat, 0.99), "p99-ms")
		b.ReportMetric(float64(turns)/elapsed.Seconds(), "turns/s")
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/turns, "cpu-ms/turn")
	}
}

// BenchmarkGatewayConcurrentSessions measures throughput with 100 sessions
// talking at once, each over its own WebSocket: 20 turns each, 2,000 in
// all. Target: at least 2,000 turns/s.
func BenchmarkGatewayConcurrentSessions(b *testing.B) { concurrentSessions(b, "") }

// BenchmarkGatewayConcurrentSessionsBudget is BenchmarkGatewayConcurrentSessions
// with a TenantQuota whose day and month budgets (in tokens and in money)
// are never reached: every model call first reads the tenant's usage
// totals. Its cpu-ms/turn against the plain benchmark's is the per-turn cost
// of the budget checks (target: under 3%); usage is recorded in both.
func BenchmarkGatewayConcurrentSessionsBudget(b *testing.B) {
	concurrentSessions(b, `apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default}
spec:
  budget: {dayTokens: 1000000000000, monthTokens: 1000000000000, dayCost: "1000000", monthCost: "1000000"}
`)
}

func concurrentSessions(b *testing.B, manifests string) {
	c := gatewayWith(b, manifests)
	const sessions, each = 100, 20
	conns := make([]*gatewaytest.WS, sessions)
	for i := range conns {
		conns[i] = c.Dial(b)
		turn(b, conns[i], fmt.Sprintf("chat%d", i), "warm")
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		start, cpu := time.Now(), cpuTime()
		var wg sync.WaitGroup
		for i, ws := range conns {
			wg.Go(func() {
				for j := range each {
					turn(b, ws, fmt.Sprintf("chat%d", i), fmt.Sprintf("m%d-%d", n, j))
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(sessions*each)/time.Since(start).Seconds(), "turns/s")
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/(sessions*each), "cpu-ms/turn")
	}
}

// BenchmarkGatewayRSS1000Connections measures the resident memory of `picobot
// serve` holding 1,000 open WebSocket connections, each of which has made a
// control-channel request (so the server has read from every one). Target:
// under 150 MB.
func BenchmarkGatewayRSS1000Connections(b *testing.B) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	for n := 0; n < b.N; n++ {
		dir := b.TempDir()
		writeAgent(b, dir, s.URL(), codingTools)
		p := serve(b, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
		c := gatewaytest.Client{URL: p.url}
		idle := p.rssKB()
		conns := make([]*gatewaytest.WS, 0, 1000)
		for i := range 1000 {
			ws, err := c.DialErr(context.Background())
			if err != nil {
				b.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, ws)
			r := ws.Request(b, gatewaytest.Frame{"type": "dialog", "id": "l", "op": "list", "agent": "assistant", "chat_id": fmt.Sprintf("c%d", i)})
			if r["type"] != "dialog" {
				b.Fatalf("connection %d: %v", i, r)
			}
		}
		time.Sleep(time.Second) // settle
		b.ReportMetric(float64(idle)/1024, "MB-rss-idle")
		b.ReportMetric(float64(p.rssKB())/1024, "MB-rss-1000-ws")
		for _, ws := range conns {
			_ = ws.Conn.CloseNow()
		}
		p.stop()
	}
}
