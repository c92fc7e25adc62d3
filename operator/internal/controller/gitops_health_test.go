package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	lua "github.com/yuin/gopher-lua"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/wake"
)

// argoHealthPrefix is the argocd-cm key prefix of Argo CD's health checks
// of custom kinds: resource.customizations.health.<group>_<kind>.
const argoHealthPrefix = "resource.customizations.health."

// argoHealthScripts reads the Argo CD health checks docs/gitops.md ships,
// by kind, from the argocd-cm ConfigMap in its YAML blocks: the test runs
// what users copy.
var argoHealthScripts = sync.OnceValues(func() (map[string]string, error) {
	_, file, _, _ := runtime.Caller(0)
	doc := filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "gitops.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		return nil, fmt.Errorf("failed to read %q: %w", doc, err)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(b, -1) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(m[1], &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != "argocd-cm" {
			continue
		}
		for k, v := range cm.Data {
			if kind, ok := strings.CutPrefix(k, argoHealthPrefix+picobotv1alpha1.GroupVersion.Group+"_"); ok {
				out[kind] = v
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("failed to find the argocd-cm ConfigMap with health checks in %q", doc)
	}
	return out, nil
})

// argoHealth is what an Argo CD health check returned.
type argoHealth struct {
	Status, Message string
}

// runArgoHealth runs script as Argo CD does: the object as the global obj
// (JSON numbers as Lua numbers, arrays as sequences), the returned table's
// status and message as the health.
func runArgoHealth(script string, obj map[string]any) (argoHealth, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return argoHealth{}, fmt.Errorf("failed to run the health check: %w", err)
	}
	t, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return argoHealth{}, fmt.Errorf("failed to run the health check: it returned %s, not a table", L.Get(-1).Type())
	}
	return argoHealth{Status: lua.LVAsString(t.RawGetString("status")), Message: lua.LVAsString(t.RawGetString("message"))}, nil
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	default:
		return lua.LNil
	}
}

// argoFor is the Argo CD health every kstatus status must map to.
var argoFor = map[status.Status]string{
	status.CurrentStatus:    "Healthy",
	status.InProgressStatus: "Progressing",
	status.FailedStatus:     "Degraded",
}

// expectHealth reads the object from the API server, as GitOps tools do
// (unstructured), until kstatus computes want for it (with message, unless
// empty), and checks that the Argo CD health check of its kind says the
// same (argo overrides the expected Argo CD status: Suspended). It returns
// both answers.
func expectHealth(t *testing.T, c client.Client, kind, ns, name string, want status.Status, argo, message string) (*status.Result, argoHealth) {
	t.Helper()
	scripts, err := argoHealthScripts()
	if err != nil {
		t.Fatal(err)
	}
	script, ok := scripts[kind]
	if !ok {
		t.Fatalf("docs/gitops.md ships no Argo CD health check for %s", kind)
	}
	if argo == "" {
		argo = argoFor[want]
	}
	var res *status.Result
	var health argoHealth
	NewWithT(t).Eventually(func(g Gomega) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(picobotv1alpha1.GroupVersion.WithKind(kind))
		g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
		var err error
		res, err = status.Compute(u)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(want), "kstatus: %s", res.Message)
		if message != "" {
			g.Expect(res.Message).To(Equal(message))
		}
		health, err = runArgoHealth(script, u.Object)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(health.Status).To(Equal(argo), "Argo CD: %s", health.Message)
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed(), "%s %s/%s", kind, ns, name)
	return res, health
}

