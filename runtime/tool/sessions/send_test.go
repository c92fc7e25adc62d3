package sessions_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// step is one turn an exchange ran.
type step struct{ session, msgID, text string }

// chats stands for the sessions' agents at the Sender boundary (the
// embedded runtime's real sender is tested in runtime/embedded): reply
// decides each turn's answer; gate, when set, holds every turn until
// closed.
type chats struct {
	mu        sync.Mutex
	steps     []step
	announced []string
	reply     func(session, text string, n int) string
	gate      chan struct{}
	done      chan struct{} // gets one value per announce step
}

func (c *chats) Turn(_ context.Context, sessionID, msgID, text string) (string, error) {
	if c.gate != nil {
		<-c.gate
	}
	c.mu.Lock()
	c.steps = append(c.steps, step{sessionID, msgID, text})
	n := len(c.steps)
	c.mu.Unlock()
	r := c.reply(sessionID, text, n)
	if strings.HasPrefix(text, "[Announce step") {
		defer func() { c.done <- struct{}{} }()
	}
	return r, nil
}

func (c *chats) Announce(_ context.Context, _, text string) error {
	c.mu.Lock()
	c.announced = append(c.announced, text)
	c.mu.Unlock()
	return nil
}

func (c *chats) snapshot() ([]step, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]step(nil), c.steps...), append([]string(nil), c.announced...)
}

