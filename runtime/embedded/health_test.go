package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/healthtool"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/services"
)

const healthAgents = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: oa}
spec:
  model: {provider: openai, model: gpt-x, baseURL: "%[1]s", apiKeySecretRef: {name: llm, key: apiKey}}
  tools: {allow: ["health"]}
  browser: {enabled: false}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: an}
spec:
  model: {provider: anthropic, model: claude-x, baseURL: "%[2]s", apiKeySecretRef: {name: llm, key: apiKey}}
  tools: {allow: ["health"]}
  browser: {enabled: false}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: refused}
spec:
  model: {provider: openai, model: gpt-x, baseURL: "%[3]s", apiKeySecretRef: {name: llm, key: apiKey}}
  browser: {enabled: false}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: wrongkey}
spec:
  model: {provider: openai, model: gpt-x, baseURL: "%[1]s", apiKeySecretRef: {name: bad, key: apiKey}}
  browser: {enabled: false}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: nomodel}
spec:
  browser: {enabled: false}
---
apiVersion: v1
kind: Secret
metadata: {name: bad}
stringData: {apiKey: sk-bad}
`

// One health service behind every surface of a running runtime: the
// gateway's report, the health tool a model calls (both protocols, text and
// JSON) and /health show the same checks; the model check tells no model
// from a refused endpoint, a refused key and a model that answers, and its
// probes are remembered for the TTL.
func TestOneHealthReportEverywhere(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.SetAPIKey("sk-test")
	refused := "http://" + services.ClosedAddr(t) + "/v1"
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, healthAgents, s.URL(), s.AnthropicURL(), refused), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	svc := health.NewService()
	rt, err := Open(context.Background(), Options{Dir: dir, Env: func(string) string { return "" }, Health: svc,
		Features:   []agenthost.Feature{healthtool.NewFeature(svc)},
		ModelProbe: &modelcheck.Prober{Clock: clk, TTL: time.Minute}})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(gateway.New(rt, "", nil, nil))
	e := &env{s: s, dir: dir, rt: rt, http: hs}
	t.Cleanup(e.stop)
	ctx := context.Background()

	// The REST endpoint: the report, by kind, each check marked.
	res, err := http.Get(hs.URL + "/api/v1/health")
	g.Expect(err).NotTo(HaveOccurred())
	var body struct {
		Status string         `json:"status"`
		OK     *bool          `json:"ok"`
		Groups []health.Group `json:"groups"`
		Checks []health.Check `json:"checks"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&body)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(body.Status).To(Equal("degraded"))
	g.Expect(body.OK).To(HaveValue(BeFalse()))
	g.Expect(body.Groups[0]).To(HaveField("Name", "runtime"))
	models := map[string]health.Check{}
	for _, c := range body.Checks {
		g.Expect(c.Kind).NotTo(BeEmpty(), "every check says its kind: %s", c.Name)
		if name, ok := strings.CutPrefix(c.Name, "model: agent "); ok {
			models[name] = c
			g.Expect(c.Kind).To(Equal(health.Core))
		}
	}
	g.Expect(models).To(HaveLen(5))
	g.Expect(models["oa"]).To(And(HaveField("OK", true), HaveField("Message", "openai/gpt-x at "+s.URL()+" answers")))
	g.Expect(models["an"]).To(And(HaveField("OK", true), HaveField("Message", "anthropic/claude-x at "+s.AnthropicURL()+" answers")))
	g.Expect(models["refused"].OK).To(BeFalse())
	g.Expect(models["refused"].Message).To(And(HavePrefix("model configured but unreachable: openai/gpt-x at "+refused+": "),
		ContainSubstring("connection refused")))
	g.Expect(models["wrongkey"].OK).To(BeFalse())
	g.Expect(models["wrongkey"].Message).To(And(HavePrefix("model configured but unreachable: openai/gpt-x at "+s.URL()+": "),
		ContainSubstring("401"), Not(ContainSubstring("sk-bad"))))
	g.Expect(models["nomodel"].OK).To(BeFalse())
	g.Expect(models["nomodel"].Message).To(HavePrefix("no model configured: spec.model is not set"))
	g.Expect(body.Checks).To(ContainElement(And(HaveField("Name", "tool sandbox: warm tool sandboxes"), HaveField("Kind", health.Optional))))
	g.Expect(body.Checks).To(ContainElement(And(HaveField("Name", "programs: git"), HaveField("Kind", health.Optional))))

	// The probes are remembered: a busy health page costs the provider
	// nothing more until the TTL passed.
	listings := s.ModelListings()
	g.Expect(listings).To(Equal(3), "oa, an and wrongkey reached the fake")
	for range 3 {
		g.Expect(rt.Health(ctx).OK).To(BeFalse())
	}
	g.Expect(s.ModelListings()).To(Equal(listings))
	clk.SetTime(clk.Now().Add(time.Minute + time.Second))
	rt.Health(ctx)
	g.Expect(s.ModelListings()).To(Equal(listings + 3))
	want := rt.Health(ctx).Text()

	// The health tool through the registry, called by the model over the
	// OpenAI protocol without arguments: the readable report.
	c := dial(t, e)
	s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "health", Args: `{}`}}}, fakellm.Turn{Text: "checked"})
	fs := exchange(t, c, frame{"v": 1, "type": "send", "id": "h1", "agent": "oa", "chat_id": "tab1", "text": "are you healthy?"})
	g.Expect(event(fs, "final")["text"]).To(Equal("checked"))
	reqs := s.Requests()
	g.Expect(reqs[0].Tools).To(ContainElement("health"))
	result := lastToolResult(reqs[len(reqs)-1])
	g.Expect(result.IsError).To(BeFalse())
	g.Expect(result.Content).To(Equal(want), "the tool shows the gateway's report")
	g.Expect(result.Content).To(ContainSubstring("Required\n"))
	g.Expect(result.Content).To(ContainSubstring("[FAIL] model: agent refused — model configured but unreachable"))
	g.Expect(result.Content).To(ContainSubstring("[FAIL] model: agent nomodel — no model configured"))
	g.Expect(result.Content).To(ContainSubstring("\nOptional\n"))

	// Over the Anthropic protocol with json=true: the structured report.
	s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "health", Args: `{"json":true}`}}}, fakellm.Turn{Text: "checked"})
	fs = exchange(t, c, frame{"v": 1, "type": "send", "id": "h2", "agent": "an", "chat_id": "tab1", "text": "health as JSON"})
	g.Expect(event(fs, "final")["text"]).To(Equal("checked"))
	reqs = s.Requests()
	g.Expect(reqs[len(reqs)-1].Protocol).To(Equal(fakellm.ProtocolAnthropic))
	var rep health.Report
	g.Expect(json.Unmarshal([]byte(lastToolResult(reqs[len(reqs)-1]).Content), &rep)).To(Succeed())
	g.Expect(rep.OK).To(BeFalse())
	g.Expect(rep).To(Equal(rt.Health(ctx)))
	for _, grp := range rep.Groups {
		for _, ck := range grp.Checks {
			g.Expect(ck.Kind).To(Equal(grp.Kind))
		}
	}

	// Invalid arguments go back to the model as a tool error.
	s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "health", Args: `{"json":"yes"}`}}}, fakellm.Turn{Text: "oops"})
	exchange(t, c, frame{"v": 1, "type": "send", "id": "h3", "agent": "an", "chat_id": "tab1", "text": "again"})
	reqs = s.Requests()
	g.Expect(lastToolResult(reqs[len(reqs)-1]).IsError).To(BeTrue())

	// /health answers with the same report, without the model.
	n := len(s.Requests())
	fs = exchange(t, c, frame{"v": 1, "type": "send", "id": "h4", "agent": "oa", "chat_id": "tab1", "text": "/health"})
	g.Expect(event(fs, "command")["text"]).To(Equal(want))
	g.Expect(s.Requests()).To(HaveLen(n))
}

// lastToolResult is the last tool result a request sent back to the model.
func lastToolResult(r fakellm.Recorded) fakellm.ToolResult {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if trs := r.Messages[i].ToolResults; len(trs) > 0 {
			return trs[len(trs)-1]
		}
	}
	return fakellm.ToolResult{}
}
