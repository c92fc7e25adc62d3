package bottask_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/bottask"
)

const tenant = "team"

// t0 is 2030-03-04T12:00:00Z, a Monday.
var t0 = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)

type agentTools struct {
	reg     *tool.Registry
	store   *sqlite.Store
	clock   *clocktesting.FakeClock
	mu      sync.Mutex
	changed []string
}

// newTools builds the tools of agent "assistant" with the given channels
// (its connectors).
func newTools(t testing.TB, channels ...picobotv1alpha1.Channel) *agentTools {
	t.Helper()
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	// The store judges record times by the same clock as the tools and the
	// scheduler, as in production.
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"), sqlite.WithClock(clk))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	at := &agentTools{store: st, clock: clk}
	f := bottask.NewFeature(bottask.Config{Clock: at.clock, Changed: func(_ context.Context, tn, name string) {
		at.mu.Lock()
		defer at.mu.Unlock()
		at.changed = append(at.changed, tn+"/"+name)
	}})
	g.Expect(f.Name()).To(Equal("bottask"))
	host := &feature.Host{Mode: feature.ModeEmbedded, Tenant: tenant, Store: st}
	parts, err := f.Build(context.Background(), &feature.Agent{Host: host,
		Spec: &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "assistant", Namespace: tenant},
			Spec: picobotv1alpha1.AgentSpec{Channels: channels}}})
	g.Expect(err).NotTo(HaveOccurred())
	at.reg, err = tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	return at
}

func (a *agentTools) ctx() context.Context { return store.WithTenant(context.Background(), tenant) }

// call runs a tool the way the agent loop does, from the chat telegram:42.
func (a *agentTools) call(t testing.TB, name, args string) tool.Result {
	t.Helper()
	return a.reg.Execute(a.ctx(), tool.Env{SessionID: "telegram:42:default", Agent: "assistant"},
		llm.ToolCall{ID: "c", Name: name, Arguments: args})
}

// ok runs a call that must succeed and returns the JSON after its sentence.
func (a *agentTools) ok(t testing.TB, name, args string) map[string]any {
	t.Helper()
	res := a.call(t, name, args)
	NewWithT(t).Expect(res.IsError).To(BeFalse(), res.Content)
	_, body, _ := strings.Cut(res.Content, "\n")
	if !strings.HasPrefix(res.Content, "{") && body == "" {
		return nil
	}
	if strings.HasPrefix(res.Content, "{") {
		body = res.Content
	}
	var m map[string]any
	NewWithT(t).Expect(json.Unmarshal([]byte(body), &m)).To(Succeed(), res.Content)
	return m
}

func (a *agentTools) job(t *testing.T, name string) picobotv1alpha1.CronJobSpec {
	t.Helper()
	rec, err := a.store.GetCronJob(a.ctx(), name)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var spec picobotv1alpha1.CronJobSpec
	NewWithT(t).Expect(json.Unmarshal(rec.Spec, &spec)).To(Succeed())
	return spec
}

