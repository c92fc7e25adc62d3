package cluster

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// sessionsSendManifest is a tenant (%[1]s, gateway key %[2]s, fake model
// %[3]s) whose Agent "lead" may talk to "researcher" (its delegate edge)
// with the OpenClaw session tools; both keep a warm pod and serve a chat
// for two minutes.
const sessionsSendManifest = tenantBase + `
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
  tools: {allow: [sessions_send, sessions_history, sessions_list, session_status, agents_list]}
  delegates:
  - {name: researcher, agentRef: {name: researcher}, description: finds facts}
  runtime: {idleTimeout: 2m, warmPool: 1}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: researcher
  namespace: %[1]s
spec:
  instructions: You are researcher.
  model: {provider: openai, model: research-model, baseURL: %[3]s, apiKeySecretRef: {name: research-key, key: apiKey}}
  tools: {allow: [calculator]}
  runtime: {idleTimeout: 2m, warmPool: 1}
`

// TestClusterSessionsSendSurvivesPodDeaths: lead's model sends researcher's
// chat a message with sessions_send and waits for the reply. The exchange
// runs across the two agents' session pods, and each side's pod is killed
// with -9 in the middle of its turn: researcher's during the first turn
// (lead's call still waits, and gets the reply of the pod that resumes it),
// lead's during the reply ping-pong (nobody waits for that one). Every
// turn still runs once: one first turn and one reply in researcher's chat,
// one ping-pong reply in lead's, researcher's REPLY_SKIP ends the
// ping-pong, and one announce step, whose stored reply is researcher's
// chat's last message. The model is called once per turn after each kill.
func TestClusterSessionsSendSurvivesPodDeaths(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-a2a"
	db, ctx := tenantStore(t, ns)
	var rsid string
	started := make(chan string, 4)
	unblock := map[string]chan struct{}{"researcher": make(chan struct{}), "lead": make(chan struct{})}
	var mu sync.Mutex
	blocked := map[string]bool{}
	block := func(agent string) bool {
		mu.Lock()
		defer mu.Unlock()
		if blocked[agent] {
			return false
		}
		blocked[agent] = true
		return true
	}
	var freed sync.Map
	free := func(agent string) {
		if _, loaded := freed.LoadOrStore(agent, true); !loaded {
			close(unblock[agent])
		}
	}
	release := func() { free("researcher"); free("lead") }
	t.Cleanup(release)
	c := observedDelegateTenant(t, ns, fmt.Sprintf(sessionsSendManifest, ns, ns+"-key", st.llm.URL()), func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher" && strings.HasPrefix(user, "[Message from agent lead"):
			if block("researcher") {
				started <- "researcher"
				<-unblock["researcher"]
				return fakellm.Turn{Text: "too late"}
			}
			return fakellm.Turn{Text: "Paris"}
		case agent == "researcher" && strings.HasPrefix(user, "[Reply from agent lead"):
			return fakellm.Turn{Text: sessions.ReplySkip}
		case agent == "researcher" && strings.HasPrefix(user, "[Announce step"):
			return fakellm.Turn{Text: "Told lead: Paris"}
		case agent == "researcher":
			return fakellm.Turn{Text: "hello"}
		case agent == "lead" && strings.HasPrefix(user, "[Reply from agent researcher"):
			if block("lead") {
				started <- "lead"
				<-unblock["lead"]
				return fakellm.Turn{Text: "too late"}
			}
			return fakellm.Turn{Text: "Are you sure?"}
		}
		mu.Lock()
		key := rsid
		mu.Unlock()
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "s1", Name: sessions.NameSend,
			Args: `{"sessionKey":"` + key + `","message":"What is the capital of France?","timeoutSeconds":120,"maxPingPongTurns":3}`}}}
	}, func() {})

	// researcher's chat, served by one of its pods.
	_, sid, err := trySend(c, "researcher", "r0", "rchat", "hi")
	g.Expect(err).NotTo(HaveOccurred())
	mu.Lock()
	rsid = sid
	mu.Unlock()

	type result struct {
		answer, sid string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		a, s, err := trySendLead(c, "l1", "lchat", "Ask researcher")
		done <- result{a, s, err}
	}()
	select {
	case who := <-started:
		g.Expect(who).To(Equal("researcher"))
	case r := <-done:
		t.Fatalf("lead's turn ended before researcher's turn started: %+v", r)
	case <-time.After(time.Minute):
		t.Fatal("researcher's turn did not start")
	}
	rchat, err := session.ParseID(rsid)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(killPod(t, ns, "researcher", rchat.ChatID)).To(BeTrue(), "researcher's pod serving its chat")
	free("researcher")

	var res result
	g.Eventually(done, 3*time.Minute).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	var sent sessions.Sent
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(res.answer, "Done: ")), &sent)).To(Succeed(), res.answer)
	g.Expect(sent).To(MatchFields(IgnoreExtras, Fields{"Status": Equal("ok"), "Reply": Equal("Paris"), "SessionKey": Equal(rsid)}))

	// The ping-pong's first reply runs in lead's chat; its pod dies in it.
	g.Eventually(started, time.Minute).Should(Receive(Equal("lead")))
	lchat, err := session.ParseID(res.sid)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(killPod(t, ns, "lead", lchat.ChatID)).To(BeTrue(), "lead's pod serving its chat")
	release()

	announce := "Told lead: Paris"
	g.Eventually(func(g Gomega) {
		g.Expect(countMessages(g, db, ns, rsid, "assistant", announce)).To(Equal(1))
	}, 3*time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(countMessages(g, db, ns, rsid, "user", "[Message from agent lead")).To(Equal(1))
		g.Expect(countMessages(g, db, ns, rsid, "assistant", "Paris")).To(Equal(1))
		g.Expect(countMessages(g, db, ns, res.sid, "user", "[Reply from agent researcher")).To(Equal(1))
		g.Expect(countMessages(g, db, ns, res.sid, "assistant", "Are you sure?")).To(Equal(1))
		g.Expect(countMessages(g, db, ns, rsid, "user", "[Reply from agent lead")).To(Equal(1))
		g.Expect(countMessages(g, db, ns, rsid, "assistant", sessions.ReplySkip)).To(Equal(1))
		g.Expect(countMessages(g, db, ns, rsid, "user", "[Announce step")).To(Equal(1))
		g.Expect(countMessages(g, db, ns, rsid, "assistant", announce)).To(Equal(1))
		// The model calls of each turn: the killed pod's and the
		// resumed one's, or one.
		g.Expect(turnCalls("researcher", "[Message from agent lead")).To(Equal(2))
		g.Expect(turnCalls("lead", "[Reply from agent researcher")).To(Equal(2))
		g.Expect(turnCalls("researcher", "[Reply from agent lead")).To(Equal(1))
		g.Expect(turnCalls("researcher", "[Announce step")).To(Equal(1))
	}, 5*time.Second, 500*time.Millisecond).Should(Succeed())
	msgs, err := db.LoadMessages(ctx, rsid, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs[len(msgs)-1].Content).To(Equal(announce), "the announce step is the chat's last word")
	n, err := st.redis.HLen(ctx, "{"+ns+":a2a}").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero(), "the ended exchange is no longer watched")
}

