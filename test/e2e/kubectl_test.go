package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var nsSeq atomic.Int64

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("e2e-%d", nsSeq.Add(1))
	_, stderr, err := kubectl("create", "namespace", ns)
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), stderr)
	return ns
}

// TestApplySamplesAndInspect is what a new user does: apply the samples, wait
// for Ready, look at the printer columns.
func TestApplySamplesAndInspect(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ns := newNamespace(t)

	out, stderr, err := kubectl("apply", "-n", ns, "-f", "config/samples/")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	for _, want := range []string{
		"agent.agents.picobot.io/assistant created",
		"agent.agents.picobot.io/researcher created",
		"cronjob.agents.picobot.io/morning-briefing created",
		"cronjob.agents.picobot.io/hourly-disk-check created",
		"browserprofile.agents.picobot.io/work-browser created",
	} {
		g.Expect(out).To(ContainSubstring(want))
	}

	// Without the API key Secret the operator says exactly what is missing.
	g.Eventually(func() string {
		out, _, _ := kubectl("get", "agent", "assistant", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="ModelResolved")].message}`)
		return out
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(
		`No usable model: spec.model: Secret "model-api-keys" (API key of openai/gpt-5.2) not found; fallbacks[0]: Secret "model-api-keys" (API key of anthropic/claude-sonnet-4-5) not found`))
	out, _, err = kubectl("get", "agents", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`(?m)^assistant\s+False\s+SecretNotFound\s+`))

	_, stderr, err = kubectl("create", "secret", "generic", "model-api-keys", "-n", ns,
		"--from-literal=openai=sk-test", "--from-literal=anthropic=sk-ant-test")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	_, stderr, err = kubectl("wait", "-n", ns, "--for=condition=Ready", "agent/assistant", "agent/researcher",
		"cronjob.agents.picobot.io/morning-briefing", "browserprofile/work-browser", "--timeout=60s")
	g.Expect(err).NotTo(HaveOccurred(), stderr)

	out, _, err = kubectl("get", "agents", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "READY", "REASON", "MODEL", "SESSIONS", "AGE"}))
	g.Expect(out).To(MatchRegexp(`(?m)^assistant\s+True\s+Ready\s+gpt-5.2\s+0\s+\S+$`))
	g.Expect(out).To(MatchRegexp(`(?m)^researcher\s+True\s+Ready\s+gpt-5.2-mini\s+0\s+\S+$`))

	out, _, err = kubectl("get", "agents", "-n", ns, "-o", "wide")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`(?m)^assistant\s+True\s+Ready\s+gpt-5.2\s+Spec\s+0\s+0\s+\S+$`))

	// The category lists every PicoBot kind; short names work.
	out, _, err = kubectl("get", "picobot", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("agent.agents.picobot.io/assistant"))
	g.Expect(out).To(ContainSubstring("cronjob.agents.picobot.io/morning-briefing"))
	g.Expect(out).To(ContainSubstring("browserprofile.agents.picobot.io/work-browser"))

	out, _, err = kubectl("get", "pcj", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " ")).To(Equal("NAME READY REASON CRON NEXT RUN LAST OUTCOME AGE"))
	g.Expect(out).To(MatchRegexp(`(?m)^morning-briefing\s+True\s+Ready\s+0 0 9 \* \* MON-FRI\s+20\d\d-\d\d-\d\dT\d\d:00:00Z\s+\S+$`))
	g.Expect(out).To(MatchRegexp(`(?m)^hourly-disk-check\s+True\s+Ready\s+20\d\d-\S+Z\s+\S+$`))

	out, _, err = kubectl("get", "bp", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`(?m)^work-browser\s+Work accounts\s+True\s+Ready\s+`))

	// The effective tool set honours profile, allow and deny.
	out, _, err = kubectl("get", "agent", "assistant", "-n", ns, "-o", "jsonpath={.status.effectiveTools}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring(`"web_fetch"`))
	g.Expect(out).To(ContainSubstring(`"delegate"`))
	g.Expect(out).NotTo(ContainSubstring(`"pty"`))

	// Re-applying the same manifests changes nothing (GitOps-friendly).
	out, _, err = kubectl("apply", "-n", ns, "-f", "config/samples/")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(regexp.MustCompile(`(?m) unchanged$`).FindAllString(out, -1)).To(HaveLen(5), out)
}

func TestExplainTeachesTheAPI(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	out, stderr, err := kubectl("explain", "agent.spec")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("spec describes the agent: its model, instructions, tools and skills"))
	for _, field := range []string{"model\t<Object>", "instructions\t<string>", "tools\t<Object>", "mcpServers\t<[]Object>", "delegates\t<[]Object>", "runtime\t<Object>"} {
		g.Expect(out).To(ContainSubstring(field))
	}
	out, _, err = kubectl("explain", "agent.spec.tools")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("deny last, which always wins"))
	g.Expect(out).To(ContainSubstring("group:runtime (exec, bash,"))
	out, _, err = kubectl("explain", "cronjobs.agents.picobot.io.spec.schedule.cron")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("6-field expression: second minute hour day-of-month month"))
}

func TestInvalidManifestsAreRejectedReadably(t *testing.T) {
	needAPIServer(t)
	ns := newNamespace(t)
	cases := []struct {
		file string
		want []string
	}{
		{"test/e2e/testdata/invalid-cronjob.yaml", []string{
			`"bad-cron" is invalid: spec.schedule.cron: Invalid value: "0 9 * * *": cron must have exactly 6 fields: second minute hour day-of-month month day-of-week (e.g. "0 0 9 * * *")`,
			`"bad-tz" is invalid: spec.schedule: Invalid value: tz applies only to a cron schedule`,
			`"no-prompt" is invalid`, `spec.prompt: Required value`,
		}},
		{"test/e2e/testdata/invalid-agent.yaml", []string{
			`"bad-provider" is invalid: [spec.model.provider: Unsupported value: "gemini": supported values: "openai", "anthropic"`,
			`"bad-wiring" is invalid`,
			`spec.mcpServers[0]: Invalid value: stdio servers need command (and no url); sse and streamable-http servers need url (and no command)`,
			`spec.browser: Invalid value: a browser restricted to allowedDomains cannot use a persistent profile (profileRef)`,
		}},
		{"test/e2e/testdata/invalid-browserprofile.yaml", []string{
			`The BrowserProfile "bad-profile" is invalid`,
			`spec.label: Too long: may not be more than 80`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			g := NewWithT(t)
			_, stderr, err := kubectl("apply", "-n", ns, "-f", tc.file)
			g.Expect(err).To(HaveOccurred())
			for _, w := range tc.want {
				g.Expect(stderr).To(ContainSubstring(w))
			}
		})
	}
	out, _, err := kubectl("get", "picobot", "-n", ns, "-o", "name")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(strings.TrimSpace(out)).To(BeEmpty(), "nothing invalid was stored")
}

func TestOperatorEndpoints(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + operator.probeAddr + path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Body.Close()).To(Succeed())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}
	// The metrics endpoint counts this test's own reconcile, whatever ran before.
	before, err := metric(context.Background(), operator.metrics, "controller_runtime_reconcile_total", `controller="agent"`)
	g.Expect(err).NotTo(HaveOccurred())
	ns := newNamespace(t)
	_, stderr, err := kubectl("apply", "-n", ns, "-f", "config/samples/agents_v1alpha1_agent.yaml")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Eventually(func(g Gomega) {
		n, err := metric(context.Background(), operator.metrics, "controller_runtime_reconcile_total", `controller="agent"`)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeNumerically(">=", before+2))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}