// TestSessionsSend runs sessions_send on a real SQLite store: the wait for
// the first reply or none (fire and forget, and a timeout on the injected
// clock), the ping-pong alternating between the two sessions up to
// maxPingPongTurns and ended by REPLY_SKIP, the announce step delivered
// unless ANNOUNCE_SKIP; sessions of another tenant, of an Agent off the
// delegate edges, deleted ones and this one are refused; bad arguments are
// tool errors.
func TestSessionsSend(t *testing.T) {
	g := NewWithT(t)
	st, team, other, mk := sessionStore(t)
	cur, own, helper := mk(team, "lead", "l/1"), mk(team, "lead", "l/2"), mk(team, "helper", "h/1")
	offEdge, stranger, gone := mk(team, "intruder", "i/1"), mk(other, "helper", "h/9"), mk(team, "helper", "h/2")
	sub, err := st.CreateSession(team, store.Session{Channel: "delegate", ChatID: "run-1", DialogID: "default", Agent: "helper"})
	g.Expect(err).NotTo(HaveOccurred())
	run1 := sub.ID
	deleted := true
	_, err = st.UpdateSession(team, gone, store.SessionUpdate{Deleted: &deleted})
	g.Expect(err).NotTo(HaveOccurred())

	c := &chats{done: make(chan struct{}, 10)}
	clk := clocktesting.NewFakeClock(time.Now())
	xctx, stop := context.WithCancel(context.Background())
	x := sessions.NewExchanges(xctx, c, clk, nil)
	t.Cleanup(func() { stop(); x.Wait() })
	reg, err := tool.NewRegistry(sessions.NewSend(sessions.SendConfig{Agent: "lead", Store: st, Exchanges: x,
		Edges: []picobotv1alpha1.Delegate{{Name: "help", AgentRef: corev1.LocalObjectReference{Name: "helper"}}}}))
	g.Expect(err).NotTo(HaveOccurred())
	run := func(ctx context.Context, args string) tool.Result {
		return reg.Execute(ctx, tool.Env{Agent: "lead", SessionID: cur}, llm.ToolCall{ID: "c1", Name: sessions.NameSend, Arguments: args})
	}
	parse := func(res tool.Result) sessions.Sent {
		var s sessions.Sent
		g.Expect(json.Unmarshal([]byte(res.Content), &s)).To(Succeed(), res.Content)
		return s
	}
	reset := func(reply func(session, text string, n int) string) {
		c.mu.Lock()
		c.steps, c.announced, c.reply = nil, nil, reply
		c.mu.Unlock()
	}
	sessionsOf := func(steps []step) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.session)
		}
		return out
	}

	// Wait for the reply; two ping-pong replies (back to lead, then to
	// helper), then helper's announce step, delivered.
	reset(func(session, text string, n int) string {
		if strings.HasPrefix(text, "[Announce step") {
			return "announced"
		}
		return "reply " + string(rune('0'+n))
	})
	sent := parse(run(team, `{"sessionKey":"`+helper+`","message":"How far along are you?","timeoutSeconds":30,"maxPingPongTurns":2}`))
	g.Expect(sent).To(And(HaveField("Status", "ok"), HaveField("Reply", "reply 1"), HaveField("SessionKey", helper)))
	g.Eventually(c.done).WithTimeout(30 * time.Second).Should(Receive())
	steps, announced := c.snapshot()
	g.Expect(sessionsOf(steps)).To(Equal([]string{helper, cur, helper, helper}), "first turn, two replies, the announce step")
	g.Expect(steps[0].text).To(Equal("[Message from agent lead, session " + cur + ", sent with sessions_send]\n\nHow far along are you?"))
	g.Expect(steps[1].text).To(HavePrefix("[Reply from agent helper, session " + helper))
	g.Expect(steps[1].text).To(ContainSubstring("reply 1"))
	g.Expect(steps[2].text).To(ContainSubstring("reply 2"))
	g.Expect(steps[3].text).To(And(ContainSubstring("Your first reply:\nreply 1"), ContainSubstring("Latest reply:\nreply 3")))
	for i, s := range steps[:3] {
		g.Expect(s.msgID).To(Equal(sent.RunID+":"+string(rune('1'+i))), "one message id per turn of the exchange")
	}
	g.Expect(steps[3].msgID).To(Equal(sent.RunID+sessions.AnnounceSuffix), "the announce step's message id says what it is")
	g.Expect(announced).To(Equal([]string{"announced"}))

	// REPLY_SKIP from lead's side ends the ping-pong at once; ANNOUNCE_SKIP
	// keeps the announcement back. The default is five replies.
	reset(func(session, text string, n int) string {
		switch {
		case strings.HasPrefix(text, "[Announce step"):
			return " ANNOUNCE_SKIP\n"
		case session == cur:
			return sessions.ReplySkip
		}
		return "sure"
	})
	g.Expect(parse(run(team, `{"sessionId":"`+own+`","message":"hi"}`)).Status).To(Equal("ok"), "lead's own other session")
	g.Eventually(c.done).WithTimeout(30 * time.Second).Should(Receive())
	steps, announced = c.snapshot()
	g.Expect(sessionsOf(steps)).To(Equal([]string{own, cur, own}))
	g.Expect(announced).To(BeEmpty())

	// maxPingPongTurns 0: no reply goes back; a first reply of REPLY_SKIP
	// ends it too.
	reset(func(string, string, int) string { return sessions.ReplySkip })
	g.Expect(parse(run(team, `{"sessionKey":"`+helper+`","message":"x","maxPingPongTurns":5}`)).Reply).To(Equal("REPLY_SKIP"))
	g.Eventually(c.done).WithTimeout(30 * time.Second).Should(Receive())
	steps, _ = c.snapshot()
	g.Expect(sessionsOf(steps)).To(Equal([]string{helper, helper}), "the first turn and the announce step")
	reset(func(string, string, int) string { return "ok" })
	parse(run(team, `{"sessionKey":"`+helper+`","message":"x","maxPingPongTurns":0}`))
	g.Eventually(c.done).WithTimeout(30 * time.Second).Should(Receive())
	steps, _ = c.snapshot()
	g.Expect(sessionsOf(steps)).To(Equal([]string{helper, helper}))

	// A caller that is no chat (a sub-agent run's turn) gets no replies.
	reset(func(string, string, int) string { return "ok" })
	res := reg.Execute(team, tool.Env{Agent: "lead", SessionID: "delegate:r9:default"}, llm.ToolCall{ID: "c2", Name: sessions.NameSend,
		Arguments: `{"sessionKey":"` + helper + `","message":"from a run"}`})
	g.Expect(parse(res).Status).To(Equal("ok"))
	g.Eventually(c.done).WithTimeout(30 * time.Second).Should(Receive())
	steps, _ = c.snapshot()
	g.Expect(sessionsOf(steps)).To(Equal([]string{helper, helper}), "the first turn and the announce step")

	// Fire and forget returns before the turn ran; a wait that runs out
	// says timeout, and the exchange goes on.
	c.gate = make(chan struct{})
	reset(func(string, string, int) string { return sessions.ReplySkip })
	sent = parse(run(team, `{"sessionKey":"`+helper+`","message":"later","timeoutSeconds":0}`))
	g.Expect(sent.Status).To(Equal("accepted"))
	steps, _ = c.snapshot()
	g.Expect(steps).To(BeEmpty(), "no turn has run yet")
	waited := make(chan tool.Result, 1)
	go func() { waited <- run(team, `{"sessionKey":"`+helper+`","message":"slow","timeoutSeconds":5}`) }()
	g.Eventually(clk.HasWaiters).WithTimeout(30 * time.Second).Should(BeTrue())
	clk.Step(5 * time.Second)
	g.Eventually(waited).WithTimeout(30 * time.Second).Should(Receive(&res))
	g.Expect(parse(res)).To(And(HaveField("Status", "timeout"), HaveField("Error", ContainSubstring("no reply within 5 s"))))
	close(c.gate)
	for range 2 {
		g.Eventually(c.done).WithTimeout(30 * time.Second).Should(Receive())
	}
	c.gate = nil

	// Refusals: each reads as not found, bad input names what is wrong.
	for _, key := range []string{stranger, offEdge, gone, "web:nobody/x:default"} {
		res := run(team, `{"sessionKey":"`+key+`","message":"hi"}`)
		g.Expect(res.IsError).To(BeTrue(), key)
		g.Expect(res.Content).To(Equal(`error: no session "` + key + `" you can send to (your own sessions, or those of agents helper)`))
	}
	g.Expect(run(other, `{"sessionKey":"`+helper+`","message":"hi"}`).Content).To(ContainSubstring("no session"), "another tenant's caller")
	for args, want := range map[string]string{
		`{"sessionKey":"` + cur + `","message":"hi"}`:                         "is this one",
		`{"sessionKey":"` + helper + `"}`:                                     `missing properties: ["message"]`,
		`{"sessionKey":"` + helper + `","message":"  "}`:                      "give a message",
		`{"message":"hi"}`:                                                    "name the session",
		`{"sessionKey":"` + run1 + `","message":"hi"}`:                        "is a sub-agent run's; it takes no messages",
		`{"sessionKey":"` + helper + `","message":"hi","timeoutSeconds":-1}`:  "timeoutSeconds must be 0",
		`{"sessionKey":"` + helper + `","message":"hi","maxPingPongTurns":6}`: "maxPingPongTurns must be 0-5, got 6",
	} {
		res := run(team, args)
		g.Expect(res.IsError).To(BeTrue(), args)
		g.Expect(res.Content).To(ContainSubstring(want), args)
	}
	steps, _ = c.snapshot()
	g.Expect(steps).To(HaveLen(4), "no refused call ran a turn (only the two late exchanges)")

	// Without Exchanges (cluster mode) the tool says why.
	none, err := tool.NewRegistry(sessions.NewSend(sessions.SendConfig{Agent: "lead", Store: st, Unavailable: "not built here"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none.Execute(team, tool.Env{Agent: "lead", SessionID: cur}, llm.ToolCall{ID: "c", Name: sessions.NameSend,
		Arguments: `{"sessionKey":"` + helper + `","message":"hi"}`}).Content).To(Equal("error: sessions_send is not available here: not built here"))
}
