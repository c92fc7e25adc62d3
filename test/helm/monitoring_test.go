package helm

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// monitoringCRDs are the Prometheus Operator CRDs of testdata/crds
// (hack/servicemonitor-crd.sh), installed before the tests run.
var monitoringCRDs = []string{"crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com",
	"crd/prometheusrules.monitoring.coreos.com"}

// TestServiceMonitorOnlyWithPrometheusOperatorAPI: the ServiceMonitor is
// rendered only when Helm sees monitoring.coreos.com/v1 ServiceMonitor (here
// given with --api-versions, as a cluster with the Prometheus Operator's
// CRDs reports it) or when forced; it scrapes over HTTPS with Prometheus's
// own token.
func TestServiceMonitorOnlyWithPrometheusOperatorAPI(t *testing.T) {
	const enabled, force, api = "operator.metrics.serviceMonitor.enabled=true", "operator.metrics.serviceMonitor.force=true", "monitoring.coreos.com/v1/ServiceMonitor"
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"enabled, API absent", []string{"--set", enabled}, false},
		{"enabled, API present", []string{"--set", enabled, "--api-versions", api}, true},
		{"enabled, only other kinds of the group", []string{"--set", enabled, "--api-versions", "monitoring.coreos.com/v1",
			"--api-versions", "monitoring.coreos.com/v1/PodMonitor"}, false},
		{"enabled and forced, API absent", []string{"--set", enabled, "--set", force}, true},
		{"enabled and all monitoring forced, API absent", []string{"--set", enabled, "--set", "monitoring.force=true"}, true},
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
	def := objects(t, mustRender(t, "default", "--set", "operator.metrics.serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"))
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
		"--set", "operator.metrics.serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"))
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

// TestMonitoringInstallWithoutPrometheusOperator: on a real API server
// without the Prometheus Operator's CRDs, installing and upgrading with every
// monitoring object enabled succeeds (the notes say which were not made; the
// dashboards, plain ConfigMaps, are); once the CRDs are installed an upgrade
// creates the ServiceMonitors, the PodMonitor and the PrometheusRule, and
// the API server accepts them against the real CRD schemas.
func TestMonitoringInstallWithoutPrometheusOperator(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	const ns, release = "picobot-sm", "sm"
	crdDir := filepath.Join(root, "test", "helm", "testdata", "crds")
	_, stderr, err := kubectl("", append([]string{"delete", "--wait", "--timeout=60s"}, monitoringCRDs...)...)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	restoreCRDs := func() error {
		if _, stderr, err := kubectl("", "apply", "--server-side", "-f", crdDir); err != nil {
			return fmt.Errorf("%w: %s", err, stderr)
		}
		return waitEstablished(monitoringCRDs)
	}
	t.Cleanup(func() {
		_, _, _ = helm("uninstall", release, "-n", ns)
		_, _, _ = kubectl("", "delete", "namespace", ns, "--wait=false")
		_ = restoreCRDs() // the other tests need them
	})

	// crds.enabled=false: the PicoBot CRDs belong to the other install test.
	out, stderr, err := helm("install", release, chartDir, "-n", ns, "--create-namespace", "--set", "fullnameOverride="+release,
		"--set", "crds.enabled=false", "--set", "operator.metrics.serviceMonitor.enabled=true",
		"--set", "monitoring.gateway.serviceMonitor=true", "--set", "monitoring.sessionPods.podMonitor=true",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboards.enabled=true")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("STATUS: deployed"))
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		g.Expect(out).To(ContainSubstring("NOTE: no " + kind + " was created"))
	}
	g.Expect(out).To(ContainSubstring("bind the ClusterRole\n" + release + "-metrics-reader"))
	dashboards, stderr, err := kubectl("", "get", "configmaps", "-n", ns, "-l", "grafana_dashboard=1", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(strings.Fields(dashboards)).To(ConsistOf("configmap/"+release+"-dashboard-overview", "configmap/"+release+"-dashboard-operator"))

	// The upgrade that used to fail with no matches for kind.
	out, stderr, err = helm("upgrade", release, chartDir, "-n", ns, "--reuse-values")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).To(ContainSubstring("NOTE: no PrometheusRule was created"))

	g.Expect(restoreCRDs()).To(Succeed())
	out, stderr, err = helm("upgrade", release, chartDir, "-n", ns, "--reuse-values")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(out).NotTo(ContainSubstring("was created"))
	made, stderr, err := kubectl("", "get", "servicemonitors,podmonitors,prometheusrules", "-n", ns, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(strings.Fields(made)).To(ConsistOf(
		"servicemonitor.monitoring.coreos.com/"+release+"-operator", "servicemonitor.monitoring.coreos.com/"+release+"-gateway",
		"podmonitor.monitoring.coreos.com/"+release+"-session", "prometheusrule.monitoring.coreos.com/"+release+"-alerts"))
	scheme, stderr, err := kubectl("", "get", "servicemonitor", release+"-operator", "-n", ns,
		"-o", "jsonpath={.spec.endpoints[0].scheme} {.spec.endpoints[0].bearerTokenFile}")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(scheme).To(Equal("https /var/run/secrets/kubernetes.io/serviceaccount/token"))
	pm, stderr, err := kubectl("", "get", "podmonitor", release+"-session", "-n", ns,
		"-o", "jsonpath={.spec.podMetricsEndpoints[0].port} {.spec.namespaceSelector.any}")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(pm).To(Equal("metrics true"))
	alerts, stderr, err := kubectl("", "get", "prometheusrule", release+"-alerts", "-n", ns, "-o", "jsonpath={.spec.groups[*].rules[*].alert}")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	g.Expect(strings.Fields(alerts)).To(ConsistOf("PicoBotTurnErrorRate", "PicoBotTurnLatencyHigh", "PicoBotQueueWaitHigh", "PicoBotBusBacklogGrowing", "PicoBotWarmPoolExhausted",
		"PicoBotCronFireLagHigh", "PicoBotOperatorReconcileErrors"))
}

// TestSessionMetricsReachTheOperator: the operator is told the session pods'
// metrics port and who may scrape it (networkPolicy.metricsFrom, as the
// JSON its --session-metrics-from reads, even with the chart's own
// NetworkPolicies off); with the port at 0 no PodMonitor is rendered, since
// no session pod would serve one.
func TestSessionMetricsReachTheOperator(t *testing.T) {
	g := NewWithT(t)
	args := podContainers(t, find(objects(t, mustRender(t, "default")), "Deployment", "picobot-operator"))[1].args
	g.Expect(args).To(ContainElement("--session-metrics-port=9090"))
	g.Expect(strings.Join(args, " ")).NotTo(ContainSubstring("--session-metrics-from"), "empty: anyone")

	peers := `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}]`
	args = podContainers(t, find(objects(t, mustRender(t, "default", "--set-json", "networkPolicy.metricsFrom="+peers,
		"--set", "networkPolicy.enabled=false")), "Deployment", "picobot-operator"))[1].args
	var from string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--session-metrics-from="); ok {
			from = v
		}
	}
	var got, want []networkingv1.NetworkPolicyPeer
	g.Expect(yaml.UnmarshalStrict([]byte(from), &got)).To(Succeed(), from)
	g.Expect(yaml.UnmarshalStrict([]byte(peers), &want)).To(Succeed())
	g.Expect(got).To(Equal(want))

	objs := objects(t, mustRender(t, "default", "--set", "operator.sessionMetricsPort=0", "--set", "monitoring.sessionPods.podMonitor=true",
		"--api-versions", "monitoring.coreos.com/v1/PodMonitor"))
	g.Expect(podContainers(t, find(objs, "Deployment", "picobot-operator"))[1].args).To(ContainElement("--session-metrics-port=0"))
	g.Expect(find(objs, "PodMonitor", "picobot-session")).To(BeNil())
}

