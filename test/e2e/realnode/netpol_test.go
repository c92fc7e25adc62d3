package realnode

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/test/realnode"
)

// probePods are two pods of the netcheck image (hack/realnode/netcheck) in
// namespace %[1]s: one labelled as a session pod, so the session pods'
// NetworkPolicy selects it, and one that no policy selects.
const probePods = `
apiVersion: v1
kind: Pod
metadata:
  name: session-probe
  namespace: %[1]s
  labels: {app.kubernetes.io/name: picobot, app.kubernetes.io/component: session}
spec: %[2]s
---
apiVersion: v1
kind: Pod
metadata:
  name: other-probe
  namespace: %[1]s
  labels: {app.kubernetes.io/name: netcheck}
spec: %[2]s
`

// probeSpec is the probe pods' spec.
const probeSpec = `{terminationGracePeriodSeconds: 1, automountServiceAccountToken: false, containers: [{name: netcheck,
  image: localhost/picobot-netcheck:dev, imagePullPolicy: Never, securityContext: {runAsNonRoot: true,
  readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]}`

// policyAgent is an Agent without warm pods (%[2]s: the fake LLM's URL):
// its namespace gets the operator's session pods' NetworkPolicy.
const policyAgent = `
apiVersion: v1
kind: Secret
metadata: {name: model-key, namespace: %[1]s}
stringData: {apiKey: sk-fake}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: helper, namespace: %[1]s}
spec:
  instructions: You are a test agent.
  model: {provider: openai, model: fake-model, baseURL: %[2]s, apiKeySecretRef: {name: model-key, key: apiKey}}
  runtime: {warmPool: 0}
`

// check is one probe: from pod, a connection (kind tcp, target HOST:PORT)
// or a name lookup (kind dns, target NAME).
type check struct{ pod, kind, target string }

// expectReach expects every check from namespace ns's probe pods to succeed
// (want true) or be refused (want false).
func expectReach(ctx context.Context, g Gomega, ns string, want bool, checks ...check) {
	for _, c := range checks {
		got, err := reach(ctx, ns, c.pod, c.kind, c.target)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(want), "%s %s %s", c.pod, c.kind, c.target)
	}
}

// reach says whether pod opens a connection (tcp HOST:PORT) or resolves a
// name (dns NAME) from its own address; an error is a failure of the probe
// itself (kubectl, the pod), never a refusal.
func reach(ctx context.Context, ns, pod, check, target string) (bool, error) {
	out, err := st.node.Kubectl(ctx, "exec", "-n", ns, pod, "--", "/netcheck", check, target)
	switch {
	case err == nil:
		return true, nil
	case strings.Contains(err.Error(), "netcheck: failed to"):
		return false, nil
	}
	return false, fmt.Errorf("probe %s %s from %s: %w (%s)", check, target, pod, err, out)
}

