package embedded_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// rootYAML is the root agent's manifest file; %[1]s is the provider,
// %[2]s its base URL, %[3]s the instructions, %[4]s extra metadata.
const rootYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
%[4]s
spec:
  role: root
  instructions: %[3]s
  model: {provider: %[1]s, model: m, baseURL: %[2]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools: {allow: [calculator, reload_config, gateway]}
`

const helperYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: helper}
spec:
  instructions: You are helper.
  model: {provider: %[1]s, model: m, baseURL: %[2]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools: {allow: [calculator, reload_config, gateway]}
`

// cfgEnv is a picobot serve runtime over a manifests folder whose fake
// model calls the tool named by the user message ("call <tool> <args>")
// and then answers with the tool's result.
type cfgEnv struct {
	t        *testing.T
	dir      string
	provider string
	llm      *fakellm.Server
	clock    *clocktesting.FakeClock
	rt       *embedded.Runtime
	c        gatewaytest.Client

	mu   sync.Mutex
	reqs []fakellm.Recorded
}

func startConfig(t *testing.T, proto string) *cfgEnv {
	t.Helper()
	g := NewWithT(t)
	e := &cfgEnv{t: t, dir: t.TempDir(), llm: fakellm.New(), clock: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), provider: "openai"}
	t.Cleanup(e.llm.Close)
	e.llm.Respond(func(req fakellm.Recorded) fakellm.Turn {
		e.mu.Lock()
		e.reqs = append(e.reqs, req)
		e.mu.Unlock()
		last := req.Messages[len(req.Messages)-1]
		if len(last.ToolResults) > 0 {
			r := last.ToolResults[0]
			return fakellm.Turn{Text: "result(" + r.CallID + "): " + r.Content}
		}
		if rest, ok := strings.CutPrefix(last.Content, "call "); ok {
			name, args, _ := strings.Cut(rest, " ")
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: name, Args: args}}}
		}
		return fakellm.Turn{Text: "hello"}
	})
	url := e.llm.URL()
	if proto == fakellm.ProtocolAnthropic {
		e.provider, url = "anthropic", e.llm.AnthropicURL()
	}
	e.writeRoot("Version one.", "")
	g.Expect(os.WriteFile(filepath.Join(e.dir, "helper.yaml"), fmt.Appendf(nil, helperYAML, e.provider, url), 0o600)).To(Succeed())
	var err error
	e.rt, err = embedded.Open(context.Background(), embedded.Options{Dir: e.dir, Clock: e.clock,
		Env: func(k string) string {
			if k == embedded.SecretEnvName("llm", "apiKey") {
				return "sk-secret-value"
			}
			return ""
		}})
	g.Expect(err).NotTo(HaveOccurred())
	srv, err := gateway.NewServer(gateway.Config{Backend: e.rt, Auth: gateway.MustStaticKeys(gateway.StaticKey{ID: "a", Token: "key", Tenant: e.rt.Tenant()}),
		DefaultLimit: gateway.Unlimited})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); e.rt.Close() })
	e.c = gatewaytest.Client{URL: hs.URL, Key: "key"}
	return e
}

func (e *cfgEnv) url() string {
	if e.provider == "anthropic" {
		return e.llm.AnthropicURL()
	}
	return e.llm.URL()
}

func (e *cfgEnv) writeRoot(instructions, meta string) {
	e.t.Helper()
	NewWithT(e.t).Expect(os.WriteFile(filepath.Join(e.dir, "assistant.yaml"), fmt.Appendf(nil, rootYAML, e.provider, e.url(), instructions, meta), 0o600)).To(Succeed())
}

// send posts text to agent's chat and returns the answer.
func (e *cfgEnv) send(agent, text string) string {
	e.t.Helper()
	status, out := e.c.Do(e.t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": fmt.Sprintf("m%d", time.Now().UnixNano()),
		"agent": agent, "chat_id": "c1", "text": text})
	NewWithT(e.t).Expect(status).To(Equal(http.StatusOK), "%v", out)
	answer, _ := out["text"].(string)
	return answer
}

