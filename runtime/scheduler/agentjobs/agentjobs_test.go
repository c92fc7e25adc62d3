package agentjobs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/agentjobs"
	"github.com/picobot/picobot/test/controlplane"
)

// kube is a real kube-apiserver with the PicoBot CRDs, so the CronJob schema
// and its CEL rules judge what the agent writes; nil (with kubeReason) when
// none could be started.
var (
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

// clock is a settable now for not-before stamps.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// namespace makes a namespace of its own for a test.
func namespace(t *testing.T) string {
	t.Helper()
	if kube == nil {
		t.Skip("SKIPPED LOUDLY: " + kubeReason)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agentjobs-"}}
	NewWithT(t).Expect(kube.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func daily(prompt string) picobotv1alpha1.CronJobSpec {
	return picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"}, Prompt: prompt}
}

// manifestJob is a CronJob applied from a manifest (GitOps): no agent-made
// label.
func manifestJob(t *testing.T, ns, name string) *picobotv1alpha1.CronJob {
	t.Helper()
	cj := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: daily("From git.")}
	NewWithT(t).Expect(kube.Create(context.Background(), cj)).To(Succeed())
	return cj
}

var t0 = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)

func TestDisplayNames(t *testing.T) {
	g := NewWithT(t)
	cj := &picobotv1alpha1.CronJob{}
	g.Expect(agentjobs.DisplayName(cj)).To(BeEmpty())
	agentjobs.SetDisplayName(cj, "")
	g.Expect(cj.Annotations).To(BeNil(), "removing a name from a job without annotations adds none")
	agentjobs.SetDisplayName(cj, "Morning report ☀")
	g.Expect(cj.Annotations).To(Equal(map[string]string{scheduler.AnnotationDisplayName: "Morning report ☀"}))
	g.Expect(agentjobs.DisplayName(cj)).To(Equal("Morning report ☀"))
	cj.Annotations["other"] = "kept"
	agentjobs.SetDisplayName(cj, "")
	g.Expect(cj.Annotations).To(Equal(map[string]string{"other": "kept"}))
	g.Expect(agentjobs.DisplayName(cj)).To(BeEmpty())
}

func TestAgentMade(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{picobotv1alpha1.LabelAgent: "helper"}, false},
		{map[string]string{picobotv1alpha1.LabelAgentMade: "false"}, false},
		{map[string]string{picobotv1alpha1.LabelAgentMade: "True"}, false},
		{map[string]string{picobotv1alpha1.LabelAgentMade: "true"}, true},
	} {
		cj := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
		NewWithT(t).Expect(agentjobs.AgentMade(cj)).To(Equal(tc.want), "%v", tc.labels)
	}
}

func TestCreate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	clk := &clock{t: t0}
	jobs := agentjobs.New(kube, ns, "helper", clk.now)

	cj, err := jobs.Create(ctx, "report", "Morning report", daily("Write the report."))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cj.UID).NotTo(BeEmpty())
	got, err := jobs.Get(ctx, "report")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Labels).To(Equal(map[string]string{picobotv1alpha1.LabelAgentMade: "true", picobotv1alpha1.LabelAgent: "helper"}))
	g.Expect(got.Annotations).To(Equal(map[string]string{scheduler.AnnotationDisplayName: "Morning report",
		scheduler.AnnotationNotBefore: "2030-03-04T12:00:00Z"}))
	g.Expect(got.Spec.Prompt).To(Equal("Write the report."))
	g.Expect(agentjobs.AgentMade(got)).To(BeTrue())

	// Without a display name there is no annotation for it; not-before is
	// in UTC whatever the clock's zone.
	clk.set(time.Date(2030, 3, 4, 14, 30, 0, 0, time.FixedZone("CET", 3600)))
	_, err = jobs.Create(ctx, "plain", "", daily("x"))
	g.Expect(err).NotTo(HaveOccurred())
	got, err = jobs.Get(ctx, "plain")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Annotations).To(Equal(map[string]string{scheduler.AnnotationNotBefore: "2030-03-04T13:30:00Z"}))

	_, err = jobs.Create(ctx, "report", "Again", daily("y"))
	g.Expect(err).To(MatchError(agentjobs.ErrExists))
	got, err = jobs.Get(ctx, "report")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Spec.Prompt).To(Equal("Write the report."), "a taken name leaves the job alone")
}