// turnCalls counts the model calls of agent that start a turn whose user
// message starts with prefix (the last message is that user message).
func turnCalls(agent, prefix string) int {
	n := 0
	for _, r := range st.llm.Requests() {
		if !strings.HasPrefix(r.System, "You are "+agent+".") || len(r.Messages) == 0 {
			continue
		}
		if last := r.Messages[len(r.Messages)-1]; last.Role == "user" && strings.HasPrefix(last.Content, prefix) {
			n++
		}
	}
	return n
}

// TestClusterSessionToolsOnPods: the other OpenClaw session tools in a
// session pod, on PostgreSQL: lead's model calls sessions_list,
// sessions_history of its other chat, session_status and agents_list in
// one step, and each answers from the tenant's store and lead's edges.
func TestClusterSessionToolsOnPods(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-session-tools"
	var other string
	var mu sync.Mutex
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		var results []string
		for i := len(r.Messages) - 1; i >= 0 && (r.Messages[i].Role == "tool" || len(r.Messages[i].ToolResults) > 0); i-- {
			if r.Messages[i].Role == "tool" {
				results = append(results, r.Messages[i].Content)
			}
			for _, tr := range r.Messages[i].ToolResults {
				results = append(results, tr.Content)
			}
		}
		if len(results) > 0 {
			return fakellm.Turn{Text: strings.Join(results, "\n---\n")}
		}
		if lastUser(r) == "hello" {
			return fakellm.Turn{Text: "hi there"}
		}
		mu.Lock()
		key := other
		mu.Unlock()
		return fakellm.Turn{ToolCalls: []fakellm.Call{
			{ID: "t1", Name: sessions.NameList, Args: `{}`},
			{ID: "t2", Name: sessions.NameHistory, Args: `{"sessionKey":"` + key + `"}`},
			{ID: "t3", Name: sessions.NameStatus, Args: `{}`},
			{ID: "t4", Name: "agents_list", Args: `{}`},
		}}
	})
	st.apply(t, fmt.Sprintf(sessionsSendManifest, ns, ns+"-key", st.llm.URL()))
	st.waitReady(t, ns, "lead")
	st.waitReady(t, ns, "researcher")
	c := gatewaytest.Client{URL: st.gatewayURL, Key: ns + "-key"}
	var sid string
	g.Eventually(func() error {
		var err error
		_, sid, err = trySendLead(c, "l0", "lone", "hello")
		return err
	}, time.Minute, time.Second).Should(Succeed())
	mu.Lock()
	other = sid
	mu.Unlock()
	answer, lsid := sendLead(t, c, "l1", "lchat", "What do you see?")
	g.Expect(answer).NotTo(ContainSubstring("error:"))
	g.Expect(answer).To(And(MatchRegexp(`"session":\s*"`+regexp.QuoteMeta(lsid)+`"`), MatchRegexp(`"session":\s*"`+regexp.QuoteMeta(sid)+`"`)),
		"sessions_list shows lead's two chats")
	g.Expect(answer).To(ContainSubstring("hi there"), "sessions_history reads lead's other chat")
	g.Expect(answer).To(MatchRegexp(`"model":\s*"[^"]*lead-model"`), "session_status tells lead's model")
	g.Expect(answer).To(MatchRegexp(`"agent":\s*"researcher"`), "agents_list lists lead's edge")
}
