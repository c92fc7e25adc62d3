package bottask_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/bottask"
)

// clusterTools builds the tools as a session pod does: Host.Kube set, the
// tenant a namespace, the store PostgreSQL as the application role.
type clusterTools struct {
	reg   *tool.Registry
	store *postgres.Store
	ns    string
}

func newClusterTools(t *testing.T, now time.Time) *clusterTools {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED LOUDLY: " + skipReason)
	}
	g := NewWithT(t)
	ns := fmt.Sprintf("bottask-%d", time.Now().UnixNano()%1_000_000_000)
	g.Expect(kube.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	c := &clusterTools{store: schedulertest.Open(t, pg.NewDatabase(t)), ns: ns}
	host := &feature.Host{Mode: feature.ModeCluster, Tenant: ns, Store: c.store, Kube: kube}
	parts, err := bottask.NewFeature(bottask.Config{Clock: clocktesting.NewFakeClock(now)}).Build(context.Background(),
		&feature.Agent{Host: host, Spec: &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "assistant", Namespace: ns}}})
	g.Expect(err).NotTo(HaveOccurred())
	c.reg, err = tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

func (c *clusterTools) ctx() context.Context { return store.WithTenant(context.Background(), c.ns) }

// ok runs a call from the chat slack:C42 that must succeed and returns the
// JSON after its sentence.
func (c *clusterTools) ok(t *testing.T, name, args string) map[string]any {
	t.Helper()
	res := c.reg.Execute(c.ctx(), tool.Env{SessionID: "slack:C42:default", Agent: "assistant"},
		llm.ToolCall{ID: "c", Name: name, Arguments: args})
	NewWithT(t).Expect(res.IsError).To(BeFalse(), res.Content)
	body := res.Content
	if !strings.HasPrefix(body, "{") {
		_, body, _ = strings.Cut(body, "\n")
	}
	var m map[string]any
	NewWithT(t).Expect(json.Unmarshal([]byte(body), &m)).To(Succeed(), res.Content)
	return m
}

func (c *clusterTools) cronJob(t *testing.T, name string) *picobotv1alpha1.CronJob {
	t.Helper()
	cj := &picobotv1alpha1.CronJob{}
	NewWithT(t).Expect(kube.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, cj)).To(Succeed())
	return cj
}

func (c *clusterTools) gone(t *testing.T, name string) {
	t.Helper()
	err := kube.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, &picobotv1alpha1.CronJob{})
	NewWithT(t).Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CronJob %s/%s: %v", c.ns, name, err)
}

