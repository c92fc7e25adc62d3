package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// delegateManifest is a tenant (%[1]s, gateway key %[2]s) whose Agent
// "lead" may delegate to "researcher", which has a model key of its own
// (Secret research-key) and its own tools; %[4]d and %[5]d are their warm
// pools, %[6]s their idle timeout; %[7]s adds to researcher's spec and
// %[8]s more documents.
const delegateManifest = tenantBase + `
apiVersion: v1
kind: Secret
metadata:
  name: research-key
  namespace: %[1]s
stringData:
  apiKey: sk-research
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: lead
  namespace: %[1]s
spec:
  instructions: You are lead.
  model: {provider: openai, model: lead-model, baseURL: %[3]s, apiKeySecretRef: {name: model-key, key: apiKey}}
  tools: {allow: [calculator, todo]}
  delegates:
  - {name: researcher, agentRef: {name: researcher}, description: finds facts}
  runtime: {idleTimeout: %[6]s, warmPool: %[4]d}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: researcher
  namespace: %[1]s
spec:
  instructions: You are researcher.
  model: {provider: openai, model: research-model, baseURL: %[3]s, apiKeySecretRef: {name: research-key, key: apiKey}}
  tools: {allow: [calculator, todo, web_fetch]}
  runtime: {idleTimeout: %[6]s, warmPool: %[5]d}
%[7]s%[8]s`

var youAreRE = regexp.MustCompile(`^You are (\w+)\.`)

// delegateTenant applies delegateManifest in namespace ns and scripts the
// fake model: a request whose last message is a tool result is answered
// with "Done: " and that result (so the chat's answer is the delegate
// tool's), every other one by answer, given the agent named in the system
// prompt and the last user message.
func delegateTenant(t testing.TB, ns string, leadPool, researchPool int, idle string, answer func(agent, user string, r fakellm.Recorded) fakellm.Turn) gatewaytest.Client {
	t.Helper()
	return observedDelegateTenant(t, ns, delegateManifestFor(ns, leadPool, researchPool, idle, "", ""), answer, func() {})
}

// delegateManifestFor is delegateManifest for tenant ns.
func delegateManifestFor(ns string, leadPool, researchPool int, idle, researcherSpec, more string) string {
	return fmt.Sprintf(delegateManifest, ns, ns+"-key", st.llm.URL(), leadPool, researchPool, idle, researcherSpec, more)
}

// observedDelegateTenant is delegateTenant with its own manifest, whose
// onResult sees every tool result coming back to a model.
func observedDelegateTenant(t testing.TB, ns, manifest string,
	answer func(agent, user string, r fakellm.Recorded) fakellm.Turn, onResult func(),
) gatewaytest.Client {
	t.Helper()
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		agent := ""
		if m := youAreRE.FindStringSubmatch(r.System); m != nil {
			agent = m[1]
		}
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			onResult()
			return fakellm.Turn{Text: "Done: " + last.ToolResults[0].Content}
		}
		if last.Role == "tool" {
			onResult()
			return fakellm.Turn{Text: "Done: " + last.Content}
		}
		return answer(agent, lastUser(r), r)
	})
	key := ns + "-key"
	st.apply(t, manifest)
	st.waitReady(t, ns, "lead")
	st.waitReady(t, ns, "researcher")
	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	// The gateway reads Agents through its cache: wait until it sees
	// lead ready too.
	NewWithT(t).Eventually(func(g Gomega) {
		res, err := c.Request(http.MethodGet, "/api/v1/agents", nil, nil)
		g.Expect(err).NotTo(HaveOccurred())
		var list struct {
			Agents []struct {
				Name  string `json:"name"`
				Ready bool   `json:"ready"`
			} `json:"agents"`
		}
		g.Expect(json.Unmarshal(res.Body, &list)).To(Succeed(), string(res.Body))
		g.Expect(list.Agents).To(ContainElement(MatchFields(IgnoreExtras, Fields{"Name": Equal("lead"), "Ready": BeTrue()})))
	}, 60*time.Second, 100*time.Millisecond).Should(Succeed())
	return c
}

// delegateCall is the lead model's delegate tool call with args.
func delegateCall(args string) fakellm.Turn {
	return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: delegate.Name, Args: args}}}
}

