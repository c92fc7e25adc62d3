package skill_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/skill"
)

// The watch delivers changes within milliseconds; these only bound a hang.
const (
	eventually = 20 * time.Second
	poll       = 50 * time.Millisecond
)

func requireCluster(t *testing.T) {
	t.Helper()
	if restConfig == nil {
		t.Skip(skipReason)
	}
}

// namespace creates a namespace for one test.
func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "skills-"}}
	NewWithT(t).Expect(c.Create(context.Background(), ns)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

func configMap(ns, name string, shared bool, data map[string]string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if shared {
		cm.Labels = map[string]string{skill.SharedLabel: "true"}
	}
	return cm
}

func keyRef(name, key string) *corev1.ConfigMapKeySelector {
	return &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// clusterAgent is the Agent of the cluster tests: deploy and later come
// from ConfigMaps by reference.
func clusterAgent(ns string) *picobotv1alpha1.Agent {
	return agent("assistant", ns,
		picobotv1alpha1.SkillSource{Name: "deploy", ConfigMapRef: keyRef("agent-skills", "deploy.md")},
		picobotv1alpha1.SkillSource{Name: "later", ConfigMapRef: keyRef("later", skill.SkillFile)},
	)
}

// seed creates the ConfigMaps the cluster tests start with.
func seed(t *testing.T, c client.Client, ns, other string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	for _, cm := range []*corev1.ConfigMap{
		configMap(ns, "skill-review", true, map[string]string{
			skill.SkillFile: skillMD("review", "Shared review v1.", "Review v1."), "checklist.md": "- tests pass"}),
		configMap(ns, "skill-deploy", true, map[string]string{skill.SkillFile: skillMD("deploy", "Shared deploy.", "shared deploy")}),
		configMap(ns, "agent-skills", false, map[string]string{"deploy.md": skillMD("deploy", "Agent deploy.", "agent deploy")}),
		configMap(ns, "not-shared", false, map[string]string{skill.SkillFile: skillMD("hidden", "Unlabelled.", "x")}),
		configMap(other, "skill-other", true, map[string]string{skill.SkillFile: skillMD("other-ns", "Other namespace.", "x")}),
	} {
		g.Expect(c.Create(ctx, cm)).To(Succeed())
	}
}

// update changes a ConfigMap with fn, retrying on conflicts.
func update(t *testing.T, c client.Client, ns, name string, fn func(*corev1.ConfigMap)) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		cm := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			return err
		}
		fn(cm)
		return c.Update(context.Background(), cm)
	}, eventually, poll).Should(Succeed())
}

