package realnode

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// helm upgrade to a new image tag rolls the release's pods onto it (the
// pre-upgrade migration Job runs it first); helm uninstall removes the
// release and keeps the CRDs, and with them the tenants' Agents.
func TestHelmUpgradeRollsThePodsAndUninstallKeepsTheCRDs(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	const newTag = imageTag + "-upgrade"
	_, err := st.node.Ctr(ctx, "-n", "k8s.io", "images", "tag", "--force", imageRepo+":"+imageTag, imageRepo+":"+newTag)
	g.Expect(err).NotTo(HaveOccurred())
	podNames := func() []string {
		out, err := st.node.Kubectl(ctx, "get", "pods", "-n", systemNamespace, "-l", "app.kubernetes.io/instance="+release,
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Fields(out)
	}
	before := podNames()
	g.Expect(before).NotTo(BeEmpty())

	out, err := st.helmRun(ctx, "upgrade", release, filepath.Join(st.root, "charts", "picobot"), "--namespace", systemNamespace,
		"--values", st.values, "--set", "image.tag="+newTag, "--wait", "--timeout", "5m")
	g.Expect(err).NotTo(HaveOccurred(), out)
	images, err := st.node.Kubectl(ctx, "get", "deployments", "-n", systemNamespace, "-o", "jsonpath={.items[*].spec.template.spec.containers[*].image}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(images)).To(HaveEach(imageRepo + ":" + newTag))
	g.Eventually(func(g Gomega) {
		out, err := st.node.Kubectl(ctx, "get", "pods", "-n", systemNamespace, "-l", "app.kubernetes.io/instance="+release,
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image}{"\n"}{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines).To(HaveLen(2), "one gateway and one operator, the old ones gone")
		for _, l := range lines {
			name, image, _ := strings.Cut(l, " ")
			g.Expect(before).NotTo(ContainElement(name))
			g.Expect(image).To(Equal(imageRepo + ":" + newTag))
		}
	}, "2m", "1s").Should(Succeed())

	out, err = st.helmRun(ctx, "uninstall", release, "--namespace", systemNamespace, "--wait", "--timeout", "3m")
	g.Expect(err).NotTo(HaveOccurred(), out)
	deployments, err := st.node.Kubectl(ctx, "get", "deployments", "-n", systemNamespace, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(deployments)).To(BeEmpty())
	crds, err := st.node.Kubectl(ctx, "get", "crds", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(crds)).To(ContainElements(
		"customresourcedefinition.apiextensions.k8s.io/agents.agents.picobot.io",
		"customresourcedefinition.apiextensions.k8s.io/cronjobs.agents.picobot.io",
		"customresourcedefinition.apiextensions.k8s.io/browserprofiles.agents.picobot.io"))
	if agents, err := st.node.Kubectl(ctx, "get", "agents", "-A", "-o", "name"); err == nil && strings.TrimSpace(agents) != "" {
		g.Expect(agents).To(ContainSubstring("agent.agents.picobot.io/helper"), "the chat test's Agent survives")
	}
}