// sendLead sends text to lead's chat and returns the answer.
func sendLead(t testing.TB, c gatewaytest.Client, id, chat, text string) (answer, sessionID string) {
	t.Helper()
	answer, sessionID, err := trySendLead(c, id, chat, text)
	if err != nil {
		t.Fatal(err)
	}
	return answer, sessionID
}

// trySendLead is sendLead for goroutines other than the test's.
func trySendLead(c gatewaytest.Client, id, chat, text string) (answer, sessionID string, err error) {
	return trySend(c, "lead", id, chat, text)
}

// trySend sends text to a chat of agent and returns the answer.
func trySend(c gatewaytest.Client, agent, id, chat, text string) (answer, sessionID string, err error) {
	res, err := c.Request(http.MethodPost, "/api/v1/send", map[string]string{"id": id, "agent": agent, "chat_id": chat, "text": text}, nil)
	if err != nil {
		return "", "", fmt.Errorf("send %s: %w", id, err)
	}
	var out struct {
		Text      string `json:"text"`
		SessionID string `json:"session"`
	}
	if res.Status != http.StatusOK || json.Unmarshal(res.Body, &out) != nil {
		return "", "", fmt.Errorf("send %s: %d %s", id, res.Status, res.Body)
	}
	return out.Text, out.SessionID, nil
}

// requestsOf are the model requests of agent whose messages mention text.
func requestsOf(agent, text string) []fakellm.Recorded {
	var out []fakellm.Recorded
	for _, r := range st.llm.Requests() {
		if strings.HasPrefix(r.System, "You are "+agent+".") && strings.Contains(string(r.Body), text) {
			out = append(out, r)
		}
	}
	return out
}

// tenantStore opens the store as the tests' application role, in tenant ns.
func tenantStore(t testing.TB, ns string) (store.Store, context.Context) {
	t.Helper()
	db, err := postgres.Open(context.Background(), strings.TrimPrefix(st.conn[0], "PICOBOT_POSTGRES_URL="))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, store.WithTenant(context.Background(), ns)
}

func decodeResult(g Gomega, answer string) delegate.Result {
	var res delegate.Result
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(answer, "Done: ")), &res)).To(Succeed(), answer)
	return res
}

