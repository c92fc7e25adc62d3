package cluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
)

// continuationPrefix starts a continuation turn's message (delegate.ContinuationText).
const continuationPrefix = "[Background run "

// killPod kills the session pod of agent in ns that serves chatKey, and
// reports whether it found one.
func killPod(t *testing.T, ns, agent, chatKey string) bool {
	t.Helper()
	victim := st.busyPod(ns, agent, chatKey)
	for _, p := range st.pods(t, ns, agent) {
		if victim != "" && p.Name == victim {
			return st.runner.Kill(p.UID)
		}
	}
	return false
}

// countMessages counts the messages of a session with role whose content
// has prefix.
func countMessages(g Gomega, db store.Store, tenant, sessionID, role, prefix string) int {
	msgs, err := db.LoadMessages(store.WithTenant(context.Background(), tenant), sessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, m := range msgs {
		if string(m.Role) == role && strings.HasPrefix(m.Content, prefix) {
			n++
		}
	}
	return n
}

// TestClusterBackgroundRunSurvivesPodDeaths: lead delegates a task in the
// background and its turn ends at once; the run is a chat of researcher
// served by one of its session pods. That pod is killed with -9 in the
// middle of the run's model call, and so is lead's pod, which nobody needs
// any more: the gateway's run watch wakes another researcher pod, which
// resumes the run, records it succeeded once and queues the continuation in
// lead's chat; a new lead pod answers it. The run ends once, the
// continuation turn happens once (one model call, one stored reply) and
// the completion is delivered.
func TestClusterBackgroundRunSurvivesPodDeaths(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-bg-kill"
	db, ctx := tenantStore(t, ns)
	started, unblock := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	first := true
	var mu sync.Mutex
	c := delegateTenant(t, ns, 1, 1, "2m", func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "lead" && strings.HasPrefix(user, continuationPrefix):
			return fakellm.Turn{Text: "Relayed: " + user[strings.Index(user, "Result:"):]}
		case agent == "lead":
			return delegateCall(`{"target":"researcher","task":"the long search","mode":"background"}`)
		}
		mu.Lock()
		block := first
		first = false
		mu.Unlock()
		if !block {
			return fakellm.Turn{Text: "found it after a pod died"}
		}
		started <- struct{}{}
		<-unblock
		return fakellm.Turn{Text: "too late"}
	})

	answer, sid := sendLead(t, c, "bg1", "bg", "Research this in the background")
	res := decodeResult(g, answer)
	g.Expect(res.Status).To(Equal("running"))
	g.Eventually(started, time.Minute).Should(Receive())
	run := runningRun(t, db, ns)
	g.Expect(run.ID).To(Equal(res.RunID))
	g.Expect(run.Completion).To(Equal(store.CompletionReserved))

	g.Expect(killPod(t, ns, "researcher", run.ID)).To(BeTrue(), "researcher's pod serving the run")
	chat, err := session.ParseID(sid)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(killPod(t, ns, "lead", chat.ChatID)).To(BeTrue(), "lead's pod serving the chat")
	release() // the killed pod's model call may now end: nobody reads it

	g.Eventually(func(g Gomega) {
		r, err := db.GetAgentRun(ctx, run.ID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r).To(MatchFields(IgnoreExtras, Fields{"Status": Equal(store.RunSucceeded), "Result": Equal("found it after a pod died"),
			"Completion": Equal(store.CompletionDelivered)}))
	}, 3*time.Minute, 200*time.Millisecond).Should(Succeed())

	// Once: one continuation message and one reply in lead's chat, one
	// model call of lead on the result, one reply in the run's session.
	g.Consistently(func(g Gomega) {
		g.Expect(countMessages(g, db, ns, sid, "user", continuationPrefix+run.ID)).To(Equal(1))
		g.Expect(countMessages(g, db, ns, sid, "assistant", "Relayed: Result:\nfound it after a pod died")).To(Equal(1))
		g.Expect(requestsOf("lead", "found it after a pod died")).To(HaveLen(1))
	}, 5*time.Second, 500*time.Millisecond).Should(Succeed())
	g.Expect(countMessages(g, db, ns, "delegate:"+run.ID+":default", "assistant", "found it after a pod died")).To(Equal(1))
	runs, err := db.ListAgentRuns(ctx, store.AgentRunFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(1))
}