// TestMonitoringObjectsOnlyWhenServed: the gateway's ServiceMonitor, the
// session PodMonitor and the PrometheusRule are each rendered only when
// enabled and the cluster serves their kind (or monitoring.force), with
// monitoring.labels for the Prometheus that selects them.
func TestMonitoringObjectsOnlyWhenServed(t *testing.T) {
	for _, tc := range []struct {
		kind, name, enable string
	}{
		{"ServiceMonitor", "picobot-gateway", "monitoring.gateway.serviceMonitor=true"},
		{"PodMonitor", "picobot-session", "monitoring.sessionPods.podMonitor=true"},
		{"PrometheusRule", "picobot-alerts", "monitoring.prometheusRule.enabled=true"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			g := NewWithT(t)
			api := "monitoring.coreos.com/v1/" + tc.kind
			render := func(args ...string) *unstructured.Unstructured {
				return find(objects(t, mustRender(t, "default", args...)), tc.kind, tc.name)
			}
			g.Expect(render("--set", tc.enable)).To(BeNil(), "kind not served")
			g.Expect(render("--set", tc.enable, "--api-versions", "monitoring.coreos.com/v1")).To(BeNil(), "the group alone is not the kind")
			g.Expect(render("--api-versions", api)).To(BeNil(), "not enabled")
			g.Expect(render("--set", tc.enable, "--set", "monitoring.force=true")).NotTo(BeNil(), "forced")
			obj := render("--set", tc.enable, "--api-versions", api, "--set", "monitoring.labels.release=kube-prometheus-stack")
			g.Expect(obj).NotTo(BeNil())
			g.Expect(obj.GetNamespace()).To(Equal(releaseNamespace))
			g.Expect(obj.GetLabels()).To(HaveKeyWithValue("release", "kube-prometheus-stack"))
		})
	}

	g := NewWithT(t)
	all := []string{"--set", "monitoring.force=true", "--set", "monitoring.gateway.serviceMonitor=true", "--set", "monitoring.sessionPods.podMonitor=true"}
	objs := objects(t, mustRender(t, "default", all...))
	eps, _, _ := unstructured.NestedSlice(find(objs, "ServiceMonitor", "picobot-gateway").Object, "spec", "endpoints")
	g.Expect(eps).To(Equal([]any{map[string]any{"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s"}}))
	pm := find(objs, "PodMonitor", "picobot-session")
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	g.Expect(sel).To(Equal(map[string]string{"app.kubernetes.io/name": "picobot", "app.kubernetes.io/component": "session",
		"app.kubernetes.io/managed-by": "picobot-operator"}), "the labels the operator gives session pods (podspec.SessionLabels)")
	nsSel, _, _ := unstructured.NestedMap(pm.Object, "spec", "namespaceSelector")
	g.Expect(nsSel).To(Equal(map[string]any{"any": true}))
	// Namespaced operator: only the namespaces it runs session pods in.
	pm = find(objects(t, mustRender(t, "default", append(all, "--set", "operator.watchNamespaces={team-a,team-b}")...)), "PodMonitor", "picobot-session")
	nsSel, _, _ = unstructured.NestedMap(pm.Object, "spec", "namespaceSelector")
	g.Expect(nsSel).To(Equal(map[string]any{"matchNames": []any{"team-a", "team-b"}}))
}
