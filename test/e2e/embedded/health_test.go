package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// runPicobot runs the picobot binary and returns its stdout, stderr and
// exit code.
func runPicobot(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(picobotBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("failed to run picobot %v: %v", args, err)
	return "", "", -1
}

// `picobot health` shows the running gateway's report — the same checks as
// GET /api/v1/health, the browser among them — and exits 1 when a
// required check fails (here an agent whose model endpoint refuses
// connections); a gateway named with --url that does not run is said to be
// unreachable.
func TestHealthCommandAgainstServe(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.SetAPIKey("sk-test")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	closed := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	writeAgent(t, dir, s.URL())
	g.Expect(os.WriteFile(filepath.Join(dir, "offline.yaml"), fmt.Appendf(nil, `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: offline}
spec:
  model: {provider: anthropic, model: claude-x, baseURL: "http://%s", apiKeySecretRef: {name: model-api-key, key: apiKey}}
  browser: {enabled: false}
`, closed), 0o600)).To(Succeed())
	p := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test", "HOME="+t.TempDir())
	noEnv := []string{"PICOBOT_URL=", "PICOBOT_API_KEY="}

	stdout, stderr, code := runPicobot(t, noEnv, "health", "--url", p.url)
	g.Expect(code).To(Equal(1), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	g.Expect(stdout).To(HavePrefix("Health of the running gateway at " + p.url + "\n\nRequired\n"))
	g.Expect(stdout).To(ContainSubstring("[ok  ] model: agent assistant — openai/fake at " + s.URL() + " answers"))
	g.Expect(stdout).To(ContainSubstring("[FAIL] model: agent offline — model configured but unreachable: anthropic/claude-x at http://" + closed + ": "))
	g.Expect(stdout).To(ContainSubstring("connection refused"))
	g.Expect(stdout).To(ContainSubstring("Required by enabled features\n"))
	g.Expect(stdout).To(ContainSubstring("agent assistant: browser headless launch"))
	g.Expect(stdout).To(ContainSubstring("\nOptional\n"))
	g.Expect(stdout).To(ContainSubstring("tool sandbox: warm tool sandboxes"))
	g.Expect(stderr).To(Equal("picobot: health checks failed\n"))

	// The JSON report is the gateway's, check for check.
	stdout, _, code = runPicobot(t, noEnv, "health", "--json", "--url", p.url)
	g.Expect(code).To(Equal(1))
	var cli struct {
		Source string `json:"source"`
		URL    string `json:"url"`
		health.Report
	}
	g.Expect(json.Unmarshal([]byte(stdout), &cli)).To(Succeed())
	g.Expect(cli.Source).To(Equal("gateway"))
	g.Expect(cli.URL).To(Equal(p.url))
	g.Expect(cli.OK).To(BeFalse())
	res, err := http.Get(p.url + "/api/v1/health")
	g.Expect(err).NotTo(HaveOccurred())
	var rest struct {
		Groups []health.Group `json:"groups"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&rest)).To(Succeed())
	_ = res.Body.Close()
	names := func(gs []health.Group) []string {
		var out []string
		for _, grp := range gs {
			for _, c := range grp.Checks {
				out = append(out, string(grp.Kind)+" "+grp.Name+": "+c.Name)
			}
		}
		return out
	}
	g.Expect(names(cli.Groups)).To(Equal(names(rest.Groups)))
	g.Expect(names(cli.Groups)).To(ContainElement("feature agent assistant: browser executable"))

	// PICOBOT_URL names the gateway too.
	stdout, _, code = runPicobot(t, []string{"PICOBOT_URL=" + p.url, "PICOBOT_API_KEY="}, "health")
	g.Expect(code).To(Equal(1))
	g.Expect(stdout).To(HavePrefix("Health of the running gateway at " + p.url + "\n"))

	// No gateway where --url points: said clearly, exit code 1, no report.
	stdout, stderr, code = runPicobot(t, noEnv, "health", "--url", "http://"+closed, "--dir", dir)
	g.Expect(code).To(Equal(1))
	g.Expect(stdout).To(BeEmpty())
	g.Expect(stderr).To(Equal("picobot: cannot reach the gateway at http://" + closed +
		" (connect: connection refused): start it, or check the manifests folder here with --local\n"))

	// --local checks the folder here, and says so.
	stdout, _, code = runPicobot(t, append(noEnv, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"), "health", "--local", "--dir", dir)
	g.Expect(code).To(Equal(1))
	g.Expect(stdout).To(HavePrefix("Local checks of the manifests folder " + dir + "\n"))
	g.Expect(stdout).To(ContainSubstring("[FAIL] model: agent offline — model configured but unreachable"))
}

// A gateway with an API key shows its report only to a caller with the key:
// `picobot health` says how to pass it rather than print an empty report.
func TestHealthCommandNeedsTheGatewaysKey(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	dir := t.TempDir()
	writeAgent(t, dir, s.URL(), "  browser: {enabled: false}\n")
	const key = "health-key-0123456789abcdef"
	p := serveArgs(t, dir, []string{"--addr", "127.0.0.1:0", "--api-key", key}, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test", "HOME="+t.TempDir())

	stdout, stderr, code := runPicobot(t, []string{"PICOBOT_URL=", "PICOBOT_API_KEY="}, "health", "--url", p.url)
	g.Expect(code).To(Equal(1))
	g.Expect(stdout).To(BeEmpty())
	g.Expect(stderr).To(MatchRegexp(`^picobot: the gateway at ` + p.url + ` answers "(ok|degraded)" but shows its checks only with a valid API key: pass --api-key or set PICOBOT_API_KEY\n$`))

	stdout, stderr, code = runPicobot(t, []string{"PICOBOT_URL=", "PICOBOT_API_KEY=" + key}, "health", "--url", p.url)
	g.Expect(stdout).To(HavePrefix("Health of the running gateway at " + p.url + "\n"))
	g.Expect(stdout).To(ContainSubstring("[ok  ] model: agent assistant — openai/fake at " + s.URL() + " answers"))
	g.Expect(stdout).NotTo(ContainSubstring("browser"))
	g.Expect(code).To(Equal(0), "every required check passes:\n%s%s", stdout, stderr)
	g.Expect(stdout).To(HaveSuffix("All required checks passed.\n"))
}
