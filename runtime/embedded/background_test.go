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
	"github.com/picobot/picobot/test/timing"
)

// bgManifests: the root agent "assistant" may delegate to researcher and to
// l1, which may delegate to l2 (so l1 is an orchestrating sub-agent).
const bgManifests = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  instructions: You are assistant.
  model: {provider: openai, model: parent-model, baseURL: %[1]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator, agents_list, sessions_spawn, sessions_send]}
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

func delegateCall(id, args string) fakellm.Call {
	return fakellm.Call{ID: id, Name: delegate.Name, Args: args}
}

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

// TestSignalsSteerAndQueue: a background run sends a steer and a queue
// signal while the parent's turn still runs. The steer one reaches that
// turn at its next boundary between tool batches (with the calculator's
// result); the queue one waits for the parent's next turn (the
// continuation), and each is read once.
func TestSignalsSteerAndQueue(t *testing.T) {
	g := NewWithT(t)
	proceed := make(chan struct{})
	// The run sends its signals once the parent's delegate batch has
	// ended: a steer signal sent sooner joins that batch's result instead.
	started := make(chan struct{})
	var startedOnce sync.Once
	var e *bgEnv
	var mu sync.Mutex
	var calcResult string
	e = startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher" && last.Role == "tool":
			<-proceed
			return fakellm.Turn{Text: "research done"}
		case agent == "researcher":
			<-started
			return fakellm.Turn{ToolCalls: []fakellm.Call{
				{ID: "s1", Name: delegate.SignalName, Args: `{"message":"STEER-1 the city is Lyon","delivery":"steer","kind":"finding"}`},
				{ID: "s2", Name: delegate.SignalName, Args: `{"message":"QUEUE-1 half way"}`}}}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "continued"}
		case last.Role == "tool" && strings.Contains(last.Content, "started in the background"):
			// Wait for both signals, then run one more tool batch.
			startedOnce.Do(func() { close(started) })
			for hangGuard := time.Now().Add(time.Minute); time.Now().Before(hangGuard); time.Sleep(5 * time.Millisecond) {
				if sigs, err := e.st.ListAgentSignals(tenantOf(tenantA), store.AgentSignalFilter{}); err == nil && len(sigs) == 2 {
					break
				}
			}
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "calculator", Args: `{"function":"evaluate","expression":"1+1"}`}}}
		case last.Role == "tool":
			mu.Lock()
			calcResult = last.Content
			mu.Unlock()
			return fakellm.Turn{Text: "noted"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"find the city","mode":"background"}`)}}
		}
	})
	// Let the run end however the test does, or closing the fake model
	// waits on its handler for ever.
	var release sync.Once
	t.Cleanup(func() {
		startedOnce.Do(func() { close(started) })
		release.Do(func() { close(proceed) })
	})
	answer, session := e.send(e.a, "signals", "Go")
	g.Expect(answer).To(Equal("noted"))
	mu.Lock()
	g.Expect(calcResult).To(ContainSubstring("STEER-1 the city is Lyon"), "the steer signal joined the running turn")
	g.Expect(calcResult).To(ContainSubstring("finding"))
	g.Expect(calcResult).NotTo(ContainSubstring("QUEUE-1"), "a queue signal waits for the next turn")
	mu.Unlock()

	release.Do(func() { close(proceed) })
	runs := e.waitDelivered(tenantA, 1)
	e.checkOnceEach(e.a, session, runs)
	var continuation string
	for _, m := range e.history(e.a, session) {
		if c, _ := m["content"].(string); m["role"] == "user" && strings.HasPrefix(c, "[Background run ") {
			continuation = c
		}
	}
	g.Expect(continuation).To(ContainSubstring("QUEUE-1 half way"), "the queue signal came with the next turn")
	g.Expect(continuation).NotTo(ContainSubstring("STEER-1"), "the steer signal was read once")
	sigs, err := e.st.ListAgentSignals(tenantOf(tenantA), store.AgentSignalFilter{SessionID: session})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sigs).To(HaveLen(2))
	for _, s := range sigs {
		g.Expect(s.State).To(Equal(store.SignalConsumed))
	}
	// The stored tool result carries the steer signal, so a resumed turn
	// sees what the model saw.
	var stored bool
	for _, m := range e.history(e.a, session) {
		if c, _ := m["content"].(string); m["role"] == "tool" && strings.Contains(c, "STEER-1") {
			stored = true
		}
	}
	g.Expect(stored).To(BeTrue())
}

// TestAgentTask: every agent_task action, and who may see a run. The root
// agent sees the runs of its own session (and their sub-runs); another
// session of the same tenant, and the same chat of another tenant, get "not
// found" for the same run id; a sub-agent sees its own subtree and not its
// root's runs. cancel stops a running background run, supersedes its
// unconsumed signals and leaves nothing to deliver.
func TestAgentTask(t *testing.T) {
	g := NewWithT(t)
	release, emitNow := make(chan struct{}), make(chan struct{})
	var emitOnce sync.Once
	var rootRun string
	var mu sync.Mutex
	var e *bgEnv
	e = startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		tools := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		switch {
		case agent == "researcher" && strings.Contains(req.Messages[1].Content, "quick"):
			return fakellm.Turn{Text: "quick result"}
		case agent == "researcher" && last.Role == "tool":
			<-release
			return fakellm.Turn{Text: "too late"}
		case agent == "researcher":
			<-emitNow
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "s1", Name: delegate.SignalName, Args: `{"message":"early news"}`}}}
		case agent == "l2":
			return fakellm.Turn{Text: "l2 done"}
		case agent == "l1" && tools == 0:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("n1", `{"target":"next","task":"go"}`)}}
		case agent == "l1" && tools == 1:
			var r delegate.Result
			_ = json.Unmarshal([]byte(last.Content), &r)
			return taskCall(fmt.Sprintf(`{"action":"get","run_id":%q}`, r.RunID))
		case agent == "l1" && tools == 2:
			mu.Lock()
			id := rootRun
			mu.Unlock()
			return taskCall(fmt.Sprintf(`{"action":"get","run_id":%q}`, id))
		case agent == "l1":
			return fakellm.Turn{Text: req.Messages[len(req.Messages)-3].Content + "\n---\n" + last.Content}
		case last.Role == "tool":
			return fakellm.Turn{Text: last.Content}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "continued"}
		case strings.HasPrefix(last.Content, "TASK "):
			// Signals may follow the first line (a queue signal joins the
			// next user message).
			args, _, _ := strings.Cut(strings.TrimPrefix(last.Content, "TASK "), "\n")
			if strings.Contains(last.Content, "\nEMIT") {
				// The run signals during the cancelling turn: a signal
				// nobody has read yet when the cancel comes.
				emitOnce.Do(func() {
					close(emitNow)
					for {
						sigs, err := e.st.ListAgentSignals(tenantOf(tenantA), store.AgentSignalFilter{})
						if err == nil && len(sigs) == 1 {
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			return taskCall(args)
		case strings.HasPrefix(last.Content, "QUICK"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("q", `{"target":"researcher","task":"quick","mode":"background"}`)}}
		case strings.HasPrefix(last.Content, "SUBTREE"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("s", `{"target":"sub","task":"look around"}`)}}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"long","mode":"background"}`)}}
		}
	})
	t.Cleanup(func() { // before the runtime stops (cleanups run last first)
		close(release)
		emitOnce.Do(func() { close(emitNow) })
	})
	task := func(c gatewaytest.Client, chat, args string) string {
		answer, _ := e.send(c, chat, "TASK "+args)
		return answer
	}
	answer, session := e.send(e.a, "owner", "START")
	var started delegate.Result
	g.Expect(json.Unmarshal([]byte(answer), &started)).To(Succeed(), answer)
	r1 := started.RunID
	mu.Lock()
	rootRun = r1
	mu.Unlock()

	// get, list and get_result of a running run.
	g.Expect(task(e.a, "owner", fmt.Sprintf(`{"action":"get","run_id":%q}`, r1))).To(And(
		ContainSubstring(`"run_id": "`+r1+`"`), ContainSubstring(`"status": "running"`), ContainSubstring(`"mode": "background"`)))
	g.Expect(task(e.a, "owner", `{"action":"list"}`)).To(ContainSubstring(r1))
	g.Expect(task(e.a, "owner", fmt.Sprintf(`{"action":"get_result","run_id":%q}`, r1))).To(ContainSubstring("has not ended (running)"))
	g.Expect(task(e.a, "owner", `{"action":"get"}`)).To(ContainSubstring("get needs run_id"))
	g.Expect(task(e.a, "owner", `{"action":"list","cursor_id":"x"}`)).To(ContainSubstring("cursor_created_at and cursor_id go together"))
	g.Expect(task(e.a, "owner", `{"action":"list","limit":500}`)).To(ContainSubstring("limit 500 is not between 1 and 100"))

	// Authorization comes from the caller, not from knowing the id.
	notFound := fmt.Sprintf("run %q not found", r1)
	for _, action := range []string{"get", "get_result", "cancel"} {
		args := fmt.Sprintf(`{"action":%q,"run_id":%q}`, action, r1)
		g.Expect(task(e.a, "another-chat", args)).To(ContainSubstring(notFound), "another session of the tenant: %s", action)
		g.Expect(task(e.b, "owner", args)).To(ContainSubstring(notFound), "the same chat of another tenant: %s", action)
	}
	g.Expect(task(e.a, "another-chat", `{"action":"list"}`)).NotTo(ContainSubstring(r1))
	g.Expect(task(e.b, "owner", `{"action":"list"}`)).NotTo(ContainSubstring(r1))

	// A sub-agent sees its own subtree only; the root sees the sub-run too.
	answer, _ = e.send(e.a, "owner", "SUBTREE")
	var sub delegate.Result
	g.Expect(json.Unmarshal([]byte(answer), &sub)).To(Succeed(), answer)
	mine, theirs, ok := strings.Cut(sub.Result, "\n---\n")
	g.Expect(ok).To(BeTrue(), answer)
	g.Expect(mine).To(And(ContainSubstring(`"agent": "l2"`), ContainSubstring(`"status": "succeeded"`)), "l1 sees the run it started")
	g.Expect(theirs).To(ContainSubstring(notFound), "l1 does not see its root's run")
	l2 := e.runs(tenantA, store.AgentRunFilter{Agent: "l2"})
	g.Expect(l2).To(HaveLen(1))
	g.Expect(task(e.a, "owner", fmt.Sprintf(`{"action":"get_result","run_id":%q}`, l2[0].ID))).To(ContainSubstring(`"result": "l2 done"`))

	// cancel: the run stops, its signal is superseded, nothing is delivered.
	g.Expect(task(e.a, "owner", fmt.Sprintf(`{"action":"cancel","run_id":%q}`+"\nEMIT", r1))).To(And(
		ContainSubstring(`"status": "cancelled"`), ContainSubstring(`"superseded_signals": 1`), ContainSubstring(`"stopped_here": true`)))
	g.Expect(task(e.a, "owner", fmt.Sprintf(`{"action":"cancel","run_id":%q}`, r1))).To(ContainSubstring("has already ended (cancelled)"))
	g.Expect(task(e.a, "owner", fmt.Sprintf(`{"action":"get_result","run_id":%q}`, r1))).To(ContainSubstring(`"result": "cancelled with agent_task"`))
	sigs, err := e.st.ListAgentSignals(tenantOf(tenantA), store.AgentSignalFilter{RunID: r1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sigs[0].State).To(Equal(store.SignalSuperseded))
	got, err := e.st.GetAgentRun(tenantOf(tenantA), r1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Completion).To(Equal(store.CompletionClosed))

	// list pages with the cursor pair, newest first, each run once.
	for range 3 {
		e.send(e.a, "owner", "QUICK")
	}
	e.waitDelivered(tenantA, 3)
	seen := map[string]int{}
	args := `{"action":"list","limit":2}`
	for page := 0; ; page++ {
		g.Expect(page).To(BeNumerically("<", 5))
		var out struct {
			Runs []struct {
				RunID string `json:"run_id"`
			} `json:"runs"`
			Next *struct {
				CreatedAt string `json:"created_at"`
				ID        string `json:"id"`
			} `json:"next_cursor"`
		}
		answer := task(e.a, "owner", args)
		g.Expect(json.Unmarshal([]byte(answer), &out)).To(Succeed(), answer)
		for _, r := range out.Runs {
			seen[r.RunID]++
		}
		if out.Next == nil {
			break
		}
		args = fmt.Sprintf(`{"action":"list","limit":2,"cursor_created_at":%q,"cursor_id":%q}`, out.Next.CreatedAt, out.Next.ID)
	}
	g.Expect(seen).To(HaveLen(5), "the long run, the sub run and three quick ones: %v", seen)
	for id, n := range seen {
		g.Expect(n).To(Equal(1), "run %s listed once", id)
	}
	g.Expect(e.continuationRequests()).NotTo(HaveKey(r1), "a cancelled run has no continuation")
	g.Expect(session).NotTo(BeEmpty())
}

