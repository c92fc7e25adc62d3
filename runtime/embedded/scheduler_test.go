package embedded_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/tracing/otlp"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
)

const scheduledManifests = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: root
spec:
  instructions: You are the household assistant.
  model:
    provider: openai
    model: test-model
    baseURL: %s
---
apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata:
  name: disk-check
spec:
  schedule:
    cron: "0 * * * * *"
  prompt: MANIFEST JOB. Check the disk of the NAS and alert above 90%%.
  deliveryPolicy: on_alert
  target:
    channel: telegram
    chatID: "1001"
`

// scheduledLLM answers like a model that follows the scheduled-run
// instructions: the chat asks for a job (cron_add), and each run ends with
// complete_scheduled_run.
func scheduledLLM(req fakellm.Recorded) fakellm.Turn {
	last := req.Messages[len(req.Messages)-1]
	var user string
	for _, m := range req.Messages {
		if m.Role == "user" && len(m.ToolResults) == 0 {
			user = m.Content
		}
	}
	switch {
	case len(last.ToolResults) > 0 || last.Role == "tool":
		return fakellm.Turn{Text: "Done."}
	case strings.Contains(user, "MANIFEST JOB"):
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "complete_scheduled_run",
			Args: `{"outcome":"alert","message":"The NAS disk is 94% full."}`}}}
	case strings.Contains(user, "TOOL JOB"):
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "complete_scheduled_run",
			Args: `{"outcome":"ok","message":"Watered: all plants are fine."}`}}}
	case strings.Contains(user, "[Scheduled run"):
		// The maintenance job, or anything else: no structured outcome.
		return fakellm.Turn{Text: "I think everything is fine."}
	default: // the chat: schedule a job
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "cron_add",
			Args: `{"name":"Plants","schedule":{"type":"cron","expr":"0 * * * * *"},"prompt":"TOOL JOB. Check the plant sensors."}`}}}
	}
}

// TestScheduledRunsInEmbeddedMode runs the real embedded Runtime with the
// fake LLM and a fake clock: an agent schedules a job through a chat turn
// (cron_add), and when the minute comes both that job and the manifests
// folder's CronJob fire; each run is a fresh session that ends with
// complete_scheduled_run, and delivery follows each job's policy.
func TestScheduledRunsInEmbeddedMode(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.Respond(scheduledLLM)
	dir, now := t.TempDir(), time.Now().UTC()
	rt, clk, del := openScheduled(t, dir, fmt.Sprintf(scheduledManifests, llm.URL()), now)
	g.Expect(rt.Agents()[0].Tools).To(ContainElements("cron_add", "cron_list", "cron_runs", "cron_update", "cron_remove",
		"cron_enable", "cron_disable"))
	g.Expect(rt.Agents()[0].Tools).NotTo(ContainElement("complete_scheduled_run"), "only runs get it")

	out, err := rt.Handle(store.WithTenant(context.Background(), manifest.DefaultNamespace), gateway.Send{ID: "m1", Agent: "root", ChatID: "kitchen", Text: "Check my plants every minute"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(Equal("Done."))

	clk.SetTime(now.Truncate(time.Minute).Add(time.Minute))
	tick := now.Truncate(time.Minute).Add(time.Minute)
	g.Eventually(del.Notices).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(HaveLen(2))
	byJob := map[string]scheduler.Notice{}
	for _, n := range del.Notices() {
		byJob[strings.SplitN(n.Job, "/", 2)[1]] = n
	}
	g.Expect(byJob["disk-check"].Outcome).To(Equal(store.OutcomeAlert), "on_alert delivers an alert")
	g.Expect(byJob["disk-check"].Channel).To(Equal("telegram"))
	g.Expect(byJob["disk-check"].Text).To(Equal("disk-check (alert): The NAS disk is 94% full."))
	var plants scheduler.Notice
	for name, n := range byJob {
		if strings.HasPrefix(name, "plants-") {
			plants = n
		}
	}
	g.Expect(plants.Outcome).To(Equal(store.OutcomeOK), "always delivers ok too")
	g.Expect(plants.Channel).To(Equal("web"), "the chat that asked is the default target")
	g.Expect(plants.Text).To(Equal("Plants (ok): Watered: all plants are fine."))

	// Each run was a fresh session: one user message, the job's prompt.
	for _, req := range llm.Requests() {
		if len(req.Messages) > 1 && strings.Contains(req.Messages[1].Content, "MANIFEST JOB") {
			g.Expect(req.Tools).NotTo(ContainElement("send_message"))
			g.Expect(req.Tools).To(ContainElement("complete_scheduled_run"))
		}
	}
	rt.Close()

	// The records: the maintenance job exists and both runs are done.
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, ".picobot", sqlite.FileName))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	ctx := store.WithTenant(context.Background(), manifest.DefaultNamespace)
	m, err := st.GetCronJob(ctx, scheduler.MaintenanceJobName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(m.Spec)).To(ContainSubstring("routine_maintenance"))
	runs, err := st.ListDetailedCronRuns(ctx, scheduler.JobKey(manifest.DefaultNamespace, "disk-check"), 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveLen(1))
	g.Expect(runs[0].ScheduledTime).To(Equal(tick))
	g.Expect(runs[0].Delivery).To(Equal(store.CronDeliveryDelivered))
	g.Expect(runs[0].Detail.SessionID).To(HavePrefix("cron:default/disk-check/"))
	msgs, err := st.LoadMessages(ctx, runs[0].Detail.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs[0].Content).To(ContainSubstring("MANIFEST JOB"))
}

// TestSchedulerOffMeansNoCronTools: without SchedulerOptions nothing fires
// and agents do not get the cron tools.
func TestSchedulerOffMeansNoCronTools(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, scheduledManifests, llm.URL()), 0o600)).To(Succeed())
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Env: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	defer rt.Close()
	g.Expect(rt.Agents()[0].Tools).NotTo(ContainElement("cron_add"))
}

// TestMaintenanceJobSurvivesRestart: a user's change to the maintenance job
// is kept when the runtime starts again.
func TestMaintenanceJobSurvivesRestart(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, scheduledManifests, llm.URL()), 0o600)).To(Succeed())
	open := func() *embedded.Runtime {
		rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Env: func(string) string { return "" },
			Scheduler: &embedded.SchedulerOptions{Clock: clocktesting.NewFakeClock(time.Now())}})
		g.Expect(err).NotTo(HaveOccurred())
		return rt
	}
	open().Close()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, ".picobot", sqlite.FileName))
	g.Expect(err).NotTo(HaveOccurred())
	ctx := store.WithTenant(context.Background(), manifest.DefaultNamespace)
	disabled := `{"schedule":{"cron":"0 0 5 * * *"},"prompt":"My own maintenance","suspend":true}`
	_, err = st.UpdateCronJob(ctx, scheduler.MaintenanceJobName, store.CronJobUpdate{Spec: []byte(disabled)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Close()).To(Succeed())

	open().Close()
	st, err = sqlite.Open(context.Background(), filepath.Join(dir, ".picobot", sqlite.FileName))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	m, err := st.GetCronJob(ctx, scheduler.MaintenanceJobName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Spec).To(MatchJSON(disabled))
	g.Expect(m.Version).To(Equal(int64(2)))
}

// TestJobsNamingNoAgentRunOnTheRootAgent: a CronJob without agentRef runs
// on the folder's root agent, by the rule of agentspec.RootAgent — the only
// Agent (make run's "assistant"), or the one with spec.role: root among
// several — and never needs an agent named "root".
func TestJobsNamingNoAgentRunOnTheRootAgent(t *testing.T) {
	const agentDoc = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: %s
spec:
  %s
  instructions: You are %s.
  model: {provider: openai, model: test-model, baseURL: %s}
`
	const job = `apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata:
  name: report
spec:
  schedule: {cron: "0 * * * * *"}
  prompt: MANIFEST JOB. Report.
  deliveryPolicy: always
  target: {channel: telegram, chatID: "1001"}
`
	cases := []struct {
		name   string
		agents [][2]string // name, role line
		root   string
	}{
		{name: "the only agent", agents: [][2]string{{"assistant", ""}}, root: "assistant"},
		{name: "the agent with role root", agents: [][2]string{{"helper", ""}, {"assistant", "role: root"}, {"other", "role: named"}}, root: "assistant"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			llm := fakellm.New()
			t.Cleanup(llm.Close)
			llm.Respond(scheduledLLM)
			docs := []string{job}
			for _, a := range tc.agents {
				docs = append(docs, fmt.Sprintf(agentDoc, a[0], a[1], a[0], llm.URL()))
			}
			now := time.Now().UTC()
			_, clk, del := openScheduled(t, t.TempDir(), strings.Join(docs, "---\n"), now)

			clk.SetTime(now.Truncate(time.Minute).Add(time.Minute))
			g.Eventually(del.Notices).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(HaveLen(1))
			g.Expect(del.Notices()[0].Text).To(Equal("report (alert): The NAS disk is 94% full."), "the run reached the model and completed")
			var systems []string
			for _, req := range llm.Requests() {
				systems = append(systems, req.Messages[0].Content)
			}
			g.Expect(systems).NotTo(BeEmpty())
			g.Expect(systems).To(HaveEach(HavePrefix("You are "+tc.root+".")), "every model call of the run was the root agent's")
		})
	}
}

