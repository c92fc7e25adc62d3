package localrun_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/localrun"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}

// recorder is a stand-in for tools other engineers own (send_message,
// delegate): it records the arguments it is called with.
type recorder struct {
	name string
	mu   sync.Mutex
	args []string
}

func (r *recorder) Name() string            { return r.name }
func (r *recorder) Description() string     { return "test tool " + r.name }
func (r *recorder) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (r *recorder) Traits() tool.Traits     { return tool.Traits{} }
func (r *recorder) Run(_ context.Context, _ tool.Env, args json.RawMessage) (tool.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.args = append(r.args, string(args))
	return tool.Text("done"), nil
}

// subAgents stands for the sub-agent "ops": it answers every delegated
// task at once and keeps the requests.
type subAgents struct {
	mu   sync.Mutex
	reqs []delegate.Request
}

func (s *subAgents) Tools(context.Context, string) ([]string, error) { return []string{"bash"}, nil }

func (s *subAgents) Run(_ context.Context, req delegate.Request) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	return "disks fine", "", nil
}

func (s *subAgents) calls() []delegate.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delegate.Request(nil), s.reqs...)
}

type toolsFeature []tool.Tool

func (f toolsFeature) Name() string { return "test-tools" }
func (f toolsFeature) Build(context.Context, *feature.Agent) (feature.Parts, error) {
	return feature.Parts{Tools: f}, nil
}

type fixture struct {
	llm      *fakellm.Server
	runner   *localrun.Runner
	store    *sqlite.Store
	delegate *subAgents
	built    *agenthost.Built
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	g := NewWithT(t)
	f := &fixture{llm: fakellm.New(), delegate: &subAgents{}}
	t.Cleanup(f.llm.Close)
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "picobot.db"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	f.store = st
	host := &agenthost.Host{Mode: agenthost.ModeEmbedded, Tenant: "team", Store: st, StateDir: dir, Holder: "test",
		Delegates: f.delegate, Features: []agenthost.Feature{toolsFeature{&recorder{name: "send_message"}}}}
	agent := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "team"},
		Spec: picobotv1alpha1.AgentSpec{Instructions: "You are the team's assistant.",
			Delegates: []picobotv1alpha1.Delegate{{Name: "ops", AgentRef: corev1.LocalObjectReference{Name: "ops"}}},
			Model:     &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "test-model", BaseURL: f.llm.URL()}}}}
	built, err := host.Build(context.Background(), agent)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(built.Close)
	g.Expect(built.Info.Tools).To(ContainElements("send_message", "delegate"), "the agent itself has them")
	f.built = built
	f.runner = localrun.New(func(name string) (localrun.Agent, bool) {
		if name == "root" {
			return built.RunTarget(), true
		}
		return localrun.Agent{}, false
	})
	return f
}

func request(runID string) scheduler.RunRequest {
	return scheduler.RunRequest{Tenant: "team", Job: "team/disk", JobName: "Disk check", RunID: runID,
		ScheduledTime: time.Date(2030, 3, 4, 9, 0, 0, 0, time.UTC), Agent: "root",
		Prompt: "Check the disk usage of build-1 and alert above 90%."}
}

func (f *fixture) run(t *testing.T, runID string) scheduler.RunResult {
	t.Helper()
	res, err := f.runner.Run(store.WithTenant(context.Background(), "team"), request(runID))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return res
}

func userMessages(r fakellm.Recorded) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" && len(m.ToolResults) == 0 {
			out = append(out, m.Content)
		}
	}
	return out
}

func toolResult(t *testing.T, r fakellm.Recorded, callID string) fakellm.ToolResult {
	t.Helper()
	for _, m := range r.Messages {
		for _, tr := range m.ToolResults {
			if tr.CallID == callID {
				return tr
			}
		}
	}
	t.Fatalf("no result of tool call %q in the request", callID)
	return fakellm.ToolResult{}
}

func complete(id, outcome, message string) fakellm.Call {
	return fakellm.Call{ID: id, Name: "complete_scheduled_run", Args: `{"outcome":"` + outcome + `","message":"` + message + `"}`}
}

