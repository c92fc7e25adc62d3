package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const leaseName = "operator.agents.picobot.io"

func (p *operatorProcess) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func leaseHolder(g Gomega) string {
	l := &coordinationv1.Lease{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: leaseName}, l)).To(Succeed())
	g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
	return *l.Spec.HolderIdentity
}

func reconciles(g Gomega, p *operatorProcess) float64 {
	n, err := metric(context.Background(), p.metrics, "controller_runtime_reconcile_total", `controller="agent"`)
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

// TestLeaderElectionFailover runs two operator replicas with leader election:
// one leads and reconciles, the other waits; when the leader stops, the other
// takes the Lease and reconciles.
func TestLeaderElectionFailover(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ns := newNamespace(t)
	_, stderr, err := kubectl("apply", "-n", ns, "-f", "config/samples/")
	g.Expect(err).NotTo(HaveOccurred(), stderr)

	args := []string{"--leader-elect", "--leader-election-namespace=kube-system"}
	a, err := startOperator(workDir, args...)
	g.Expect(err).NotTo(HaveOccurred())
	defer a.stop()
	g.Eventually(a.log).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(ContainSubstring("Successfully acquired lease"))
	first := leaseHolder(g)

	b, err := startOperator(workDir, args...)
	g.Expect(err).NotTo(HaveOccurred())
	defer b.stop()
	g.Eventually(func(g Gomega) { g.Expect(reconciles(g, a)).To(BeNumerically(">=", 2)) }).
		WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	// The standby serves probes and metrics but reconciles nothing.
	g.Consistently(func(g Gomega) {
		g.Expect(reconciles(g, b)).To(BeZero())
		g.Expect(leaseHolder(g)).To(Equal(first))
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(b.log()).NotTo(ContainSubstring("Successfully acquired lease"))

	// The leader stops (releasing the Lease); the standby takes over at once.
	a.stop()
	g.Eventually(b.log).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(ContainSubstring("Successfully acquired lease"))
	g.Eventually(func(g Gomega) {
		g.Expect(leaseHolder(g)).NotTo(Equal(first))
		g.Expect(reconciles(g, b)).To(BeNumerically(">=", 2))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Expect(strings.Count(b.log(), "Successfully acquired lease")).To(Equal(1))
}
