package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, embeddedtest.LeakOptions()...)
}

const apiKey = "sk-gateway"

// hangGuard bounds a test step that would otherwise hang on a bug.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// scrape GETs /metrics with key ("" sends none) and returns the status and,
// for a 200, the parsed families.
func scrape(t *testing.T, url, key string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	g := NewWithT(t)
	req, err := http.NewRequestWithContext(hangGuard(t), http.MethodGet, url+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, fams
}

// value is the value of the series of family name with exactly the labels
// given (of those it has); a counter, gauge or a histogram's count. Absent
// is -1.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	found := -1.0
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			if have[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		if found < 0 {
			found = 0
		}
		switch {
		case m.Counter != nil:
			found += m.GetCounter().GetValue()
		case m.Gauge != nil:
			found += m.GetGauge().GetValue()
		case m.Histogram != nil:
			found += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return found
}

func lbl(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestTurnsOverOpenAI runs turns through the embedded runtime and the real
// gateway (WebSocket) with an agent on the OpenAI protocol: two turns that
// end well, one with a failing tool, one the model refuses; then scrapes
// /metrics, first without the key.
func TestTurnsOverOpenAI(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	env := embeddedtest.Start(t, embeddedtest.Options{APIKey: apiKey, Registry: reg})
	env.LLM.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}},
			Usage: &fakellm.Usage{InputTokens: 100, OutputTokens: 10}},
		fakellm.Turn{Text: "42.", Usage: &fakellm.Usage{InputTokens: 120, OutputTokens: 3}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*("}`}},
			Usage: &fakellm.Usage{InputTokens: 50, OutputTokens: 7}},
		fakellm.Turn{Text: "That did not parse.", Usage: &fakellm.Usage{InputTokens: 70, OutputTokens: 5, CachedInputTokens: 40}},
		fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: "content policy"},
	)
	c, err := client.New(env.URL, client.Options{APIKey: apiKey})
	g.Expect(err).NotTo(HaveOccurred())
	conn, err := c.Dial(hangGuard(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	for i, text := range []string{"6*7?", "6*(?", "something bad"} {
		_, err := conn.Ask(hangGuard(t), client.Send{Agent: "assistant", ChatID: "c1", Text: text}, nil)
		if i < 2 {
			g.Expect(err).NotTo(HaveOccurred())
		} else {
			g.Expect(err).To(MatchError(ContainSubstring("content policy")))
		}
	}

	status, _ := scrape(t, env.URL, "")
	g.Expect(status).To(Equal(http.StatusUnauthorized))
	status, fams := scrape(t, env.URL, apiKey)
	g.Expect(status).To(Equal(http.StatusOK))

	a := lbl("tenant", "default", "agent", "assistant")
	with := func(kv ...string) map[string]string {
		m := lbl(kv...)
		for k, v := range a {
			m[k] = v
		}
		return m
	}
	g.Expect(value(fams, "picobot_turns_total", with("outcome", "ok"))).To(Equal(2.0))
	g.Expect(value(fams, "picobot_turns_total", with("outcome", "model_rejected"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", with("phase", "total"))).To(Equal(3.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", with("phase", "model"))).To(Equal(3.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", with("phase", "tools"))).To(Equal(3.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", with("phase", "queue"))).To(Equal(3.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", with("phase", "prompt"))).To(Equal(3.0), "the session's first step")
	g.Expect(value(fams, "picobot_turn_duration_seconds", with("phase", "persist"))).To(Equal(3.0), "a refused turn is stored too")

	m := with("provider", "openai", "model", "fake")
	g.Expect(value(fams, "picobot_model_calls_total", with("provider", "openai", "model", "fake", "outcome", "ok"))).To(Equal(4.0))
	g.Expect(value(fams, "picobot_model_calls_total", with("provider", "openai", "model", "fake", "outcome", "400"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_model_call_duration_seconds", m)).To(Equal(5.0))
	// Two answers streamed text; tool calls alone stream none.
	g.Expect(value(fams, "picobot_model_time_to_first_token_seconds", m)).To(Equal(2.0))
	g.Expect(value(fams, "picobot_model_tokens_total", with("provider", "openai", "model", "fake", "direction", "in"))).To(Equal(340.0))
	g.Expect(value(fams, "picobot_model_tokens_total", with("provider", "openai", "model", "fake", "direction", "out"))).To(Equal(25.0))
	g.Expect(value(fams, "picobot_model_tokens_total", with("provider", "openai", "model", "fake", "direction", "cached"))).To(Equal(40.0))
	g.Expect(value(fams, "picobot_model_fallbacks_total", nil)).To(Equal(-1.0))

	g.Expect(value(fams, "picobot_tool_calls_total", with("tool", "calculator", "outcome", "ok"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_tool_calls_total", with("tool", "calculator", "outcome", "error"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_tool_call_duration_seconds", with("tool", "calculator"))).To(Equal(2.0))

	g.Expect(value(fams, "picobot_gateway_connections", lbl("kind", "websocket"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_gateway_frames_total", lbl("direction", "in"))).To(Equal(3.0))
	g.Expect(value(fams, "picobot_gateway_auth_failures_total", nil)).To(Equal(1.0))
	g.Expect(value(fams, "picobot_gateway_rate_limited_total", nil)).To(Equal(-1.0))

	// The bus carried the three messages (and the chat's wake); the store
	// timed the turns' writes, one audit record per tool call.
	chat := lbl("tenant", "default", "stream", "chat")
	g.Expect(value(fams, "picobot_bus_published_total", chat)).To(Equal(3.0))
	g.Expect(value(fams, "picobot_bus_consumed_total", chat)).To(Equal(3.0))
	g.Expect(value(fams, "picobot_bus_consumer_lag_seconds", chat)).To(Equal(3.0))
	g.Expect(value(fams, "picobot_bus_errors_total", nil)).To(Equal(-1.0))
	g.Expect(value(fams, "picobot_session_wakes_total", with("outcome", "queued"))).To(BeNumerically(">=", 1))
	g.Expect(value(fams, "picobot_store_operation_duration_seconds", lbl("operation", "AppendAudit"))).To(Equal(2.0))
	g.Expect(value(fams, "picobot_store_operation_duration_seconds", lbl("operation", "AppendMessages"))).To(BeNumerically(">=", 3))
	g.Eventually(func() []float64 {
		_, fams := scrape(t, env.URL, apiKey)
		return []float64{value(fams, "picobot_bus_acked_total", chat), value(fams, "picobot_bus_pending_entries", chat)}
	}).Should(Equal([]float64{3, 0}), "each message acked once its turn is stored")

	// No label value is a session id or user text.
	for name, f := range fams {
		for _, met := range f.GetMetric() {
			for _, l := range met.GetLabel() {
				g.Expect(l.GetValue()).NotTo(SatisfyAny(ContainSubstring("c1"), ContainSubstring("6*")), "%s %s", name, l.GetName())
			}
		}
	}

	g.Expect(conn.Close()).To(Succeed())
	g.Eventually(func() float64 {
		_, fams := scrape(t, env.URL, apiKey)
		return value(fams, "picobot_gateway_connections", lbl("kind", "websocket"))
	}).Should(Equal(0.0))
}

// TestFallbackOverAnthropic: an agent whose first model (Anthropic
// protocol) refuses its key falls back to its second (OpenAI protocol);
// then a turn on the Anthropic model works. The scrape asks for
// OpenMetrics.
func TestFallbackOverAnthropic(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	env := embeddedtest.Start(t, embeddedtest.Options{APIKey: apiKey, Registry: reg, Agents: []string{"unused"}, Manifests: []string{`apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: claude
spec:
  instructions: You are a test assistant.
  model:
    provider: anthropic
    model: fake-a
    baseURL: {{anthropic}}
    apiKeySecretRef: {name: llm, key: apiKey}
    fallbacks:
    - provider: openai
      model: fake-o
      baseURL: {{openai}}
      apiKeySecretRef: {name: llm, key: apiKey}
`}})
	env.LLM.Script(
		fakellm.Turn{Status: http.StatusUnauthorized, ErrorBody: "invalid x-api-key"},
		fakellm.Turn{Text: "from the fallback", Usage: &fakellm.Usage{InputTokens: 30, OutputTokens: 4}},
		fakellm.Turn{Text: "from claude", Usage: &fakellm.Usage{InputTokens: 35, OutputTokens: 6}},
	)
	c, err := client.New(env.URL, client.Options{APIKey: apiKey})
	g.Expect(err).NotTo(HaveOccurred())
	conn, err := c.Dial(hangGuard(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	for _, want := range []string{"from the fallback", "from claude"} {
		reply, err := conn.Ask(hangGuard(t), client.Send{Agent: "claude", ChatID: "c1", Text: "hello"}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(reply.Text).To(Equal(want))
	}
	g.Expect(env.LLM.Requests()[0].Protocol).To(Equal(fakellm.ProtocolAnthropic))

	req, err := http.NewRequestWithContext(hangGuard(t), http.MethodGet, env.URL+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("application/openmetrics-text"))

	_, fams := scrape(t, env.URL, apiKey)
	a := func(kv ...string) map[string]string {
		return lbl(append([]string{"tenant", "default", "agent", "claude"}, kv...)...)
	}
	g.Expect(value(fams, "picobot_turns_total", a("outcome", "ok"))).To(Equal(2.0))
	g.Expect(value(fams, "picobot_model_calls_total", a("provider", "anthropic", "model", "fake-a", "outcome", "401"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_model_calls_total", a("provider", "anthropic", "model", "fake-a", "outcome", "ok"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_model_calls_total", a("provider", "openai", "model", "fake-o", "outcome", "ok"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_model_fallbacks_total", a("provider", "openai", "model", "fake-o"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_model_tokens_total", a("provider", "anthropic", "model", "fake-a", "direction", "in"))).To(Equal(35.0))
	g.Expect(value(fams, "picobot_model_tokens_total", a("provider", "anthropic", "model", "fake-a", "direction", "out"))).To(Equal(6.0))
	g.Expect(value(fams, "picobot_model_tokens_total", a("provider", "openai", "model", "fake-o", "direction", "in"))).To(Equal(30.0))
	g.Expect(value(fams, "picobot_model_time_to_first_token_seconds", a("provider", "anthropic", "model", "fake-a"))).To(Equal(1.0))
	// The chat is served until it has been idle for a minute.
	g.Expect(value(fams, "picobot_sessions_active", a())).To(Equal(1.0))

	// Guessing keys: ten failures, then the address is refused before its
	// key is looked at. The address is blocked now, so the registry is read
	// in process.
	for i := range 11 {
		status, _ := scrape(t, env.URL, "wrong")
		want := http.StatusUnauthorized
		if i == 10 {
			want = http.StatusTooManyRequests
		}
		g.Expect(status).To(Equal(want), "scrape %d", i)
	}
	fams = gather(t, reg)
	g.Expect(value(fams, "picobot_gateway_auth_failures_total", nil)).To(Equal(10.0))
	g.Expect(value(fams, "picobot_gateway_rate_limited_total", lbl("reason", "auth_failures"))).To(Equal(1.0))
}

// TestToolLabelsAreBounded: a tool name the model made up is "unknown",
// and past MaxToolLabels distinct tools further ones are "other".
func TestToolLabelsAreBounded(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	env := embeddedtest.Start(t, embeddedtest.Options{Registry: reg})
	env.LLM.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "secret_of_user_42", Args: `{}`}}},
		fakellm.Turn{Text: "No such tool."},
	)
	c, err := client.New(env.URL, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	conn, err := c.Dial(hangGuard(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.Ask(hangGuard(t), client.Send{Agent: "assistant", ChatID: "c1", Text: "hi"}, nil)
	g.Expect(err).NotTo(HaveOccurred())

	// The same process's other agents' tools, past the cap.
	m, err := metrics.New(reg, metrics.Options{})
	g.Expect(err).To(HaveOccurred(), "a registry takes PicoBot's metrics once")
	g.Expect(m).To(BeNil())
	own := prometheus.NewRegistry()
	m, err = metrics.New(own, metrics.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	tools := m.Tools("default", "assistant")
	for i := range metrics.MaxToolLabels + 2 {
		tools.ToolStarted(context.Background(), fmt.Sprintf("tool_%d", i))(i%2 == 0)
	}

	// Without an API key, loopback clients are served, as for /api/.
	status, fams := scrape(t, env.URL, "")
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(value(fams, "picobot_tool_calls_total", lbl("tool", "unknown", "outcome", "error"))).To(Equal(1.0))
	fams = gather(t, reg)
	g.Expect(value(fams, "picobot_tool_calls_total", lbl("tool", "unknown", "outcome", "error"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_tool_calls_total", lbl("tool", "secret_of_user_42"))).To(Equal(-1.0))
	fams = gather(t, own)
	g.Expect(value(fams, "picobot_tool_calls_total", lbl("tool", "other"))).To(Equal(2.0))
	g.Expect(value(fams, "picobot_tool_calls_total", lbl("tool", "tool_0", "outcome", "error"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_tool_calls_total", lbl("tool", fmt.Sprintf("tool_%d", metrics.MaxToolLabels)))).To(Equal(-1.0))
}

// TestStatelessTurns: a stateless request of the OpenAI-compatible endpoint
// (several messages, no chat: nothing stored, no bus) is a turn too, with
// no queue phase.
func TestStatelessTurns(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	env := embeddedtest.Start(t, embeddedtest.Options{Registry: reg})
	env.LLM.Script(
		fakellm.Turn{Text: "hello", Usage: &fakellm.Usage{InputTokens: 11, OutputTokens: 2}},
		fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: "no"},
	)
	for _, want := range []int{http.StatusOK, http.StatusBadRequest} {
		req, err := http.NewRequestWithContext(hangGuard(t), http.MethodPost, env.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"assistant","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes?"},{"role":"user","content":"hi"}]}`))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(want))
	}
	fams := gather(t, reg)
	a := func(kv ...string) map[string]string {
		return lbl(append([]string{"tenant", "default", "agent", "assistant"}, kv...)...)
	}
	g.Expect(value(fams, "picobot_turns_total", a("outcome", "ok"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_turns_total", a("outcome", "model_rejected"))).To(Equal(1.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", a("phase", "model"))).To(Equal(2.0))
	g.Expect(value(fams, "picobot_turn_duration_seconds", a("phase", "queue"))).To(Equal(-1.0))
	g.Expect(value(fams, "picobot_model_tokens_total", a("direction", "in"))).To(Equal(11.0))
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	got, err := reg.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	fams := map[string]*dto.MetricFamily{}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	return fams
}

func TestErrorCode(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{context.Background(), fmt.Errorf("failed: %w", &llm.StatusError{Provider: "openai", StatusCode: 429}), "429"},
		{context.Background(), fmt.Errorf("failed: %w", llm.ErrContextOverflow), "context_overflow"},
		{context.Background(), llm.ErrTruncated, "truncated"},
		{cancelled, errors.New("read: connection closed"), "cancelled"},
		{context.Background(), errors.New("dial tcp: connection refused"), "error"},
	} {
		NewWithT(t).Expect(metrics.ErrorCode(tc.ctx, tc.err)).To(Equal(tc.want), "%v", tc.err)
	}
}
