// Package embedded runs the real `picobot serve` binary as a process against
// the scripted fake LLM, the way `make run` does.
package embedded

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/controlplane"
)

var picobotBin string

// mcpProbeBin is a hostile MCP stdio server (test/mcpprobe).
var mcpProbeBin string

func TestMain(m *testing.M) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "picobot-serve-")
	if err != nil {
		panic(err)
	}
	picobotBin = filepath.Join(dir, "picobot")
	mcpProbeBin = filepath.Join(dir, "mcpprobe")
	for bin, pkg := range map[string]string{picobotBin: "./runtime/cmd/picobot", mcpProbeBin: "./test/mcpprobe"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to build %s: %v\n", pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type serveProc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	log  *strings.Builder
}

var servingRE = regexp.MustCompile(`PicoBot is serving (http://\S+)/`)

func serve(tb testing.TB, dir string, env ...string) *serveProc {
	tb.Helper()
	return serveArgs(tb, dir, []string{"--addr", "127.0.0.1:0"}, env...)
}

// serveArgs starts `picobot serve --dir dir` with more flags.
func serveArgs(tb testing.TB, dir string, args []string, env ...string) *serveProc {
	tb.Helper()
	cmd := exec.Command(picobotBin, append([]string{"serve", "--dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan struct{}), log: &strings.Builder{}}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.log.WriteString(line + "\n")
			if m := servingRE.FindStringSubmatch(line); m != nil {
				urlc <- m[1]
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-urlc:
	case <-p.done:
		tb.Fatalf("picobot serve exited:\n%s", p.log)
	case <-time.After(60 * time.Second):
		p.stop()
		tb.Fatalf("picobot serve did not start:\n%s", p.log)
	}
	tb.Cleanup(p.stop)
	return p
}

func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *serveProc) rssKB() int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// codingTools is the spec.tools of an Agent with the coding profile.
const codingTools = `  tools:
    profile: coding
`

// writeAgent writes dir/agent.yaml: the Agent "assistant" of the fake model
// at baseURL, whose key is the Secret model-api-key (which the tests pass to
// `picobot serve` in its environment), followed by the spec fields of spec
// (tools, channels, MCP servers; each indented by two spaces).
func writeAgent(tb testing.TB, dir, baseURL string, spec ...string) {
	tb.Helper()
	yaml := fmt.Sprintf(`apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  model: {provider: openai, model: fake, baseURL: %s, apiKeySecretRef: {name: model-api-key, key: apiKey}}
`, baseURL) + strings.Join(spec, "")
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// say sends one message over a fresh WebSocket and returns the final text.
func say(tb testing.TB, url, chat, id, text string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/api/v1/ws", nil)
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
	if err != nil {
		return "", err
	}
	defer func() { _ = c.CloseNow() }()
	b, _ := json.Marshal(map[string]any{"v": 1, "type": "send", "id": id, "agent": "assistant", "chat_id": chat, "text": text})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		return "", err
	}
	final := ""
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return "", err
		}
		var f struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Event   struct {
				Kind, Text string
			} `json:"event"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return "", err
		}
		switch {
		case f.Type == "error":
			return "", fmt.Errorf("error frame: %s", f.Message)
		case f.Type == "event" && (f.Event.Kind == "final" || f.Event.Kind == "command"):
			final = f.Event.Text
		case f.Type == "done":
			return final, nil
		}
	}
}

func TestServeBinary(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: fmt.Sprintf("reply %d", len(r.Messages))}
	})
	dir := t.TempDir()
	writeAgent(t, dir, s.URL(), codingTools)

	// Without the key the agent is loaded, says why it cannot answer, and
	// the UI is served.
	p := serve(t, dir)
	g.Expect(p.log.String()).To(ContainSubstring(`NOT READY: No usable model: spec.model: Secret \"model-api-key\"`))
	_, err := say(t, p.url, "tab1", "m1", "hello")
	g.Expect(err).To(MatchError(ContainSubstring("agent assistant has no usable model")))
	res, err := http.Get(p.url + "/")
	g.Expect(err).NotTo(HaveOccurred())
	page, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusOK))
	g.Expect(string(page)).To(ContainSubstring("PicoBot"))
	p.stop()

	// With the key from the environment it answers, and a restart keeps the
	// conversation.
	env := "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"
	p = serve(t, dir, env)
	// The model sees: system, the first "hello" (kept although no model could
	// answer it), the new "hello".
	g.Expect(say(t, p.url, "tab1", "m2", "hello")).To(Equal("reply 3"))
	p.stop()
	p = serve(t, dir, env)
	g.Expect(say(t, p.url, "tab1", "m3", "again")).To(Equal("reply 5"), "system + 3 earlier messages + the new one")
	g.Expect(say(t, p.url, "tab1", "m4", "/info")).To(ContainSubstring("Messages: 5"))
}