// The chart's and the operator's NetworkPolicies are enforced on the real
// node (kube-router's firewall): without the session pods' policy a pod
// labelled as a session pod reaches kubelet on the node address, the
// gateway's HTTP port and the store's port on the pod network's gateway
// address; once an Agent makes the operator write the policy it is refused
// there (a private address and no service port; a port of the system
// namespace that is no service port; a store address the install does not
// list), and at kube-system's pods but for DNS, while DNS, the gateway's blob
// service, the stores on their listed address, the API server and a public
// address stay open. A pod no policy selects reaches what the session pod may
// not, but not the gateway's blob port, which the chart's gateway policy
// keeps for session pods. So the test fails when nothing enforces them.
func TestNetworkPoliciesAreEnforcedOnTheRealNode(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "tenant-netpol"

	archive, err := hack(st.root, "realnode-images.sh", "netcheck")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.node.Import(archive)).To(Succeed())
	_, err = st.node.Kubectl(ctx, "create", "namespace", ns)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.node.KubectlIn(ctx, fmt.Sprintf(probePods, ns, probeSpec), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.node.Kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "pod/session-probe", "pod/other-probe", "--timeout=120s")
	g.Expect(err).NotTo(HaveOccurred())

	// The same PostgreSQL as on the node address, on the node's address on
	// the pod network (the CNI bridge's gateway), which the install's
	// --service-cidrs does not list.
	unlisted, err := st.node.ExposeAt(net.JoinHostPort("10.244.0.1", pgPort), st.pgHost)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(unlisted.Close)
	llm := mustURL(st.llmURL).Host
	g.Expect(llm).To(HavePrefix(realnode.PublicIP + ":"))
	// kubelet's port on the node address: private, and no service port.
	kubelet := net.JoinHostPort(realnode.NodeIP, "10250")
	// The gateway's Service by name for the DNS check, by address for the
	// connections, so that a refused DNS query cannot pass for a refused
	// connection.
	gatewayName := release + "-gateway." + systemNamespace + ".svc.cluster.local"
	gateway, err := st.node.Kubectl(ctx, "get", "service", "-n", systemNamespace, release+"-gateway", "-o", "jsonpath={.spec.clusterIP}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gateway).NotTo(BeEmpty())
	dnsPod, err := st.node.Kubectl(ctx, "get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "jsonpath={.items[0].status.podIP}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dnsPod).NotTo(BeEmpty())

	expect := func(g Gomega, want bool, checks ...check) { expectReach(ctx, g, ns, want, checks...) }

	// Without the policy: nothing stops the session-labelled pod.
	g.Expect(st.node.Kubectl(ctx, "get", "networkpolicies", "-n", ns, "-o", "name")).To(BeEmpty())
	expect(g, true,
		check{"session-probe", "tcp", kubelet},
		check{"session-probe", "tcp", net.JoinHostPort(gateway, "80")},
		check{"session-probe", "tcp", unlisted.Addr},
		check{"session-probe", "tcp", net.JoinHostPort(dnsPod, "8080")})

	_, err = st.node.KubectlIn(ctx, fmt.Sprintf(policyAgent, ns, st.llmURL), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		return st.node.Kubectl(ctx, "get", "networkpolicies", "-n", ns, "-o", "name")
	}, 60*time.Second, time.Second).Should(ContainSubstring("networkpolicy.networking.k8s.io/picobot-session-pods"))

	allowed := []check{
		{"session-probe", "dns", gatewayName},
		{"session-probe", "tcp", net.JoinHostPort(gateway, "8090")},
		{"session-probe", "tcp", net.JoinHostPort(realnode.NodeIP, pgPort)},
		{"session-probe", "tcp", net.JoinHostPort(realnode.NodeIP, redisPort)},
		{"session-probe", "tcp", llm},
		// The API server through the kubernetes Service: it listens on
		// 6443, not a service port, and the policy admits it by the
		// addresses and ports the operator read from its EndpointSlices;
		// session pods read their Agent there.
		{"session-probe", "tcp", "10.96.0.1:443"},
		{"other-probe", "tcp", kubelet},
		{"other-probe", "tcp", net.JoinHostPort(gateway, "80")},
		{"other-probe", "tcp", unlisted.Addr},
		{"other-probe", "tcp", net.JoinHostPort(dnsPod, "8080")},
	}
	refused := []check{
		{"session-probe", "tcp", kubelet},
		{"session-probe", "tcp", net.JoinHostPort(gateway, "80")},
		{"session-probe", "tcp", net.JoinHostPort(gateway, "9090")},
		{"session-probe", "tcp", unlisted.Addr},
		{"session-probe", "tcp", net.JoinHostPort(dnsPod, "8080")},
		{"other-probe", "tcp", net.JoinHostPort(gateway, "8090")},
	}
	// kube-router applies a new policy within seconds; then every check
	// holds at once.
	g.Eventually(func(g Gomega) { expect(g, false, refused...) }, 60*time.Second, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) { expect(g, true, allowed...) }, 30*time.Second, time.Second).Should(Succeed())
	expect(g, false, refused...)
}
