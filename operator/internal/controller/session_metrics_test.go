package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
)

// TestSessionPodsServeMetrics: with a metrics port, the warm pods the
// operator creates serve PicoBot's metrics there (the runtime's
// PICOBOT_METRICS_ADDR and a container port named metrics, which the
// chart's PodMonitor scrapes), and the namespace's NetworkPolicy, as the
// API server stores it, admits the scrapers it is given on that port and
// nothing else. An operator upgraded to a metrics port rewrites the policy
// of a namespace that already has one, and the pods it creates from then
// on serve metrics.
func TestSessionPodsServeMetrics(t *testing.T) {
	ns := newRuntimeNamespace(t)
	g := NewWithT(t)
	ctx := context.Background()
	a := runtimeAgent(ns, "scraped", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](1)})
	policy := func(g Gomega) *networkingv1.NetworkPolicy {
		np := &networkingv1.NetworkPolicy{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.NetworkPolicyName}, np)).To(Succeed())
		return np
	}
	var before []corev1.Pod
	t.Run("without metrics", func(t *testing.T) {
		startRuntimeManager(t, ns, nil) // stopped when this subtest ends
		g := NewWithT(t)
		g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
		g.Expect(k8s.Create(ctx, a)).To(Succeed())
		g.Eventually(func(g Gomega) { before = sessionPods(g, a); g.Expect(before).To(HaveLen(1)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		g.Expect(before[0].Spec.Containers[0].Ports).To(BeEmpty())
		g.Expect(policy(g).Spec.Ingress).To(BeEmpty(), "nothing may connect")
	})

	monitoring := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
	}
	startRuntimeManager(t, ns, func(rc *RuntimeConfig) {
		rc.MetricsPort = 9090
		rc.Network.MetricsFrom = []networkingv1.NetworkPolicyPeer{monitoring}
	})
	tcp, port := corev1.ProtocolTCP, intstr.FromInt32(9090)
	g.Eventually(func(g Gomega) {
		g.Expect(policy(g).Spec.Ingress).To(Equal([]networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			From:  []networkingv1.NetworkPolicyPeer{monitoring},
		}}), "stored exactly as built, so a resync writes nothing")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())

	// The warm pod of before is replaced (say, it claimed a chat and
	// exited): its successor serves metrics.
	g.Expect(k8s.Delete(ctx, &before[0])).To(Succeed())
	var pods []corev1.Pod
	g.Eventually(func(g Gomega) {
		pods = sessionPods(g, a)
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].UID).NotTo(Equal(before[0].UID))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	rt := pods[0].Spec.Containers[0]
	g.Expect(rt.Name).To(Equal(podspec.ContainerRuntime))
	g.Expect(rt.Ports).To(Equal([]corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}))
	g.Expect(rt.Env).To(ContainElement(corev1.EnvVar{Name: "PICOBOT_METRICS_ADDR", Value: ":9090"}))
	g.Expect(pods[0].Spec.InitContainers[0].Ports).To(BeEmpty(), "the sandbox serves nothing")
}