// BenchmarkServeRSS100Sessions measures the resident memory of `picobot serve`
// after 100 sessions were restored (each got a message after a restart) and
// went idle. Target: under 100 MB.
func BenchmarkServeRSS100Sessions(b *testing.B) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		writeAgent(b, dir, s.URL(), codingTools)
		env := "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"
		p := serve(b, dir, env)
		for j := range 100 {
			if _, err := say(b, p.url, fmt.Sprintf("chat%d", j), "a", "first"); err != nil {
				b.Fatal(err)
			}
		}
		p.stop()
		p = serve(b, dir, env)
		start := time.Now()
		for j := range 100 {
			if _, err := say(b, p.url, fmt.Sprintf("chat%d", j), "b", "restored?"); err != nil {
				b.Fatal(err)
			}
		}
		restore := time.Since(start)
		time.Sleep(time.Second) // idle
		b.ReportMetric(float64(p.rssKB())/1024, "MB-rss-100-idle")
		b.ReportMetric(float64(restore.Milliseconds())/100, "ms-per-restored-turn")
		p.stop()
	}
}

// BenchmarkHelloBytes reports what a plain "hello" costs on the wire to the
// model with an agent's default tool set (every built-in tool and feature
// `picobot serve` gives an agent without a tool policy; the folder's only
// Agent is its root agent, so reload_config and gateway are among them):
// request bytes and about 4 bytes per token.
func BenchmarkHelloBytes(b *testing.B) { helloBytes(b) }

// BenchmarkHelloBytesWithWebSearch is BenchmarkHelloBytes for an agent with
// spec.tools.webSearch, the only agents web_search is declared to: what the
// tool costs those who configure it.
func BenchmarkHelloBytesWithWebSearch(b *testing.B) {
	helloBytes(b, "  tools: {webSearch: {provider: searxng, baseURL: \"http://127.0.0.1:9\"}}\n")
}

// BenchmarkHelloBytesWithBotTools is BenchmarkHelloBytes for an agent with
// a connector (spec.channels) and a saved credential (spec.tools.secrets),
// the only agents bot_connector and bot_secret are declared to.
func BenchmarkHelloBytesWithBotTools(b *testing.B) {
	helloBytes(b, "  tools: {secrets: [{name: site-password, secretKeyRef: {name: site, key: password}, domains: [site.example]}]}\n",
		"  channels: [{type: web, chatID: inbox}]\n")
}

// BenchmarkHelloBytesWithChatChannel is BenchmarkHelloBytes for an agent
// with a chat platform channel (a webhook), the only agents the message
// tool is declared to: what the tool costs them.
func BenchmarkHelloBytesWithChatChannel(b *testing.B) {
	helloBytesEnv(b, []string{"PICOBOT_SECRET_TICKETS_SIGNINGSECRET=s"},
		"  channels: [{type: webhook, name: tickets, secretRef: {name: tickets}}]\n")
}

func helloBytes(b *testing.B, spec ...string) { helloBytesEnv(b, nil, spec...) }

func helloBytesEnv(b *testing.B, env []string, spec ...string) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "hi"} })
	dir := b.TempDir()
	writeAgent(b, dir, s.URL(), spec...)
	p := serve(b, dir, append([]string{"PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test", "HOME=" + b.TempDir()}, env...)...)
	defer p.stop()
	for i := 0; i < b.N; i++ {
		if _, err := say(b, p.url, fmt.Sprintf("hello%d", i), "h", "hello"); err != nil {
			b.Fatal(err)
		}
	}
	reqs := s.Requests()
	last := reqs[len(reqs)-1]
	b.ReportMetric(float64(len(last.Body)), "request-bytes")
	b.ReportMetric(float64(len(last.Body))/4, "approx-tokens")
	b.ReportMetric(float64(len(last.Tools)), "tools")
}
