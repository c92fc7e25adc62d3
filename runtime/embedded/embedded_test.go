package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const agentYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  instructions: You are a test assistant.
  model:
    provider: openai
    model: test-model
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["calculator", "todo"]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: keyless
spec:
  model:
    provider: anthropic
    model: claude-x
    apiKeySecretRef: {name: anthropic, key: apiKey}
`

const secretYAML = `apiVersion: v1
kind: Secret
metadata:
  name: llm
stringData:
  apiKey: sk-test
`

type env struct {
	s    *fakellm.Server
	dir  string
	rt   *Runtime
	http *httptest.Server
}

func start(t *testing.T, dir string, s *fakellm.Server) *env {
	t.Helper()
	g := NewWithT(t)
	rt, err := Open(context.Background(), Options{Dir: dir, Env: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	hs := httptest.NewServer(gateway.New(rt, "", nil, nil))
	e := &env{s: s, dir: dir, rt: rt, http: hs}
	t.Cleanup(e.stop)
	return e
}

func (e *env) stop() {
	if e.http != nil {
		e.http.Close()
		e.rt.Close()
		e.http = nil
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := fakellm.New()
	t.Cleanup(s.Close)
	dir := t.TempDir()
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, agentYAML, s.URL()), 0o600)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())
	return start(t, dir, s)
}

type frame map[string]any

// exchange sends one frame and collects frames until its "done".
func exchange(t *testing.T, c *websocket.Conn, send frame) []frame {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // hang guard only
	defer cancel()
	b, _ := json.Marshal(send)
	g.Expect(c.Write(ctx, websocket.MessageText, b)).To(Succeed())
	var got []frame
	for {
		_, data, err := c.Read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var f frame
		g.Expect(json.Unmarshal(data, &f)).To(Succeed())
		got = append(got, f)
		if f["type"] == "done" {
			return got
		}
	}
}

func dial(t *testing.T, e *env) *websocket.Conn {
	t.Helper()
	c, res, err := websocket.Dial(context.Background(), strings.Replace(e.http.URL, "http", "ws", 1)+"/api/v1/ws", nil)
	closeBody(res)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// event returns the body of the first event of kind.
func event(fs []frame, kind string) map[string]any {
	for _, f := range fs {
		if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == kind {
			return ev
		}
	}
	return nil
}

func kinds(fs []frame) []string {
	var out []string
	for _, f := range fs {
		k := f["type"].(string)
		if ev, ok := f["event"].(map[string]any); ok {
			k += ":" + ev["kind"].(string)
		}
		if k != "event:delta" {
			out = append(out, k)
		}
	}
	return out
}

func TestChatOverWebSocketSurvivesRestart(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
		fakellm.Turn{Text: "It is 42."},
	)
	c := dial(t, e)
	fs := exchange(t, c, frame{"v": 1, "type": "send", "id": "c1", "agent": "assistant", "chat_id": "tab1", "text": "what is 6*7?"})
	g.Expect(kinds(fs)).To(Equal([]string{"ack", "event:usage", "event:tool_call", "event:tool_result", "event:usage", "event:final", "done"}))
	g.Expect(event(fs, "tool_result")["content"]).To(Equal("42"))
	g.Expect(event(fs, "final")["text"]).To(Equal("It is 42."))
	g.Expect(fs[len(fs)-1]["session"]).To(Equal("web:assistant/tab1:default"))
	g.Expect(e.s.Requests()[0].Tools).To(Equal([]string{"calculator", "todo"}))
	g.Expect(e.s.Requests()[0].System).To(HavePrefix("You are a test assistant."))

	// The same client id again is processed once.
	fs = exchange(t, c, frame{"v": 1, "type": "send", "id": "c1", "agent": "assistant", "chat_id": "tab1", "text": "what is 6*7?"})
	g.Expect(kinds(fs)).To(Equal([]string{"ack", "done"}))
	g.Expect(e.s.Requests()).To(HaveLen(2))

	// Restart the whole runtime on the same folder: history is restored.
	e.stop()
	e2 := start(t, e.dir, e.s)
	e.s.Script(fakellm.Turn{Text: "Still 42."})
	fs = exchange(t, dial(t, e2), frame{"v": 1, "type": "send", "id": "c2", "agent": "assistant", "chat_id": "tab1", "text": "and again?"})
	g.Expect(kinds(fs)).To(ContainElement("event:final"))
	var contents []string
	for _, m := range e.s.Requests()[2].Messages {
		contents = append(contents, m.Role+":"+m.Content)
	}
	g.Expect(contents).To(ContainElement("user:what is 6*7?"))
	g.Expect(contents).To(ContainElement("assistant:It is 42."))

	// REST: sessions and history.
	res, err := http.Get(e2.http.URL + "/api/v1/sessions?agent=assistant&chat_id=tab1")
	g.Expect(err).NotTo(HaveOccurred())
	var sess struct {
		Current  string           `json:"current"`
		Sessions []map[string]any `json:"sessions"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&sess)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(sess.Current).To(Equal("default"))
	g.Expect(sess.Sessions).To(HaveLen(1))
	res, err = http.Get(e2.http.URL + "/api/v1/sessions/web:assistant%2Ftab1:default/messages?last=2")
	g.Expect(err).NotTo(HaveOccurred())
	var hist struct {
		Messages []map[string]any `json:"messages"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&hist)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(hist.Messages).To(HaveLen(2))
	g.Expect(hist.Messages[1]["content"]).To(Equal("Still 42."))
}

func TestCommandsAndBadInput(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	c := dial(t, e)
	fs := exchange(t, c, frame{"v": 1, "type": "send", "id": "n1", "agent": "assistant", "chat_id": "tab1", "text": "/new"})
	g.Expect(kinds(fs)).To(Equal([]string{"ack", "event:command", "done"}))
	g.Expect(event(fs, "command")["text"]).To(HavePrefix("Started a new conversation (d_"))

	cases := []struct {
		send frame
		code string
		msg  string
	}{
		{frame{"v": 2, "type": "send"}, gateway.CodeBadRequest, "unsupported protocol version 2"},
		{frame{"v": 1, "type": "shout"}, gateway.CodeBadRequest, `unknown frame type "shout"`},
		{frame{"v": 1, "type": "send", "id": "x", "agent": "assistant", "chat_id": "tab1", "text": "  "}, gateway.CodeBadRequest, "text is required"},
		{frame{"v": 1, "type": "send", "id": "x", "agent": "assistant", "chat_id": "a:b", "text": "hi"}, gateway.CodeBadRequest, "must not contain ':'"},
		{frame{"v": 1, "type": "send", "id": "x", "agent": "assistant", "chat_id": "tab1", "text": strings.Repeat("a", gateway.MaxTextBytes+1)}, gateway.CodeBadRequest, "the limit is 65536"},
		{frame{"v": 1, "type": "send", "id": "x", "agent": "nobody", "chat_id": "tab1", "text": "hi"}, gateway.CodeUnknownAgent, `no agent "nobody"`},
		{frame{"v": 1, "type": "send", "id": "y", "agent": "keyless", "chat_id": "tab1", "text": "hi"}, gateway.CodeNoModel,
			`agent keyless has no usable model: No usable model: spec.model: Secret "anthropic" (API key of anthropic/claude-x) not found. ` +
				`Set ANTHROPIC_API_KEY in the environment of picobot serve`},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, _ := json.Marshal(tc.send)
		g.Expect(c.Write(ctx, websocket.MessageText, b)).To(Succeed())
		var errFrame frame
		for errFrame == nil {
			_, data, err := c.Read(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			var f frame
			g.Expect(json.Unmarshal(data, &f)).To(Succeed())
			if f["type"] == "error" {
				errFrame = f
			}
		}
		cancel()
		g.Expect(errFrame["code"]).To(Equal(tc.code))
		g.Expect(errFrame["message"]).To(ContainSubstring(tc.msg))
	}
	g.Expect(e.s.Requests()).To(BeEmpty(), "nothing invalid reached the model")

	// Agents report their model state for the UI.
	res, err := http.Get(e.http.URL + "/api/v1/agents")
	g.Expect(err).NotTo(HaveOccurred())
	var agents struct {
		Agents []gateway.AgentInfo `json:"agents"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&agents)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(agents.Agents).To(HaveLen(2))
	g.Expect(agents.Agents[0].Ready).To(BeTrue())
	g.Expect(agents.Agents[1].Ready).To(BeFalse())
	g.Expect(agents.Agents[1].Reason).To(Equal("SecretNotFound"))
	g.Expect(agents.Agents[1].Message).To(HaveSuffix("or provide a Secret manifest \"anthropic\" in " + e.dir + " or the environment variable PICOBOT_SECRET_ANTHROPIC_APIKEY, then restart"))
	res, err = http.Get(e.http.URL + "/api/v1/health")
	g.Expect(err).NotTo(HaveOccurred())
	var health struct {
		Status string          `json:"status"`
		Checks []gateway.Check `json:"checks"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&health)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(health.Status).To(Equal("degraded"))
	checks := map[string]gateway.Check{}
	for _, c := range health.Checks {
		checks[c.Name] = c
	}
	g.Expect(checks["model: agent keyless"].Message).To(HavePrefix("no model configured: No usable model: spec.model: Secret \"anthropic\""))
	g.Expect(checks["model: agent keyless"].Fix).To(ContainSubstring("PICOBOT_SECRET_<SECRET>_<KEY>"))
	g.Expect(checks["model: agent keyless"].Kind).To(BeEquivalentTo("core"))
	g.Expect(checks["model: agent assistant"].OK).To(BeTrue(), "the fake model lists its models: %+v", checks["model: agent assistant"])
	g.Expect(checks["model: agent assistant"].Message).To(Equal("openai/test-model at " + e.s.URL() + " answers"))
	// The tool sandbox says which layers it has (this machine has all).
	layers := map[string]bool{}
	for _, c := range health.Checks {
		if strings.HasPrefix(c.Name, "tool sandbox: ") {
			layers[strings.TrimPrefix(c.Name, "tool sandbox: ")] = c.OK
		}
	}
	g.Expect(layers).To(Equal(map[string]bool{"environment": true, "namespaces": true, "private /proc": true, "Landlock": true, "network": true,
		"warm tool sandboxes": true}))
}

func TestStopInterruptsATurn(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.s.Script(fakellm.Turn{Text: strings.Repeat("slow ", 400), ChunkDelay: 20 * time.Millisecond})
	c := dial(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, _ := json.Marshal(frame{"v": 1, "type": "send", "id": "long", "agent": "assistant", "chat_id": "tab1", "text": "talk"})
	g.Expect(c.Write(ctx, websocket.MessageText, b)).To(Succeed())
	stopped := false
	var last, stopErr frame
	for {
		_, data, err := c.Read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var f frame
		g.Expect(json.Unmarshal(data, &f)).To(Succeed())
		if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == "delta" && !stopped {
			stopped = true
			sb, _ := json.Marshal(frame{"v": 1, "type": "stop", "agent": "assistant", "chat_id": "tab1"})
			g.Expect(c.Write(ctx, websocket.MessageText, sb)).To(Succeed())
		}
		if f["type"] == "error" {
			stopErr = f
		}
		if f["type"] == "error" || f["type"] == "done" {
			last = f
			if f["type"] == "done" {
				break
			}
		}
	}
	g.Expect(stopped).To(BeTrue())
	g.Expect(last["type"]).To(Equal("done"))
	g.Expect(stopErr).NotTo(BeNil())
	g.Expect(stopErr["code"]).To(Equal(gateway.CodeStopped))
}

func TestSecretFromEnvironment(t *testing.T) {
	g := NewWithT(t)
	g.Expect(SecretEnvName("model-api-keys", "openai")).To(Equal("PICOBOT_SECRET_MODEL_API_KEYS_OPENAI"))
}

func TestGatewayAPIKey(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	hs := httptest.NewServer(gateway.New(e.rt, "s3cret", nil, nil))
	defer hs.Close()
	get := func(path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = res.Body.Close()
		return res.StatusCode
	}
	g.Expect(get("/api/v1/agents", "")).To(Equal(http.StatusUnauthorized))
	g.Expect(get("/api/v1/agents", "wrong")).To(Equal(http.StatusUnauthorized))
	g.Expect(get("/api/v1/agents", "s3cret")).To(Equal(http.StatusOK))
	g.Expect(get("/api/v1/sessions?agent=assistant", "s3cret")).To(Equal(http.StatusBadRequest), "chat_id missing")
	g.Expect(get("/api/v1/sessions/nonsense/messages", "s3cret")).To(Equal(http.StatusBadRequest))
	g.Expect(get("/api/v1/sessions/web:assistant%2Fnobody:default/messages", "s3cret")).To(Equal(http.StatusNotFound))
	g.Expect(get("/api/v1/health", "")).To(Equal(http.StatusOK), "health needs no key (probes)")

	ws := strings.Replace(hs.URL, "http", "ws", 1) + "/api/v1/ws"
	_, res, err := websocket.Dial(context.Background(), ws, nil)
	closeBody(res)
	g.Expect(err).To(HaveOccurred())
	g.Expect(res.StatusCode).To(Equal(http.StatusUnauthorized))
	c, res2, err := websocket.Dial(context.Background(), ws+"?key=s3cret", nil)
	closeBody(res2)
	g.Expect(err).NotTo(HaveOccurred())
	_ = c.CloseNow()
}

// closeBody closes the handshake response body of a WebSocket dial, when any.
func closeBody(res *http.Response) {
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
}

func TestDumpSavesATranscriptArtifact(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.s.Script(fakellm.Turn{Text: "Hangzhou is lovely in spring."})
	c := dial(t, e)
	exchange(t, c, frame{"v": 1, "type": "send", "id": "q1", "agent": "assistant", "chat_id": "tab1", "text": "Where should I travel?"})
	fs := exchange(t, c, frame{"v": 1, "type": "send", "id": "d1", "agent": "assistant", "chat_id": "tab1", "text": "/dump"})
	text := event(fs, "command")["text"].(string)
	g.Expect(text).To(MatchRegexp(`^Saved 2 messages as markdown: \[default\.md\]\(/api/v1/artifacts/[0-9a-f-]+\)$`))
	link := text[strings.Index(text, "(")+1 : len(text)-1]

	res, err := http.Get(e.http.URL + link)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusOK))
	g.Expect(res.Header.Get("Content-Type")).To(Equal("text/plain; charset=utf-8"))
	g.Expect(res.Header.Get("Content-Security-Policy")).To(ContainSubstring("sandbox"))
	g.Expect(string(body)).To(ContainSubstring("**User:** Where should I travel?"))
	g.Expect(string(body)).To(ContainSubstring("**Assistant:** Hangzhou is lovely in spring."))

	res, err = http.Get(e.http.URL + "/api/v1/artifacts/does-not-exist")
	g.Expect(err).NotTo(HaveOccurred())
	_ = res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusNotFound))
}

func TestMCPStatusAndBrokenServer(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	dir := t.TempDir()
	yaml := fmt.Sprintf(agentYAML, s.URL()) + `---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: with-mcp
spec:
  model:
    provider: openai
    model: test-model
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  mcpServers:
    - name: broken
      transport: stdio
      command: /nonexistent/mcp-server
`
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, yaml, s.URL()), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())
	e := start(t, dir, s)
	c := dial(t, e)

	fs := exchange(t, c, frame{"v": 1, "type": "send", "id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "/mcp"})
	g.Expect(event(fs, "command")["text"]).To(Equal("No MCP servers configured."))
	fs = exchange(t, c, frame{"v": 1, "type": "send", "id": "m2", "agent": "with-mcp", "chat_id": "tab1", "text": "/mcp"})
	status := event(fs, "command")["text"].(string)
	g.Expect(status).To(ContainSubstring("broken"))
	g.Expect(status).To(ContainSubstring("/nonexistent/mcp-server"))

	// The agent still works without the broken server.
	s.Script(fakellm.Turn{Text: "fine without it"})
	fs = exchange(t, c, frame{"v": 1, "type": "send", "id": "m3", "agent": "with-mcp", "chat_id": "tab1", "text": "hi"})
	g.Expect(event(fs, "final")["text"]).To(Equal("fine without it"))

	var found bool
	for _, ck := range e.rt.Health(context.Background()).Checks() {
		if ck.Name == "agent with-mcp: MCP server broken" {
			found = true
			g.Expect(ck.OK).To(BeFalse())
			g.Expect(ck.Fix).To(ContainSubstring("/mcp"))
		}
	}
	g.Expect(found).To(BeTrue())
}

// A model key nobody provided as a Secret or PICOBOT_SECRET_ variable comes
// from the provider's own variable (ANTHROPIC_API_KEY here), as people
// expect of a tool on their laptop; the keyless agent of newEnv is then ready.
func TestModelKeyFromTheProvidersVariable(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, agentYAML, s.URL()), 0o600)).To(Succeed())
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-from-env", "OPENAI_API_KEY": "sk-openai-from-env"}
	rt, err := Open(context.Background(), Options{Dir: dir, Env: func(k string) string { return env[k] }})
	g.Expect(err).NotTo(HaveOccurred())
	defer rt.Close()
	ready := map[string]bool{}
	for _, a := range rt.Agents() {
		ready[a.Name] = a.Ready
	}
	g.Expect(ready).To(Equal(map[string]bool{"assistant": true, "keyless": true}))

	// The PICOBOT_SECRET_ variable alone does it too.
	env = map[string]string{"ANTHROPIC_API_KEY": "", "PICOBOT_SECRET_ANTHROPIC_APIKEY": "sk-ant-named"}
	rt2, err := Open(context.Background(), Options{Dir: dir, StateDir: t.TempDir(), Env: func(k string) string { return env[k] }})
	g.Expect(err).NotTo(HaveOccurred())
	defer rt2.Close()
	for _, a := range rt2.Agents() {
		if a.Name == "keyless" {
			g.Expect(a.Ready).To(BeTrue(), a.Message)
		}
	}
}

// make run's demo model (fakellm.Demo) drives a real tool through the
// runtime and reports its result.
func TestDemoModelShowsATool(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.s.Respond(fakellm.Demo)
	c := dial(t, e)
	fs := exchange(t, c, frame{"v": 1, "type": "send", "id": "d1", "agent": "assistant", "chat_id": "demo", "text": "what is 6*7?"})
	g.Expect(event(fs, "tool_result")["content"]).To(Equal("42"))
	g.Expect(event(fs, "final")["text"]).To(HavePrefix("The **calculator** tool returned:\n\n```\n42\n```"))
	fs = exchange(t, c, frame{"v": 1, "type": "send", "id": "d2", "agent": "assistant", "chat_id": "demo", "text": "hello"})
	g.Expect(event(fs, "final")["text"]).To(ContainSubstring("try `what is 6*7?`. `/help`"), "only the tools this agent has")
}