// TestClusterModeTaskIsACronJob runs bot_task against the real API server
// and PostgreSQL: a task's job is an agent-made CronJob the operator fires,
// update changes it, the task's state follows the run records the
// operator's scheduler writes under the CronJob's name, and cancel deletes
// the CronJob.
func TestClusterModeTaskIsACronJob(t *testing.T) {
	g := NewWithT(t)
	now := time.Now().UTC().Truncate(time.Second)
	c := newClusterTools(t, now)

	due := now.Add(time.Hour)
	added := c.ok(t, "bot_task", fmt.Sprintf(`{"action":"add","title":"Audit the backups","note":"all three servers","due_at":%q}`,
		due.Format(time.RFC3339)))
	g.Expect(added).To(HaveKeyWithValue("state", "queued"))
	id := added["id"].(string)
	job := "task-" + id

	cj := c.cronJob(t, job)
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgentMade, "true"))
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "assistant"))
	g.Expect(cj.Annotations).To(HaveKeyWithValue(scheduler.AnnotationDisplayName, "Audit the backups"))
	g.Expect(cj.Annotations).To(HaveKeyWithValue(scheduler.AnnotationNotBefore, now.Format(time.RFC3339)))
	g.Expect(cj.Spec.Schedule.At).To(HaveValue(Equal(due.UnixMilli())))
	g.Expect(cj.Spec.Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "slack", ChatID: "C42"}))
	g.Expect(cj.Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryAlways))
	g.Expect(cj.Spec.AgentRef.Name).To(Equal("assistant"))
	g.Expect(cj.Spec.Prompt).To(ContainSubstring("all three servers"))
	_, err := c.store.GetCronJob(c.ctx(), job)
	g.Expect(err).To(MatchError(store.ErrNotFound), "cluster mode keeps no job records in the store")

	// A new due time and note change the CronJob.
	due = now.Add(2 * time.Hour)
	c.ok(t, "bot_task", fmt.Sprintf(`{"action":"update","id":%q,"note":"both NAS","due_at":%q}`, id, due.Format(time.RFC3339)))
	cj = c.cronJob(t, job)
	g.Expect(cj.Spec.Schedule.At).To(HaveValue(Equal(due.UnixMilli())))
	g.Expect(cj.Spec.Prompt).To(ContainSubstring("both NAS"))
	g.Expect(cj.Spec.Prompt).NotTo(ContainSubstring("all three servers"))
	// A title alone keeps the schedule and renames the job.
	c.ok(t, "bot_task", fmt.Sprintf(`{"action":"update","id":%q,"title":"Audit the NAS backups"}`, id))
	cj = c.cronJob(t, job)
	g.Expect(cj.Spec.Schedule.At).To(HaveValue(Equal(due.UnixMilli())))
	g.Expect(cj.Annotations).To(HaveKeyWithValue(scheduler.AnnotationDisplayName, "Audit the NAS backups"))

	// The operator's scheduler claims the tick under the CronJob's name in
	// the tenant, then records the outcome.
	runID := job + "-run"
	won, err := c.store.ClaimCronRuns(c.ctx(), []store.CronClaim{{Run: store.CronRun{Job: scheduler.JobKey(c.ns, job), RunID: runID,
		ScheduledTime: due}, Detail: store.CronRunDetail{Agent: "assistant"}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(won).To(Equal([]bool{true}))
	g.Expect(c.ok(t, "bot_task", fmt.Sprintf(`{"action":"list","id":%q}`, id))["tasks"]).To(ConsistOf(HaveKeyWithValue("state", "running")))
	done, ok := store.CronDone, store.OutcomeOK
	_, err = c.store.UpdateCronRunDetail(c.ctx(), runID, store.CronRunUpdate{State: &done, Outcome: &ok,
		Message: new("Both NAS backed up")}, store.CronRunDetailUpdate{})
	g.Expect(err).NotTo(HaveOccurred())
	list := c.ok(t, "bot_task", `{"action":"list"}`)["tasks"]
	g.Expect(list).To(ConsistOf(And(HaveKeyWithValue("state", "succeeded"), HaveKeyWithValue("result", "Both NAS backed up"))))

	g.Expect(c.ok(t, "bot_task", fmt.Sprintf(`{"action":"cancel","id":%q}`, id))).To(HaveKeyWithValue("state", "cancelled"))
	c.gone(t, job)
}

// TestClusterModeAgendaReminderIsACronJob: a timed agenda item's reminder
// is an agent-made CronJob delivering to the chat it was added from; done
// deletes it.
func TestClusterModeAgendaReminderIsACronJob(t *testing.T) {
	g := NewWithT(t)
	now := time.Now().UTC().Truncate(time.Second)
	c := newClusterTools(t, now)
	at := now.Add(3 * time.Hour)
	item := c.ok(t, "bot_agenda", fmt.Sprintf(`{"action":"add","at":%q,"text":"Call the dentist"}`, at.Format(time.RFC3339)))
	job := "agenda-" + item["id"].(string)

	cj := c.cronJob(t, job)
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgentMade, "true"))
	g.Expect(cj.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "assistant"))
	g.Expect(cj.Spec.Schedule.At).To(HaveValue(Equal(at.UnixMilli())))
	g.Expect(cj.Spec.Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "slack", ChatID: "C42"}))
	g.Expect(cj.Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryAlways))
	g.Expect(cj.Spec.Prompt).To(ContainSubstring("Call the dentist"))

	c.ok(t, "bot_agenda", fmt.Sprintf(`{"action":"done","id":%q}`, item["id"]))
	c.gone(t, job)
}