// TestClusterDelegateForeground: lead's session pod hands a task to
// researcher, which has no pod until then (no warm pool): the run is woken
// like a chat, runs in a session pod of researcher — its model, its key
// (which lead's pods are not given), its tools minus todo — on the task and
// the context alone, and its answer is the tool's result, recorded in
// agent_runs in PostgreSQL. allowed_tools narrows the tools researcher's
// model is offered and cannot widen them.
func TestClusterDelegateForeground(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-delegate"
	c := delegateTenant(t, ns, 1, 0, "2m", func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher" && strings.Contains(user, "add 2 and 2"):
			return fakellm.Turn{Text: "4"}
		case agent == "researcher":
			return fakellm.Turn{Text: "The capital is Paris."}
		case strings.Contains(user, "PINEAPPLE"):
			return fakellm.Turn{Text: "Noted."}
		case strings.Contains(user, "NARROW"):
			return delegateCall(`{"target":"researcher","task":"add 2 and 2","allowed_tools":["calculator"]}`)
		case strings.Contains(user, "WIDEN"):
			return delegateCall(`{"target":"researcher","task":"list files","allowed_tools":["calculator","bash"]}`)
		default:
			return delegateCall(`{"target":"researcher","task":"Find the capital of France.","context":"The user plans a trip in May.","plan_item_id":"3"}`)
		}
	})
	sendLead(t, c, "m1", "trip", "My door code is PINEAPPLE.")
	answer, sid := sendLead(t, c, "m2", "trip", "Where should I fly?")
	res := decodeResult(g, answer)
	g.Expect(res).To(MatchFields(IgnoreExtras, Fields{"Target": Equal("researcher"), "Status": Equal("succeeded"),
		"Result": Equal("The capital is Paris."), "PlanItemID": Equal("3")}))

	child := requestsOf("researcher", "capital of France")
	g.Expect(child).To(HaveLen(1))
	g.Expect(child[0].Model).To(Equal("research-model"))
	g.Expect(child[0].Header.Get("Authorization")).To(Equal("Bearer sk-research"), "researcher's own key")
	g.Expect(child[0].Messages).To(HaveLen(2), "the system prompt and the task, nothing of lead's chat")
	g.Expect(child[0].Messages[1].Content).To(Equal("[Task delegated by agent lead]\n\nFind the capital of France.\n\nContext:\nThe user plans a trip in May."))
	g.Expect(string(child[0].Body)).NotTo(ContainSubstring("PINEAPPLE"))
	g.Expect(child[0].Tools).To(ConsistOf("calculator", "web_fetch"), "never todo")
	lead := requestsOf("lead", "Where should I fly?")
	g.Expect(lead[0].Header.Get("Authorization")).To(Equal("Bearer sk-fake"))
	g.Expect(lead[0].Tools).To(ContainElements("delegate", "todo"))

	// lead's pods are not given researcher's key: it stays in researcher's.
	for _, p := range st.pods(t, ns, "lead") {
		for _, ctr := range p.Spec.Containers {
			for _, e := range ctr.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					g.Expect(e.ValueFrom.SecretKeyRef.Name).NotTo(Equal("research-key"), "pod %s env %s", p.Name, e.Name)
				}
			}
		}
	}

	db, ctx := tenantStore(t, ns)
	runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(1))
	g.Expect(runs[0]).To(MatchFields(IgnoreExtras, Fields{"ID": Equal(res.RunID), "Agent": Equal("researcher"),
		"SessionID": Equal(sid), "Status": Equal(store.RunSucceeded), "Result": Equal("The capital is Paris.")}))
	g.Expect(runs[0].Input).To(ContainSubstring(`"depth":1`))
	// The run is a stored session of researcher: chat = the run id.
	runSession, err := db.GetSession(ctx, protocol.ChannelDelegate+":"+res.RunID+":default")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runSession.Agent).To(Equal("researcher"))

	answer, _ = sendLead(t, c, "m3", "narrow", "NARROW")
	g.Expect(decodeResult(g, answer)).To(MatchFields(IgnoreExtras, Fields{"Status": Equal("succeeded"), "Result": Equal("4")}))
	narrowed := requestsOf("researcher", "add 2 and 2")
	g.Expect(narrowed).To(HaveLen(1))
	g.Expect(narrowed[0].Tools).To(Equal([]string{"calculator"}))

	answer, _ = sendLead(t, c, "m4", "widen", "WIDEN")
	g.Expect(answer).To(ContainSubstring("allowed_tools can only narrow the tools of researcher, which does not have bash (it has calculator, web_fetch)"))
	g.Expect(requestsOf("researcher", "list files")).To(BeEmpty())

	// With its tenant's own Redis user, what lead's pods connect as, a task
	// can be queued (and woken) for this tenant's researcher only: Redis
	// refuses another tenant's chat and wake streams.
	sec := &corev1.Secret{}
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "picobot-runtime-connection"}, sec)).To(Succeed())
	opt, err := redis.ParseURL(string(sec.Data["PICOBOT_REDIS_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	own := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: wake.ChatStream(ns, "researcher", protocol.ChannelDelegate, "probe"), Values: []any{"p", "x"}})
	g.Expect(own.Err()).NotTo(HaveOccurred())
	for _, key := range []string{wake.ChatStream("tenant-other", "researcher", protocol.ChannelDelegate, "probe"), wake.Stream("tenant-other", "researcher"), wake.Notices} {
		err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: []any{"p", "x"}}).Err()
		g.Expect(err).To(MatchError(ContainSubstring("NOPERM")), key)
	}
}

// TestClusterDelegateBatchKeepsRequestOrder: two tasks run at once in two
// session pods of researcher; the first finishes only after the second's
// run is recorded as succeeded in PostgreSQL, and the results still come
// in request order.
func TestClusterDelegateBatchKeepsRequestOrder(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-delegate-batch"
	db, ctx := tenantStore(t, ns)
	c := delegateTenant(t, ns, 1, 2, "2m", func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher" && strings.Contains(user, "task A"):
			for range 600 {
				runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{Status: store.RunSucceeded})
				if err == nil && len(runs) == 1 {
					return fakellm.Turn{Text: "A done after " + runs[0].Result}
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fakellm.Turn{Text: "A gave up waiting for B"}
		case agent == "researcher":
			return fakellm.Turn{Text: "B done"}
		default:
			return delegateCall(`{"target":"researcher","tasks":[{"task":"task A","plan_item_id":"1"},{"task":"task B","plan_item_id":"2"}]}`)
		}
	})
	answer, _ := sendLead(t, c, "b1", "batch", "Do both")
	var res []delegate.Result
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(answer, "Done: ")), &res)).To(Succeed(), answer)
	g.Expect(res).To(HaveExactElements(
		MatchFields(IgnoreExtras, Fields{"PlanItemID": Equal("1"), "Status": Equal("succeeded"), "Result": Equal("A done after B done")}),
		MatchFields(IgnoreExtras, Fields{"PlanItemID": Equal("2"), "Status": Equal("succeeded"), "Result": Equal("B done")})))
	runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(2))
	for _, r := range runs {
		g.Expect(r.Status).To(Equal(store.RunSucceeded))
	}
}

