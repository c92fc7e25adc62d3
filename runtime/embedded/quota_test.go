package embedded_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/logbuf"
)

// quotaYAML is tenant-a's quota: 200 tokens a day, a warning at half, and
// its own price of the test model (1 and 2 per million tokens).
const quotaYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata:
  name: default
  namespace: tenant-a
spec:
  budget:
    dayTokens: 200
    softLimitPercent: 50
  pricesConfigMap: model-prices
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: model-prices
  namespace: tenant-a
data:
  prices: |
    openai/quota-model: 1 2
    anthropic/quota-model: 1 2
`

const quotaAgentYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  model:
    provider: %s
    model: quota-model
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
`

// TestTenantQuotaBudget: a TenantQuota manifest's dayTokens stops tenant A's
// third turn with budget_exhausted before the model is asked (each turn
// uses 100 tokens), warns once at the soft limit (a notice event to the
// WebSocket client of the turn, a log line), prices A's calls with
// its ConfigMap's table, and tenant B, served by the same runtime and
// agents, keeps working. Both wire protocols through the official SDKs.
func TestTenantQuotaBudget(t *testing.T) {
	for _, proto := range []string{fakellm.ProtocolOpenAI, fakellm.ProtocolAnthropic} {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			t.Cleanup(s.Close)
			url := s.URL()
			if proto == fakellm.ProtocolAnthropic {
				url = s.AnthropicURL()
			}
			s.Respond(func(fakellm.Recorded) fakellm.Turn {
				return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 80, OutputTokens: 20}}
			})
			dir := t.TempDir()
			g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, quotaAgentYAML, proto, url), 0o600)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(quotaYAML), 0o600)).To(Succeed())
			logs := &logbuf.Buffer{}
			reg := prometheus.NewRegistry()
			met, err := metrics.New(reg, metrics.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Tenant: "tenant-a", Tenants: []string{"tenant-b"},
				Log: slog.New(slog.NewTextHandler(logs, nil)), Metrics: met,
				Env: func(k string) string {
					if k == embedded.SecretEnvName("llm", "apiKey") {
						return "sk-test"
					}
					return ""
				}})
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(rt.Close)
			srv, err := gateway.NewServer(gateway.Config{Backend: rt, DefaultLimit: gateway.Unlimited, Auth: gateway.MustStaticKeys(
				gateway.StaticKey{ID: "a", Token: "key-a", Tenant: "tenant-a"}, gateway.StaticKey{ID: "b", Token: "key-b", Tenant: "tenant-b"})})
			g.Expect(err).NotTo(HaveOccurred())
			hs := httptest.NewServer(srv)
			t.Cleanup(hs.Close)
			a, b := gatewaytest.Client{URL: hs.URL, Key: "key-a"}, gatewaytest.Client{URL: hs.URL, Key: "key-b"}
			send := func(c gatewaytest.Client, id string) (int, gatewaytest.Frame) {
				return c.Do(t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": id, "agent": "assistant", "chat_id": "c1", "text": "hi"})
			}

			status, body := send(a, "a1")
			g.Expect(status).To(Equal(http.StatusOK), "%v", body)
			// The second turn finds 100 of 200 tokens used: its client
			// gets a notice (once), the log a warning.
			ws := a.Dial(t)
			frames := ws.Exchange(t, gatewaytest.Frame{"id": "a2", "agent": "assistant", "chat_id": "c1", "text": "hi"})
			var notices []string
			for _, f := range frames {
				if ev, _ := f["event"].(map[string]any); ev["kind"] == "notice" {
					notices = append(notices, ev["text"].(string))
				}
			}
			g.Expect(notices).To(Equal([]string{"Model budget: 50% of today's model budget of 200 tokens is used (100); calls stop when it is spent."}), "%v", frames)
			g.Expect(frames[len(frames)-1]).To(HaveKeyWithValue("type", "done"))
			g.Expect(strings.Count(logs.String(), "Model budget soft limit reached")).To(Equal(1), "warned at 100 of 200 tokens, once")
			asked := len(s.Requests())

			status, body = send(a, "a3")
			g.Expect(status).To(Equal(http.StatusTooManyRequests), "%v", body)
			e, _ := body["error"].(map[string]any)
			g.Expect(e).To(HaveKeyWithValue("code", gateway.CodeBudgetExhausted))
			g.Expect(e["message"]).To(ContainSubstring("today's model budget of 200 tokens is spent (200 used)"))
			g.Expect(s.Requests()).To(HaveLen(asked), "the model is not asked once the budget is spent")

			// Tenant B has no quota: same agent, same runtime, it works.
			for _, id := range []string{"b1", "b2", "b3"} {
				status, body := send(b, id)
				g.Expect(status).To(Equal(http.StatusOK), "%s: %v", id, body)
			}

			// A's two calls at its own price: 160 input at 1 and 40
			// output at 2 per million = 240 millionths; B's are apart.
			status, body = a.Do(t, http.MethodGet, "/api/v1/usage", nil)
			g.Expect(status).To(Equal(http.StatusOK), "%v", body)
			g.Expect(body["today"]).To(And(HaveKeyWithValue("input_tokens", 160.0), HaveKeyWithValue("output_tokens", 40.0),
				HaveKeyWithValue("cost_micros", 240.0), HaveKeyWithValue("model_calls", 2.0)))
			status, body = b.Do(t, http.MethodGet, "/api/v1/usage", nil)
			g.Expect(status).To(Equal(http.StatusOK), "%v", body)
			g.Expect(body["today"]).To(And(HaveKeyWithValue("input_tokens", 240.0), HaveKeyWithValue("model_calls", 3.0),
				HaveKeyWithValue("cost_micros", 0.0)), "no price for quota-model in the built-in table")
			// The same cost as a metric, in the currency unit.
			g.Expect(metricValue(t, reg, "picobot_model_cost_total", map[string]string{"tenant": "tenant-a", "agent": "assistant", "provider": proto, "model": "quota-model"})).
				To(BeNumerically("~", 0.000240, 1e-12))
			g.Expect(metricValue(t, reg, "picobot_model_cost_total", map[string]string{"tenant": "tenant-b"})).To(Equal(-1.0), "no cost: no series")
		})
	}
}