// openScheduled opens the embedded runtime on manifests written into dir,
// with its scheduler on a fake clock set to now, delivering to the
// returned Deliverer.
func openScheduled(t *testing.T, dir, manifests string, now time.Time) (*embedded.Runtime, *clocktesting.FakeClock, *schedulertest.Deliverer) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(now)
	del := &schedulertest.Deliverer{}
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Env: func(string) string { return "" },
		Scheduler: &embedded.SchedulerOptions{Clock: clk, Deliverer: del}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt, clk, del
}

// TestFireLinksToTheTurnThatMadeTheJob: a job an agent makes with cron_add
// in a traced turn keeps that tool call's trace context in its store record,
// and each fire (a trace of its own, exported to a real OTLP receiver)
// carries a span link to the tool call.
func TestFireLinksToTheTurnThatMadeTheJob(t *testing.T) {
	g := NewWithT(t)
	rcv := tracingtest.Start(t)
	tp, err := otlp.NewProvider(context.Background(), otlp.Config{Endpoint: rcv.HTTPEndpoint, Getenv: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.Respond(scheduledLLM)
	dir, now := t.TempDir(), time.Now().UTC()
	if err := os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(strings.SplitN(fmt.Sprintf(scheduledManifests, llm.URL()), "---", 2)[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(now)
	del := &schedulertest.Deliverer{}
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, Env: func(string) string { return "" }, TracerProvider: tp,
		Scheduler: &embedded.SchedulerOptions{Clock: clk, Deliverer: del}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)

	out, err := rt.Handle(store.WithTenant(context.Background(), manifest.DefaultNamespace),
		gateway.Send{ID: "m1", Agent: "root", ChatID: "kitchen", Text: "Check my plants every minute"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(Equal("Done."))
	var tool tracingtest.Span
	g.Eventually(func() error {
		g.Expect(tp.ForceFlush(context.Background())).To(Succeed())
		tool, err = tracingtest.Find(rcv.Spans(), tracing.SpanTool)
		return err
	}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	g.Expect(tool.Attrs).To(HaveKeyWithValue("gen_ai.tool.name", "cron_add"))

	clk.SetTime(now.Truncate(time.Minute).Add(time.Minute))
	g.Eventually(del.Notices).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).ShouldNot(BeEmpty())
	var fire tracingtest.Span
	g.Eventually(func() error {
		g.Expect(tp.ForceFlush(context.Background())).To(Succeed())
		fire, err = tracingtest.Find(rcv.Spans(), tracing.SpanCronFire)
		return err
	}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	g.Expect(fire.Attrs["picobot.cronjob"]).To(HavePrefix("plants-"))
	g.Expect(fire.ParentID).To(BeEmpty(), "a fire is a trace of its own")
	g.Expect(fire.TraceID).NotTo(Equal(tool.TraceID))
	g.Expect(fire.Links).To(Equal([]string{tool.TraceID + "/" + tool.SpanID}), "linked to the cron_add call of the turn")
}
