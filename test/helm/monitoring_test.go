package helm

import (
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestServiceMonitorOnlyWithPrometheusOperatorAPI: the ServiceMonitor is
// rendered only when Helm sees monitoring.coreos.com/v1 (here given with
// --api-versions, as a cluster with the Prometheus Operator's CRDs reports
// it) or when forced; it scrapes over HTTPS with Prometheus's own token.
func TestServiceMonitorOnlyWithPrometheusOperatorAPI(t *testing.T) {
	const enabled, force, api = "operator.metrics.serviceMonitor.enabled=true", "operator.metrics.serviceMonitor.force=true", "monitoring.coreos.com/v1"
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"enabled, API absent", []string{"--set", enabled}, false},
		{"enabled, API present", []string{"--set", enabled, "--api-versions", api}, true},
		{"enabled and forced, API absent", []string{"--set", enabled, "--set", force}, true},
		{"API present, not enabled", []string{"--api-versions", api}, false},
		{"forced, not enabled", []string{"--set", force}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			sm := find(objects(t, mustRender(t, "default", tt.args...)), "ServiceMonitor", "picobot-operator")
			if !tt.want {
				g.Expect(sm).To(BeNil())
				return
			}
			g.Expect(sm).NotTo(BeNil())
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			g.Expect(eps).To(Equal([]any{map[string]any{"port": "https", "path": "/metrics", "scheme": "https", "interval": "30s",
				"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
				"tlsConfig":       map[string]any{"insecureSkipVerify": true}}}))
		})
	}
}

// TestMetricsAreSecureByDefault: the operator serves HTTPS metrics behind
// authn/authz (no --metrics-secure=false), its Service names the port https,
// the chart grants the reviews the endpoint makes and ships the reader role
// Prometheus is bound to; metrics.secure=false undoes all of it, and
// certSecret mounts a real certificate.
func TestMetricsAreSecureByDefault(t *testing.T) {
	g := NewWithT(t)
	def := objects(t, mustRender(t, "default", "--set", "operator.metrics.serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1"))
	args := podContainers(t, find(def, "Deployment", "picobot-operator"))[1].args
	g.Expect(args).To(ContainElement("--metrics-bind-address=:8443"))
	g.Expect(strings.Join(args, " ")).NotTo(ContainSubstring("--metrics-secure"))
	g.Expect(strings.Join(args, " ")).NotTo(ContainSubstring("--metrics-cert-path"))
	ports, _, _ := unstructured.NestedSlice(find(def, "Service", "picobot-operator-metrics").Object, "spec", "ports")
	g.Expect(ports).To(ConsistOf(HaveKeyWithValue("name", "https")))
	reader := find(def, "ClusterRole", "picobot-metrics-reader")
	g.Expect(reader).NotTo(BeNil())
	rules, _, _ := unstructured.NestedSlice(reader.Object, "rules")
	g.Expect(rules).To(Equal([]any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}}))
	auth := find(def, "ClusterRoleBinding", "picobot-operator-metrics-auth")
	g.Expect(auth).NotTo(BeNil())
	subjects, _, _ := unstructured.NestedSlice(auth.Object, "subjects")
	g.Expect(subjects).To(ConsistOf(And(HaveKeyWithValue("name", "picobot-operator"), HaveKeyWithValue("namespace", releaseNamespace))))

	plain := objects(t, mustRender(t, "default", "--set", "operator.metrics.secure=false",
		"--set", "operator.metrics.serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1"))
	g.Expect(podContainers(t, find(plain, "Deployment", "picobot-operator"))[1].args).To(ContainElement("--metrics-secure=false"))
	ports, _, _ = unstructured.NestedSlice(find(plain, "Service", "picobot-operator-metrics").Object, "spec", "ports")
	g.Expect(ports).To(ConsistOf(HaveKeyWithValue("name", "http")))
	g.Expect(find(plain, "ClusterRole", "picobot-metrics-reader")).To(BeNil())
	g.Expect(find(plain, "ClusterRole", "picobot-operator-metrics-auth")).To(BeNil())
	eps, _, _ := unstructured.NestedSlice(find(plain, "ServiceMonitor", "picobot-operator").Object, "spec", "endpoints")
	g.Expect(eps).To(Equal([]any{map[string]any{"port": "http", "path": "/metrics", "scheme": "http", "interval": "30s"}}))

	cert := find(objects(t, mustRender(t, "default", "--set", "operator.metrics.certSecret=operator-metrics-tls")), "Deployment", "picobot-operator")
	g.Expect(podContainers(t, cert)[1].args).To(ContainElement("--metrics-cert-path=/etc/picobot/metrics-certs"))
	vols, _, _ := unstructured.NestedSlice(cert.Object, "spec", "template", "spec", "volumes")
	g.Expect(vols).To(ConsistOf(map[string]any{"name": "metrics-certs", "secret": map[string]any{"secretName": "operator-metrics-tls"}}))
}

// TestServiceMonitorInstallWithoutPrometheusOperator: on a real API server
// without the ServiceMonitor CRD, installing with the ServiceMonitor enabled
// succeeds (and says none was made); once the CRD is installed an upgrade
// creates it, and the API server accepts it.
func TestServiceMonitorInstallWithoutPrometheusOperator(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	const ns, release, crd = "picobot-sm", "sm", "crd/servicemonitors.monitoring.coreos.com"
	crdDir := filepath.Join(root, "test", "helm", "testdata", "crds")
	_, stderr, err := kubectl("", "delete", crd, "--wait", "--timeout=60s")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	restoreCRD := func() {
		_, stderr, err := kubectl("", "apply", "--server-side", "-f", crdDir)
		g.Expect(err).NotTo(HaveOccurred(), stderr)
		_, stderr, err = kubectl("", "wait", "--for=condition=Established", crd, "--timeout=60s")
		g.Expect(err).NotTo(HaveOccurred(), stderr)
	}
	t.Cleanup(func() {
		_, _, _ = helm("uninstall", release, "-n", ns)
		_, _, _ = kubectl("", "delete", "namespace", ns, "--wait=false")
		_, _, _ = kubectl("", "apply", "--server-side", "-f", crdDir) // the other tests need it
		_, _, _ = kubectl("", "wait", "--for=condition=Established", crd, "--timeout=60s")
	})

	// crds.enabled=false: the PicoBot CRDs belong to the other install test.
	out, stderr, err := helm("install", release, chartDir, "-n", ns, "--create-namespace", "--set", "fullnameOverride="+release,
		"--set", "crds.enabled=false", "--set", "operator.metrics.serviceMonitor.enabled=true")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("STATUS: deployed"))
	g.Expect(out).To(ContainSubstring("NOTE: no ServiceMonitor was created"))
	g.Expect(out).To(ContainSubstring("bind the ClusterRole\n" + release + "-metrics-reader"))

	restoreCRD()
	out, stderr, err = helm("upgrade", release, chartDir, "-n", ns, "--reuse-values")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).NotTo(ContainSubstring("no ServiceMonitor was created"))
	scheme, stderr, err := kubectl("", "get", "servicemonitor", release+"-operator", "-n", ns,
		"-o", "jsonpath={.spec.endpoints[0].scheme} {.spec.endpoints[0].bearerTokenFile}")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(scheme).To(Equal("https /var/run/secrets/kubernetes.io/serviceaccount/token"))
}
