package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/services"
)

const healthAgent = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: helper
spec:
  model:
    provider: openai
    model: gpt-5.2
    baseURL: %s
    apiKeySecretRef:
      name: keys
      key: openai
`

// The local checks of a manifests folder (--local, or when no gateway
// answers at the default address).
func TestHealthCommand(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.SetAPIKey("sk-test")
	dir := t.TempDir()
	agent := fmt.Sprintf(healthAgent, llm.URL())
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(agent), 0o600)).To(Succeed())
	noEnv := func(string) string { return "" }
	noGateway := "http://" + services.ClosedAddr(t)

	// No gateway at the default address: it says so and checks the folder.
	// No key: the model check fails with the exact fix, and the exit code
	// says so.
	var out bytes.Buffer
	err := runHealth(context.Background(), []string{"--dir", dir}, noEnv, &out, noGateway)
	g.Expect(err).To(MatchError(errChecksFailed))
	g.Expect(out.String()).To(HavePrefix("Local checks of the manifests folder " + dir + " (no gateway answers at " + noGateway +
		" (connect: connection refused); start it with `picobot serve`, or point --url at it)\n"))
	g.Expect(out.String()).To(ContainSubstring("[FAIL] model: agent helper — no model configured: "))
	g.Expect(out.String()).To(ContainSubstring("PICOBOT_SECRET_KEYS_OPENAI"))
	g.Expect(out.String()).To(ContainSubstring("Required by enabled features"))
	g.Expect(out.String()).To(ContainSubstring("browser: browser executable"))
	g.Expect(out.String()).To(ContainSubstring("[ok  ] tool sandbox: Landlock — ABI "))
	g.Expect(out.String()).To(ContainSubstring("[ok  ] tool sandbox: network — programs connect over TCP only to ports 53, 80 and 443 and those the Agent allows"))

	// With the key (and a working browser) everything required passes.
	env := func(k string) string {
		if k == "PICOBOT_SECRET_KEYS_OPENAI" {
			return "sk-test"
		}
		return ""
	}
	out.Reset()
	err = runHealth(context.Background(), []string{"--dir", dir, "--json", "--local"}, env, &out, noGateway)
	var r struct {
		Source string `json:"source"`
		health.Report
	}
	g.Expect(json.Unmarshal(out.Bytes(), &r)).To(Succeed())
	g.Expect(r.Source).To(Equal("local"))
	if _, statErr := os.Stat("/usr/lib/chromium/chromium"); statErr == nil {
		g.Expect(err).NotTo(HaveOccurred(), out.String())
		g.Expect(r.OK).To(BeTrue())
	}
	g.Expect(r.Groups[0].Kind).To(Equal(health.Core))
	g.Expect(r.Groups[1].Checks).To(ConsistOf(health.Check{Name: "agent helper", OK: true, Kind: health.Core,
		Message: "openai/gpt-5.2 at " + llm.URL() + " answers"}), "the endpoint was probed with the key")

	// A model configured but unreachable is told apart from none.
	refused := "http://" + services.ClosedAddr(t) + "/v1"
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(fmt.Sprintf(healthAgent, refused)), 0o600)).To(Succeed())
	out.Reset()
	g.Expect(runHealth(context.Background(), []string{"--dir", dir, "--local"}, env, &out, noGateway)).To(MatchError(errChecksFailed))
	g.Expect(out.String()).To(HavePrefix("Local checks of the manifests folder " + dir + "\n"))
	g.Expect(out.String()).To(MatchRegexp(`\[FAIL\] model: agent helper — model configured but unreachable: openai/gpt-5.2 at ` +
		regexp.QuoteMeta(refused) + `: .*connection refused`))
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(agent), 0o600)).To(Succeed())

	// A missing browser is a failed requirement with the install command.
	out.Reset()
	err = runHealth(context.Background(), []string{"--dir", dir, "--chromium", "/nonexistent/chromium"}, env, &out, noGateway)
	g.Expect(err).To(MatchError(errChecksFailed))
	g.Expect(out.String()).To(ContainSubstring("fix: apt-get install -y chromium"))

	// A browser disabled by every agent is not checked.
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(agent+"  browser:\n    enabled: false\n"), 0o600)).To(Succeed())
	out.Reset()
	g.Expect(runHealth(context.Background(), []string{"--dir", dir, "--chromium", "/nonexistent/chromium"}, env, &out, noGateway)).To(Succeed())
	g.Expect(out.String()).NotTo(ContainSubstring("browser"))

	out.Reset()
	g.Expect(runHealth(context.Background(), []string{"--bogus"}, env, &out, noGateway)).To(HaveOccurred())

	// A gateway named on purpose that does not answer is an error, not a
	// report on this folder.
	out.Reset()
	err = runHealth(context.Background(), []string{"--dir", dir, "--url", noGateway}, env, &out, noGateway)
	g.Expect(err).To(MatchError("cannot reach the gateway at " + noGateway + " (connect: connection refused): start it, or check the manifests folder here with --local"))
	g.Expect(out.String()).To(BeEmpty())
}

// bot_status asks the health service's prober: a model that answers, one
// configured at an address nothing listens on, and none.
func TestBotStatusProbe(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	probe := modelProbe(modelcheck.NewProber())
	ok, detail := probe(context.Background(), &feature.Agent{Endpoint: &provider.Config{Provider: "openai", Model: "m", BaseURL: llm.URL(), APIKey: "k"}})
	g.Expect(ok).To(BeTrue(), detail)
	ok, detail = probe(context.Background(), &feature.Agent{Endpoint: &provider.Config{Provider: "openai", Model: "m", BaseURL: "http://" + services.ClosedAddr(t) + "/v1", APIKey: "k"}})
	g.Expect(ok).To(BeFalse())
	g.Expect(detail).To(HavePrefix("model configured but unreachable: openai/m at http://127.0.0.1:"))
	ok, detail = probe(context.Background(), &feature.Agent{ModelMessage: "spec.model is not set"})
	g.Expect(ok).To(BeFalse())
	g.Expect(detail).To(Equal("no model configured: spec.model is not set"))
	g.Expect(modelProbe(nil)).To(BeNil())
}
