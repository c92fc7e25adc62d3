package cron_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/cron"
	"github.com/picobot/picobot/test/controlplane"
)

const tenant = "team"

var (
	// 2030-03-04T12:00:00Z, a Monday.
	t0         = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)
	kube       client.Client
	kubeReason string
)

func TestMain(m *testing.M) {
	baseline := goleak.IgnoreCurrent()
	env, k, reason, err := controlplane.Connect()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kube, kubeReason = k, reason
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(append(controlplane.LeakIgnores(), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// agentTools builds the feature's tools for one agent as agenthost would.
type agentTools struct {
	reg     *tool.Registry
	store   *sqlite.Store
	clock   *clocktesting.FakeClock
	mu      sync.Mutex
	changed []string
}

func newTools(t *testing.T, kubeClient client.Client, ns string, manifest ...picobotv1alpha1.CronJob) *agentTools {
	t.Helper()
	return newToolsOn(t, &feature.Host{Mode: feature.ModeEmbedded, Tenant: ns, Kube: kubeClient}, manifest...)
}

// newToolsOn builds the tools on host (its Store is set here).
func newToolsOn(t *testing.T, host *feature.Host, manifest ...picobotv1alpha1.CronJob) *agentTools {
	t.Helper()
	ns := host.Tenant
	g := NewWithT(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	at := &agentTools{store: st, clock: clocktesting.NewFakeClock(t0)}
	f := cron.NewFeature(cron.Config{Clock: at.clock,
		Manifest: func(string) []picobotv1alpha1.CronJob { return manifest },
		Changed: func(_ context.Context, tenant, name string) {
			at.mu.Lock()
			defer at.mu.Unlock()
			at.changed = append(at.changed, tenant+"/"+name)
		},
		Agents: func(string) []string { return []string{"root", "ops"} }})
	host.Store = st
	parts, err := f.Build(context.Background(), &feature.Agent{Host: host,
		Spec: &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "assistant", Namespace: ns}}})
	g.Expect(err).NotTo(HaveOccurred())
	at.reg, err = tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	return at
}

// call runs a tool the way the agent loop does, from the chat telegram:42.
func (a *agentTools) call(t *testing.T, name, args string) tool.Result {
	t.Helper()
	ctx := store.WithTenant(context.Background(), tenant)
	return a.reg.Execute(ctx, tool.Env{SessionID: "telegram:42:default", Agent: "assistant"}, llm.ToolCall{ID: "c", Name: name, Arguments: args})
}

func (a *agentTools) ok(t *testing.T, name, args string) string {
	t.Helper()
	res := a.call(t, name, args)
	NewWithT(t).Expect(res.IsError).To(BeFalse(), res.Content)
	return res.Content
}

// jobOf decodes the job JSON on the line after a tool's sentence.
func jobOf(t *testing.T, content string) map[string]any {
	t.Helper()
	var m map[string]any
	_, body, _ := cutLine(content)
	NewWithT(t).Expect(json.Unmarshal([]byte(body), &m)).To(Succeed(), content)
	return m
}

func cutLine(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func TestToolNamesAreInTheCatalog(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t, nil, tenant)
	g.Expect(a.reg.Names()).To(Equal([]string{"cron_add", "cron_disable", "cron_enable", "cron_list", "cron_remove", "cron_runs", "cron_update"}))
	size := 0
	for _, d := range a.reg.Definitions() {
		size += len(d.Description) + len(d.Parameters)
	}
	g.Expect(size).To(BeNumerically("<", 5000), "what every request carries stays small")
}

func TestAddListUpdateRemoveEmbedded(t *testing.T) {
	g := NewWithT(t)
	manifest := picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "weekly-report", Namespace: tenant},
		Spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 8 * * MON"}, Prompt: "Write the weekly report"}}
	a := newTools(t, nil, tenant, manifest)

	out := a.ok(t, "cron_add", `{"name":"Daily digest","schedule":{"type":"cron","expr":"0 0 9 * * *","tz":"Asia/Shanghai"},
		"prompt":"Summarise yesterday's unread mail of alice@example.com","delivery_policy":"on_alert"}`)
	j := jobOf(t, out)
	id := j["job_id"].(string)
	g.Expect(id).To(MatchRegexp(`^daily-digest-[a-z2-7]{5}$`))
	g.Expect(out).To(HavePrefix(fmt.Sprintf("Created job %q. Next run: 2030-03-05T01:00:00Z.", id)))
	g.Expect(j["channel"]).To(Equal("telegram"), "the current chat is the default target")
	g.Expect(j["chat_id"]).To(Equal("42"))
	g.Expect(j["agent_id"]).To(BeNil(), "Root")
	g.Expect(j["created_by"]).To(Equal("assistant"))
	g.Expect(a.changed).To(Equal([]string{tenant + "/" + id}), "the scheduler is told")

	rec, err := a.store.GetCronJob(store.WithTenant(context.Background(), tenant), id)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rec.DisplayName).To(Equal("Daily digest"))

	list := a.ok(t, "cron_list", `{}`)
	g.Expect(list).To(ContainSubstring(`"job_id":"weekly-report"`))
	g.Expect(list).To(ContainSubstring(`"read_only":"defined in the manifests folder; change its file there"`))
	g.Expect(list).To(ContainSubstring(`"job_id":"` + id + `"`))

	// Changes: another agent, then back to Root with null.
	out = a.ok(t, "cron_update", fmt.Sprintf(`{"job_id":%q,"agent_id":"ops","prompt":"Summarise all unread mail"}`, id))
	g.Expect(jobOf(t, out)["agent_id"]).To(Equal("ops"))
	g.Expect(jobOf(t, out)["prompt"]).To(Equal("Summarise all unread mail"))
	out = a.ok(t, "cron_update", fmt.Sprintf(`{"job_id":%q,"agent_id":null}`, id))
	g.Expect(jobOf(t, out)["agent_id"]).To(BeNil())
	g.Expect(jobOf(t, out)["prompt"]).To(Equal("Summarise all unread mail"), "fields left out stay")

	out = a.ok(t, "cron_disable", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(out).To(HavePrefix(fmt.Sprintf("Job %q is disabled. It is disabled.", id)))
	g.Expect(a.ok(t, "cron_list", `{"status":"enabled"}`)).NotTo(ContainSubstring(id))
	g.Expect(a.ok(t, "cron_list", `{"status":"disabled"}`)).To(ContainSubstring(id))
	a.clock.Step(48 * time.Hour)
	out = a.ok(t, "cron_enable", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(out).To(ContainSubstring("Next run: 2030-03-07T01:00:00Z."), "recomputed from now")

	// Manifest jobs are read-only.
	for _, call := range []struct{ name, args string }{
		{"cron_update", `{"job_id":"weekly-report","prompt":"x"}`},
		{"cron_disable", `{"job_id":"weekly-report"}`},
		{"cron_remove", `{"job_id":"weekly-report"}`},
	} {
		res := a.call(t, call.name, call.args)
		g.Expect(res.IsError).To(BeTrue(), call.name)
		g.Expect(res.Content).To(ContainSubstring(`job "weekly-report" is defined in the manifests folder; change its file there and is read-only to agents`))
	}

	g.Expect(a.ok(t, "cron_remove", fmt.Sprintf(`{"job_id":%q}`, id))).To(ContainSubstring("Removed job"))
	res := a.call(t, "cron_remove", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(res.Content).To(Equal(fmt.Sprintf(`error: no job %q; cron_list shows the jobs`, id)))
}

func TestBadInputIsAToolError(t *testing.T) {
	a := newTools(t, nil, tenant)
	past := t0.Add(-time.Hour).UnixMilli()
	cases := []struct{ name, args, want string }{
		{"invalid cron", `{"schedule":{"type":"cron","expr":"0 0 25 * * *"},"prompt":"p"}`, `invalid cron "0 0 25 * * *"`},
		{"five fields", `{"schedule":{"type":"cron","expr":"0 9 * * *"},"prompt":"p"}`, "has 5 fields; want 6"},
		{"unknown tz", `{"schedule":{"type":"cron","expr":"0 0 9 * * *","tz":"Mars/Olympus"},"prompt":"p"}`, `unknown time zone "Mars/Olympus"`},
		{"never fires", `{"schedule":{"type":"cron","expr":"0 0 0 30 2 *"},"prompt":"p"}`, "never fires"},
		{"every below floor", `{"schedule":{"type":"every","every_ms":30000},"prompt":"p"}`, "every must be at least 60000 ms"},
		{"at in the past", fmt.Sprintf(`{"schedule":{"type":"at","at":%d},"prompt":"p"}`, past), "is in the past"},
		{"at in seconds", fmt.Sprintf(`{"schedule":{"type":"at","at":%d},"prompt":"p"}`, t0.Add(time.Hour).Unix()), "looks like seconds"},
		{"at with tz", fmt.Sprintf(`{"schedule":{"type":"at","at":%d,"tz":"UTC"},"prompt":"p"}`, t0.Add(time.Hour).UnixMilli()), "does not take expr or tz"},
		{"unknown type", `{"schedule":{"type":"daily"},"prompt":"p"}`, "invalid arguments for cron_add"},
		{"empty prompt", `{"schedule":{"type":"every","every_ms":60000},"prompt":" "}`, "prompt is empty"},
		{"unknown agent", `{"schedule":{"type":"every","every_ms":60000},"prompt":"p","agent_id":"ghost"}`, `no agent "ghost"; known agents: root, ops`},
		{"half a target", `{"schedule":{"type":"every","every_ms":60000},"prompt":"p","channel":"slack"}`, "give both channel and chat_id"},
		{"unknown policy", `{"schedule":{"type":"every","every_ms":60000},"prompt":"p","delivery_policy":"sometimes"}`, "invalid arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := a.call(t, "cron_add", tc.args)
			NewWithT(t).Expect(res.IsError).To(BeTrue())
			NewWithT(t).Expect(res.Content).To(ContainSubstring(tc.want))
		})
	}
	g := NewWithT(t)
	g.Expect(a.changed).To(BeEmpty(), "nothing was written")

	// An at in the past is refused on update and on enable too.
	out := a.ok(t, "cron_add", fmt.Sprintf(`{"schedule":{"type":"at","at":%d},"prompt":"Remind me of the dentist"}`, t0.Add(time.Hour).UnixMilli()))
	id := jobOf(t, out)["job_id"].(string)
	res := a.call(t, "cron_update", fmt.Sprintf(`{"job_id":%q,"schedule":{"type":"at","at":%d}}`, id, past))
	g.Expect(res.Content).To(ContainSubstring("is in the past"))
	a.ok(t, "cron_disable", fmt.Sprintf(`{"job_id":%q}`, id))
	a.clock.Step(2 * time.Hour)
	res = a.call(t, "cron_enable", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("is in the past"))
	g.Expect(res.Content).To(ContainSubstring("give the job a new schedule with cron_update first"))
	res = a.call(t, "cron_update", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(res.Content).To(ContainSubstring("nothing to change"))
	res = a.call(t, "cron_update", `{"job_id":"Not An ID!","prompt":"x"}`)
	g.Expect(res.Content).To(ContainSubstring(`job_id "Not An ID!" is not a job id`))
}

func TestRunsAndRemoveWhilePending(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t, nil, tenant)
	out := a.ok(t, "cron_add", `{"name":"disk","schedule":{"type":"every","every_ms":3600000},"prompt":"Check the disk","delivery_policy":"on_alert"}`)
	id := jobOf(t, out)["job_id"].(string)
	g.Expect(a.ok(t, "cron_runs", fmt.Sprintf(`{"job_id":%q}`, id))).To(Equal(fmt.Sprintf("Job %q has not run yet.", id)))

	ctx := store.WithTenant(context.Background(), tenant)
	key := scheduler.JobKey(tenant, id)
	started := t0
	_, err := a.store.ClaimCronRuns(ctx, []store.CronClaim{
		{Run: store.CronRun{Job: key, RunID: "r1", ScheduledTime: t0.Add(-time.Hour), State: store.CronDone, Outcome: store.OutcomeOK,
			Message: "42% used", FinishedAt: &started, Delivery: store.CronDeliverySuppressed, StartedAt: &started},
			Detail: store.CronRunDetail{Agent: "root", SessionID: "cron:team/x/r1:default", Channel: "telegram", ChatID: "42"}},
		{Run: store.CronRun{Job: key, RunID: "r2", ScheduledTime: t0, StartedAt: &started}, Detail: store.CronRunDetail{Agent: "root"}},
	})
	g.Expect(err).NotTo(HaveOccurred())

	var runs struct {
		JobID string           `json:"job_id"`
		Runs  []map[string]any `json:"runs"`
	}
	g.Expect(json.Unmarshal([]byte(a.ok(t, "cron_runs", fmt.Sprintf(`{"job_id":%q}`, id))), &runs)).To(Succeed())
	g.Expect(runs.Runs).To(HaveLen(2))
	g.Expect(runs.Runs[0]["run_id"]).To(Equal("r2"))
	g.Expect(runs.Runs[0]["state"]).To(Equal("running"))
	g.Expect(runs.Runs[1]["outcome"]).To(Equal("ok"))
	g.Expect(runs.Runs[1]["delivery"]).To(Equal(map[string]any{"status": "suppressed", "channel": "telegram", "chat_id": "42"}),
		"silent results are shown")
	one := a.ok(t, "cron_runs", fmt.Sprintf(`{"job_id":%q,"run_id":"r1"}`, id))
	g.Expect(one).To(ContainSubstring(`"message":"42% used"`))
	g.Expect(a.call(t, "cron_runs", fmt.Sprintf(`{"job_id":%q,"run_id":"r9"}`, id)).Content).To(ContainSubstring(`has no run "r9"`))
	g.Expect(a.call(t, "cron_runs", `{"job_id":"ghost"}`).Content).To(ContainSubstring(`no job "ghost"`))

	res := a.call(t, "cron_remove", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("run r2 of job"))
	g.Expect(res.Content).To(ContainSubstring("is still running"))

	done, alert, pending := store.CronDone, store.OutcomeAlert, store.CronDeliveryPending
	_, err = a.store.UpdateCronRunDetail(ctx, "r2", store.CronRunUpdate{State: &done, Outcome: &alert, Delivery: &pending}, store.CronRunDetailUpdate{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.call(t, "cron_remove", fmt.Sprintf(`{"job_id":%q}`, id)).Content).To(ContainSubstring("has a delivery pending"))

	delivered := store.CronDeliveryDelivered
	_, err = a.store.UpdateCronRunDetail(ctx, "r2", store.CronRunUpdate{Delivery: &delivered}, store.CronRunDetailUpdate{})
	g.Expect(err).NotTo(HaveOccurred())
	a.ok(t, "cron_remove", fmt.Sprintf(`{"job_id":%q}`, id))
	g.Expect(a.call(t, "cron_runs", fmt.Sprintf(`{"job_id":%q}`, id)).Content).To(ContainSubstring(`"run_id":"r2"`), "history stays")
}

func TestMaintenanceJobCannotBeRemoved(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t, nil, tenant)
	spec, err := json.Marshal(scheduler.MaintenanceSpec(""))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.store.CreateCronJob(store.WithTenant(context.Background(), tenant), store.CronJob{Name: scheduler.MaintenanceJobName, Spec: spec})
	g.Expect(err).NotTo(HaveOccurred())
	res := a.call(t, "cron_remove", `{"job_id":"routine-maintenance"}`)
	g.Expect(res.Content).To(ContainSubstring("disable it with cron_disable instead"))
	a.ok(t, "cron_disable", `{"job_id":"routine-maintenance"}`)
	out := a.ok(t, "cron_update", `{"job_id":"routine-maintenance","schedule":{"type":"cron","expr":"0 0 4 * * *"}}`)
	g.Expect(jobOf(t, out)["enabled"]).To(BeFalse())
}

// TestClusterModeMakesCronJobResources runs the tools against the real
// kube-apiserver: jobs are CronJob resources labelled agent-made, visible to
// kubectl; manifest CronJobs are read-only.
func TestClusterModeMakesCronJobResources(t *testing.T) {
	if kube == nil {
		t.Skip(kubeReason)
	}
	g := NewWithT(t)
	ctx := context.Background()
	ns := fmt.Sprintf("cron-tools-%d", time.Now().UnixNano()%1_000_000)
	g.Expect(kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(kube.Create(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "ops", Namespace: ns}})).To(Succeed())
	gitops := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "from-git", Namespace: ns},
		Spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 8 * * *"}, Prompt: "Report"}}
	g.Expect(kube.Create(ctx, gitops)).To(Succeed())
	a := newTools(t, kube, ns)
	call := func(name, args string) tool.Result {
		return a.reg.Execute(store.WithTenant(ctx, ns), tool.Env{SessionID: "slack:C42:default", Agent: "assistant"},
			llm.ToolCall{Name: name, Arguments: args})
	}

	res := call("cron_add", `{"name":"Nightly backup check","schedule":{"type":"cron","expr":"0 30 2 * * *","tz":"Europe/Berlin"},
		"prompt":"Verify last night's backup of db-1","agent_id":"ops","missed_run_policy":"catch_up"}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	id := jobOf(t, res.Content)["job_id"].(string)

	cj := &picobotv1alpha1.CronJob{}
	g.Expect(kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, cj)).To(Succeed())
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgentMade, "true"))
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "assistant"))
	g.Expect(cj.Annotations).To(HaveKeyWithValue(scheduler.AnnotationDisplayName, "Nightly backup check"))
	g.Expect(cj.Annotations).To(HaveKey(scheduler.AnnotationNotBefore))
	g.Expect(cj.Spec.Schedule).To(Equal(picobotv1alpha1.Schedule{Cron: "0 30 2 * * *", TZ: "Europe/Berlin"}))
	g.Expect(cj.Spec.AgentRef.Name).To(Equal("ops"))
	g.Expect(cj.Spec.Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "slack", ChatID: "C42"}))
	g.Expect(cj.Spec.MissedRunPolicy).To(Equal(picobotv1alpha1.MissedCatchUp))

	res = call("cron_add", `{"schedule":{"type":"every","every_ms":60000},"prompt":"p","agent_id":"ghost"}`)
	g.Expect(res.Content).To(ContainSubstring(`no agent "ghost"; known agents: ops`))

	res = call("cron_update", fmt.Sprintf(`{"job_id":%q,"agent_id":null,"delivery_policy":"never"}`, id))
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, cj)).To(Succeed())
	g.Expect(cj.Spec.AgentRef).To(BeNil(), "back to Root")
	g.Expect(cj.Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryNever))

	g.Expect(call("cron_disable", fmt.Sprintf(`{"job_id":%q}`, id)).IsError).To(BeFalse())
	g.Expect(kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, cj)).To(Succeed())
	g.Expect(cj.Spec.Suspend).To(HaveValue(BeTrue()))
	g.Expect(call("cron_enable", fmt.Sprintf(`{"job_id":%q}`, id)).IsError).To(BeFalse())
	g.Expect(kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, cj)).To(Succeed())
	g.Expect(cj.Spec.Suspend).To(BeNil())

	list := call("cron_list", `{}`).Content
	g.Expect(list).To(ContainSubstring(`"job_id":"from-git"`))
	g.Expect(list).To(ContainSubstring(`"read_only":"defined by a CronJob manifest (kubectl or GitOps); change it there"`))
	res = call("cron_update", `{"job_id":"from-git","prompt":"changed"}`)
	g.Expect(res.Content).To(ContainSubstring("is defined by a CronJob manifest"))
	g.Expect(kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "from-git"}, cj)).To(Succeed())
	g.Expect(cj.Spec.Prompt).To(Equal("Report"), "untouched")

	g.Expect(call("cron_remove", fmt.Sprintf(`{"job_id":%q}`, id)).IsError).To(BeFalse())
	err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, cj)
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	g.Expect(err).To(HaveOccurred())
}

// TestAddRefusedAtTheTenantsCap: with the tenant's maxCronJobs reached
// (every job counts but the routine-maintenance one, as the operator
// counts them), cron_add is refused with a tool error saying so, and
// accepted again once a job is removed; in embedded mode (the store) and in
// cluster mode (CronJob resources on the real API server, a GitOps job
// counted).
func TestAddRefusedAtTheTenantsCap(t *testing.T) {
	g := NewWithT(t)
	capAt := func(n int32) func(context.Context, string) (int32, bool) {
		return func(context.Context, string) (int32, bool) { return n, true }
	}
	a := newToolsOn(t, &feature.Host{Mode: feature.ModeEmbedded, Tenant: tenant, MaxCronJobs: capAt(2)})
	spec, err := json.Marshal(scheduler.MaintenanceSpec(""))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.store.CreateCronJob(store.WithTenant(context.Background(), tenant), store.CronJob{Name: scheduler.MaintenanceJobName, Spec: spec})
	g.Expect(err).NotTo(HaveOccurred())
	add := `{"schedule":{"type":"every","every_ms":3600000},"prompt":"Check the queue"}`
	first := jobOf(t, a.ok(t, "cron_add", add))["job_id"].(string)
	a.ok(t, "cron_add", add)
	res := a.call(t, "cron_add", add)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(Equal("error: this workspace has 2 scheduled jobs, the most its quota allows (maxCronJobs 2); remove one with cron_remove, or ask the platform team to raise the cap"))
	a.ok(t, "cron_remove", fmt.Sprintf(`{"job_id":%q}`, first))
	a.ok(t, "cron_add", add)

	uncapped := newToolsOn(t, &feature.Host{Mode: feature.ModeEmbedded, Tenant: tenant,
		MaxCronJobs: func(context.Context, string) (int32, bool) { return 0, false }})
	for range 3 {
		uncapped.ok(t, "cron_add", add)
	}

	if kube == nil {
		t.Skip(kubeReason)
	}
	ctx := context.Background()
	ns := fmt.Sprintf("cron-cap-%d", time.Now().UnixNano()%1_000_000)
	g.Expect(kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(kube.Create(ctx, &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "from-git", Namespace: ns},
		Spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 8 * * *"}, Prompt: "Report"}})).To(Succeed())
	c := newToolsOn(t, &feature.Host{Mode: feature.ModeEmbedded, Tenant: ns, Kube: kube, MaxCronJobs: capAt(1)})
	res = c.reg.Execute(store.WithTenant(ctx, ns), tool.Env{SessionID: "slack:C42:default", Agent: "assistant"},
		llm.ToolCall{Name: "cron_add", Arguments: add})
	g.Expect(res.Content).To(ContainSubstring("this workspace has 1 scheduled jobs, the most its quota allows (maxCronJobs 1)"))
	var list picobotv1alpha1.CronJobList
	g.Expect(kube.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "no CronJob made past the cap")
}