// sendApproving sends text to agent's chat over the WebSocket, answers the
// approval request its turn makes with decision (approve or deny) as the
// chat's user would, and returns the answer and the request.
func (e *cfgEnv) sendApproving(agent, text, decision string) (string, gatewaytest.Frame) {
	e.t.Helper()
	req, frames := e.c.Dial(e.t).SendAnswering(e.t, fmt.Sprintf("m%d", time.Now().UnixNano()), agent, "c1", text, decision)
	final := gatewaytest.Event(frames, "final")
	NewWithT(e.t).Expect(final).NotTo(BeNil(), "%v", frames)
	return final["text"].(string), req
}

// lastRequest is the model request of the last turn's first step.
func (e *cfgEnv) lastRequest() fakellm.Recorded {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reqs[len(e.reqs)-1]
}

// TestReloadConfig: reload_config, offered to the root agent only, switches
// new turns to the folder's new content; an invalid folder keeps the
// running generation and the error names the file and the problem. Both
// wire protocols.
func TestReloadConfig(t *testing.T) {
	for _, proto := range []string{fakellm.ProtocolOpenAI, fakellm.ProtocolAnthropic} {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			e := startConfig(t, proto)
			g.Expect(e.send("assistant", "hi")).To(Equal("hello"))
			req := e.lastRequest()
			g.Expect(req.Tools).To(ContainElements("reload_config", "gateway"))
			g.Expect(req.System).To(ContainSubstring("Version one."))

			// Another agent is never offered them, even when it allows them.
			e.send("helper", "hi")
			g.Expect(e.lastRequest().Tools).NotTo(ContainElements("reload_config"))
			g.Expect(e.lastRequest().Tools).NotTo(ContainElements("gateway"))

			e.writeRoot("Version two.", "")
			g.Expect(e.send("assistant", "call reload_config {}")).To(And(ContainSubstring("): Reloaded: generation 2"),
				ContainSubstring("agents assistant, helper")))
			g.Expect(e.rt.Generation()).To(Equal(2))
			// The turn that reloaded finished on the generation it started with.
			g.Expect(e.lastRequest().Messages[len(e.lastRequest().Messages)-1].ToolResults).NotTo(BeEmpty())
			g.Expect(e.lastRequest().System).To(ContainSubstring("Version one."))
			e.send("assistant", "hi")
			g.Expect(e.lastRequest().System).To(And(ContainSubstring("Version two."), Not(ContainSubstring("Version one."))))

			// An invalid folder: the error names the file, the old generation stays.
			g.Expect(os.WriteFile(filepath.Join(e.dir, "bad.yaml"), []byte("apiVersion: agents.picobot.io/v1alpha1\nkind: Agent\nmetadata: {name: bad}\n"+
				"spec:\n  model: {provider: nope, model: m}\n"), 0o600)).To(Succeed())
			e.writeRoot("Version three.", "")
			answer := e.send("assistant", "call reload_config {}")
			g.Expect(answer).To(And(ContainSubstring("): error: "), ContainSubstring("the running one stays"),
				ContainSubstring("bad.yaml"), ContainSubstring("spec.model.provider")))
			g.Expect(e.rt.Generation()).To(Equal(2))
			e.send("assistant", "hi")
			g.Expect(e.lastRequest().System).To(ContainSubstring("Version two."))
		})
	}
}