// TestGitOpsHealth: kstatus (Flux) and the Argo CD health checks of
// docs/gitops.md read every kind as Current/Healthy when it holds,
// InProgress/Progressing while it waits for something that may still
// come, and Failed/Degraded (never InProgress for ever) when only a
// change to it helps, from the status the operator writes.
func TestGitOpsHealth(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t)
	g := NewWithT(t)

	t.Run("Agent", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(k8s.Create(ctx, secret(ns, "k", "apiKey"))).To(Succeed())
		g.Expect(k8s.Create(ctx, openAIAgent(ns, "ready", "k"))).To(Succeed())
		_, h := expectHealth(t, k8s, "Agent", ns, "ready", status.CurrentStatus, "", "")
		g.Expect(h.Message).To(Equal("All conditions hold"))

		// Its Secret is not there yet (say, the secret manager has not
		// synced it): it waits, and becomes Ready when it comes.
		g.Expect(k8s.Create(ctx, openAIAgent(ns, "waiting", "later"))).To(Succeed())
		res, h := expectHealth(t, k8s, "Agent", ns, "waiting", status.InProgressStatus, "",
			`ModelResolved: No usable model: spec.model: Secret "later" (API key of openai/gpt-5.2) not found`)
		g.Expect(h.Message).To(Equal("SecretNotFound: " + res.Message))
		a := getAgent(g, ns, "waiting")
		g.Expect(cond(a, picobotv1alpha1.ConditionReconciling)).To(HaveField("Reason", picobotv1alpha1.ReasonSecretNotFound))
		g.Expect(cond(a, picobotv1alpha1.ConditionStalled)).To(BeNil())
		g.Expect(k8s.Create(ctx, secret(ns, "later", "apiKey"))).To(Succeed())
		expectHealth(t, k8s, "Agent", ns, "waiting", status.CurrentStatus, "", "")
		a = getAgent(g, ns, "waiting")
		g.Expect(cond(a, picobotv1alpha1.ConditionReconciling)).To(BeNil(), "Ready: neither Reconciling nor Stalled")
		g.Expect(cond(a, picobotv1alpha1.ConditionStalled)).To(BeNil(), "Ready: neither Reconciling nor Stalled")

		// Its tool policy names a group that does not exist: nothing
		// outside the Agent can fix that.
		broken := openAIAgent(ns, "broken", "k")
		broken.Spec.Tools = &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"group:nope"}}}
		g.Expect(k8s.Create(ctx, broken)).To(Succeed())
		res, h = expectHealth(t, k8s, "Agent", ns, "broken", status.FailedStatus, "", "")
		g.Expect(res.Message).To(And(HavePrefix("ToolsResolved: invalid tool policy: "), ContainSubstring(`unknown group "group:nope"`)))
		g.Expect(h.Message).To(Equal("InvalidToolPolicy: " + res.Message))
		g.Expect(cond(getAgent(g, ns, "broken"), picobotv1alpha1.ConditionReconciling)).To(BeNil(), "never both")

		// Fixed, it reads Current: the new generation observed, Stalled gone.
		broken = getAgent(g, ns, "broken")
		broken.Spec.Tools = nil
		g.Expect(k8s.Update(ctx, broken)).To(Succeed())
		expectHealth(t, k8s, "Agent", ns, "broken", status.CurrentStatus, "", "")
	})

	t.Run("CronJob", func(t *testing.T) {
		g := NewWithT(t)
		daily := picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"}
		withAgent := func(name, agent string) *picobotv1alpha1.CronJob {
			cj := cronJob(ns, name, daily)
			cj.Spec.AgentRef = &corev1.LocalObjectReference{Name: agent}
			return cj
		}
		g.Expect(k8s.Create(ctx, withAgent("daily", "ready"))).To(Succeed())
		_, h := expectHealth(t, k8s, "CronJob", ns, "daily", status.CurrentStatus, "", "")
		g.Expect(h.Message).To(Equal("All conditions hold"))

		paused := withAgent("paused", "ready")
		paused.Spec.Suspend = ptr(true)
		g.Expect(k8s.Create(ctx, paused)).To(Succeed())
		_, h = expectHealth(t, k8s, "CronJob", ns, "paused", status.CurrentStatus, "Suspended", "")
		g.Expect(h.Message).To(Equal("Suspended; no runs until spec.suspend is false"))

		// Its Agent comes later in the sync: it waits for it.
		g.Expect(k8s.Create(ctx, withAgent("early", "later-agent"))).To(Succeed())
		_, h = expectHealth(t, k8s, "CronJob", ns, "early", status.InProgressStatus, "", `ReferencesResolved: Not found: Agent "later-agent"`)
		g.Expect(h.Message).To(Equal(picobotv1alpha1.ReasonReferenceNotFound + `: ReferencesResolved: Not found: Agent "later-agent"`))
		expectEvent(t, ns, "CronJob", "early", corev1.EventTypeWarning, picobotv1alpha1.ReasonReferenceNotFound, `ReferencesResolved: Not found: Agent "later-agent"`)
		g.Expect(k8s.Create(ctx, openAIAgent(ns, "later-agent", "k"))).To(Succeed())
		expectHealth(t, k8s, "CronJob", ns, "early", status.CurrentStatus, "", "")
		expectEvent(t, ns, "CronJob", "early", corev1.EventTypeNormal, picobotv1alpha1.ReasonResolved, "ReferencesResolved: All references exist")

		// A one-shot time in the past never comes.
		g.Expect(k8s.Create(ctx, cronJob(ns, "too-late", picobotv1alpha1.Schedule{At: ptr(int64(1700000000000))}))).To(Succeed())
		res, h := expectHealth(t, k8s, "CronJob", ns, "too-late", status.FailedStatus, "", "")
		g.Expect(res.Message).To(Equal("ScheduleValid: at 2023-11-14T22:13:20Z is in the past; a one-shot schedule must lie in the future"))
		g.Expect(h.Message).To(Equal("AtInPast: " + res.Message))
	})

	t.Run("BrowserProfile", func(t *testing.T) {
		g := NewWithT(t)
		bp := &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"}}
		g.Expect(k8s.Create(ctx, bp)).To(Succeed())
		expectHealth(t, k8s, "BrowserProfile", ns, "work", status.CurrentStatus, "", "")

		// Stored before the schema refused its idleTimeout: only a fix helps.
		restore := loosenProfileIdleTimeout(t)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agents.picobot.io/v1alpha1", "kind": "BrowserProfile",
			"metadata": map[string]any{"namespace": ns, "name": "forever"},
			"spec":     map[string]any{"label": "Work", "idleTimeout": "forever"},
		}}
		g.Eventually(func() error { return k8s.Create(ctx, obj.DeepCopy()) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		restore()
		res, h := expectHealth(t, k8s, "BrowserProfile", ns, "forever", status.FailedStatus, "", "")
		g.Expect(h.Message).To(Equal("InvalidSpec: " + res.Message))
		// (A browser starting, a pod that cannot pull its image and a
		// profile no agent may use need browser pods: TestBrowserPods.)
	})

	// No operator has looked at it yet (the namespace is not watched): the
	// API server's default status says generation 0 is observed.
	unwatched := newRuntimeNamespace(t)
	g.Expect(k8s.Create(ctx, cronJob(unwatched, "unseen", picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"}))).To(Succeed())
	res, h := expectHealth(t, k8s, "CronJob", unwatched, "unseen", status.InProgressStatus, "", "")
	g.Expect(res.Message).To(Equal("CronJob generation is 1, but latest observed generation is 0"))
	g.Expect(h.Message).To(Equal("Waiting for the operator to observe generation 1"))
}

// TestGitOpsHealthOfWarmPools: an Agent whose warm pool is filling reads
// InProgress/Progressing (Ready already True: a session can start), and
// Current/Healthy once its pods are warm.
func TestGitOpsHealthOfWarmPools(t *testing.T) {
	ns := newRuntimeNamespace(t)
	rc := startRuntimeManager(t, ns, nil)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, runtimeAgent(ns, "pool", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](2)}))).To(Succeed())
	res, h := expectHealth(t, k8s, "Agent", ns, "pool", status.InProgressStatus, "", "RuntimeReady: Warm pool filling: 0 of 2 warm, 2 starting")
	g.Expect(h.Message).To(Equal(picobotv1alpha1.ReasonPodsStarting + ": " + res.Message))
	a := getAgent(g, ns, "pool")
	g.Expect(meta.IsStatusConditionTrue(a.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())

	// The pods start and register warm (no kubelet here: the test writes
	// what their runtimes would).
	var pods []corev1.Pod
	g.Eventually(func(g Gomega) { pods = sessionPods(g, a); g.Expect(pods).To(HaveLen(2)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	g.Expect(rc.Redis.HSet(ctx, wake.PodsKey(ns, "pool"), pods[0].Name, "warm").Err()).To(Succeed())
	expectHealth(t, k8s, "Agent", ns, "pool", status.InProgressStatus, "", "RuntimeReady: Warm pool filling: 1 of 2 warm, 1 starting")
	g.Expect(rc.Redis.HSet(ctx, wake.PodsKey(ns, "pool"), pods[1].Name, "warm").Err()).To(Succeed())
	expectHealth(t, k8s, "Agent", ns, "pool", status.CurrentStatus, "", "")
	g.Expect(cond(getAgent(g, ns, "pool"), picobotv1alpha1.ConditionReconciling)).To(BeNil())
}