// TestBackgroundSurvivesRestart stops the server and starts it again on the
// same state folder, once while the background run is running and once
// while its continuation turn is running: either way the run ends, its
// continuation runs to its answer exactly once and the completion is
// delivered.
func TestBackgroundSurvivesRestart(t *testing.T) {
	for _, phase := range []string{"run", "continuation"} {
		t.Run("during the "+phase, func(t *testing.T) {
			g := NewWithT(t)
			stuck := make(chan struct{}, 1)
			release := make(chan struct{})
			e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
				last := lastMessage(req)
				_, continuation := continuationOf(req)
				switch {
				case agent == "researcher" && phase == "run", continuation && phase == "continuation":
					stuck <- struct{}{}
					<-release // until the test is over: the server stops meanwhile
					return fakellm.Turn{Text: "from the first server"}
				case agent == "researcher":
					return fakellm.Turn{Text: "research result"}
				case last.Role == "tool":
					return fakellm.Turn{Text: "started"}
				default:
					return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"survive","mode":"background"}`)}}
				}
			})
			t.Cleanup(func() { close(release) })
			_, session := e.send(e.a, "restart", "Go")
			<-stuck
			e.stop()
			before := len(e.llm.Requests())
			// What the stopped server left in its state folder.
			state, err := embedded.OpenState(context.Background(), embedded.StateDir(e.dir, ""))
			g.Expect(err).NotTo(HaveOccurred())
			run, err := state.Store.ListAgentRuns(tenantOf(tenantA), store.AgentRunFilter{Mode: store.RunBackground})
			state.Close()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(run).To(HaveLen(1))
			if phase == "run" {
				g.Expect(run[0].Status).To(Equal(store.RunRunning), "the stop left the run running")
			} else {
				g.Expect(run[0].Completion).To(Equal(store.CompletionReady), "the stop left the completion undelivered")
			}

			e.setRespond(func(agent string, req fakellm.Recorded) fakellm.Turn {
				if agent == "researcher" {
					return fakellm.Turn{Text: "research result"}
				}
				if id, ok := continuationOf(req); ok {
					return fakellm.Turn{Text: "Processed " + id}
				}
				return fakellm.Turn{Text: "?"}
			})
			e.start()
			done := e.waitDelivered(tenantA, 1)
			g.Expect(done[0].Status).To(Equal(store.RunSucceeded))
			g.Expect(done[0].Result).To(Equal("research result"))

			// One continuation message, answered once; after the restart
			// the model was asked for it once.
			hist := e.history(e.a, session)
			var users, replies int
			for _, m := range hist {
				c, _ := m["content"].(string)
				if m["role"] == "user" && strings.HasPrefix(c, "[Background run ") {
					users++
				}
				if m["role"] == "assistant" && c == "Processed "+done[0].ID {
					replies++
				}
			}
			g.Expect(users).To(Equal(1))
			g.Expect(replies).To(Equal(1))
			after := 0
			for _, r := range e.llm.Requests()[before:] {
				if _, ok := continuationOf(r); ok {
					after++
				}
			}
			g.Expect(after).To(Equal(1), "the continuation turn ran once after the restart")
			// Nothing more comes: the server is stopped and started once more.
			e.stop()
			e.start()
			g.Expect(e.runs(tenantA, store.AgentRunFilter{Completion: store.CompletionReady})).To(BeEmpty())
			e.checkNoMoreContinuations(session, 1)
		})
	}
}

// checkNoMoreContinuations waits until the chat has had no turn in flight
// (a probe message answered after everything queued before it) and checks
// it still holds want continuation messages.
func (e *bgEnv) checkNoMoreContinuations(session string, want int) {
	e.t.Helper()
	prev := e.respond
	e.setRespond(func(agent string, req fakellm.Recorded) fakellm.Turn {
		if strings.Contains(lastMessage(req).Content, "PROBE") {
			return fakellm.Turn{Text: "probe"}
		}
		return prev(agent, req)
	})
	id, err := parseChat(session)
	NewWithT(e.t).Expect(err).NotTo(HaveOccurred())
	e.send(e.a, id, "PROBE")
	n := 0
	for _, m := range e.history(e.a, session) {
		if c, _ := m["content"].(string); m["role"] == "user" && strings.HasPrefix(c, "[Background run ") {
			n++
		}
	}
	NewWithT(e.t).Expect(n).To(Equal(want), "continuation messages in the chat")
}

// parseChat returns the chat id of a web session "web:assistant/<chat>:<dialog>".
func parseChat(session string) (string, error) {
	_, rest, ok := strings.Cut(session, "assistant/")
	if !ok {
		return "", fmt.Errorf("not a web session of assistant: %q", session)
	}
	chat := rest[:strings.LastIndexByte(rest, ':')]
	return chat, nil
}

// TestRunRetention: ended runs with their completion delivered, and the
// audit records of tool calls, are kept for their retention and deleted at
// the next start past it.
func TestRunRetention(t *testing.T) {
	g := NewWithT(t)
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher":
			return fakellm.Turn{Text: "done"}
		case lastMessage(req).Role == "tool", strings.HasPrefix(lastMessage(req).Content, "[Background run "):
			return fakellm.Turn{Text: "ok"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"t","mode":"background"}`)}}
		}
	})
	e.send(e.a, "retention", "Go")
	e.waitDelivered(tenantA, 1)
	e.stop()
	e.start() // the default retentions, 24 h and 30 days
	g.Expect(e.runs(tenantA, store.AgentRunFilter{})).To(HaveLen(1), "kept within the retention")
	audited := func() []store.AuditRecord {
		recs, err := e.st.ListAudit(tenantOf(tenantA), store.AuditFilter{Tool: "delegate"})
		g.Expect(err).NotTo(HaveOccurred())
		return recs
	}
	g.Expect(audited()).To(ConsistOf(And(HaveField("Agent", "assistant"), HaveField("Actor", "key:a"), HaveField("Outcome", store.AuditOK))),
		"the delegate call is in the audit log")
	e.stop()
	e.opts.RunRetention, e.opts.AuditRetention = time.Nanosecond, time.Nanosecond
	e.start()
	g.Expect(e.runs(tenantA, store.AgentRunFilter{})).To(BeEmpty(), "deleted past the retention")
	g.Expect(audited()).To(BeEmpty(), "audit records deleted past their retention")
}

