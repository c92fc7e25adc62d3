package helm

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// applyRBAC renders the chart as release in namespace ns with the extra
// helm flags, and creates its ServiceAccounts and RBAC objects on the API
// server (what `kubectl auth can-i` judges), removing them when the test
// ends. It returns the applied objects.
func applyRBAC(t *testing.T, release, ns string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	g := NewWithT(t)
	out, stderr, err := helm(append([]string{"template", release, chartDir, "--namespace", ns, "--set", "fullnameOverride=" + release}, extra...)...)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	var keep []*unstructured.Unstructured
	for _, o := range objects(t, out) {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			keep = append(keep, o)
		}
	}
	items := make([]any, len(keep))
	for i, o := range keep {
		items[i] = o.Object
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range []string{ns, "team-a", "team-b"} {
		_, _, _ = kubectl("", "create", "namespace", n) // shared by the cases; may exist
	}
	_, stderr, err = kubectl(string(list), "apply", "--server-side", "--field-manager=picobot-rbac-test", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	t.Cleanup(func() { _, _, _ = kubectl(string(list), "delete", "--ignore-not-found", "-f", "-") })
	return keep
}

// canI asks the API server whether subject may do verb on resource (with
// /subresource) in ns ("" for every namespace), with `kubectl auth can-i`.
func canI(t *testing.T, subject, verb, resource, ns string) bool {
	t.Helper()
	resource, sub, _ := strings.Cut(resource, "/")
	// "kind:name" asks about one object by name (kubectl's kind/name).
	resource = strings.Replace(resource, ":", "/", 1)
	args := []string{"auth", "can-i", verb, resource, "--as=" + subject}
	if sub != "" {
		args = append(args, "--subresource="+sub)
	}
	if ns == "" {
		args = append(args, "--all-namespaces")
	} else {
		args = append(args, "-n", ns)
	}
	out, stderr, err := kubectl("", args...)
	switch strings.TrimSpace(out) {
	case "yes":
		return true
	case "no":
		return false
	}
	t.Fatalf("kubectl %s: %v: %s%s", strings.Join(args, " "), err, out, stderr)
	return false
}

// TestAuthCanI installs the chart's RBAC on a real API server, once
// cluster-wide and once in namespaced mode (operator.watchNamespaces), binds
// a tenant editor and viewer to the chart's picobot-edit and picobot-view
// roles in team-a, and asks `kubectl auth can-i` what each identity may do.
func TestAuthCanI(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	const sys, nsSys = "rbac-system", "rbac-ns-system"
	objs := applyRBAC(t, "rbac", sys)
	applyRBAC(t, "rbac-ns", nsSys, "--set", "operator.watchNamespaces={team-a}")

	// The tenant roles aggregate into Kubernetes' edit/admin and view.
	for _, o := range objs {
		switch o.GetName() {
		case "rbac-edit":
			g.Expect(o.GetLabels()).To(And(HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-edit", "true"),
				HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-admin", "true")))
		case "rbac-view":
			g.Expect(o.GetLabels()).To(HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-view", "true"))
		}
	}
	// Tenants: alice edits team-a, bob views it (bound directly: the
	// aggregation into edit/view is kube-controller-manager's, which this
	// control plane does not run).
	bind := `{"apiVersion":"v1","kind":"List","items":[
{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"alice-edit","namespace":"team-a"},
 "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rbac-edit"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"alice"}]},
{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"bob-view","namespace":"team-a"},
 "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rbac-view"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"bob"}]}]}`
	_, stderr, err := kubectl(bind, "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	t.Cleanup(func() { _, _, _ = kubectl(bind, "delete", "--ignore-not-found", "-f", "-") })

	sa := func(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }
	operator, gateway, nsOperator := sa(sys, "rbac-operator"), sa(sys, "rbac-gateway"), sa(nsSys, "rbac-ns-operator")
	cases := []struct {
		who, subject, verb, resource, ns string
		want                             bool
	}{
		// The operator, cluster-wide: what it runs in tenant namespaces.
		{"operator", operator, "create", "pods", "team-a", true},
		{"operator", operator, "update", "networkpolicies", "team-b", true},
		{"operator", operator, "update", "roles", "team-a", true},
		{"operator", operator, "patch", "agents.agents.picobot.io/status", "team-a", true},
		{"operator", operator, "list", "agents.agents.picobot.io", "", true},
		{"operator", operator, "update", "agents.agents.picobot.io", "team-a", false},
		{"operator", operator, "create", "clusterroles", "", false},
		{"operator", operator, "escalate", "roles", "team-a", false},
		{"operator", operator, "bind", "roles", "team-a", false},
		{"operator", operator, "create", "deployments.apps", "team-a", false},
		{"operator", operator, "get", "nodes", "", false},
		// It publishes for the gateway in its own namespace, and a sandbox
		// pod's address (sandbox placement "pod") beside its session pod.
		{"operator", operator, "update", "configmaps", sys, true},
		{"operator", operator, "create", "configmaps", "team-a", true},
		// It reads where the API server answers (the kubernetes Service and
		// its EndpointSlices) for the session pods' NetworkPolicy, and
		// changes neither.
		{"operator", operator, "get", "services", "default", true},
		{"operator", operator, "list", "endpointslices.discovery.k8s.io", "default", true},
		{"operator", operator, "create", "services", "default", false},
		{"operator", operator, "update", "endpointslices.discovery.k8s.io", "default", false},
		// Namespaced mode: the same rights in team-a, none elsewhere.
		{"namespaced operator", nsOperator, "create", "pods", "team-a", true},
		{"namespaced operator", nsOperator, "watch", "agents.agents.picobot.io", "team-a", true},
		{"namespaced operator", nsOperator, "create", "secrets", "team-a", true},
		{"namespaced operator", nsOperator, "create", "pods", "team-b", false},
		{"namespaced operator", nsOperator, "get", "secrets", "team-b", false},
		{"namespaced operator", nsOperator, "get", "secrets", "kube-system", false},
		{"namespaced operator", nsOperator, "list", "agents.agents.picobot.io", "", false},
		{"namespaced operator", nsOperator, "update", "leases.coordination.k8s.io", nsSys, true},
		{"namespaced operator", nsOperator, "watch", "configmaps", nsSys, true},
		{"namespaced operator", nsOperator, "create", "secrets", nsSys, true},
		{"namespaced operator", nsOperator, "create", "configmaps", "team-b", false},
		// Its metrics endpoint reviews scrapers' tokens and rights, in
		// either mode (cluster-scoped reviews).
		{"operator", operator, "create", "tokenreviews.authentication.k8s.io", "", true},
		{"operator", operator, "create", "subjectaccessreviews.authorization.k8s.io", "", true},
		{"namespaced operator", nsOperator, "create", "tokenreviews.authentication.k8s.io", "", true},
		{"namespaced operator", nsOperator, "create", "subjectaccessreviews.authorization.k8s.io", "", true},
		{"gateway", gateway, "create", "subjectaccessreviews.authorization.k8s.io", "", false},
		// The gateway reads; it writes nothing the operator keeps.
		{"gateway", gateway, "list", "agents.agents.picobot.io", "", true},
		{"gateway", gateway, "update", "agents.agents.picobot.io", "team-a", false},
		{"gateway", gateway, "create", "pods", "team-a", false},
		{"gateway", gateway, "create", "secrets", "team-a", false},
		// The blob grant service reviews session pods' tokens.
		{"gateway", gateway, "create", "tokenreviews.authentication.k8s.io", "", true},
		// No Secret outside its own namespace: it reads what the operator
		// publishes there (API-key hashes, channel credential copies).
		{"gateway", gateway, "get", "secrets", "kube-system", false},
		{"gateway", gateway, "get", "secrets", "team-a", false},
		{"gateway", gateway, "list", "secrets", "team-b", false},
		{"gateway", gateway, "watch", "secrets", "", false},
		{"gateway", gateway, "list", "configmaps", "team-a", false},
		{"gateway", gateway, "watch", "configmaps", sys, true},
		{"gateway", gateway, "get", "secrets", sys, true},
		{"gateway", gateway, "update", "configmaps", sys, false},
		// A tenant namespace editor manages PicoBot objects in it, and
		// nothing else the roles do not give.
		{"tenant editor", "alice", "create", "agents.agents.picobot.io", "team-a", true},
		{"tenant editor", "alice", "delete", "cronjobs.agents.picobot.io", "team-a", true},
		{"tenant editor", "alice", "update", "browserprofiles.agents.picobot.io", "team-a", true},
		{"tenant editor", "alice", "update", "agents.agents.picobot.io/status", "team-a", false},
		{"tenant editor", "alice", "create", "agents.agents.picobot.io", "team-b", false},
		{"tenant editor", "alice", "get", "secrets", "team-a", false},
		{"tenant viewer", "bob", "list", "agents.agents.picobot.io", "team-a", true},
		{"tenant viewer", "bob", "get", "cronjobs.agents.picobot.io", "team-a", true},
		{"tenant viewer", "bob", "create", "agents.agents.picobot.io", "team-a", false},
		{"tenant viewer", "bob", "list", "agents.agents.picobot.io", "team-b", false},
		// The platform team sets a namespace's TenantQuota: its tenant
		// reads it and cannot change it; the operator reads them all (it
		// grants session pods get on theirs).
		{"tenant editor", "alice", "get", "tenantquotas.agents.picobot.io", "team-a", true},
		{"tenant editor", "alice", "watch", "tenantquotas.agents.picobot.io", "team-a", true},
		{"tenant editor", "alice", "create", "tenantquotas.agents.picobot.io", "team-a", false},
		{"tenant editor", "alice", "update", "tenantquotas.agents.picobot.io", "team-a", false},
		{"tenant editor", "alice", "patch", "tenantquotas.agents.picobot.io", "team-a", false},
		{"tenant editor", "alice", "delete", "tenantquotas.agents.picobot.io", "team-a", false},
		{"tenant editor", "alice", "update", "tenantquotas.agents.picobot.io/status", "team-a", false},
		{"tenant viewer", "bob", "list", "tenantquotas.agents.picobot.io", "team-a", true},
		{"tenant viewer", "bob", "create", "tenantquotas.agents.picobot.io", "team-a", false},
		{"operator", operator, "list", "tenantquotas.agents.picobot.io", "", true},
		{"operator", operator, "update", "tenantquotas.agents.picobot.io", "team-a", false},
		{"namespaced operator", nsOperator, "get", "tenantquotas.agents.picobot.io", "team-a", true},
		// The gateway enforces each tenant's session and message caps: it
		// reads the quota named default, and nothing else of the kind.
		{"gateway", gateway, "get", "tenantquotas.agents.picobot.io:default", "team-a", true},
		{"gateway", gateway, "get", "tenantquotas.agents.picobot.io:other", "team-a", false},
		{"gateway", gateway, "list", "tenantquotas.agents.picobot.io", "team-a", false},
		{"gateway", gateway, "update", "tenantquotas.agents.picobot.io:default", "team-a", false},
	}
	// Prometheus, bound to the chart's metrics-reader ClusterRole, may get
	// /metrics; nobody else may.
	promBinding := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"rbac-prometheus"},
 "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rbac-metrics-reader"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"prometheus"}]}`
	_, stderr, err = kubectl(promBinding, "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	t.Cleanup(func() { _, _, _ = kubectl(promBinding, "delete", "--ignore-not-found", "-f", "-") })
	for who, want := range map[string]string{"prometheus": "yes", "alice": "no", gateway: "no"} {
		out, _, _ := kubectl("", "auth", "can-i", "get", "/metrics", "--as="+who)
		g.Expect(strings.TrimSpace(out)).To(Equal(want), "%s: get /metrics", who)
	}
	out, _, _ := kubectl("", "auth", "can-i", "get", "/logs", "--as=prometheus")
	g.Expect(strings.TrimSpace(out)).To(Equal("no"), "the reader role grants /metrics only")

	for _, tc := range cases {
		where := tc.ns
		if where == "" {
			where = "all namespaces"
		}
		g.Expect(canI(t, tc.subject, tc.verb, tc.resource, tc.ns)).To(Equal(tc.want), "%s: %s %s in %s", tc.who, tc.verb, tc.resource, where)
	}
}