func TestCreateRefusals(t *testing.T) {
	ns := namespace(t)
	jobs := agentjobs.New(kube, ns, "helper", nil)
	cases := []struct {
		name string
		job  string
		spec picobotv1alpha1.CronJobSpec
		msg  string
	}{
		{name: "cron of five fields", job: "five", spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 9 * * *"}, Prompt: "x"},
			msg: `cron must have exactly 6 fields`},
		{name: "every below a minute", job: "fast", spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Every: ptr(int64(1000))}, Prompt: "x"},
			msg: "every must be at least 60000 ms (one minute)"},
		{name: "two schedules", job: "two", spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", Every: ptr(int64(60000))}, Prompt: "x"},
			msg: "schedule needs exactly one of at, every or cron"},
		{name: "no prompt", job: "mute", spec: picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"}},
			msg: "spec.prompt in body should be at least 1 chars long"},
		{name: "invalid name", job: "Not_A_Name", spec: daily("x"),
			msg: `metadata.name: Invalid value: "Not_A_Name"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := jobs.Create(context.Background(), tc.job, "", tc.spec)
			var inv *agentjobs.InvalidError
			g.Expect(errors.As(err, &inv)).To(BeTrue(), "input the model can fix: %v", err)
			g.Expect(err).To(MatchError(HavePrefix(fmt.Sprintf("the API server refused to create job %q: ", tc.job))))
			g.Expect(err).To(MatchError(ContainSubstring(tc.msg)))
			_, err = jobs.Get(context.Background(), tc.job)
			g.Expect(err).To(MatchError(agentjobs.ErrNotFound))
		})
	}
	t.Run("a failure that is not the input's", func(t *testing.T) {
		g := NewWithT(t)
		_, err := agentjobs.New(kube, "no-such-namespace", "helper", nil).Create(context.Background(), "x", "", daily("x"))
		var inv *agentjobs.InvalidError
		g.Expect(errors.As(err, &inv)).To(BeFalse(), "the model cannot fix a missing namespace")
		g.Expect(err).To(MatchError(HavePrefix(`failed to create CronJob "x": `)))
		g.Expect(err).To(MatchError(ContainSubstring(`namespaces "no-such-namespace" not found`)))
	})
}

func TestCreateStampsNowByDefault(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	before := time.Now().Truncate(time.Second)
	_, err := agentjobs.New(kube, ns, "helper", nil).Create(context.Background(), "now", "", daily("x"))
	g.Expect(err).NotTo(HaveOccurred())
	after := time.Now()
	got := &picobotv1alpha1.CronJob{}
	g.Expect(kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "now"}, got)).To(Succeed())
	nb, err := time.Parse(time.RFC3339, got.Annotations[scheduler.AnnotationNotBefore])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nb).To(BeTemporally(">=", before))
	g.Expect(nb).To(BeTemporally("<=", after))
}

func TestListAndGet(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, elsewhere := namespace(t), namespace(t)
	jobs := agentjobs.New(kube, ns, "helper", func() time.Time { return t0 })
	_, err := jobs.Create(ctx, "mine", "Mine", daily("x"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = agentjobs.New(kube, ns, "other-agent", nil).Create(ctx, "theirs", "", daily("x"))
	g.Expect(err).NotTo(HaveOccurred())
	manifestJob(t, ns, "from-git")
	manifestJob(t, elsewhere, "far")

	list, err := jobs.List(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	names := map[string]bool{}
	for _, cj := range list {
		names[cj.Name] = agentjobs.AgentMade(&cj)
	}
	g.Expect(names).To(Equal(map[string]bool{"mine": true, "theirs": true, "from-git": false}),
		"every job of the namespace, whoever made it, and none of another")

	got, err := jobs.Get(ctx, "from-git")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agentjobs.AgentMade(got)).To(BeFalse())
	_, err = jobs.Get(ctx, "far")
	g.Expect(err).To(MatchError(agentjobs.ErrNotFound), "another namespace's job is not found")
}

func TestUpdate(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	clk := &clock{t: t0}
	jobs := agentjobs.New(kube, ns, "helper", clk.now)
	_, err := jobs.Create(ctx, "report", "Report", daily("Write the report."))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	manifestJob(t, ns, "from-git")

	t.Run("applies the change and stamps not-before again", func(t *testing.T) {
		g := NewWithT(t)
		clk.set(t0.Add(time.Hour))
		cj, err := jobs.Update(ctx, "report", func(cj *picobotv1alpha1.CronJob) error {
			cj.Spec.Suspend = ptr(true)
			agentjobs.SetDisplayName(cj, "Paused report")
			return nil
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*cj.Spec.Suspend).To(BeTrue())
		got, err := jobs.Get(ctx, "report")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*got.Spec.Suspend).To(BeTrue())
		g.Expect(got.Annotations).To(Equal(map[string]string{scheduler.AnnotationDisplayName: "Paused report",
			scheduler.AnnotationNotBefore: "2030-03-04T13:00:00Z"}))
		g.Expect(got.ResourceVersion).To(Equal(cj.ResourceVersion), "the job returned is the one written")
	})
	t.Run("a job of a manifest is not the agent's to change", func(t *testing.T) {
		g := NewWithT(t)
		called := false
		_, err := jobs.Update(ctx, "from-git", func(*picobotv1alpha1.CronJob) error { called = true; return nil })
		g.Expect(err).To(MatchError(agentjobs.ErrNotAgentMade))
		g.Expect(err).To(MatchError(`failed to update CronJob "from-git": the CronJob was not made by an agent`))
		g.Expect(called).To(BeFalse())
	})
	t.Run("the change's own error, as it is", func(t *testing.T) {
		g := NewWithT(t)
		mine := errors.New("the job is busy")
		_, err := jobs.Update(ctx, "report", func(cj *picobotv1alpha1.CronJob) error {
			cj.Spec.Prompt = "changed"
			return mine
		})
		g.Expect(err).To(BeIdenticalTo(mine))
		got, err := jobs.Get(ctx, "report")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Spec.Prompt).To(Equal("Write the report."), "nothing written")
	})
	t.Run("missing", func(t *testing.T) {
		g := NewWithT(t)
		_, err := jobs.Update(ctx, "absent", func(*picobotv1alpha1.CronJob) error { return nil })
		g.Expect(err).To(MatchError(agentjobs.ErrNotFound))
	})
	t.Run("a change the API server refuses", func(t *testing.T) {
		g := NewWithT(t)
		_, err := jobs.Update(ctx, "report", func(cj *picobotv1alpha1.CronJob) error {
			cj.Spec.Schedule = picobotv1alpha1.Schedule{Every: ptr(int64(1000))}
			return nil
		})
		var inv *agentjobs.InvalidError
		g.Expect(errors.As(err, &inv)).To(BeTrue(), "%v", err)
		g.Expect(err).To(MatchError(HavePrefix(`the API server refused to update job "report": `)))
		g.Expect(err).To(MatchError(ContainSubstring("every must be at least 60000 ms (one minute)")))
	})
	t.Run("retries over a concurrent change, keeping it", func(t *testing.T) {
		g := NewWithT(t)
		calls := 0
		cj, err := jobs.Update(ctx, "report", func(cj *picobotv1alpha1.CronJob) error {
			calls++
			if calls == 1 {
				// Someone else writes the job between our read and write.
				other := &picobotv1alpha1.CronJob{}
				g.Expect(kube.Get(ctx, client.ObjectKeyFromObject(cj), other)).To(Succeed())
				other.Labels["team"] = "ops"
				g.Expect(kube.Update(ctx, other)).To(Succeed())
			}
			cj.Spec.Prompt = fmt.Sprintf("Write the report (attempt %d).", calls)
			return nil
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(calls).To(Equal(2), "the conflict made it read the job again")
		got, err := jobs.Get(ctx, "report")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Spec.Prompt).To(Equal("Write the report (attempt 2)."))
		g.Expect(got.Labels).To(HaveKeyWithValue("team", "ops"), "the other writer's change survives")
		g.Expect(cj.ResourceVersion).To(Equal(got.ResourceVersion))
	})
}

func TestDelete(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	jobs := agentjobs.New(kube, ns, "helper", nil)
	_, err := jobs.Create(ctx, "report", "", daily("x"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(jobs.Delete(ctx, "report")).To(Succeed())
	_, err = jobs.Get(ctx, "report")
	g.Expect(err).To(MatchError(agentjobs.ErrNotFound))
	g.Expect(jobs.Delete(ctx, "report")).To(MatchError(agentjobs.ErrNotFound))
}

// down is an API server that cannot be reached.
type down struct{ client.Client }

var errDown = errors.New("dial tcp 10.0.0.1:443: connect: connection refused")

func (down) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errDown
}
func (down) List(context.Context, client.ObjectList, ...client.ListOption) error { return errDown }
func (down) Create(context.Context, client.Object, ...client.CreateOption) error { return errDown }
func (down) Delete(context.Context, client.Object, ...client.DeleteOption) error { return errDown }

// An unreachable API server is an error of its own, not "no such job" nor
// input the model could fix.
func TestAPIServerDown(t *testing.T) {
	ctx := context.Background()
	jobs := agentjobs.New(down{}, "team", "helper", nil)
	_, errList := jobs.List(ctx)
	_, errGet := jobs.Get(ctx, "report")
	_, errCreate := jobs.Create(ctx, "report", "", daily("x"))
	_, errUpdate := jobs.Update(ctx, "report", func(*picobotv1alpha1.CronJob) error { return nil })
	errDelete := jobs.Delete(ctx, "report")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errList, `failed to list CronJobs in namespace "team": `},
		{errGet, `failed to get CronJob "report": `},
		{errCreate, `failed to create CronJob "report": `},
		{errUpdate, `failed to update CronJob "report": `},
		{errDelete, `failed to delete CronJob "report": `},
	} {
		g := NewWithT(t)
		g.Expect(tc.err).To(MatchError(tc.want + errDown.Error()))
		g.Expect(tc.err).To(MatchError(errDown))
		g.Expect(tc.err).NotTo(MatchError(agentjobs.ErrNotFound))
		var inv *agentjobs.InvalidError
		g.Expect(errors.As(tc.err, &inv)).To(BeFalse())
	}
}

func ptr[T any](v T) *T { return &v }