// TestTenantQuotaPricesAreChecked: a quota naming a price ConfigMap the
// folder lacks, or one that is not a price table, is refused at start with
// the problem named, rather than run with prices other than written.
func TestTenantQuotaPricesAreChecked(t *testing.T) {
	withoutMap, _, _ := strings.Cut(quotaYAML, "---")
	for name, tc := range map[string]struct{ quota, want string }{
		"missing ConfigMap": {withoutMap, `TenantQuota tenant-a/default names pricesConfigMap "model-prices": the folder has no ConfigMap "model-prices" in namespace "tenant-a"`},
		"bad table": {strings.Replace(quotaYAML, "openai/quota-model: 1 2", "openai/quota-model: cheap", 1),
			`failed to read the prices of TenantQuota tenant-a/default: failed to read the price table of ConfigMap "model-prices": line 1 (openai/quota-model): want 2 or 3 prices`},
		"no prices key": {strings.Replace(quotaYAML, "  prices: |", "  price: |", 1), `ConfigMap "model-prices" has no key "prices"`},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, quotaAgentYAML, "openai", "http://127.0.0.1:1/v1"), 0o600)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(tc.quota), 0o600)).To(Succeed())
			rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Tenant: "tenant-a", Env: func(string) string { return "" }})
			if err == nil {
				rt.Close()
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

// capsYAML caps tenant-a at 2 open sessions and 4 messages a minute.
const capsYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata:
  name: default
  namespace: tenant-a
spec:
  maxConcurrentSessions: 2
  messagesPerMinute: 4
`

// TestTenantQuotaCaps: tenant A's third chat is refused with session_limit
// (HTTP 429, and an error frame on the WebSocket) while its two open chats
// go on, its fifth message in the minute is refused with message_limit and
// a Retry-After, and tenant B, same runtime and agent, keeps being served.
func TestTenantQuotaCaps(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, quotaAgentYAML, fakellm.ProtocolOpenAI, s.URL()), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(capsYAML), 0o600)).To(Succeed())
	// A fixed clock: the minute and the sessions' window do not move.
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 9, 0, 10, 0, time.UTC))
	reg := prometheus.NewRegistry()
	met, err := metrics.New(reg, metrics.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Tenant: "tenant-a", Tenants: []string{"tenant-b"},
		Log: slog.New(slog.DiscardHandler), Clock: clk, Metrics: met,
		Env: func(k string) string {
			if k == embedded.SecretEnvName("llm", "apiKey") {
				return "sk-test"
			}
			return ""
		}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)
	srv, err := gateway.NewServer(gateway.Config{Backend: rt, DefaultLimit: gateway.Unlimited, Auth: gateway.MustStaticKeys(
		gateway.StaticKey{ID: "a", Token: "key-a", Tenant: "tenant-a"}, gateway.StaticKey{ID: "b", Token: "key-b", Tenant: "tenant-b"})})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	a, b := gatewaytest.Client{URL: hs.URL, Key: "key-a"}, gatewaytest.Client{URL: hs.URL, Key: "key-b"}
	send := func(c gatewaytest.Client, id, chat string) (int, map[string]any) {
		status, body := c.Do(t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": id, "agent": "assistant", "chat_id": chat, "text": "hi"})
		e, _ := body["error"].(map[string]any)
		return status, e
	}

	for i, chat := range []string{"c1", "c2"} {
		status, e := send(a, fmt.Sprint("a", i), chat)
		g.Expect(status).To(Equal(http.StatusOK), "%v", e)
	}
	status, e := send(a, "a2", "c3")
	g.Expect(status).To(Equal(http.StatusTooManyRequests))
	g.Expect(e).To(HaveKeyWithValue("code", gateway.CodeSessionLimit))
	g.Expect(e["message"]).To(ContainSubstring("this workspace has 2 sessions open, the most its quota allows (maxConcurrentSessions)"))
	// The WebSocket client of a new chat gets the same as an error frame.
	frames := a.Dial(t).Exchange(t, gatewaytest.Frame{"id": "a3", "agent": "assistant", "chat_id": "c4", "text": "hi"})
	g.Expect(frames).To(ContainElement(And(HaveKeyWithValue("type", "error"), HaveKeyWithValue("code", gateway.CodeSessionLimit),
		HaveKeyWithValue("retry_after_ms", 600000.0))), "%v", frames)
	status, e = send(a, "a4", "c1")
	g.Expect(status).To(Equal(http.StatusOK), "an open chat goes on: %v", e)
	status, e = send(a, "a5", "c2")
	g.Expect(status).To(Equal(http.StatusOK), "4 messages admitted in the minute: %v", e)

	status, body := a.Do(t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": "a6", "agent": "assistant", "chat_id": "c1", "text": "hi"})
	g.Expect(status).To(Equal(http.StatusTooManyRequests))
	g.Expect(body["error"]).To(HaveKeyWithValue("code", gateway.CodeMessageLimit))
	g.Expect(body["error"].(map[string]any)["message"]).To(ContainSubstring("this workspace has sent 4 messages in the last minute"))

	// Tenant B has no quota: new chats and many messages are served.
	for i := range 6 {
		status, e := send(b, fmt.Sprint("b", i), fmt.Sprint("c", i))
		g.Expect(status).To(Equal(http.StatusOK), "%d: %v", i, e)
	}
	g.Expect(metricValue(t, reg, "picobot_gateway_quota_refused_total", map[string]string{"tenant": "tenant-a", "code": "session_limit"})).To(Equal(2.0))
	g.Expect(metricValue(t, reg, "picobot_gateway_quota_refused_total", map[string]string{"tenant": "tenant-a", "code": "message_limit"})).To(Equal(1.0))
}

// metricValue is the value of the counter name with labels in reg, -1 when
// there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// TestTenantQuotaCronCap: a TenantQuota manifest's maxCronJobs reaches the
// cron tools: tenant A's agent makes one job, and its second cron_add is
// refused with a tool error the model reads (the turn goes on).
func TestTenantQuotaCronCap(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			return fakellm.Turn{Text: "tool said: " + last.Content}
		}
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "cron_add",
			Args: `{"schedule":{"type":"every","every_ms":3600000},"prompt":"Check the queue"}`}}}
	})
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, quotaAgentYAML+"  tools: {allow: [cron_add]}\n",
		fakellm.ProtocolOpenAI, s.URL()), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "quota.yaml"), []byte(`apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: tenant-a}
spec:
  maxCronJobs: 1
`), 0o600)).To(Succeed())
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Tenant: "tenant-a", Log: slog.New(slog.DiscardHandler),
		Scheduler: &embedded.SchedulerOptions{Clock: clocktesting.NewFakeClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))},
		Env: func(k string) string {
			if k == embedded.SecretEnvName("llm", "apiKey") {
				return "sk-test"
			}
			return ""
		}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)
	srv, err := gateway.NewServer(gateway.Config{Backend: rt, DefaultLimit: gateway.Unlimited,
		Auth: gateway.MustStaticKeys(gateway.StaticKey{ID: "a", Token: "key-a", Tenant: "tenant-a"})})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	a := gatewaytest.Client{URL: hs.URL, Key: "key-a"}
	answer := func(id string) string {
		status, body := a.Do(t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": id, "agent": "assistant", "chat_id": "c1", "text": "remind me hourly"})
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
		return fmt.Sprint(body["text"])
	}
	g.Expect(answer("m1")).To(ContainSubstring("tool said: Created job"))
	g.Expect(answer("m2")).To(ContainSubstring("tool said: error: this workspace has 1 scheduled jobs, the most its quota allows (maxCronJobs 1)"))
}