// TestGatewayTool: config.get shows the spec without secret values,
// config.schema the CRD's schema of a field, config.patch validates then
// rewrites the manifest and reloads, an invalid patch changes nothing, a
// GitOps-managed Agent is refused, and restart is off by default and, once
// enabled, waits delayMs on the injected clock.
func TestGatewayTool(t *testing.T) {
	g := NewWithT(t)
	e := startConfig(t, fakellm.ProtocolOpenAI)

	got := e.send("assistant", `call gateway {"action":"config.get"}`)
	g.Expect(got).To(And(ContainSubstring(`"instructions":"Version one."`), ContainSubstring(`"apiKeySecretRef"`)))
	g.Expect(got).NotTo(ContainSubstring("sk-secret-value"))

	got = e.send("assistant", `call gateway {"action":"config.schema","path":"tools.gateway"}`)
	g.Expect(got).To(And(ContainSubstring(`"restart"`)))
	got = e.send("assistant", `call gateway {"action":"config.schema","path":"tools.nothing"}`)
	g.Expect(got).To(And(ContainSubstring("): error: "), ContainSubstring(`no field "nothing"`)))

	// A change waits for the chat's user: denied, nothing is written.
	before, err := os.ReadFile(filepath.Join(e.dir, "assistant.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	got, req := e.sendApproving("assistant", `call gateway {"action":"config.patch","patch":{"instructions":"Unseen."}}`, "deny")
	g.Expect(req).To(And(HaveKeyWithValue("name", "gateway"), HaveKeyWithValue("command", `config.patch {"instructions":"Unseen."}`)))
	g.Expect(got).To(ContainSubstring("): error: the configuration was not changed: the user denied it"))
	g.Expect(os.ReadFile(filepath.Join(e.dir, "assistant.yaml"))).To(Equal(before))
	g.Expect(e.rt.Generation()).To(Equal(1))

	got, _ = e.sendApproving("assistant", `call gateway {"action":"config.patch","patch":{"instructions":"Patched."}}`, "approve")
	g.Expect(got).To(ContainSubstring("): Saved and reloaded: generation 2"))
	file, err := os.ReadFile(filepath.Join(e.dir, "assistant.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(file)).To(ContainSubstring("instructions: Patched."))
	e.send("assistant", "hi")
	g.Expect(e.lastRequest().System).To(ContainSubstring("Patched."))

	// Invalid: the API server's validation (enum) refuses it, nothing is written.
	got, _ = e.sendApproving("assistant", `call gateway {"action":"config.patch","patch":{"model":{"provider":"nope"}}}`, "approve")
	g.Expect(got).To(And(ContainSubstring("): error: "), ContainSubstring("not saved"), ContainSubstring("spec.model.provider")))
	after, err := os.ReadFile(filepath.Join(e.dir, "assistant.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(file))
	g.Expect(e.rt.Generation()).To(Equal(2))

	// restart: disabled by default.
	got = e.send("assistant", `call gateway {"action":"restart"}`)
	g.Expect(got).To(And(ContainSubstring("): error: "), ContainSubstring("spec.tools.gateway.restart")))
	got, _ = e.sendApproving("assistant", `call gateway {"action":"config.patch","patch":{"tools":{"gateway":{"restart":true}}}}`, "approve")
	g.Expect(got).To(ContainSubstring("generation 3"))
	got = e.send("assistant", `call gateway {"action":"restart","delayMs":5000}`)
	g.Expect(got).To(ContainSubstring("Restarting in 5s"))
	g.Expect(e.rt.Generation()).To(Equal(3))
	e.clock.Step(4999 * time.Millisecond)
	g.Expect(e.rt.Generation()).To(Equal(3))
	g.Expect(e.clock.HasWaiters()).To(BeTrue())
	e.clock.Step(time.Millisecond)
	g.Eventually(e.rt.Generation).Should(Equal(4)) // the restart runs in its own goroutine

	// GitOps-managed: refused with a message saying so; reading still works.
	e.writeRoot("Managed.", "  labels: {kustomize.toolkit.fluxcd.io/name: apps}")
	g.Expect(e.send("assistant", "call reload_config {}")).To(ContainSubstring("generation 5"))
	managed, err := os.ReadFile(filepath.Join(e.dir, "assistant.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	got = e.send("assistant", `call gateway {"action":"config.apply","spec":{"instructions":"x"}}`)
	g.Expect(got).To(And(ContainSubstring("): error: "), ContainSubstring("managed by Flux (Kustomization)"),
		ContainSubstring("kustomize.toolkit.fluxcd.io/name=apps"), ContainSubstring("Git repository")))
	now, err := os.ReadFile(filepath.Join(e.dir, "assistant.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now).To(Equal(managed))
}