// finishRun records a run of job the way the scheduler does: claimed, then
// done with outcome and message.
func (a *agentTools) finishRun(t *testing.T, job string, at time.Time, outcome store.CronOutcome, msg string) {
	t.Helper()
	g := NewWithT(t)
	runID := fmt.Sprintf("%s-%d", job, at.Unix())
	won, err := a.store.ClaimCronRuns(a.ctx(), []store.CronClaim{{Run: store.CronRun{Job: scheduler.JobKey(tenant, job), RunID: runID,
		ScheduledTime: at}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(won).To(Equal([]bool{true}))
	if outcome == "" {
		return
	}
	done := store.CronDone
	_, err = a.store.UpdateCronRunDetail(a.ctx(), runID, store.CronRunUpdate{State: &done, Outcome: &outcome, Message: &msg},
		store.CronRunDetailUpdate{})
	g.Expect(err).NotTo(HaveOccurred())
}

func taskList(t *testing.T, a *agentTools, args string) []map[string]any {
	t.Helper()
	m := a.ok(t, "bot_task", args)
	var out []map[string]any
	for _, v := range m["tasks"].([]any) {
		out = append(out, v.(map[string]any))
	}
	return out
}

func TestToolNamesAreInTheCatalog(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t)
	g.Expect(a.reg.Names()).To(Equal([]string{"bot_agenda", "bot_task"}))
	for _, d := range a.reg.Definitions() {
		g.Expect(len(d.Description)+len(d.Parameters)).To(BeNumerically("<", 1600), "%s is sent with every request", d.Name)
	}
}

func TestTaskLifecycleFollowsItsRuns(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t)

	added := a.ok(t, "bot_task", `{"action":"add","title":"Audit the backups","note":"all three servers","due_at":"2030-03-05T09:00:00+08:00"}`)
	g.Expect(added).To(HaveKeyWithValue("priority", BeEquivalentTo(3)))
	g.Expect(added).To(HaveKeyWithValue("continuity", "continue"))
	g.Expect(added).To(HaveKeyWithValue("state", "queued"))
	g.Expect(added).To(HaveKeyWithValue("due_at", "2030-03-05T01:00:00Z"))
	id := added["id"].(string)
	job := "task-" + id
	spec := a.job(t, job)
	g.Expect(*spec.Schedule.At).To(Equal(time.Date(2030, 3, 5, 1, 0, 0, 0, time.UTC).UnixMilli()))
	g.Expect(spec.Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "telegram", ChatID: "42"}))
	g.Expect(spec.AgentRef.Name).To(Equal("assistant"))
	g.Expect(spec.Prompt).To(ContainSubstring("Audit the backups"))
	g.Expect(spec.Prompt).To(ContainSubstring("bot_task with action list and id "+id), "continue reads the last conclusion")
	g.Expect(a.changed).To(Equal([]string{tenant + "/" + job}))

	// The scheduler claims the tick: running.
	first := time.Date(2030, 3, 5, 1, 0, 0, 0, time.UTC)
	a.finishRun(t, job, first, "", "")
	g.Expect(taskList(t, a, `{"action":"list"}`)[0]).To(HaveKeyWithValue("state", "running"))

	// The run stops at a boundary and asks: awaiting, showing the question.
	done := store.CronDone
	alert := store.OutcomeAlert
	_, err := a.store.UpdateCronRunDetail(a.ctx(), fmt.Sprintf("%s-%d", job, first.Unix()),
		store.CronRunUpdate{State: &done, Outcome: &alert, Message: new("Which of the two NAS should I include?")}, store.CronRunDetailUpdate{})
	g.Expect(err).NotTo(HaveOccurred())
	got := taskList(t, a, `{"action":"list","id":"`+id+`"}`)
	g.Expect(got[0]).To(HaveKeyWithValue("state", "awaiting"))
	g.Expect(got[0]).To(HaveKeyWithValue("awaiting", "Which of the two NAS should I include?"))

	// Answered by rescheduling with a fuller note: queued again, new job time.
	a.clock.SetTime(first.Add(time.Hour))
	up := a.ok(t, "bot_task", `{"action":"update","id":"`+id+`","note":"both NAS","priority":1,"due_at":"2030-03-06T01:00:00Z","continuity":"fresh"}`)
	g.Expect(up).To(HaveKeyWithValue("state", "queued"))
	g.Expect(up).To(HaveKeyWithValue("priority", BeEquivalentTo(1)))
	g.Expect(up).NotTo(HaveKey("awaiting"))
	spec = a.job(t, job)
	g.Expect(*spec.Schedule.At).To(Equal(time.Date(2030, 3, 6, 1, 0, 0, 0, time.UTC).UnixMilli()))
	g.Expect(spec.Prompt).To(ContainSubstring("both NAS"))
	g.Expect(spec.Prompt).To(ContainSubstring("Continuity fresh"))
	g.Expect(taskList(t, a, `{"action":"list"}`)[0]).To(HaveKeyWithValue("state", "queued"), "the older run no longer counts")

	a.finishRun(t, job, time.Date(2030, 3, 6, 1, 0, 0, 0, time.UTC), store.OutcomeOK, "Both NAS backed up; oldest snapshot 2 days")
	got = taskList(t, a, `{"action":"list"}`)
	g.Expect(got[0]).To(HaveKeyWithValue("state", "succeeded"))
	g.Expect(got[0]).To(HaveKeyWithValue("result", "Both NAS backed up; oldest snapshot 2 days"))

	c := a.ok(t, "bot_task", `{"action":"cancel","id":"`+id+`"}`)
	g.Expect(c).To(HaveKeyWithValue("state", "cancelled"))
	_, err = a.store.GetCronJob(a.ctx(), job)
	g.Expect(err).To(MatchError(store.ErrNotFound), "cancel removes the job")
	res := a.call(t, "bot_task", `{"action":"update","id":"`+id+`","title":"again"}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("is cancelled"))
}

func TestFailedRunAndImmediateTask(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t)
	added := a.ok(t, "bot_task", `{"action":"add","title":"Check the disk"}`)
	spec := a.job(t, "task-"+added["id"].(string))
	g.Expect(*spec.Schedule.At).To(Equal(t0.Add(time.Second).UnixMilli()), "without due_at the task runs at once")
	a.finishRun(t, "task-"+added["id"].(string), t0.Add(time.Second), store.OutcomeRefused, "not allowed to read /dev")
	got := taskList(t, a, `{"action":"list"}`)
	g.Expect(got[0]).To(HaveKeyWithValue("state", "failed"))
	g.Expect(got[0]).To(HaveKeyWithValue("result", "not allowed to read /dev"))
}

func TestRepeatPinsItsTime(t *testing.T) {
	for _, tc := range []struct {
		args, cron, tz string
	}{
		{`"repeat":"day 09:00","tz":"Asia/Shanghai"`, "0 0 9 * * *", "Asia/Shanghai"},
		{`"repeat":"Week Mon 09:30"`, "0 30 9 * * MON", ""},
		{`"repeat":"week","due_at":"2030-03-08T18:15:00Z"`, "0 15 18 * * FRI", ""},
		{`"repeat":"hour :30"`, "0 30 * * * *", ""},
		{`"repeat":"hour"`, "0 0 * * * *", ""},
		{`"repeat":"day"`, "0 0 12 * * *", ""},
	} {
		t.Run(tc.cron, func(t *testing.T) {
			g := NewWithT(t)
			a := newTools(t)
			added := a.ok(t, "bot_task", `{"action":"add","title":"Digest",`+tc.args+`}`)
			spec := a.job(t, "task-"+added["id"].(string))
			g.Expect(spec.Schedule.Cron).To(Equal(tc.cron))
			g.Expect(spec.Schedule.TZ).To(Equal(tc.tz))
			g.Expect(spec.Schedule.At).To(BeNil())
		})
	}
}

func TestInvalidInputIsAToolError(t *testing.T) {
	a := newTools(t)
	added := a.ok(t, "bot_task", `{"action":"add","title":"x"}`)
	id := added["id"].(string)
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"bot_task", `{"action":"add","title":"x","due_at":"tomorrow afternoon"}`, "their meaning depends on when they are read"},
		{"bot_task", `{"action":"add","title":"x","due_at":"2030-03-05T09:00:00"}`, "has no UTC offset"},
		{"bot_task", `{"action":"add","title":"x","due_at":"2030-03-01T09:00:00Z"}`, "is in the past"},
		{"bot_task", `{"action":"add","title":"x","priority":9}`, "priority"},
		{"bot_task", `{"action":"add","title":"x","repeat":"fortnight"}`, "repeat \"fortnight\" is not understood"},
		{"bot_task", `{"action":"add","title":"x","repeat":"day 25:00"}`, "is not understood"},
		{"bot_task", `{"action":"add","title":"x","repeat":"day","tz":"Mars/Olympus"}`, "not an IANA time zone"},
		{"bot_task", `{"action":"add","title":"x","continuity":"sometimes"}`, "continuity"},
		{"bot_task", `{"action":"add"}`, "add needs a title"},
		{"bot_task", `{"action":"snooze","id":"x"}`, "action"},
		{"bot_task", `{"action":"update","title":"y"}`, "id is required"},
		{"bot_task", `{"action":"update","id":"t-nope","title":"y"}`, `no task "t-nope"`},
		{"bot_task", `{"action":"update","id":"` + id + `"}`, "needs at least one"},
		{"bot_task", `{"action":"cancel","id":"a/b"}`, "is not a task id"},
		{"bot_task", `not json`, "invalid arguments"},
		{"bot_agenda", `{"action":"add","at":"tomorrow afternoon","text":"call mum"}`, "2026-10-01T18:30:00+08:00"},
		{"bot_agenda", `{"action":"add","at":"2030-03-05 18:30","text":"call mum"}`, "has no UTC offset"},
		{"bot_agenda", `{"action":"add","at":"2030-03-01","text":"call mum"}`, "is in the past"},
		{"bot_agenda", `{"action":"add","text":"call mum"}`, "add needs at"},
		{"bot_agenda", `{"action":"add","at":"2030-03-05"}`, "add needs text"},
		{"bot_agenda", `{"action":"done"}`, "id is required"},
		{"bot_agenda", `{"action":"remove","id":"a-nope"}`, `no agenda item "a-nope"`},
	} {
		t.Run(tc.args, func(t *testing.T) {
			res := a.call(t, tc.tool, tc.args)
			NewWithT(t).Expect(res.IsError).To(BeTrue(), res.Content)
			NewWithT(t).Expect(res.Content).To(ContainSubstring(tc.want))
		})
	}
	// The agenda refusal says why and what to write instead.
	res := a.call(t, "bot_agenda", `{"action":"add","at":"tomorrow afternoon","text":"call mum"}`)
	NewWithT(t).Expect(res.Content).To(ContainSubstring(`phrases like "tomorrow afternoon" are refused`))
	tasks, err := a.store.ListTasks(a.ctx(), store.TaskFilter{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(tasks).To(HaveLen(1), "nothing was written by refused calls")
}

func TestAgenda(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t)
	timed := a.ok(t, "bot_agenda", `{"action":"add","at":"2030-03-05T18:30:00+08:00","text":"Call the dentist"}`)
	g.Expect(timed).To(HaveKeyWithValue("at", "2030-03-05T10:30:00Z"))
	tid := timed["id"].(string)
	spec := a.job(t, "agenda-"+tid)
	g.Expect(*spec.Schedule.At).To(Equal(time.Date(2030, 3, 5, 10, 30, 0, 0, time.UTC).UnixMilli()))
	g.Expect(spec.Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "telegram", ChatID: "42"}))
	g.Expect(spec.Prompt).To(ContainSubstring("Call the dentist"))

	day := a.ok(t, "bot_agenda", `{"action":"add","at":"2030-03-04","text":"Pay rent"}`)
	g.Expect(day).To(HaveKeyWithValue("at", "2030-03-04"))
	did := day["id"].(string)
	_, err := a.store.GetCronJob(a.ctx(), "agenda-"+did)
	g.Expect(err).To(MatchError(store.ErrNotFound), "a whole day gets no reminder")

	list := a.ok(t, "bot_agenda", `{"action":"list"}`)["items"].([]any)
	g.Expect(list).To(HaveLen(2))
	g.Expect(list[0]).To(HaveKeyWithValue("id", did), "earliest first")

	a.ok(t, "bot_agenda", `{"action":"done","id":"`+tid+`"}`)
	_, err = a.store.GetCronJob(a.ctx(), "agenda-"+tid)
	g.Expect(err).To(MatchError(store.ErrNotFound), "done cancels the reminder")
	a.ok(t, "bot_agenda", `{"action":"remove","id":"`+did+`"}`)
	res := a.call(t, "bot_agenda", `{"action":"list"}`)
	g.Expect(res.Content).To(Equal("The agenda is empty."))
}

// BenchmarkTaskList measures bot_task list over 100 tasks on SQLite, each
// with a recorded run (one run lookup per task).
func BenchmarkTaskList(b *testing.B) {
	a := newTools(b)
	for i := range 100 {
		res := a.call(b, "bot_task", fmt.Sprintf(`{"action":"add","title":"task %d","due_at":"2030-03-05T09:00:00Z"}`, i))
		if res.IsError {
			b.Fatal(res.Content)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if res := a.call(b, "bot_task", `{"action":"list"}`); res.IsError {
			b.Fatal(res.Content)
		}
	}
}

// A task's results and an agenda reminder go to a named connector (its
// chatID) instead of the chat they were added from; an update without
// connector keeps it. A connector without a chat, or an unknown one, is a
// tool error saying which exist.
func TestDeliveryToAConnector(t *testing.T) {
	g := NewWithT(t)
	a := newTools(t, picobotv1alpha1.Channel{Type: "telegram", Name: "alerts", ChatID: "-100777"},
		picobotv1alpha1.Channel{Type: "slack"}, picobotv1alpha1.Channel{Type: "telegram"})
	alerts := &picobotv1alpha1.DeliveryTarget{Channel: "alerts", ChatID: "-100777"}

	id := a.ok(t, "bot_task", `{"action":"add","title":"Check the disks","connector":"alerts"}`)["id"].(string)
	g.Expect(a.job(t, "task-"+id).Target).To(Equal(alerts))
	a.ok(t, "bot_task", `{"action":"update","id":"`+id+`","title":"Check the disks and the fans"}`)
	g.Expect(a.job(t, "task-"+id).Target).To(Equal(alerts), "an update without connector keeps it")
	a.ok(t, "bot_task", `{"action":"update","id":"`+id+`","connector":"telegram"}`)
	g.Expect(a.job(t, "task-"+id).Target).To(Equal(&picobotv1alpha1.DeliveryTarget{Channel: "telegram", ChatID: "42"}),
		"the connector this chat is on, without a chatID, speaks in this chat")

	res := a.call(t, "bot_agenda", `{"action":"add","at":"2030-03-05T18:30:00+08:00","text":"Renew the domain","connector":"alerts"}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("through connector alerts (chat -100777)"))
	item := a.ok(t, "bot_agenda", `{"action":"list"}`)["items"].([]any)[0].(map[string]any)
	g.Expect(a.job(t, "agenda-"+item["id"].(string)).Target).To(Equal(alerts))

	res = a.call(t, "bot_agenda", `{"action":"add","at":"2030-03-05T18:30:00+08:00","text":"x","connector":"slack"}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring(`connector "slack" has no chat to speak in`))
	res = a.call(t, "bot_task", `{"action":"add","title":"x","connector":"pager"}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring(`no connector "pager"; this agent's connectors: alerts, slack, telegram`))
}