// fanOut50 is the model of a turn that starts 50 background runs at once:
// seven delegate calls in one step, six batches of eight and one of two.
func fanOut50(tag string) fakellm.Turn {
	var calls []fakellm.Call
	for c := range 7 {
		n := 8
		if c == 6 {
			n = 2
		}
		var tasks []string
		for i := range n {
			tasks = append(tasks, fmt.Sprintf(`{"task":"%s task %d"}`, tag, c*8+i))
		}
		calls = append(calls, delegateCall(fmt.Sprintf("f%d", c), `{"target":"researcher","mode":"background","tasks":[`+strings.Join(tasks, ",")+`]}`))
	}
	return fakellm.Turn{ToolCalls: calls}
}

// fanOutModel answers fan-out turns; continued, when set, is told of each
// continuation it answers.
func fanOutModel(continued func()) func(agent string, req fakellm.Recorded) fakellm.Turn {
	return func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		if id, ok := continuationOf(req); ok {
			if continued != nil {
				continued()
			}
			return fakellm.Turn{Text: "Processed " + id}
		}
		switch {
		case agent == "researcher":
			return fakellm.Turn{Text: "result of " + last.Content[strings.LastIndex(last.Content, "\n")+1:]}
		case last.Role == "tool":
			return fakellm.Turn{Text: "all started"}
		default:
			return fanOut50(last.Content)
		}
	}
}

