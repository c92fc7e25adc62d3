package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/services"
)

// metricsModel answers the scripted turns of TestPrometheusScrapesServe: a
// calculator call for "compute", a refusal for "refuse", an answer after a
// tool result and to the CronJob's prompt.
func metricsModel(r fakellm.Recorded) fakellm.Turn {
	last := r.Messages[len(r.Messages)-1]
	switch {
	case last.Role == "tool" || len(last.ToolResults) > 0:
		return fakellm.Turn{Text: "It is 42."}
	case strings.Contains(last.Content, "compute"):
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}}
	case strings.Contains(last.Content, "refuse"):
		return fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: "content policy"}
	}
	return fakellm.Turn{Text: "Nothing to report."}
}

// postSend sends one message over REST with the API key and returns the
// status.
func postSend(ctx context.Context, base, key, id, text string) (int, error) {
	b, _ := json.Marshal(map[string]any{"id": id, "agent": "assistant", "chat_id": "prom", "text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/send", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, resp.Body.Close()
}

// TestPrometheusScrapesServe has a real Prometheus (hack/prometheus.sh)
// scrape `picobot serve`'s /metrics with the API key while it runs a turn
// with a tool call, a turn the model refuses and a CronJob's run, then asks
// Prometheus's HTTP API for the counters.
func TestPrometheusScrapesServe(t *testing.T) {
	g := NewWithT(t)
	// Built (once) before the CronJob's time is set.
	services.PrometheusBinary(t)
	llm := fakellm.New()
	defer llm.Close()
	llm.Respond(metricsModel)
	dir := t.TempDir()
	writeAgent(t, dir, llm.URL(), "  tools:\n    allow: [calculator]\n")
	// A one-shot CronJob a few seconds after the start.
	at := time.Now().Add(6 * time.Second).UnixMilli()
	cron := fmt.Sprintf(`apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: {at: %d}
  prompt: Report anything unusual.
  agentRef: {name: assistant}
  deliveryPolicy: never
`, at)
	g.Expect(os.WriteFile(filepath.Join(dir, "cron.yaml"), []byte(cron), 0o600)).To(Succeed())
	const key = "sk-scrape-0123456789"
	p := serveArgs(t, dir, []string{"--addr", "127.0.0.1:0", "--api-key", key}, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	u, err := url.Parse(p.url)
	g.Expect(err).NotTo(HaveOccurred())
	prom := services.StartPrometheus(t, services.ScrapeTarget{Job: "picobot", Addr: u.Host, BearerToken: key})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for id, text := range map[string]string{"m1": "compute 6*7", "m2": "refuse this"} {
		status, err := postSend(ctx, p.url, key, id, text)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(status).To(BeElementOf(http.StatusOK, http.StatusBadRequest), id)
	}

	q := func(promql string) func() (float64, error) {
		return func() (float64, error) { return prom.Scalar(ctx, promql) }
	}
	wait := func(promql string, want float64) {
		g.Eventually(q(promql)).WithTimeout(90*time.Second).WithPolling(time.Second).Should(Equal(want), promql)
	}
	wait(`up{job="picobot"}`, 1)
	wait(`sum(picobot_cron_runs_total{job="picobot"})`, 1)
	wait(`sum(picobot_turns_total{job="picobot",outcome="model_rejected"})`, 1)
	// The tool turn and the CronJob's run ended well.
	wait(`sum(picobot_turns_total{job="picobot",outcome="ok"})`, 1)
	wait(`sum(picobot_tool_calls_total{job="picobot",tool="calculator",outcome="ok"})`, 1)
	wait(`sum(picobot_bus_published_total{job="picobot",stream="chat"})`, 2)
	wait(`sum(picobot_store_operation_duration_seconds_count{job="picobot",operation="AppendAudit"})`, 1)
	g.Expect(prom.Scalar(ctx, `count(picobot_cron_fire_lag_seconds_bucket{job="picobot"})`)).To(BeNumerically(">", 0))
	// No scrape failed for want of the key.
	g.Expect(prom.Scalar(ctx, `sum(picobot_gateway_auth_failures_total{job="picobot"})`)).To(Equal(0.0))
}
