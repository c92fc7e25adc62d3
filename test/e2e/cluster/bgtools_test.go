package cluster

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// TestClusterBackgroundToolsOnPods: the tools around background runs in
// session pods. sessions_spawn returns accepted at once; the run (on a
// researcher pod) sends a queue signal with emit_signal, which joins lead's
// next turn (the announce step), and with cleanup delete its session is
// deleted once it has ended. agent_task lists lead's runs and cancels a
// background run that researcher's pod is working on: the run ends
// cancelled, the pod's turn is stopped, and no continuation comes.
func TestClusterBackgroundToolsOnPods(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns := "tenant-bg-tools"
	db, ctx := tenantStore(t, ns)
	manifest := strings.Replace(delegateManifestFor(ns, 1, 1, "2m", "", ""), "tools: {allow: [calculator, todo]}",
		"tools: {allow: [calculator, todo, sessions_spawn]}", 1)
	var cancelID string
	c := observedDelegateTenant(t, ns, manifest, func(agent, user string, r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case agent == "researcher" && strings.Contains(user, "spawned task") && last.Role == "user":
			// Its answer after the signal is "Done: " and emit_signal's result.
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "s1", Name: delegate.SignalName, Args: `{"message":"halfway there","delivery":"queue"}`}}}
		case agent == "researcher":
			return fakellm.Turn{Text: "never", Delay: time.Hour}
		case strings.Contains(user, continuationPrefix):
			return fakellm.Turn{Text: "ANNOUNCED"}
		case strings.Contains(user, "SPAWN"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "p1", Name: delegate.SpawnName,
				Args: `{"task":"spawned task","label":"the spawn","agentId":"researcher","cleanup":"delete"}`}}}
		case strings.Contains(user, "LONG"):
			return delegateCall(`{"target":"researcher","task":"a long one","mode":"background"}`)
		case strings.Contains(user, "LIST"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "t1", Name: delegate.TaskName, Args: `{"action":"list"}`}}}
		default: // CANCEL
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "t2", Name: delegate.TaskName, Args: `{"action":"cancel","run_id":"` + cancelID + `"}`}}}
		}
	}, func() {})

	answer, sid := sendLead(t, c, "s1", "tools", "SPAWN it")
	var spawned delegate.Spawned
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(answer, "Done: ")), &spawned)).To(Succeed(), answer)
	g.Expect(spawned).To(MatchFields(IgnoreExtras, Fields{"Status": Equal("accepted"), "AgentID": Equal("researcher"), "Label": Equal("the spawn")}))
	g.Eventually(func(g Gomega) {
		r, err := db.GetAgentRun(ctx, spawned.RunID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r).To(MatchFields(IgnoreExtras, Fields{"Status": Equal(store.RunSucceeded), "Result": HavePrefix("Done: "),
			"Completion": Equal(store.CompletionDelivered)}))
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	announce := requestsOf("lead", continuationPrefix+spawned.RunID)
	g.Expect(announce).To(HaveLen(1), "one announce step")
	g.Expect(string(announce[0].Body)).To(ContainSubstring("halfway there"), "the queue signal joins lead's next turn")
	g.Expect(string(announce[0].Body)).To(ContainSubstring("ANNOUNCE_SKIP"))
	child, err := db.GetSession(ctx, spawned.ChildSessionKey)
	if !errors.Is(err, store.ErrNotFound) {
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(child.DeletedAt).NotTo(BeNil(), "cleanup delete")
	}

	answer, _ = sendLead(t, c, "s2", "tools", "LONG one")
	long := decodeResult(g, answer)
	g.Expect(long.Status).To(Equal("running"))
	g.Eventually(func() string { return st.busyPod(ns, "researcher", long.RunID) }, time.Minute, 100*time.Millisecond).ShouldNot(BeEmpty())
	answer, _ = sendLead(t, c, "s3", "tools", "LIST runs")
	g.Expect(answer).To(ContainSubstring(long.RunID))
	g.Expect(answer).To(ContainSubstring(spawned.RunID))
	cancelID = long.RunID
	answer, _ = sendLead(t, c, "s4", "tools", "CANCEL it")
	g.Expect(answer).To(ContainSubstring(`"status": "cancelled"`))
	g.Expect(answer).To(ContainSubstring(`"stopped_here": true`), "the stop reached the pod serving the run")
	g.Eventually(func() string { return st.busyPod(ns, "researcher", long.RunID) }, time.Minute, 200*time.Millisecond).Should(BeEmpty(),
		"the run's pod stopped its turn and exited")
	r, err := db.GetAgentRun(ctx, long.RunID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r).To(MatchFields(IgnoreExtras, Fields{"Status": Equal(store.RunCancelled), "Completion": Equal(store.CompletionClosed)}))
	g.Consistently(func() int {
		return countMessages(g, db, ns, sid, "user", continuationPrefix+long.RunID)
	}, 5*time.Second, 500*time.Millisecond).Should(BeZero(), "no continuation of a cancelled run")
}