// TestBackgroundFanOut50Repeated starts 50 background runs at once, 20
// times over: every run's completion is delivered, with exactly one
// continuation turn each, none lost and none twice.
func TestBackgroundFanOut50Repeated(t *testing.T) {
	g := NewWithT(t)
	e := startBackground(t, fanOutModel(nil))
	for rep := range 20 {
		answer, session := e.send(e.a, fmt.Sprintf("fan%d", rep), fmt.Sprintf("rep%d", rep))
		g.Expect(answer).To(Equal("all started"))
		g.Eventually(func() int {
			return len(e.runs(tenantA, store.AgentRunFilter{SessionID: session, Completion: store.CompletionDelivered}))
		}).WithTimeout(120*time.Second).WithPolling(10*time.Millisecond).Should(Equal(50), "rep %d", rep)
		runs := e.runs(tenantA, store.AgentRunFilter{SessionID: session})
		g.Expect(runs).To(HaveLen(50))
		for _, r := range runs {
			g.Expect(r.Status).To(Equal(store.RunSucceeded))
		}
		e.checkOnceEach(e.a, session, runs)
		e.checkNoMoreContinuations(session, 50)
	}
}

// BenchmarkBackgroundFanOut50 measures, in embedded mode with a model that
// answers at once, the time from the message whose turn starts 50
// background runs at once to the 50th continuation answer in the chat.
func BenchmarkBackgroundFanOut50(b *testing.B) {
	var mu sync.Mutex
	count, all := 0, make(chan struct{}, 1)
	e := startBackground(b, fanOutModel(func() {
		mu.Lock()
		defer mu.Unlock()
		if count++; count == 50 {
			all <- struct{}{}
		}
	}))
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		mu.Lock()
		count = 0
		mu.Unlock()
		start := time.Now()
		e.send(e.a, fmt.Sprintf("bench%d", i), fmt.Sprintf("bench%d", i))
		select {
		case <-all:
		case <-time.After(2 * time.Minute):
			b.Fatal("the 50 continuations did not come")
		}
		took = append(took, time.Since(start))
	}
	b.ReportMetric(float64(timing.Percentile(took, 0.50).Milliseconds()), "ms-all50-p50")
	b.ReportMetric(float64(timing.Percentile(took, 0.99).Milliseconds()), "ms-all50-p99")
}

// TestContinuationGoesToTheStartingSession: the chat switches to a new
// dialog while the run works; the continuation still goes to the session
// that started the run.
func TestContinuationGoesToTheStartingSession(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher":
			<-release
			return fakellm.Turn{Text: "found"}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "continued"}
		case last.Role == "tool":
			return fakellm.Turn{Text: "started"}
		case strings.Contains(last.Content, "hello"):
			return fakellm.Turn{Text: "hi"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"t","mode":"background"}`)}}
		}
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	_, first := e.send(e.a, "dialogs", "Go")
	e.send(e.a, "dialogs", "/new")
	_, second := e.send(e.a, "dialogs", "hello")
	g.Expect(second).NotTo(Equal(first))
	close(release)
	runs := e.waitDelivered(tenantA, 1)
	e.checkOnceEach(e.a, first, runs)
	for _, m := range e.history(e.a, second) {
		g.Expect(m["content"]).NotTo(HavePrefix("[Background run "), "nothing of the run in the new dialog")
	}
}