// blockingResearcher scripts a tenant whose researcher's first model call
// signals started and waits for release (at the latest when the test
// ends); later calls answer at once.
func blockingResearcher(t *testing.T, ns string) (c gatewaytest.Client, started chan struct{}, release func()) {
	started, unblock := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	first := true
	var mu sync.Mutex
	c = delegateTenant(t, ns, 1, 1, "2m", func(agent, _ string, _ fakellm.Recorded) fakellm.Turn {
		if agent != "researcher" {
			return delegateCall(`{"target":"researcher","task":"the long search"}`)
		}
		mu.Lock()
		block := first
		first = false
		mu.Unlock()
		if !block {
			return fakellm.Turn{Text: "found it on the second pod"}
		}
		started <- struct{}{}
		<-unblock
		return fakellm.Turn{Text: "too late"}
	})
	return c, started, release
}

// runningRun waits for the one running agent_runs record of tenant ns.
func runningRun(t *testing.T, db store.Store, ns string) store.AgentRun {
	t.Helper()
	ctx := store.WithTenant(context.Background(), ns)
	var run store.AgentRun
	NewWithT(t).Eventually(func(g Gomega) {
		runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{Status: store.RunRunning})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(runs).To(HaveLen(1))
		run = runs[0]
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	return run
}

// TestClusterDelegateChildPodKilled: researcher's session pod is killed
// with -9 in the middle of the run's model call; the run is taken over by
// another pod of researcher and answers once: lead gets one result, and
// the run's agent_runs record became terminal once, as succeeded.
func TestClusterDelegateChildPodKilled(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-delegate-kill"
	db, ctx := tenantStore(t, ns)
	c, started, release := blockingResearcher(t, ns)
	type sent struct {
		answer string
		err    error
	}
	done := make(chan sent, 1)
	go func() {
		a, _, err := trySendLead(c, "k1", "kill", "Search")
		done <- sent{a, err}
	}()
	<-started
	run := runningRun(t, db, ns)
	victim := st.busyPod(ns, "researcher", run.ID)
	g.Expect(victim).NotTo(BeEmpty())
	killed := false
	for _, p := range st.pods(t, ns, "researcher") {
		if p.Name == victim {
			killed = st.runner.Kill(p.UID)
		}
	}
	g.Expect(killed).To(BeTrue(), "pod %s", victim)
	release() // the killed pod's model call may now end: nobody reads it
	var out sent
	g.Eventually(done, 3*time.Minute).Should(Receive(&out))
	g.Expect(out.err).NotTo(HaveOccurred())
	res := decodeResult(g, out.answer)
	g.Expect(res).To(MatchFields(IgnoreExtras, Fields{"RunID": Equal(run.ID), "Status": Equal("succeeded"), "Result": Equal("found it on the second pod")}))

	runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(1))
	g.Expect(runs[0].Status).To(Equal(store.RunSucceeded))
	g.Expect(runs[0].Result).To(Equal("found it on the second pod"))
	// One answer: lead's model got the run's result once, and the run's
	// session stored one reply.
	g.Expect(requestsOf("lead", "found it on the second pod")).To(HaveLen(1))
	msgs, err := db.LoadMessages(ctx, protocol.ChannelDelegate+":"+run.ID+":default", store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	replies := 0
	for _, m := range msgs {
		if m.Role == "assistant" && strings.Contains(m.Content, "found it on the second pod") {
			replies++
		}
	}
	g.Expect(replies).To(Equal(1))
}

// TestClusterDelegateStopCancelsChild: /stop of lead's chat while
// researcher's run waits on its model stops the run's turn in researcher's
// pod (its running mark goes while the model call still hangs), and the run
// is recorded as cancelled.
func TestClusterDelegateStopCancelsChild(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-delegate-stop"
	db, ctx := tenantStore(t, ns)
	c, started, _ := blockingResearcher(t, ns)
	done := make(chan error, 1)
	go func() {
		_, _, err := trySendLead(c, "s1", "stop", "Search")
		done <- err
	}()
	<-started
	run := runningRun(t, db, ns)
	running := wake.RunningKey(ns, "researcher", protocol.ChannelDelegate, run.ID)
	g.Expect(st.redis.Exists(context.Background(), running).Val()).To(Equal(int64(1)))
	stopped, _ := sendLead(t, c, "s2", "stop", "/stop")
	g.Expect(stopped).To(Equal("Stopped."))
	g.Eventually(done, time.Minute).Should(Receive())
	g.Eventually(func(g Gomega) {
		r, err := db.GetAgentRun(ctx, run.ID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Status).To(Equal(store.RunCancelled))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// The release channel is still open: only the stop can have ended the
	// child's turn.
	g.Eventually(func() int64 { return st.redis.Exists(context.Background(), running).Val() }, 30*time.Second, 100*time.Millisecond).Should(BeZero())
}

// analystAgent is a third Agent, which researcher may delegate to.
const analystAgent = `---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: analyst
  namespace: %[1]s
spec:
  instructions: You are analyst.
  model: {provider: openai, model: analyst-model, baseURL: %[2]s, apiKeySecretRef: {name: research-key, key: apiKey}}
  tools: {allow: [calculator]}
  runtime: {idleTimeout: 2m, warmPool: 1}
`

// TestClusterDelegateNestedRunsCarryTheirDepth: lead delegates to
// researcher, whose pod delegates on to analyst: the nested run is at depth
// 2 (its depth came to researcher's pod in the queued message), is recorded
// in the session of the run that delegated it naming that run as its
// parent, and the answers come back up the chain.
func TestClusterDelegateNestedRunsCarryTheirDepth(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-delegate-chain"
	manifest := delegateManifestFor(ns, 1, 1, "2m", "  delegates: [{name: analyst, agentRef: {name: analyst}}]\n", fmt.Sprintf(analystAgent, ns, st.llm.URL()))
	c := observedDelegateTenant(t, ns, manifest, func(agent, _ string, _ fakellm.Recorded) fakellm.Turn {
		switch agent {
		case "analyst":
			return fakellm.Turn{Text: "bedrock"}
		case "researcher":
			return delegateCall(`{"target":"analyst","task":"dig deeper"}`)
		default:
			return delegateCall(`{"target":"researcher","task":"dig"}`)
		}
	}, func() {})
	st.waitReady(t, ns, "analyst")
	answer, sid := sendLead(t, c, "n1", "chain", "How deep?")
	outer := decodeResult(g, answer)
	g.Expect(outer.Status).To(Equal("succeeded"), answer)
	g.Expect(decodeResult(g, outer.Result)).To(MatchFields(IgnoreExtras, Fields{"Target": Equal("analyst"), "Status": Equal("succeeded"), "Result": Equal("bedrock")}))

	db, ctx := tenantStore(t, ns)
	runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	byAgent := map[string]store.AgentRun{}
	for _, r := range runs {
		byAgent[r.Agent] = r
	}
	g.Expect(byAgent).To(HaveLen(2))
	g.Expect(byAgent["researcher"]).To(MatchFields(IgnoreExtras, Fields{"SessionID": Equal(sid), "ParentRunID": BeEmpty()}))
	g.Expect(byAgent["researcher"].Input).To(ContainSubstring(`"depth":1`))
	g.Expect(byAgent["analyst"]).To(MatchFields(IgnoreExtras, Fields{"ParentRunID": Equal(byAgent["researcher"].ID),
		"SessionID": Equal("delegate:" + byAgent["researcher"].ID + ":default"), "Status": Equal(store.RunSucceeded)}))
	g.Expect(byAgent["analyst"].Input).To(ContainSubstring(`"depth":2`))
	g.Expect(requestsOf("analyst", "dig deeper")[0].Header.Get("Authorization")).To(Equal("Bearer sk-research"))
}
