package realnode

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/test/realnode"
)

// The sandbox pods' names and port as the operator documents them
// (docs/cluster.md; operator/internal/podspec, which tests outside the
// operator cannot import).
const (
	sandboxPlacementLabel = "agents.picobot.io/sandbox-placement"
	sandboxPolicy         = "picobot-sandbox-pods"
	sessionPolicy         = "picobot-session-pods"
	sandboxExecPort       = 7443
)

// sandboxProbePods are probePods and one more, labelled as a sandbox pod
// (%[2]s, the probe spec, listens on the exec port).
const sandboxProbePods = `
apiVersion: v1
kind: Pod
metadata:
  name: sandbox-probe
  namespace: %[1]s
  labels: {app.kubernetes.io/name: picobot, app.kubernetes.io/component: sandbox}
spec: %[2]s
---` + probePods

// The sandbox pods' NetworkPolicy (sandbox placement "pod") is enforced on
// the real node: before the operator writes it, a pod labelled as a sandbox
// pod reaches the store, the bus and the API server, like any pod; once a
// namespace labelled for sandbox pods gets an Agent, it is refused all of them (while a session pod of the same
// namespace still reaches the store and the API server), keeps DNS and the
// public internet, and takes connections on its exec port from session pods
// only. So a prompt-injected program in a sandbox pod cannot reach what the
// runtime reaches, by address, whatever port it tries.
func TestSandboxPodPolicyIsEnforcedOnTheRealNode(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "tenant-sandbox-netpol"

	archive, err := hack(st.root, "realnode-images.sh", "netcheck")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.node.Import(archive)).To(Succeed())
	_, err = st.node.Kubectl(ctx, "create", "namespace", ns)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.node.Kubectl(ctx, "label", "namespace", ns, sandboxPlacementLabel+"=pod")
	g.Expect(err).NotTo(HaveOccurred())
	spec := fmt.Sprintf(`{terminationGracePeriodSeconds: 1, automountServiceAccountToken: false, containers: [{name: netcheck,
  image: localhost/picobot-netcheck:dev, imagePullPolicy: Never, args: [sleep, "%d"], securityContext: {runAsNonRoot: true,
  readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]}`, sandboxExecPort)
	_, err = st.node.KubectlIn(ctx, fmt.Sprintf(sandboxProbePods, ns, spec), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.node.Kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "pod/sandbox-probe", "pod/session-probe", "pod/other-probe", "--timeout=120s")
	g.Expect(err).NotTo(HaveOccurred())

	sandboxIP, err := st.node.Kubectl(ctx, "get", "pod", "-n", ns, "sandbox-probe", "-o", "jsonpath={.status.podIP}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sandboxIP).NotTo(BeEmpty())
	gateway, err := st.node.Kubectl(ctx, "get", "service", "-n", systemNamespace, release+"-gateway", "-o", "jsonpath={.spec.clusterIP}")
	g.Expect(err).NotTo(HaveOccurred())
	llm := mustURL(st.llmURL).Host
	g.Expect(llm).To(HavePrefix(realnode.PublicIP + ":"))
	exec := net.JoinHostPort(sandboxIP, fmt.Sprint(sandboxExecPort))
	store := net.JoinHostPort(realnode.NodeIP, pgPort)
	bus := net.JoinHostPort(realnode.NodeIP, redisPort)
	apiServer := "10.96.0.1:443"
	blob := net.JoinHostPort(gateway, "8090")

	expect := func(g Gomega, want bool, checks ...check) { expectReach(ctx, g, ns, want, checks...) }

	// Without the namespace's policies nothing stops the sandbox-labelled
	// pod (the gateway's blob port is the chart's gateway policy's, for
	// session pods only, already).
	g.Expect(st.node.Kubectl(ctx, "get", "networkpolicies", "-n", ns, "-o", "name")).To(BeEmpty())
	expect(g, true,
		check{"sandbox-probe", "tcp", store},
		check{"sandbox-probe", "tcp", bus},
		check{"sandbox-probe", "tcp", apiServer},
		check{"other-probe", "tcp", exec})

	_, err = st.node.KubectlIn(ctx, fmt.Sprintf(policyAgent, ns, st.llmURL), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		return st.node.Kubectl(ctx, "get", "networkpolicies", "-n", ns, "-o", "name")
	}, 60*time.Second, time.Second).Should(And(
		ContainSubstring("networkpolicy.networking.k8s.io/"+sandboxPolicy),
		ContainSubstring("networkpolicy.networking.k8s.io/"+sessionPolicy)))

	refused := []check{
		{"sandbox-probe", "tcp", store},
		{"sandbox-probe", "tcp", bus},
		{"sandbox-probe", "tcp", apiServer},
		{"sandbox-probe", "tcp", blob},
		{"sandbox-probe", "tcp", net.JoinHostPort(realnode.NodeIP, "10250")},
		{"other-probe", "tcp", exec},
	}
	allowed := []check{
		{"sandbox-probe", "dns", release + "-gateway." + systemNamespace + ".svc.cluster.local"},
		{"sandbox-probe", "tcp", llm},
		{"session-probe", "tcp", exec},
		{"session-probe", "tcp", store},
		{"session-probe", "tcp", apiServer},
	}
	// kube-router applies new policies within seconds; then every check
	// holds at once.
	g.Eventually(func(g Gomega) { expect(g, false, refused...) }, 60*time.Second, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) { expect(g, true, allowed...) }, 30*time.Second, time.Second).Should(Succeed())
	expect(g, false, refused...)
}
