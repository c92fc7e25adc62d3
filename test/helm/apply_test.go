package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// applyDryRun sends manifests to the API server with server-side apply in
// dry-run mode: every object is validated (schemas, CEL rules, defaulting,
// admission) and nothing is stored. It returns kubectl's output, one line
// per object.
func applyDryRun(t *testing.T, manifests string) string {
	t.Helper()
	out, stderr, err := kubectl(manifests, "apply", "--server-side", "--force-conflicts", "--dry-run=server",
		"--field-manager=picobot-chart-test", "-f", "-")
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), "the API server refused the manifests:\n%s", stderr)
	return out
}

// expectAllApplied checks that every object of the manifests was accepted.
func expectAllApplied(t *testing.T, manifests, out string) {
	t.Helper()
	g := NewWithT(t)
	objs := objects(t, manifests)
	g.Expect(objs).NotTo(BeEmpty())
	for _, o := range objs {
		g.Expect(out).To(ContainSubstring("/"+o.GetName()+" serverside-applied (server dry run)"), "%s/%s", o.GetKind(), o.GetName())
	}
	g.Expect(strings.Count(out, "serverside-applied (server dry run)")).To(Equal(len(objs)))
}

// TestRenderedManifestsApplyToAPIServer: every object the chart renders, for
// every case, is valid for a real kube-apiserver (the chart's CRDs and the
// ServiceMonitor CRD are installed).
func TestRenderedManifestsApplyToAPIServer(t *testing.T) {
	needAPIServer(t)
	for _, name := range chartCases {
		t.Run(name, func(t *testing.T) {
			manifests := mustRender(t, name)
			expectAllApplied(t, manifests, applyDryRun(t, manifests))
		})
	}
}

