package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestScheduledRunInASessionPod fires a CronJob in cluster mode: the
// operator's scheduler wakes a session pod with the run, the pod runs it in
// a fresh session (the model reports with complete_scheduled_run), the
// outcome is published on the CronJob and delivered by policy through the
// gateway's dispatcher into the target chat.
func TestScheduledRunInASessionPod(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-cron", "tenant-cron-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if strings.Contains(lastUser(r), "check the backups") && r.Messages[len(r.Messages)-1].Role == "user" {
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "complete_scheduled_run",
				Args: `{"outcome":"alert","message":"backup of tuesday is missing"}`}}}
		}
		return fakellm.Turn{Text: "done"}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0))
	st.waitReady(t, ns, "helper")
	at := time.Now().Add(8 * time.Second).UnixMilli()
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: backups, namespace: %s}
spec:
  schedule: {at: %d}
  prompt: check the backups and report
  agentRef: {name: helper}
  target: {channel: web, chatID: helper/ops}
  deliveryPolicy: on_alert
`, ns, at))
	job := &picobotv1alpha1.CronJob{}
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "backups"}, job)).To(Succeed())
		g.Expect(job.Status.LastRun).NotTo(BeNil())
		g.Expect(string(job.Status.LastRun.Outcome)).To(Equal("alert"))
	}, 120*time.Second, 250*time.Millisecond).Should(Succeed())

	// on_alert: the outcome was delivered into the target chat.
	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	g.Eventually(func() string {
		_, body := c.Do(t, "GET", "/api/v1/sessions/web:helper%2Fops:default/messages", nil)
		return fmt.Sprint(body["messages"])
	}, 60*time.Second, 250*time.Millisecond).Should(ContainSubstring("backup of tuesday is missing"))
}
