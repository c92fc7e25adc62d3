package embedded_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tool/sessions"
	"github.com/picobot/picobot/test/timing"
)

// chatWith posts a message to agent's chat over HTTP and returns its answer
// and session.
func (e *bgEnv) chatWith(c gatewaytest.Client, agent, chat, text string) (answer, session string) {
	e.t.Helper()
	status, out := c.Do(e.t, http.MethodPost, "/api/v1/send", gatewaytest.Frame{"id": fmt.Sprintf("m%d", time.Now().UnixNano()),
		"agent": agent, "chat_id": chat, "text": text})
	NewWithT(e.t).Expect(status).To(Equal(http.StatusOK), "%v", out)
	answer, _ = out["text"].(string)
	session, _ = out["session"].(string)
	return answer, session
}

func toolCall(name, args string) fakellm.Turn {
	return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "s1", Name: name, Args: args}}}
}

// TestAgentsListAndSessionsSpawn: agents_list shows the caller's delegate
// edges; sessions_spawn returns accepted while the run still runs, the run
// is a background delegate run of the target, and its result comes back as
// exactly one continuation turn (the announce step) in the calling chat;
// cleanup delete deletes the run's session; bad arguments are tool errors;
// an Agent without edges gets neither tool.
func TestAgentsListAndSessionsSpawn(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher":
			if strings.Contains(last.Content, "count slowly") {
				<-release
			}
			return fakellm.Turn{Text: "counted: 1 2 3"}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "Announced: " + last.Content}
		case last.Role == "tool":
			return fakellm.Turn{Text: last.Content}
		case last.Content == "LIST":
			return toolCall(delegate.AgentsListName, `{}`)
		case last.Content == "SPAWN":
			return toolCall(delegate.SpawnName, `{"task":"count slowly to 3","label":"counter","agentId":"researcher"}`)
		case last.Content == "CLEAN":
			return toolCall(delegate.SpawnName, `{"task":"count once","agentId":"researcher","cleanup":"delete"}`)
		default: // the arguments to try
			return toolCall(delegate.SpawnName, last.Content)
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	answer, _ := e.send(e.a, "spawn", "LIST")
	var listed struct {
		Requester string                 `json:"requester"`
		Agents    []delegate.ListedAgent `json:"agents"`
		AllowAny  bool                   `json:"allowAny"`
	}
	g.Expect(json.Unmarshal([]byte(answer), &listed)).To(Succeed(), answer)
	g.Expect(listed.Requester).To(Equal("assistant"))
	g.Expect(listed.Agents).To(Equal([]delegate.ListedAgent{{ID: "researcher", Agent: "researcher"}, {ID: "sub", Agent: "l1"}}))
	g.Expect(listed.AllowAny).To(BeFalse())

	answer, session := e.send(e.a, "spawn", "SPAWN")
	var spawned delegate.Spawned
	g.Expect(json.Unmarshal([]byte(answer), &spawned)).To(Succeed(), answer)
	g.Expect(spawned).To(And(HaveField("Status", "accepted"), HaveField("AgentID", "researcher"), HaveField("Label", "counter"),
		HaveField("ChildSessionKey", "delegate:"+spawned.RunID+":default")))
	run, err := e.st.GetAgentRun(tenantOf(tenantA), spawned.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(run).To(And(HaveField("Status", store.RunRunning), HaveField("Mode", store.RunBackground),
		HaveField("Completion", store.CompletionReserved), HaveField("SessionID", session), HaveField("Agent", "researcher")),
		"accepted while the run still runs")
	close(release)
	runs := e.waitDelivered(tenantA, 1)
	e.checkOnceEach(e.a, session, runs)
	hist := e.history(e.a, session)
	last, _ := hist[len(hist)-1]["content"].(string)
	g.Expect(last).To(And(HavePrefix("Announced: [Background run "+spawned.RunID), ContainSubstring("Label: counter"),
		ContainSubstring("counted: 1 2 3"), ContainSubstring(sessions.AnnounceSkip)), "the announce step's reply closes the chat")
	child, err := e.st.GetSession(tenantOf(tenantA), spawned.ChildSessionKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(child.Agent).To(Equal("researcher"))
	g.Expect(child.DeletedAt).To(BeNil(), "cleanup keep is the default")

	answer, _ = e.send(e.a, "spawn", "CLEAN")
	g.Expect(json.Unmarshal([]byte(answer), &spawned)).To(Succeed(), answer)
	e.waitDelivered(tenantA, 2)
	child, err = e.st.GetSession(tenantOf(tenantA), spawned.ChildSessionKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(child.DeletedAt).NotTo(BeNil(), "cleanup delete")
	g.Expect(e.continuationRequests()).To(HaveLen(2), "one announce step per run")

	for args, want := range map[string]string{
		`{"task":"x","agentId":"hacker"}`:                            `agentId: "hacker" is not one of your sub-agents; you may delegate to researcher, sub`,
		`{"task":"x"}`:                                               "agentId: name a target: one of researcher, sub",
		`{"task":"x","agentId":"researcher","model":"gpt-9"}`:        "model overrides are not available",
		`{"task":"x","agentId":"researcher","cleanup":"burn"}`:       "cleanup",
		`{"task":" ","agentId":"researcher"}`:                        "give a task",
		`{"task":"x","agentId":"researcher","runTimeoutSeconds":-1}`: "runTimeoutSeconds must be 0",
	} {
		answer, _ := e.send(e.a, "spawn-bad", args)
		g.Expect(answer).To(ContainSubstring(want), args)
	}
	g.Expect(e.runs(tenantA, store.AgentRunFilter{})).To(HaveLen(2), "no refused call started a run")

	for _, r := range e.llm.Requests() {
		switch a := youAre.FindStringSubmatch(r.System); {
		case a != nil && a[1] == "researcher":
			g.Expect(r.Tools).NotTo(ContainElements(delegate.AgentsListName), "no edges, no agents_list")
			g.Expect(r.Tools).NotTo(ContainElements(delegate.SpawnName))
		case a != nil && a[1] == "assistant":
			g.Expect(r.Tools).To(ContainElements(delegate.AgentsListName, delegate.SpawnName, sessions.NameSend))
		}
	}
}

// TestSessionsSendBetweenAgents: the assistant sends to a chat of
// researcher (one of its delegate edges) and waits: researcher's turn runs
// in its own session and its reply is the tool's answer; then one reply
// goes back to the assistant's session and one to researcher's
// (maxPingPongTurns 2), then researcher's announce step; all of it stored
// in the two sessions. Fire and forget returns while researcher's turn
// still waits. A session of an Agent off the edges, or of another tenant,
// is refused.
func TestSessionsSendBetweenAgents(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	var researcherChat, l2Chat, otherTenantChat string
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher" && strings.Contains(last.Content, "FORGET"):
			<-release
			return fakellm.Turn{Text: sessions.ReplySkip}
		case agent == "researcher" && strings.HasPrefix(last.Content, "[Message from agent assistant"):
			return fakellm.Turn{Text: "R1: the survey is half done"}
		case agent == "researcher" && strings.HasPrefix(last.Content, "[Reply from agent assistant"):
			return fakellm.Turn{Text: "R2: will do"}
		case agent == "researcher" && strings.HasPrefix(last.Content, "[Announce step"):
			return fakellm.Turn{Text: "Survey update: half done, speeding up."}
		case agent == "researcher" || agent == "l2":
			return fakellm.Turn{Text: "hello there"}
		case strings.HasPrefix(last.Content, "[Reply from agent researcher"):
			return fakellm.Turn{Text: "A1: please hurry"}
		case last.Role == "tool":
			return fakellm.Turn{Text: last.Content}
		case last.Content == "SEND":
			return toolCall(sessions.NameSend, `{"sessionKey":"`+researcherChat+`","message":"How is the survey?","timeoutSeconds":120,"maxPingPongTurns":2}`)
		case last.Content == "FORGET":
			return toolCall(sessions.NameSend, `{"sessionKey":"`+researcherChat+`","message":"FORGET this","timeoutSeconds":0}`)
		case last.Content == "OFF-EDGE":
			return toolCall(sessions.NameSend, `{"sessionKey":"`+l2Chat+`","message":"hi"}`)
		case last.Content == "OTHER-TENANT":
			return toolCall(sessions.NameSend, `{"sessionKey":"`+otherTenantChat+`","message":"hi"}`)
		}
		return fakellm.Turn{Text: "?"}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	_, researcherChat = e.chatWith(e.a, "researcher", "desk", "hi")
	_, l2Chat = e.chatWith(e.a, "l2", "desk", "hi")
	_, otherTenantChat = e.chatWith(e.b, "researcher", "desk-b", "hi")

	answer, session := e.send(e.a, "send", "SEND")
	var sent sessions.Sent
	g.Expect(json.Unmarshal([]byte(answer), &sent)).To(Succeed(), answer)
	g.Expect(sent).To(And(HaveField("Status", "ok"), HaveField("Reply", "R1: the survey is half done"), HaveField("SessionKey", researcherChat)))

	contents := func(session string) []string {
		var out []string
		for _, m := range e.history(e.a, session) {
			c, _ := m["content"].(string)
			out = append(out, fmt.Sprintf("%s: %s", m["role"], strings.SplitN(c, "\n", 2)[0]))
		}
		return out
	}
	g.Eventually(func() []string { return contents(researcherChat) }).WithTimeout(60 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal([]string{
		"user: hi", "assistant: hello there",
		"user: [Message from agent assistant, session " + session + ", sent with sessions_send]", "assistant: R1: the survey is half done",
		"user: [Reply from agent assistant, session " + session + " (agent-to-agent exchange " + sent.RunID + ", reply 2 of at most 2)]", "assistant: R2: will do",
		"user: [Announce step of agent-to-agent exchange " + sent.RunID + " with agent assistant]", "assistant: Survey update: half done, speeding up.",
	}))
	g.Expect(contents(session)).To(ContainElements(
		"user: [Reply from agent researcher, session "+researcherChat+" (agent-to-agent exchange "+sent.RunID+", reply 1 of at most 2)]",
		"assistant: A1: please hurry"))

	answer, _ = e.send(e.a, "send", "FORGET")
	g.Expect(json.Unmarshal([]byte(answer), &sent)).To(Succeed(), answer)
	g.Expect(sent.Status).To(Equal("accepted"), "returned while researcher's turn waits")
	close(release)
	g.Eventually(func() []string { return contents(researcherChat) }).WithTimeout(60 * time.Second).WithPolling(20 * time.Millisecond).Should(
		ContainElement("user: [Announce step of agent-to-agent exchange " + sent.RunID + " with agent assistant]"))

	answer, _ = e.send(e.a, "send", "OFF-EDGE")
	g.Expect(answer).To(Equal(`error: no session "` + l2Chat + `" you can send to (your own sessions, or those of agents researcher, l1)`))
	answer, _ = e.send(e.a, "send", "OTHER-TENANT")
	g.Expect(answer).To(ContainSubstring(`error: no session "` + otherTenantChat + `" you can send to`))
	g.Expect(contents(l2Chat)).To(HaveLen(2), "nothing reached l2")
	g.Expect(e.history(e.b, otherTenantChat)).To(HaveLen(2), "nothing reached tenant b's chat")
}

// BenchmarkSessionsSendRoundTrip measures a chat turn whose model sends a
// message to a chat of researcher with sessions_send and waits for its
// reply (maxPingPongTurns 0), with a fake model that answers at once: the
// assistant's turn (three model calls: the call, researcher's reply, the
// final text) and the sessions_send call alone (queueing researcher's turn
// on its chat stream, the turn, the reply back). The announce step runs
// after the call and is not timed.
func BenchmarkSessionsSendRoundTrip(b *testing.B) {
	var researcherChat string
	var mu sync.Mutex
	var calls []time.Duration
	var called time.Time
	e := startBackground(b, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher" && strings.HasPrefix(last.Content, "[Announce step"):
			return fakellm.Turn{Text: sessions.AnnounceSkip}
		case agent == "researcher":
			return fakellm.Turn{Text: "pong"}
		case last.Role == "tool":
			mu.Lock()
			calls = append(calls, time.Since(called))
			mu.Unlock()
			return fakellm.Turn{Text: "done"}
		}
		mu.Lock()
		called = time.Now()
		mu.Unlock()
		return toolCall(sessions.NameSend, `{"sessionKey":"`+researcherChat+`","message":"ping","timeoutSeconds":60,"maxPingPongTurns":0}`)
	})
	_, researcherChat = e.chatWith(e.a, "researcher", "desk", "hi")
	turns := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if answer, _ := e.send(e.a, fmt.Sprintf("bench%d", i), "go"); answer != "done" {
			b.Fatalf("answer %q", answer)
		}
		turns = append(turns, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(timing.Percentile(turns, 0.50).Microseconds()), "us-turn-p50")
	b.ReportMetric(float64(timing.Percentile(turns, 0.99).Microseconds()), "us-turn-p99")
	mu.Lock()
	defer mu.Unlock()
	b.ReportMetric(float64(timing.Percentile(calls, 0.50).Microseconds()), "us-send-p50")
	b.ReportMetric(float64(timing.Percentile(calls, 0.99).Microseconds()), "us-send-p99")
}
