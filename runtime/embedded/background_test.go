package embedded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// bgManifests: the root agent "assistant" may delegate to researcher and to
// l1, which may delegate to l2 (so l1 is an orchestrating sub-agent).
const bgManifests = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  instructions: You are assistant.
  model: {provider: openai, model: parent-model, baseURL: %[1]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator]}
  delegates:
  - {name: researcher, agentRef: {name: researcher}}
  - {name: sub, agentRef: {name: l1}}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: researcher}
spec:
  instructions: You are researcher.
  model: {provider: openai, model: research-model, baseURL: %[1]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator]}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: l1}
spec:
  instructions: You are l1.
  model: {provider: openai, model: chain-model, baseURL: %[1]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator]}
  delegates: [{name: next, agentRef: {name: l2}}]
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: l2}
spec:
  instructions: You are l2.
  model: {provider: openai, model: chain-model, baseURL: %[1]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator]}
`

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// bgEnv is an embedded runtime over bgManifests serving tenants a and b
// behind the real gateway HTTP API (keys "key-a", "key-b"); it can be
// stopped and started again on the same state folder.
type bgEnv struct {
	t    testing.TB
	dir  string
	llm  *fakellm.Server
	opts embedded.Options
	rt   *embedded.Runtime
	st   store.Store
	hs   *httptest.Server
	a, b gatewaytest.Client

	mu      sync.Mutex
	respond func(agent string, req fakellm.Recorded) fakellm.Turn
}

func startBackground(t testing.TB, respond func(agent string, req fakellm.Recorded) fakellm.Turn) *bgEnv {
	t.Helper()
	e := &bgEnv{t: t, dir: t.TempDir(), llm: fakellm.New(), respond: respond}
	t.Cleanup(e.llm.Close)
	e.llm.Respond(func(req fakellm.Recorded) fakellm.Turn {
		agent := ""
		if m := youAre.FindStringSubmatch(req.System); m != nil {
			agent = m[1]
		}
		e.mu.Lock()
		fn := e.respond
		e.mu.Unlock()
		return fn(agent, req)
	})
	NewWithT(t).Expect(os.WriteFile(filepath.Join(e.dir, "agents.yaml"), fmt.Appendf(nil, bgManifests, e.llm.URL()), 0o600)).To(Succeed())
	e.opts = embedded.Options{Dir: e.dir, Tenant: tenantA, Tenants: []string{tenantB},
		Env: func(k string) string {
			if k == embedded.SecretEnvName("parent", "apiKey") {
				return "sk-test"
			}
			return ""
		}}
	e.start()
	t.Cleanup(e.stop)
	return e
}

// setRespond swaps the fake model's behaviour (a restarted server's).
func (e *bgEnv) setRespond(fn func(agent string, req fakellm.Recorded) fakellm.Turn) {
	e.mu.Lock()
	e.respond = fn
	e.mu.Unlock()
}

func (e *bgEnv) start() {
	g := NewWithT(e.t)
	state, err := embedded.OpenState(context.Background(), embedded.StateDir(e.dir, ""))
	g.Expect(err).NotTo(HaveOccurred())
	opts := e.opts
	opts.State = state
	e.rt, err = embedded.Open(context.Background(), opts)
	g.Expect(err).NotTo(HaveOccurred())
	e.st = state.Store
	auth := gateway.MustStaticKeys(gateway.StaticKey{ID: "a", Token: "key-a", Tenant: tenantA}, gateway.StaticKey{ID: "b", Token: "key-b", Tenant: tenantB})
	srv, err := gateway.NewServer(gateway.Config{Backend: e.rt, Auth: auth, DefaultLimit: gateway.Unlimited})
	g.Expect(err).NotTo(HaveOccurred())
	e.hs = httptest.NewServer(srv)
	e.a, e.b = gatewaytest.Client{URL: e.hs.URL, Key: "key-a"}, gatewaytest.Client{URL: e.hs.URL, Key: "key-b"}
}

// stop shuts the server down as picobot serve does (running turns and runs
// are cut short and resume at the next start).
func (e *bgEnv) stop() {
	if e.rt == nil {
		return
	}
	e.hs.Close()
	e.rt.Close()
	e.rt = nil
}

// send posts a message to the assistant over HTTP and returns its answer
// and session.
func (e *bgEnv) send(c gatewaytest.Client, chat, text string) (answer, session string) {
	e.t.Helper()
	status, out := c.Do(e.t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": fmt.Sprintf("m%d", time.Now().UnixNano()),
		"agent": "assistant", "chat_id": chat, "text": text})
	NewWithT(e.t).Expect(status).To(Equal(http.StatusOK), "%v", out)
	answer, _ = out["text"].(string)
	session, _ = out["session"].(string)
	return answer, session
}

// history is the session's messages as the HTTP API shows them.
func (e *bgEnv) history(c gatewaytest.Client, session string) []gatewaytest.Frame {
	e.t.Helper()
	status, out := c.Do(e.t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape(session)+"/messages?last=500", nil)
	NewWithT(e.t).Expect(status).To(Equal(http.StatusOK), "%v", out)
	var msgs []gatewaytest.Frame
	for _, m := range out["messages"].([]any) {
		msgs = append(msgs, m.(map[string]any))
	}
	return msgs
}

func tenantOf(t string) context.Context { return store.WithTenant(context.Background(), t) }

// runs lists a tenant's runs.
func (e *bgEnv) runs(tenant string, f store.AgentRunFilter) []store.AgentRun {
	e.t.Helper()
	f.Limit = 1000
	runs, err := e.st.ListAgentRuns(tenantOf(tenant), f)
	NewWithT(e.t).Expect(err).NotTo(HaveOccurred())
	return runs
}

// lastMessage is the request's last message (the user's, or a tool result).
func lastMessage(req fakellm.Recorded) fakellm.Message { return req.Messages[len(req.Messages)-1] }

// continuationOf returns the run a continuation request processes.
func continuationOf(req fakellm.Recorded) (string, bool) {
	m := lastMessage(req)
	if m.Role != "user" || !strings.HasPrefix(m.Content, "[Background run ") {
		return "", false
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(m.Content, "[Background run "), " ")
	return id, true
}

// continuationRequests counts, per run, the model requests that processed
// its continuation.
func (e *bgEnv) continuationRequests() map[string]int {
	out := map[string]int{}
	for _, r := range e.llm.Requests() {
		if id, ok := continuationOf(r); ok {
			out[id]++
		}
	}
	return out
}

func delegateCall(id, args string) fakellm.Call { return fakellm.Call{ID: id, Name: delegate.Name, Args: args} }

func taskCall(args string) fakellm.Turn {
	return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "t1", Name: delegate.TaskName, Args: args}}}
}

// waitDelivered waits until n background runs of the tenant have had their
// completion delivered.
func (e *bgEnv) waitDelivered(tenant string, n int) []store.AgentRun {
	e.t.Helper()
	var runs []store.AgentRun
	NewWithT(e.t).Eventually(func() int {
		runs = e.runs(tenant, store.AgentRunFilter{Mode: store.RunBackground, Completion: store.CompletionDelivered})
		return len(runs)
	}).WithTimeout(60*time.Second).WithPolling(10*time.Millisecond).Should(BeNumerically(">=", n), "delivered completions")
	return runs
}

// checkOnceEach checks that each run had exactly one continuation turn: one
// user message with its continuation id in the parent session, answered,
// and one model request processing it.
func (e *bgEnv) checkOnceEach(c gatewaytest.Client, session string, runs []store.AgentRun) {
	e.t.Helper()
	g := NewWithT(e.t)
	hist := e.history(c, session)
	perRun := map[string]int{}
	for i, m := range hist {
		content, _ := m["content"].(string)
		if m["role"] != "user" || !strings.HasPrefix(content, "[Background run ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(content, "[Background run "), " ")
		perRun[id]++
		g.Expect(i+1 < len(hist) && hist[i+1]["role"] == "assistant").To(BeTrue(), "the continuation of %s was answered in the chat", id)
	}
	reqs := e.continuationRequests()
	for _, r := range runs {
		g.Expect(perRun[r.ID]).To(Equal(1), "run %s: one continuation message in the chat", r.ID)
		g.Expect(reqs[r.ID]).To(Equal(1), "run %s: one continuation turn", r.ID)
	}
}

// TestDelegateBackground: a single background run and a batch of two each
// return at once with their run ids; every run is recorded with its
// completion slot, ends on its own, and the parent chat gets exactly one
// continuation turn per run whose reply is in the chat's history; the
// background run's model got emit_signal, the chat's never did.
func TestDelegateBackground(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher":
			if strings.Contains(last.Content, "slow") {
				<-release
			}
			return fakellm.Turn{Text: "found: " + last.Content[strings.LastIndex(last.Content, "\n")+1:]}
		case strings.HasPrefix(last.Content, "[Background run "):
			id, _ := continuationOf(req)
			return fakellm.Turn{Text: "Processed " + id}
		case last.Role == "tool":
			return fakellm.Turn{Text: "Started: " + last.Content}
		case strings.Contains(last.Content, "ONE"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"slow task","mode":"background"}`)}}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d2",
				`{"target":"researcher","mode":"background","tasks":[{"task":"quick A","plan_item_id":"1"},{"task":"quick B","plan_item_id":"2"}]}`)}}
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	answer, session := e.send(e.a, "bg", "Start ONE")
	var one delegate.Result
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(answer, "Started: ")), &one)).To(Succeed(), answer)
	g.Expect(one.Status).To(Equal("running"), "the call returned while the run still runs")
	g.Expect(one.RunID).NotTo(BeEmpty())
	run, err := e.st.GetAgentRun(tenantOf(tenantA), one.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(run.Mode).To(Equal(store.RunBackground))
	g.Expect(run.Completion).To(Equal(store.CompletionReserved))
	g.Expect(run.SessionID).To(Equal(session))
	g.Expect(run.ParentAgent).To(Equal("assistant"))

	// The batch: each run returns on its own while the first is still
	// running.
	answer, _ = e.send(e.a, "bg", "Start TWO")
	var two []delegate.Result
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(answer, "Started: ")), &two)).To(Succeed(), answer)
	g.Expect(two).To(HaveLen(2))
	done := e.waitDelivered(tenantA, 2)
	g.Expect(done).To(HaveLen(2), "the two quick runs; the slow one still runs")
	got, err := e.st.GetAgentRun(tenantOf(tenantA), one.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(store.RunRunning))

	close(release)
	done = e.waitDelivered(tenantA, 3)
	for _, r := range done {
		g.Expect(r.Status).To(Equal(store.RunSucceeded))
		g.Expect(r.Result).To(HavePrefix("found: "))
	}
	e.checkOnceEach(e.a, session, done)
	hist := e.history(e.a, session)
	g.Expect(hist[len(hist)-1]["content"]).To(HavePrefix("Processed "), "the last continuation's reply is the chat's last message")

	for _, r := range e.llm.Requests() {
		a := youAre.FindStringSubmatch(r.System)
		switch {
		case a != nil && a[1] == "researcher":
			g.Expect(r.Tools).To(ContainElement(delegate.SignalName), "background runs get emit_signal")
		default:
			g.Expect(r.Tools).NotTo(ContainElement(delegate.SignalName))
			g.Expect(r.Tools).To(ContainElements(delegate.Name, delegate.TaskName))
		}
	}
}

// TestBackgroundRefusedToSubAgents: a sub-agent delegating in the background
// gets a clear error, and its foreground delegation works.
func TestBackgroundRefusedToSubAgents(t *testing.T) {
	g := NewWithT(t)
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "l2":
			return fakellm.Turn{Text: "l2 did it"}
		case agent == "l1" && last.Role == "tool":
			return fakellm.Turn{Text: last.Content}
		case agent == "l1" && strings.Contains(last.Content, "BG"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("x", `{"target":"next","task":"later","mode":"background"}`)}}
		case agent == "l1":
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("x", `{"target":"next","task":"now"}`)}}
		case last.Role == "tool":
			return fakellm.Turn{Text: last.Content}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d", fmt.Sprintf(`{"target":"sub","task":%q}`, last.Content))}}
		}
	})
	answer, _ := e.send(e.a, "sub", "BG please")
	g.Expect(answer).To(ContainSubstring("a sub-agent delegates in the foreground only"))
	answer, _ = e.send(e.a, "sub2", "FG please")
	g.Expect(answer).To(ContainSubstring("l2 did it"))
	g.Expect(e.runs(tenantA, store.AgentRunFilter{Mode: store.RunBackground})).To(BeEmpty())
}
