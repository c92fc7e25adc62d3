package embedded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/test/timing"
)

// delegateManifests: the root agent "assistant" may delegate to
// "researcher" (its own model and key) and to a chain l1 -> l2 -> l3 -> l4
// deeper than delegations may nest.
const delegateManifests = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  instructions: You are assistant.
  model: {provider: openai, model: parent-model, baseURL: %[1]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator, todo]}
  delegates:
  - {name: researcher, agentRef: {name: researcher}, description: finds facts}
  - {name: deep, agentRef: {name: l1}}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: researcher}
spec:
  instructions: You are researcher.
  model: {provider: openai, model: research-model, baseURL: %[1]s, apiKeySecretRef: {name: research, key: apiKey}}
  tools: {allow: [calculator, todo, file_read]}
`

const chainAgent = `---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: %[1]s}
spec:
  instructions: You are %[1]s.
  model: {provider: openai, model: chain-model, baseURL: %[2]s, apiKeySecretRef: {name: parent, key: apiKey}}
  tools: {allow: [calculator]}
%[3]s`

var youAre = regexp.MustCompile(`^You are (\w+)\.`)

// delegateEnv is an embedded runtime over delegateManifests whose fake
// model plays every agent: answer decides what the agent named in the
// system prompt does with the request's last user message.
type delegateEnv struct {
	rt  *embedded.Runtime
	llm *fakellm.Server
	st  store.Store
}

func startDelegates(t *testing.T, answer func(agent, user string, req fakellm.Recorded) fakellm.Turn) *delegateEnv {
	t.Helper()
	return startDelegatesTB(t, answer, nil)
}

// startDelegatesTB is startDelegates for benchmarks too; onResult, when
// set, sees every tool result coming back to a model.
func startDelegatesTB(t testing.TB, answer func(agent, user string, req fakellm.Recorded) fakellm.Turn, onResult func()) *delegateEnv {
	t.Helper()
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.Respond(func(req fakellm.Recorded) fakellm.Turn {
		agent := ""
		if m := youAre.FindStringSubmatch(req.System); m != nil {
			agent = m[1]
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" || len(last.ToolResults) > 0 {
			text := last.Content
			if len(last.ToolResults) > 0 {
				text = last.ToolResults[0].Content
			}
			if onResult != nil {
				onResult()
			}
			return fakellm.Turn{Text: "Done: " + text}
		}
		return answer(agent, last.Content, req)
	})
	docs := fmt.Sprintf(delegateManifests, llm.URL())
	for i, name := range []string{"l1", "l2", "l3", "l4"} {
		edge := ""
		if i < 3 {
			edge = fmt.Sprintf("  delegates: [{name: next, agentRef: {name: l%d}}]\n", i+2)
		}
		docs += fmt.Sprintf(chainAgent, name, llm.URL(), edge)
	}
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(docs), 0o600)).To(Succeed())
	state, err := embedded.OpenState(context.Background(), embedded.StateDir(dir, ""))
	g.Expect(err).NotTo(HaveOccurred())
	env := map[string]string{embedded.SecretEnvName("parent", "apiKey"): "sk-parent", embedded.SecretEnvName("research", "apiKey"): "sk-research"}
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, State: state, Env: func(k string) string { return env[k] }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)
	return &delegateEnv{rt: rt, llm: llm, st: state.Store}
}

var tenantCtx = store.WithTenant(context.Background(), manifest.DefaultNamespace)

func (e *delegateEnv) send(chat, text string) (gateway.Outcome, error) {
	return e.rt.Handle(tenantCtx, gateway.Send{ID: fmt.Sprintf("m%d", time.Now().UnixNano()), Channel: gateway.ChannelWeb, Agent: "assistant", ChatID: chat, Text: text})
}

// requestsOf are the model requests an agent made.
func (e *delegateEnv) requestsOf(agent string) []fakellm.Recorded {
	var out []fakellm.Recorded
	for _, r := range e.llm.Requests() {
		if strings.HasPrefix(r.System, "You are "+agent+".") {
			out = append(out, r)
		}
	}
	return out
}

func call(args string) fakellm.Turn {
	return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: delegate.Name, Args: args}}}
}

// TestDelegateForeground: the root agent hands a task to researcher, which
// runs as a fresh session of its own Agent (its model, its key, its tools
// minus todo) seeing only the task and the context — not the secret said
// earlier in the chat — and the answer comes back as the tool's result and
// is recorded in agent_runs.
func TestDelegateForeground(t *testing.T) {
	g := NewWithT(t)
	e := startDelegates(t, func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher":
			return fakellm.Turn{Text: "The capital is Paris."}
		case strings.Contains(user, "PINEAPPLE"):
			return fakellm.Turn{Text: "Noted."}
		default:
			return call(`{"target":"researcher","task":"Find the capital of France.","context":"The user plans a trip in May.","plan_item_id":"3"}`)
		}
	})
	_, err := e.send("trip", "My door code is PINEAPPLE.")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := e.send("trip", "Where should I fly?")
	g.Expect(err).NotTo(HaveOccurred())

	var res delegate.Result
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(out.Text, "Done: ")), &res)).To(Succeed(), out.Text)
	g.Expect(res).To(MatchFields(IgnoreExtras, Fields{"Target": Equal("researcher"), "Status": Equal("succeeded"),
		"Result": Equal("The capital is Paris."), "PlanItemID": Equal("3")}))

	child := e.requestsOf("researcher")
	g.Expect(child).To(HaveLen(1))
	g.Expect(child[0].Model).To(Equal("research-model"))
	g.Expect(child[0].Header.Get("Authorization")).To(Equal("Bearer sk-research"), "the target's own key")
	g.Expect(e.requestsOf("assistant")[0].Header.Get("Authorization")).To(Equal("Bearer sk-parent"))
	g.Expect(child[0].Messages).To(HaveLen(2), "the system prompt and the task, nothing of the parent's chat")
	g.Expect(child[0].Messages[1].Content).To(Equal("[Task delegated by agent assistant]\n\nFind the capital of France.\n\nContext:\nThe user plans a trip in May."))
	g.Expect(string(child[0].Body)).NotTo(ContainSubstring("PINEAPPLE"))
	g.Expect(child[0].Tools).To(ConsistOf("calculator", "file_read"), "never todo")
	g.Expect(e.requestsOf("assistant")[0].Tools).To(ContainElements("delegate", "todo"))

	runs, err := e.st.ListAgentRuns(tenantCtx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(1))
	g.Expect(runs[0]).To(MatchFields(IgnoreExtras, Fields{"ID": Equal(res.RunID), "Agent": Equal("researcher"),
		"SessionID": Equal(out.SessionID), "Status": Equal(store.RunSucceeded), "Result": Equal("The capital is Paris.")}))
	g.Expect(runs[0].Input).To(ContainSubstring(`"task":"Find the capital of France."`))
}

// TestDelegateBatchKeepsRequestOrder: two tasks run at once; the first
// finishes only after the second has (its model answers once the second's
// run is recorded as succeeded), and the results still come in request
// order.
func TestDelegateBatchKeepsRequestOrder(t *testing.T) {
	g := NewWithT(t)
	var e *delegateEnv
	var ready sync.WaitGroup
	ready.Add(1)
	e = startDelegates(t, func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher" && strings.Contains(user, "task A"):
			ready.Wait()
			for {
				runs, err := e.st.ListAgentRuns(tenantCtx, store.AgentRunFilter{Status: store.RunSucceeded})
				if err == nil && len(runs) == 1 {
					return fakellm.Turn{Text: "A done after " + runs[0].Result}
				}
				time.Sleep(5 * time.Millisecond)
			}
		case agent == "researcher":
			return fakellm.Turn{Text: "B done"}
		default:
			return call(`{"target":"researcher","tasks":[{"task":"task A","plan_item_id":"1"},{"task":"task B","plan_item_id":"2"}]}`)
		}
	})
	ready.Done()
	out, err := e.send("batch", "Do both")
	g.Expect(err).NotTo(HaveOccurred())
	var res []delegate.Result
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(out.Text, "Done: ")), &res)).To(Succeed(), out.Text)
	g.Expect(res).To(HaveExactElements(
		MatchFields(IgnoreExtras, Fields{"PlanItemID": Equal("1"), "Status": Equal("succeeded"), "Result": Equal("A done after B done")}),
		MatchFields(IgnoreExtras, Fields{"PlanItemID": Equal("2"), "Status": Equal("succeeded"), "Result": Equal("B done")})))
}

// TestDelegateRefusals: allowed_tools narrows the sub-agent's tools and
// cannot widen them; unknown targets, nesting deeper than
// three and more than eight tasks at once are refused with errors saying so.
func TestDelegateRefusals(t *testing.T) {
	nine := make([]string, 9)
	for i := range nine {
		nine[i] = fmt.Sprintf(`{"task":"t%d"}`, i)
	}
	byUser := map[string]string{
		"NARROW":   `{"target":"researcher","task":"add 2 and 2","allowed_tools":["calculator"]}`,
		"WIDEN":    `{"target":"researcher","task":"list files","allowed_tools":["calculator","bash","exec"]}`,
		"STRANGER": `{"target":"hacker","task":"x"}`,
		"FANOUT":   `{"target":"researcher","tasks":[` + strings.Join(nine, ",") + `]}`,
		"DEEP":     `{"target":"deep","task":"dig"}`,
	}
	e := startDelegates(t, func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch agent {
		case "researcher", "l4":
			return fakellm.Turn{Text: "4"}
		case "l1", "l2", "l3":
			return call(`{"target":"next","task":"dig further"}`)
		}
		for k, args := range byUser {
			if strings.Contains(user, k) {
				return call(args)
			}
		}
		return fakellm.Turn{Text: "?"}
	})
	cases := []struct{ user, want string }{
		{"NARROW", `"status": "succeeded"`},
		{"WIDEN", "allowed_tools can only narrow the tools of researcher, which does not have bash, exec (it has calculator, file_read)"},
		{"STRANGER", `"hacker" is not one of your sub-agents; you may delegate to researcher, deep`},
		{"FANOUT", "9 tasks in one call; at most 8 run at once"},
		{"DEEP", "delegation depth limit reached: this run is 3 levels deep and runs nest at most 3"},
	}
	for _, tc := range cases {
		t.Run(tc.user, func(t *testing.T) {
			g := NewWithT(t)
			out, err := e.send(strings.ToLower(tc.user), tc.user)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Text).To(ContainSubstring(tc.want))
		})
	}
	g := NewWithT(t)
	var narrowed []fakellm.Recorded
	for _, r := range e.requestsOf("researcher") {
		if strings.Contains(r.Messages[1].Content, "add 2 and 2") {
			narrowed = append(narrowed, r)
		}
	}
	g.Expect(narrowed).To(HaveLen(1))
	g.Expect(narrowed[0].Tools).To(Equal([]string{"calculator"}))
	g.Expect(e.requestsOf("l4")).To(BeEmpty(), "the chain stopped at depth 3")
	g.Expect(e.requestsOf("l3")).NotTo(BeEmpty())

	// The nested runs are recorded as a chain: each in the session of the
	// run that delegated it, naming that run as its parent.
	byAgent := map[string]store.AgentRun{}
	runs, err := e.st.ListAgentRuns(tenantCtx, store.AgentRunFilter{Limit: 100})
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range runs {
		byAgent[r.Agent] = r
	}
	g.Expect(byAgent).To(HaveKey("l3"))
	g.Expect(byAgent["l1"].ParentRunID).To(BeEmpty())
	g.Expect(byAgent["l2"].ParentRunID).To(Equal(byAgent["l1"].ID))
	g.Expect(byAgent["l3"].ParentRunID).To(Equal(byAgent["l2"].ID))
	g.Expect(byAgent["l2"].SessionID).To(Equal("delegate:" + byAgent["l1"].ID + ":default"))
	g.Expect(byAgent["l3"].Status).To(Equal(store.RunSucceeded), "l3 answered after its own delegation was refused")
}

// TestStopCancelsForegroundChildren: /stop of the delegating chat cancels
// the sub-agent's run in the middle of its model call; the run is recorded
// as cancelled.
func TestStopCancelsForegroundChildren(t *testing.T) {
	g := NewWithT(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	e := startDelegates(t, func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		if agent == "researcher" {
			started <- struct{}{}
			<-release
			return fakellm.Turn{Text: "too late"}
		}
		return call(`{"target":"researcher","task":"a long search"}`)
	})
	t.Cleanup(func() { close(release) }) // before the fake LLM closes (cleanups run last first)
	done := make(chan error, 1)
	go func() {
		_, err := e.send("stop", "Search")
		done <- err
	}()
	<-started
	stopped, err := e.rt.Stop(tenantCtx, gateway.Chat{Channel: gateway.ChannelWeb, Agent: "assistant", ChatID: "stop"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeTrue())
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive())
	g.Eventually(func(g Gomega) {
		runs, err := e.st.ListAgentRuns(tenantCtx, store.AgentRunFilter{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(runs).To(HaveLen(1))
		g.Expect(runs[0].Status).To(Equal(store.RunCancelled))
	}).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
}

// BenchmarkDelegateRoundTrip measures a chat turn whose model delegates one
// task to researcher, with a fake model that answers at once: three model
// calls (delegate, the sub-agent's answer, the final text), the sub-agent's
// session and the agent_runs record. It reports p50/p99 of the whole turn
// and of the delegate call alone (the sub-agent run, from the parent's tool
// call to its result).
func BenchmarkDelegateRoundTrip(b *testing.B) {
	var mu sync.Mutex
	var calls []time.Duration
	var called time.Time
	e := startDelegatesTB(b, func(agent, _ string, _ fakellm.Recorded) fakellm.Turn {
		if agent == "researcher" {
			return fakellm.Turn{Text: "Paris"}
		}
		mu.Lock()
		called = time.Now()
		mu.Unlock()
		return call(`{"target":"researcher","task":"Find the capital of France."}`)
	}, func() {
		mu.Lock()
		calls = append(calls, time.Since(called))
		mu.Unlock()
	})
	turns := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, err := e.send(fmt.Sprintf("bench%d", i), "Where?"); err != nil {
			b.Fatal(err)
		}
		turns = append(turns, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(timing.Percentile(turns, 0.50).Microseconds()), "us-turn-p50")
	b.ReportMetric(float64(timing.Percentile(turns, 0.99).Microseconds()), "us-turn-p99")
	b.ReportMetric(float64(timing.Percentile(calls, 0.50).Microseconds()), "us-delegate-p50")
	b.ReportMetric(float64(timing.Percentile(calls, 0.99).Microseconds()), "us-delegate-p99")
}
