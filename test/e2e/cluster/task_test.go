package cluster

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

var taskIDRE = regexp.MustCompile(`"id":"(t-[0-9a-f]+)"`)

// TestTaskRunsInClusterMode: an agent in a session pod queues a task with
// bot_task; its job is an agent-made CronJob, which the operator's
// scheduler fires as a run in a session pod; bot_task list then shows the
// task succeeded with the run's conclusion.
func TestTaskRunsInClusterMode(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-task", "tenant-task-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if last.Role != "user" {
			// Echo the tool result, so the chat's final text shows it.
			var out []string
			for _, tr := range last.ToolResults {
				out = append(out, tr.Content)
			}
			return fakellm.Turn{Text: "tool said: " + strings.Join(out, "\n")}
		}
		switch u := lastUser(r); {
		case strings.Contains(u, "queue the backup audit"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "bot_task", Args: `{"action":"add","title":"Audit the backups"}`}}}
		case strings.Contains(u, "from your task queue"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c2", Name: "complete_scheduled_run",
				Args: `{"outcome":"ok","message":"all backups present"}`}}}
		case strings.Contains(u, "how are my tasks"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c3", Name: "bot_task", Args: `{"action":"list"}`}}}
		}
		return fakellm.Turn{Text: "done"}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0))
	st.waitReady(t, ns, "helper")

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	send := func(id, text string) string {
		frames := ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": "ops", "text": text})
		ev := gatewaytest.Event(frames, "final")
		if ev == nil {
			t.Fatalf("no final event in %v", frames)
		}
		return ev["text"].(string)
	}

	added := send("m1", "queue the backup audit")
	g.Expect(added).To(ContainSubstring("Added task"))
	m := taskIDRE.FindStringSubmatch(added)
	g.Expect(m).NotTo(BeNil(), added)
	job := "task-" + m[1]

	cj := &picobotv1alpha1.CronJob{}
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: job}, cj)).To(Succeed())
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgentMade, "true"))
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "helper"))
	g.Expect(cj.Spec.Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "web", ChatID: "helper/ops"}))

	// Without a due time the task runs at once.
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: job}, cj)).To(Succeed())
		g.Expect(cj.Status.LastRun).NotTo(BeNil())
		g.Expect(string(cj.Status.LastRun.Outcome)).To(Equal("ok"))
	}, 120*time.Second, 250*time.Millisecond).Should(Succeed())

	listed := send("m2", "how are my tasks")
	g.Expect(listed).To(ContainSubstring(`"state":"succeeded"`))
	g.Expect(listed).To(ContainSubstring(`"result":"all backups present"`))
}
