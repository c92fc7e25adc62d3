package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/health"
)

const healthAgent = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: helper
spec:
  model:
    provider: openai
    model: gpt-5.2
    apiKeySecretRef:
      name: keys
      key: openai
`

func TestHealthCommand(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(healthAgent), 0o600)).To(Succeed())
	noEnv := func(string) string { return "" }

	// No key: the model check fails with the exact fix, and the exit code says so.
	var out bytes.Buffer
	err := runHealth(context.Background(), []string{"--dir", dir}, noEnv, &out)
	g.Expect(err).To(MatchError(errChecksFailed))
	g.Expect(out.String()).To(ContainSubstring("[FAIL] runtime: model of agent helper"))
	g.Expect(out.String()).To(ContainSubstring("PICOBOT_SECRET_KEYS_OPENAI"))
	g.Expect(out.String()).To(ContainSubstring("Enabled features"))
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
	err = runHealth(context.Background(), []string{"--dir", dir, "--json"}, env, &out)
	var r health.Report
	g.Expect(json.Unmarshal(out.Bytes(), &r)).To(Succeed())
	if _, statErr := os.Stat("/usr/lib/chromium/chromium"); statErr == nil {
		g.Expect(err).NotTo(HaveOccurred(), out.String())
		g.Expect(r.OK).To(BeTrue())
	}
	g.Expect(r.Groups[0].Kind).To(Equal(health.Core))

	// A missing browser is a failed requirement with the install command.
	out.Reset()
	err = runHealth(context.Background(), []string{"--dir", dir, "--chromium", "/nonexistent/chromium"}, env, &out)
	g.Expect(err).To(MatchError(errChecksFailed))
	g.Expect(out.String()).To(ContainSubstring("fix: apt-get install -y chromium"))

	// A browser disabled by every agent is not checked.
	g.Expect(os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(healthAgent+"  browser:\n    enabled: false\n"), 0o600)).To(Succeed())
	out.Reset()
	g.Expect(runHealth(context.Background(), []string{"--dir", dir, "--chromium", "/nonexistent/chromium"}, env, &out)).To(Succeed())
	g.Expect(out.String()).NotTo(ContainSubstring("browser"))

	out.Reset()
	g.Expect(runHealth(context.Background(), []string{"--bogus"}, env, &out)).To(HaveOccurred())
}
