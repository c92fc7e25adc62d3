package embedded

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/agenthost"
	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool/browser"
	"github.com/picobot/picobot/test/logbuf"
)

// sitePassword is the saved credential; nothing but the page may see it.
const sitePassword = "hunter2-Zq9!vX"

const secretAgentsYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: gpt-shopper
spec:
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:ui"]
    secrets:
    - name: shop-password
      secretKeyRef: {name: shop, key: password}
      domains: ["127.0.0.1"]
    - name: shop-user
      type: username
      secretKeyRef: {name: shop, key: user}
      domains: ["127.0.0.1"]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: claude-shopper
spec:
  model: {provider: anthropic, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:ui"]
    secrets:
    - name: shop-password
      secretKeyRef: {name: shop, key: password}
      domains: ["127.0.0.1"]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: no-secrets
spec:
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:ui"]
---
apiVersion: v1
kind: Secret
metadata:
  name: shop
stringData:
  password: ` + sitePassword + `
  user: alice
`

// shopSite is a login form; logins receives each password it was sent.
func shopSite(t *testing.T) (*httptest.Server, <-chan string) {
	logins := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.Method == http.MethodPost {
			logins <- r.PostFormValue("pw")
			_, _ = fmt.Fprint(w, `<!doctype html><title>Welcome</title><p>Logged in.</p>`)
			return
		}
		_, _ = fmt.Fprint(w, `<!doctype html><title>Shop login</title>
<form method="post" action="/login"><label>Password <input type="password" name="pw"></label>
<label>Note <input name="note"></label><button>Log in</button></form>`)
	}))
	t.Cleanup(srv.Close)
	return srv, logins
}

// bot_secret types a saved password into a real Chromium page on both model
// protocols, and the value is nowhere else: not in any request the model
// received, not in the store's files, not in the logs (debug level), not in
// the tool results streamed to the client or kept in the state folder. The
// page got it (its form posted it). A password is refused for a field that
// would show it, and an agent without spec.tools.secrets is not offered the
// tool.
func TestBotSecretTypesWithoutTheModelSeeingIt(t *testing.T) {
	if err := driver.CheckExecutable(driver.DefaultBin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Chromium is required: %v", err)
		}
		t.Skipf("Chromium is not installed: %v (run hack/chromium.sh)", err)
	}
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	site, logins := shopSite(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, secretAgentsYAML, s.URL()), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())

	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	resolver := netguard.ResolverFunc(func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	})
	bf := browser.NewFeature(browser.FeatureConfig{Driver: driver.Config{
		Guard:    netguard.New(netguard.AllowPrefixes(netip.MustParsePrefix("127.0.0.0/8")), netguard.WithResolver(resolver)),
		Resolver: resolver, TempDir: t.TempDir(), Log: log,
		Limits: driver.Limits{Navigation: 10 * time.Second, Action: 10 * time.Second},
	}})
	t.Cleanup(bf.Close)
	rt, err := Open(context.Background(), Options{Dir: dir, Env: func(string) string { return "" }, Log: log,
		Features: []agenthost.Feature{bf}})
	g.Expect(err).NotTo(HaveOccurred())
	e := &env{s: s, dir: dir, rt: rt, http: httptest.NewServer(gateway.New(rt, "", nil, nil))}
	t.Cleanup(e.stop)
	c := dial(t, e)

	var streamed []byte
	for _, agent := range []string{"gpt-shopper", "claude-shopper"} {
		before := len(s.Requests())
		s.Script(
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "browser", Args: fmt.Sprintf(`{"action":"open","url":%q}`, site.URL)}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "browser", Args: `{"action":"snapshot"}`}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_secret", Args: `{"action":"list"}`}}},
			// A password is not typed where the page would show it.
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_secret", Args: `{"action":"type","name":"shop-password","ref":"@e2"}`}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_secret", Args: `{"action":"type","name":"shop-password","ref":"@e1"}`}}},
			// The masked field in a snapshot, then submit.
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "browser", Args: `{"action":"snapshot"}`}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "browser", Args: `{"action":"press","key":"Enter"}`}}},
			fakellm.Turn{Text: "Logged in."},
		)
		fs := exchange(t, c, frame{"v": 1, "type": "send", "id": agent, "agent": agent, "chat_id": agent, "text": "log me in to the shop"})
		g.Expect(event(fs, "final")["text"]).To(Equal("Logged in."), agent)
		for _, f := range fs {
			streamed = fmt.Append(streamed, f)
		}
		var got string
		g.Eventually(logins, 10*time.Second).Should(Receive(&got), agent)
		g.Expect(got).To(Equal(sitePassword), "%s: the page's field held the saved password", agent)

		reqs := s.Requests()[before:]
		g.Expect(reqs).To(HaveLen(8), agent)
		g.Expect(reqs[0].Tools).To(ContainElement("bot_secret"))
		results := toolResults(reqs[len(reqs)-1])
		g.Expect(results).To(HaveLen(7), agent)
		g.Expect(results[2]).To(ContainSubstring(`{"name":"shop-password","type":"password","domains":["127.0.0.1"]}`))
		g.Expect(results[3]).To(ContainSubstring("not a password field"))
		g.Expect(results[4]).To(Equal(`Typed secret "shop-password" (password) into @e1.`))
		g.Expect(results[5]).To(ContainSubstring(`textbox "Password" [ref=@e1`), "the field is in the snapshot, its value masked")
		for i, r := range reqs {
			g.Expect(bytes.Contains(r.Body, []byte(sitePassword))).To(BeFalse(), "%s: request %d to the model holds the secret", agent, i)
		}
	}

	// Without spec.tools.secrets there is no bot_secret.
	before := len(s.Requests())
	s.Script(fakellm.Turn{Text: "hi"})
	exchange(t, c, frame{"v": 1, "type": "send", "id": "n1", "agent": "no-secrets", "chat_id": "n1", "text": "hello"})
	g.Expect(s.Requests()[before].Tools).To(ContainElement("browser"))
	g.Expect(s.Requests()[before].Tools).NotTo(ContainElement("bot_secret"))

	// The search finds the value where it is (the Secret manifest), so
	// finding it nowhere else means something.
	manifest, err := os.ReadFile(filepath.Join(dir, "agents.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Contains(manifest, []byte(sitePassword))).To(BeTrue())
	g.Expect(bytes.Contains(streamed, []byte("Typed secret"))).To(BeTrue())
	g.Expect(bytes.Contains(streamed, []byte(sitePassword))).To(BeFalse(), "the events streamed to the client hold the secret")
	g.Expect(logs.Bytes()).NotTo(BeEmpty())
	g.Expect(bytes.Contains(logs.Bytes(), []byte(sitePassword))).To(BeFalse(), "the logs hold the secret")

	// Every file of the state folder: SQLite with its WAL (history, tool
	// results, deliveries), artifacts, workspaces.
	e.stop()
	state := StateDir(dir, "")
	var files int
	g.Expect(filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(data, []byte(sitePassword)) {
			return fmt.Errorf("%s holds the secret", path)
		}
		return nil
	})).To(Succeed())
	g.Expect(files).To(BeNumerically(">", 0))
	db, err := os.ReadFile(filepath.Join(state, "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	wal, _ := os.ReadFile(filepath.Join(state, "picobot.db-wal"))
	g.Expect(bytes.Contains(append(db, wal...), []byte("Typed secret"))).To(BeTrue(), "the history was searched where it is kept")
}

// toolResults are the tool results a request carries, in order.
func toolResults(r fakellm.Recorded) []string {
	var out []string
	for _, m := range r.Messages {
		for _, tr := range m.ToolResults {
			out = append(out, tr.Content)
		}
	}
	return out
}
