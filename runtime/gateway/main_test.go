package gateway_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestMain fails the package if a test leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// agentYAML declares "assistant", answered by the fake model, and "keyless",
// whose model key is missing.
const agentYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  instructions: You are a test assistant.
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["calculator", "bash"]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: keyless
spec:
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: missing, key: apiKey}
`

// Keys of the test gateway.
const (
	keyA = "key-a-0123456789"
	keyB = "key-b-0123456789"
)

// env is a gateway over the real embedded runtime and the fake model.
type env struct {
	llm *fakellm.Server
	rt  *embedded.Runtime
	url string
	dir string // the manifest folder (state in .picobot)
	a   gatewaytest.Client
}

// start serves tenant-a (keyA) and tenant-b (keyB); configure may change the
// gateway's configuration.
func start(tb testing.TB, configure func(*gateway.Config)) *env {
	tb.Helper()
	return startAgents(tb, func(llmURL string) string { return fmt.Sprintf(agentYAML, llmURL, llmURL) }, nil, configure)
}

// startAgents is start with the agents of manifests (given the fake model's
// URL) and features.
func startAgents(tb testing.TB, manifests func(llmURL string) string, features []agenthost.Feature, configure func(*gateway.Config)) *env {
	tb.Helper()
	llm := fakellm.New()
	tb.Cleanup(llm.Close)
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(manifests(llm.URL())), 0o600); err != nil {
		tb.Fatal(err)
	}
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Tenant: "tenant-a", Tenants: []string{"tenant-b"}, Features: features,
		Env: func(name string) string {
			if name == embedded.SecretEnvName("llm", "apiKey") {
				return "sk-test"
			}
			return ""
		}})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := gateway.Config{Backend: rt, Auth: gateway.MustStaticKeys(
		gateway.StaticKey{ID: "a", Token: keyA, Tenant: "tenant-a"},
		gateway.StaticKey{ID: "b", Token: keyB, Tenant: "tenant-b"}), DefaultLimit: gateway.Unlimited}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := gateway.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	tb.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		rt.Close()
	})
	return &env{llm: llm, rt: rt, url: hs.URL, dir: dir, a: gatewaytest.Client{URL: hs.URL, Key: keyA}}
}

// echo makes the fake model answer "echo: <last user message>".
func (e *env) echo() {
	e.llm.Respond(func(rec fakellm.Recorded) fakellm.Turn {
		last := ""
		for _, m := range rec.Messages {
			if m.Role == "user" {
				last = m.Content
			}
		}
		return fakellm.Turn{Text: "echo: " + last}
	})
}

// contents lists a recorded request's messages but the system prompt as
// "role:content".
func contents(rec fakellm.Recorded) []string {
	out := make([]string, 0, len(rec.Messages))
	for _, m := range rec.Messages {
		if m.Role != "system" {
			out = append(out, m.Role+":"+strings.TrimSpace(m.Content))
		}
	}
	return out
}