// TestInstallUpgradeUninstall installs the chart with helm into the real API
// server (bundled servers: no hook to wait for), upgrades it, and uninstalls
// it, checking what stays. There is no kubelet: pods never start, but every
// object is created as Helm creates it.
func TestInstallUpgradeUninstall(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	const ns = "picobot-it"
	// CRDs applied before the chart (as envtest did here, or as a kustomize
	// install does) are adopted by the release once labelled and annotated.
	for _, crd := range []string{"agents.agents.picobot.io", "cronjobs.agents.picobot.io", "browserprofiles.agents.picobot.io", "tenantquotas.agents.picobot.io"} {
		_, stderr, err := kubectl("", "label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
		g.Expect(err).NotTo(HaveOccurred(), stderr)
		_, stderr, err = kubectl("", "annotate", "--overwrite", "crd", crd, "meta.helm.sh/release-name="+releaseName, "meta.helm.sh/release-namespace="+ns)
		g.Expect(err).NotTo(HaveOccurred(), stderr)
	}

	out, stderr, err := helm("install", releaseName, chartDir, "-n", ns, "--create-namespace")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("STATUS: deployed"))
	g.Expect(out).To(ContainSubstring("WARNING: NOT FOR PRODUCTION"))
	g.Expect(out).To(ContainSubstring("Bundled single-instance servers are running: PostgreSQL, Redis (Valkey), S3 (SeaweedFS)"))
	g.Expect(out).To(ContainSubstring("kubectl port-forward -n picobot-it svc/picobot-gateway 8080:80"))
	t.Cleanup(func() {
		_, _, _ = helm("uninstall", releaseName, "-n", ns)
		_, _, _ = kubectl("", "delete", "secret", "picobot-bundled-credentials", "-n", ns, "--ignore-not-found")
	})

	secretData := func() string {
		out, stderr, err := kubectl("", "get", "secret", "picobot-bundled-credentials", "-n", ns, "-o", "jsonpath={.data}")
		g.Expect(err).NotTo(HaveOccurred(), stderr)
		return out
	}
	before := secretData()
	g.Expect(before).To(ContainSubstring("postgres-app-url"))
	out, _, err = kubectl("", "get", "deployments,statefulsets,services,networkpolicies,poddisruptionbudgets", "-n", ns, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	for _, want := range []string{"deployment.apps/picobot-operator", "deployment.apps/picobot-gateway",
		"statefulset.apps/picobot-postgres", "statefulset.apps/picobot-redis", "statefulset.apps/picobot-s3",
		"service/picobot-gateway", "networkpolicy.networking.k8s.io/picobot-gateway",
		"poddisruptionbudget.policy/picobot-operator"} {
		g.Expect(out).To(ContainSubstring(want))
	}

	// An upgrade keeps the generated credentials (read back with lookup) and
	// changes what the values say.
	_, stderr, err = helm("upgrade", releaseName, chartDir, "-n", ns, "--set", "gateway.replicaCount=3")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(secretData()).To(Equal(before), "the bundled credentials changed on upgrade")
	out, _, err = kubectl("", "get", "deployment", "picobot-gateway", "-n", ns, "-o", "jsonpath={.spec.replicas}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("3"))

	// Invalid values are refused before anything changes.
	_, stderr, err = helm("upgrade", releaseName, chartDir, "-n", ns, "--set", "gateway.replicas=3")
	g.Expect(err).To(HaveOccurred())
	g.Expect(stderr).To(ContainSubstring("at '/gateway': additional properties 'replicas' not allowed"))

	// Uninstall: the workloads go; the CRDs and the credentials stay.
	_, stderr, err = helm("uninstall", releaseName, "-n", ns)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	out, _, err = kubectl("", "get", "deployments,statefulsets,services", "-n", ns, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(out)).To(BeEmpty())
	g.Expect(secretData()).To(Equal(before))
	_, stderr, err = kubectl("", "get", "crd", "agents.agents.picobot.io", "cronjobs.agents.picobot.io", "browserprofiles.agents.picobot.io",
		"tenantquotas.agents.picobot.io")
	g.Expect(err).NotTo(HaveOccurred(), "a kept CRD is gone: %s", stderr)
}

// TestKustomizeDefaultApplies: config/default renders with kubectl's
// kustomize into a complete install that the API server accepts.
func TestKustomizeDefaultApplies(t *testing.T) {
	g := NewWithT(t)
	manifests, stderr, err := kubectl("", "kustomize", filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	objs := objects(t, manifests)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()+"/"+o.GetName()] = true
		if o.GetKind() != "Namespace" && o.GetKind() != "CustomResourceDefinition" && o.GetNamespace() == "" &&
			!strings.HasPrefix(o.GetKind(), "Cluster") {
			t.Errorf("%s/%s has no namespace", o.GetKind(), o.GetName())
		}
	}
	for _, want := range []string{"Namespace/picobot-system", "CustomResourceDefinition/agents.agents.picobot.io",
		"Deployment/picobot-operator", "Deployment/picobot-gateway", "Service/picobot-gateway", "Job/picobot-migrate",
		"ClusterRole/picobot-operator", "ClusterRole/picobot-gateway", "Role/picobot-leader-election"} {
		g.Expect(kinds).To(HaveKey(want))
	}
	op := find(objs, "Deployment", "picobot-operator")
	c := podContainers(t, op)[0]
	g.Expect(c.args).To(ContainElements("--leader-elect", "--metrics-bind-address=:8443", "--runtime-image=ghcr.io/picobot/picobot:0.1.0"))
	for _, e := range c.env {
		if ref, ok, _ := unstructured.NestedString(e, "valueFrom", "secretKeyRef", "name"); ok {
			g.Expect(ref).To(Equal("picobot-connection"), "kustomize must not rename the user's Secret")
		}
	}
	// The ServiceAccount subjects follow the namespace.
	crb := find(objs, "ClusterRoleBinding", "picobot-gateway")
	subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
	g.Expect(subjects).To(ConsistOf(HaveKeyWithValue("namespace", "picobot-system")))

	needAPIServer(t)
	expectAllApplied(t, manifests, applyDryRun(t, manifests))
}

// yamlBlock matches a fenced ```yaml block in Markdown.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestDocsExamplesApply: every YAML example in the guides and READMEs
// parses; chart values are accepted by the chart, and manifests made of
// Kubernetes and PicoBot objects by the API server (server-side dry run;
// namespaces they name are created).
func TestDocsExamplesApply(t *testing.T) {
	for _, doc := range []string{"docs/install.md", "docs/gitops.md", "charts/picobot/README.md", "images/README.md"} {
		t.Run(strings.ReplaceAll(doc, "/", "_"), func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(filepath.Join(root, doc))
			g.Expect(err).NotTo(HaveOccurred())
			blocks := yamlBlock.FindAllStringSubmatch(string(data), -1)
			for i, b := range blocks {
				objs := objects(t, b[1])
				if len(objs) == 1 && objs[0].GetKind() == "" && objs[0].GetAPIVersion() == "" {
					// Chart values: the chart must accept them.
					file := filepath.Join(t.TempDir(), "values.yaml")
					g.Expect(os.WriteFile(file, []byte(b[1]), 0o600)).To(Succeed())
					_, err := renderChart("default", "-f", file)
					g.Expect(err).NotTo(HaveOccurred(), "%s, YAML block %d: the chart refuses these values", doc, i+1)
					continue
				}
				applicable := len(objs) > 0
				for _, o := range objs {
					group := strings.Split(o.GetAPIVersion(), "/")[0]
					if o.GetAPIVersion() != "v1" && group != "agents.picobot.io" && group != "apps" && group != "networking.k8s.io" {
						applicable = false // e.g. Argo CD or Flux objects: not installed here
					}
				}
				if !applicable || env == nil {
					continue
				}
				for _, o := range objs {
					if ns := o.GetNamespace(); ns != "" {
						_, _, _ = kubectl("", "create", "namespace", ns)
					}
				}
				manifests := b[1]
				out, stderr, err := kubectl(manifests, "apply", "--server-side", "--dry-run=server", "-f", "-")
				g.Expect(err).NotTo(HaveOccurred(), "%s, YAML block %d:\n%s\n%s", doc, i+1, manifests, stderr)
				g.Expect(strings.Count(out, "serverside-applied (server dry run)")).To(Equal(len(objs)), fmt.Sprintf("%s block %d: %s", doc, i+1, out))
			}
		})
	}
}