func TestRunReportsTheCompletion(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{complete("c1", "alert", "build-1 disk is at 95%")}},
		fakellm.Turn{Text: "Reported."},
	)
	res := f.run(t, "run-1")
	g.Expect(res.Outcome).To(Equal(store.OutcomeAlert))
	g.Expect(res.Message).To(Equal("build-1 disk is at 95%"))
	g.Expect(res.SessionID).To(Equal("cron:team/disk/run-1:default"))

	reqs := f.llm.Requests()
	g.Expect(reqs).To(HaveLen(2))
	first := reqs[0]
	g.Expect(first.Tools).To(ContainElement("complete_scheduled_run"))
	g.Expect(first.Tools).NotTo(ContainElement("send_message"), "delivery is the scheduler's")
	g.Expect(first.System).To(ContainSubstring("You are the team's assistant."))
	g.Expect(first.System).To(ContainSubstring("call complete_scheduled_run exactly once"))
	g.Expect(userMessages(first)).To(HaveLen(1), "a fresh session without chat history")
	g.Expect(userMessages(first)[0]).To(ContainSubstring(`[Scheduled run of "Disk check" for 2030-03-04T09:00:00Z]`))
	g.Expect(userMessages(first)[0]).To(ContainSubstring("Check the disk usage of build-1"))
	g.Expect(toolResult(t, reqs[1], "c1").Content).To(ContainSubstring("Recorded outcome alert"))

	// The run's session is stored like any other, under the cron channel.
	s, err := f.store.GetSession(store.WithTenant(context.Background(), "team"), res.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Agent).To(Equal("root"))

	// The next run of the same job starts from nothing again.
	f.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{complete("c2", "ok", "build-1 disk is at 40%")}}, fakellm.Turn{Text: "ok"})
	res = f.run(t, "run-2")
	g.Expect(res.Outcome).To(Equal(store.OutcomeOK))
	reqs = f.llm.Requests()
	g.Expect(userMessages(reqs[2])).To(HaveLen(1))
}

func TestRunFailsClosed(t *testing.T) {
	cases := []struct {
		name    string
		turns   []fakellm.Turn
		message string
	}{
		{name: "plain text is not an outcome", turns: []fakellm.Turn{{Text: "Everything looks fine to me."}},
			message: `The run ended without calling complete_scheduled_run; plain final text is not an outcome (its final text: "Everything looks fine to me.")`},
		{name: "two calls", turns: []fakellm.Turn{
			{ToolCalls: []fakellm.Call{complete("c1", "ok", "fine")}},
			{ToolCalls: []fakellm.Call{complete("c2", "alert", "not fine after all")}},
			{Text: "Sorry."},
		}, message: "complete_scheduled_run was called 2 times; a run completes exactly once (the first call said ok: fine)"},
		{name: "two calls in one step", turns: []fakellm.Turn{
			{ToolCalls: []fakellm.Call{complete("c1", "ok", "fine"), complete("c2", "ok", "fine")}},
			{Text: "Done."},
		}, message: "called 2 times"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			f.llm.Script(tc.turns...)
			res := f.run(t, "run-x")
			g.Expect(res.Outcome).To(Equal(store.OutcomeFailed))
			g.Expect(res.Message).To(ContainSubstring(tc.message))
		})
	}
}

func TestCompleteToolRejectsBadCalls(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "complete_scheduled_run", Args: `{"outcome":"maybe","message":"x"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{complete("c2", "ok", "  ")}},
		fakellm.Turn{ToolCalls: []fakellm.Call{complete("c3", "refused", "I will not delete production data")}},
		fakellm.Turn{Text: "Done."},
	)
	res := f.run(t, "run-1")
	g.Expect(res.Outcome).To(Equal(store.OutcomeRefused), "invalid calls do not count; the valid one does")
	reqs := f.llm.Requests()
	g.Expect(toolResult(t, reqs[1], "c1").Content).To(ContainSubstring("invalid arguments for complete_scheduled_run"))
	g.Expect(toolResult(t, reqs[2], "c2").Content).To(ContainSubstring("message is empty"))

	// Outside a run the tool refuses.
	reg := f.built.Loop.Tools
	_, ok := reg.Get("complete_scheduled_run")
	g.Expect(ok).To(BeFalse(), "ordinary sessions do not get the tool")
}

func TestDelegationIsSynchronous(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "delegate", Args: `{"target":"ops","task":"check disks","mode":"background"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{complete("c1", "ok", "delegated and done")}},
		fakellm.Turn{Text: "Done."},
	)
	g.Expect(f.run(t, "run-1").Outcome).To(Equal(store.OutcomeOK))
	calls := f.delegate.calls()
	g.Expect(calls).To(HaveLen(1), "the background delegation ran in the foreground (background runs are refused)")
	g.Expect(calls[0].Agent).To(Equal("ops"))
	g.Expect(calls[0].Text).To(ContainSubstring("check disks"))
}

func TestUnknownAgentIsAClearError(t *testing.T) {
	g := NewWithT(t)
	runner := localrun.New(func(string) (localrun.Agent, bool) { return localrun.Agent{}, false })
	_, err := runner.Run(context.Background(), request("r"))
	g.Expect(err).To(MatchError(scheduler.ErrUnknownAgent))
	g.Expect(err.Error()).To(ContainSubstring(`no agent named "root" in tenant "team"; the job names no agent, so it runs on the root agent`))
	req := request("r")
	req.Agent = "ops"
	_, err = runner.Run(context.Background(), req)
	g.Expect(err.Error()).To(ContainSubstring(`no agent named "ops"`))
	g.Expect(strings.Contains(err.Error(), "root agent")).To(BeFalse())
}
