package cluster

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
)

// TestClusterRunWatchWakesARunNoPodServes is the positive proof that the
// gateway's RunWatch, on PostgreSQL, wakes a runtime for a background run
// whose chat has no pod: the run is recorded in agent_runs as a delegating
// pod records it, and that pod "dies" before queuing its task or waking
// anyone (the test writes the record and nothing else). No pod ever served
// the run's chat, so the operator has no dead pod's chat to re-wake and
// nobody waits for the run: only RunWatch knows of it. It queues the task
// again (its gateway log says so for this run), wakes researcher, whose pod
// runs it and records it once; lead's chat gets the continuation once and
// the completion is delivered.
func TestClusterRunWatchWakesARunNoPodServes(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-runwatch"
	db, ctx := tenantStore(t, ns)
	c := delegateTenant(t, ns, 1, 1, "2m", func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher":
			return fakellm.Turn{Text: "found by the watch"}
		case strings.HasPrefix(user, continuationPrefix):
			return fakellm.Turn{Text: "Relayed: " + user[strings.Index(user, "Result:"):]}
		}
		return fakellm.Turn{Text: "hello"}
	})
	_, sid := sendLead(t, c, "w0", "watch", "hi")

	id := store.NewID()
	_, err := db.CreateAgentRun(ctx, store.AgentRun{ID: id, Agent: "researcher", SessionID: sid, ParentAgent: "lead",
		Mode: store.RunBackground, Status: store.RunRunning, Completion: store.CompletionReserved,
		Input: `{"mode":"background","parent_agent":"lead","target":"researcher","task":"find it for the watch","tools":["calculator"],"depth":1}`})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		r, err := db.GetAgentRun(ctx, id)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r).To(MatchFields(IgnoreExtras, Fields{"Status": Equal(store.RunSucceeded), "Result": Equal("found by the watch"),
			"Completion": Equal(store.CompletionDelivered)}))
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Expect(requeued(id)).To(BeTrue(), "the gateway's RunWatch queued the run's task")
	g.Consistently(func(g Gomega) {
		g.Expect(countMessages(g, db, ns, sid, "user", continuationPrefix+id)).To(Equal(1))
		g.Expect(countMessages(g, db, ns, sid, "assistant", "Relayed: Result:\nfound by the watch")).To(Equal(1))
		g.Expect(turnCalls("researcher", "[Task delegated by agent lead]\n\nfind it for the watch")).To(Equal(1))
	}, 5*time.Second, 500*time.Millisecond).Should(Succeed())
}

// requeued reports whether the gateway's log has RunWatch queuing run id's
// task again.
func requeued(id string) bool {
	for _, line := range strings.Split(readFile(st.gatewayLog), "\n") {
		if strings.Contains(line, "Queuing a background run's task again") && strings.Contains(line, id) {
			return true
		}
	}
	return false
}