// TestClusterConfigMapChangesReachRunningSessions builds the feature as a
// session pod does (a client that can watch) and changes the ConfigMaps under
// it: the next prompt and get_skill see every change, with no rebuild.
func TestClusterConfigMapChangesReachRunningSessions(t *testing.T) {
	requireCluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	c, err := client.NewWithWatch(restConfig, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ns, other := namespace(t, c), namespace(t, c)
	seed(t, c, ns, other)

	b := build(t, skill.NewFeature(skill.Options{}), &feature.Host{Mode: feature.ModeCluster, Tenant: ns, Kube: c}, clusterAgent(ns))

	// The first build waited for the watch, so everything is there at once.
	g.Expect(b.prompt()).To(ContainSubstring("\n- review: Shared review v1.\n"))
	g.Expect(b.prompt()).To(ContainSubstring("\n- deploy: Agent deploy.\n"))
	g.Expect(b.prompt()).NotTo(Or(ContainSubstring("hidden"), ContainSubstring("other-ns"), ContainSubstring("- later")))
	g.Expect(b.summary().Message).To(Equal("6 skills (1 agent, 1 shared, 4 built-in)"))
	g.Expect(b.failed()).To(ConsistOf(ContainSubstring("spec.skills[1] (later): ConfigMap later key SKILL.md: ConfigMap later does not exist in namespace " + ns)))
	g.Expect(b.call(t, map[string]any{"action": "list"}).Content).To(ContainSubstring("- deploy [agent, overrides shared]: Agent deploy."))
	g.Expect(b.get(t, "review")).To(Equal("Skill review [shared]: Shared review v1.\nFiles (read one with get_skill file=<name>): checklist.md\n\nReview v1."))
	g.Expect(b.call(t, map[string]any{"skill_name": "review", "file": "checklist.md"}).Content).To(HaveSuffix("- tests pass"))

	// Edit a shared skill.
	update(t, c, ns, "skill-review", func(cm *corev1.ConfigMap) {
		cm.Data[skill.SkillFile] = skillMD("review", "Shared review v2.", "Review v2.")
	})
	g.Eventually(b.prompt, eventually, poll).Should(ContainSubstring("\n- review: Shared review v2.\n"))
	g.Expect(b.get(t, "review")).To(HaveSuffix("\n\nReview v2."))

	// A referenced ConfigMap created after the session started.
	g.Expect(c.Create(ctx, configMap(ns, "later", false, map[string]string{
		skill.SkillFile: skillMD("later", "Arrived later.", "later body"), "notes.md": "n"}))).To(Succeed())
	g.Eventually(b.prompt, eventually, poll).Should(ContainSubstring("\n- later: Arrived later.\n"))
	g.Expect(b.failed()).To(BeEmpty())
	g.Expect(b.get(t, "later")).To(ContainSubstring("Files (read one with get_skill file=<name>): notes.md\n"))

	// A new shared ConfigMap overriding a built-in.
	g.Expect(c.Create(ctx, configMap(ns, "team-research", true, map[string]string{
		skill.SkillFile: skillMD("web-research", "Team research rules.", "team rules")}))).To(Succeed())
	g.Eventually(func() string { return b.call(t, map[string]any{"action": "list"}).Content }, eventually, poll).
		Should(ContainSubstring("- web-research [shared, overrides built-in]: Team research rules."))

	// Breaking the agent's ConfigMap falls back to the shared skill and
	// reports the problem.
	update(t, c, ns, "agent-skills", func(cm *corev1.ConfigMap) { cm.Data["deploy.md"] = "oops" })
	g.Eventually(b.prompt, eventually, poll).Should(ContainSubstring("\n- deploy: Shared deploy.\n"))
	g.Expect(b.failed()).To(ConsistOf(ContainSubstring("spec.skills[0] (deploy): ConfigMap agent-skills key deploy.md: missing frontmatter")))

	// Removing the label withdraws a shared skill; deleting a referenced
	// ConfigMap reports it again.
	update(t, c, ns, "skill-review", func(cm *corev1.ConfigMap) { delete(cm.Labels, skill.SharedLabel) })
	g.Eventually(b.prompt, eventually, poll).ShouldNot(ContainSubstring("- review:"))
	g.Expect(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}})).To(Succeed())
	g.Eventually(b.failed, eventually, poll).Should(ContainElement(ContainSubstring("ConfigMap later does not exist")))
	res := b.call(t, map[string]any{"skill_name": "later"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(HavePrefix("error: no skill named later; available: "))

	// A shared ConfigMap without SKILL.md is reported, not fatal.
	g.Expect(c.Create(ctx, configMap(ns, "skill-empty", true, map[string]string{"README": "x"}))).To(Succeed())
	g.Eventually(b.failed, eventually, poll).Should(ContainElement(ContainSubstring(
		"ConfigMap skill-empty: ConfigMap is labelled skills.picobot.io/shared=true but has no key SKILL.md")))
}

// TestClusterClientWithoutWatch covers a client that cannot watch (e.g. a
// manager's cached client): every turn reads the ConfigMaps.
func TestClusterClientWithoutWatch(t *testing.T) {
	requireCluster(t)
	g := NewWithT(t)
	watching, err := client.NewWithWatch(restConfig, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var plain client.Client = struct{ client.Client }{watching} // hides Watch
	ns, other := namespace(t, plain), namespace(t, plain)
	seed(t, plain, ns, other)

	b := build(t, skill.NewFeature(skill.Options{}), &feature.Host{Mode: feature.ModeCluster, Tenant: ns, Kube: plain}, clusterAgent(ns))
	g.Expect(b.prompt()).To(ContainSubstring("\n- review: Shared review v1.\n"))
	g.Expect(b.prompt()).To(ContainSubstring("\n- deploy: Agent deploy.\n"))
	update(t, plain, ns, "skill-review", func(cm *corev1.ConfigMap) {
		cm.Data[skill.SkillFile] = skillMD("review", "Shared review v2.", "Review v2.")
	})
	g.Expect(b.prompt()).To(ContainSubstring("\n- review: Shared review v2.\n"))
	g.Expect(b.failed()).To(ConsistOf(ContainSubstring("ConfigMap later does not exist in namespace " + ns)))
}

// TestClusterForbidden runs the feature as a user without any rights: the
// agent still loads with its built-in skills, and health says why the
// ConfigMap skills are missing.
func TestClusterForbidden(t *testing.T) {
	requireCluster(t)
	g := NewWithT(t)
	admin, err := client.New(restConfig, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ns := namespace(t, admin)
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	c, err := client.NewWithWatch(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	b := build(t, skill.NewFeature(skill.Options{SyncTimeout: time.Second}),
		&feature.Host{Mode: feature.ModeCluster, Tenant: ns, Kube: c}, clusterAgent(ns))
	g.Expect(b.summary().Message).To(Equal("4 skills (4 built-in)"))
	g.Eventually(b.failed, eventually, poll).Should(ConsistOf(
		ContainSubstring("spec.skills[0] (deploy): ConfigMap agent-skills key deploy.md: failed to read ConfigMap agent-skills: the watch has not started: "),
		ContainSubstring("spec.skills[1] (later): ConfigMap later key SKILL.md: failed to read ConfigMap later: the watch has not started: "),
		And(ContainSubstring("failed to list ConfigMaps labelled skills.picobot.io/shared=true: the watch has not started: "),
			ContainSubstring(`User "nobody" cannot list resource "configmaps"`)),
	))
}
