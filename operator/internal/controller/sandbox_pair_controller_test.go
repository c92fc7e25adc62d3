package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
)

// A session pod with a sandbox pod, against the real API server (no
// kubelet: the test writes the pods' status): the operator creates the
// sandbox pod from it, hands it the pair's Secret, publishes the running
// sandbox pod's address, replaces a sandbox pod that ended (a new pod, a
// new address) and removes the pair when the session pod ends.
func TestSandboxPairFollowsItsSessionPod(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newRuntimeNamespace(t)
	startRuntimeManager(t, ns, nil)

	a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: ns, UID: "agent-uid"}}
	cred, err := paircred.Generate(podspec.PairName("helper-abcde"), time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	sec := podspec.PairSecret(a, "helper-abcde", cred)
	sec.OwnerReferences = nil // no such Agent here
	g.Expect(k8s.Create(ctx, sec)).To(Succeed())
	session := podspec.SessionPod(podspec.Input{Agent: a, Name: "helper-abcde", Image: "registry.example/picobot:1.0", Sandbox: podspec.SandboxInPod})
	session.OwnerReferences = nil
	g.Expect(k8s.Create(ctx, session)).To(Succeed())

	key := client.ObjectKey{Namespace: ns, Name: "helper-abcde-sandbox"}
	sandbox := func() *corev1.Pod {
		var p corev1.Pod
		if err := k8s.Get(ctx, key, &p); err != nil {
			return nil
		}
		return &p
	}
	g.Eventually(sandbox, 20*time.Second, 100*time.Millisecond).ShouldNot(BeNil())
	first := sandbox()
	g.Expect(first.OwnerReferences).To(HaveLen(1))
	g.Expect(first.OwnerReferences[0].UID).To(Equal(session.UID))
	g.Expect(first.Spec.Containers[0].Image).To(Equal("registry.example/picobot:1.0"))
	g.Eventually(func() []metav1.OwnerReference {
		var s corev1.Secret
		must(k8s.Get(ctx, key, &s))
		g.Expect(s.Data[paircred.KeyToken]).To(BeEquivalentTo(cred.Token), "the patch keeps the values")
		return s.OwnerReferences
	}, 20*time.Second, 100*time.Millisecond).Should(ConsistOf(HaveField("UID", session.UID)))

	running := func(p *corev1.Pod, ip string) {
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		g.Expect(k8s.Status().Update(ctx, p)).To(Succeed())
	}
	address := func() string {
		var cm corev1.ConfigMap
		if err := k8s.Get(ctx, key, &cm); err != nil {
			return err.Error()
		}
		return cm.Data[paircred.KeyAddress]
	}
	running(first, "10.1.2.3")
	g.Eventually(address, 20*time.Second, 100*time.Millisecond).Should(Equal("10.1.2.3:7443"))

	// The sandbox pod ends: a new one replaces it, with a new address.
	first.Status.Phase = corev1.PodFailed
	g.Expect(k8s.Status().Update(ctx, first)).To(Succeed())
	g.Eventually(func() bool {
		p := sandbox()
		return p != nil && p.UID != first.UID
	}, 20*time.Second, 100*time.Millisecond).Should(BeTrue())
	running(sandbox(), "10.1.2.4")
	g.Eventually(address, 20*time.Second, 100*time.Millisecond).Should(Equal("10.1.2.4:7443"))

	// The session pod ends: the pair goes.
	var cur corev1.Pod
	must(k8s.Get(ctx, client.ObjectKeyFromObject(session), &cur))
	cur.Status.Phase = corev1.PodSucceeded
	g.Expect(k8s.Status().Update(ctx, &cur)).To(Succeed())
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Secret{}, &corev1.ConfigMap{}} {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, key, obj))
		}, 20*time.Second, 100*time.Millisecond).Should(BeTrue(), "%T", obj)
	}
}

// A pair's Secret whose session pod never came (the operator died between
// creating the two) is deleted once older than the grace; one whose pod
// follows it, as the operator makes them, is kept and handed to the pod.
func TestOrphanedPairSecretIsDeleted(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newRuntimeNamespace(t)
	startRuntimeManager(t, ns, func(rc *RuntimeConfig) { rc.PairSecretGrace = 3 * time.Second })

	a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: ns, UID: "agent-uid"}}
	secret := func(pod string) *corev1.Secret {
		cred, err := paircred.Generate(podspec.PairName(pod), time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		sec := podspec.PairSecret(a, pod, cred)
		sec.OwnerReferences = nil // no such Agent here
		g.Expect(k8s.Create(ctx, sec)).To(Succeed())
		return sec
	}
	orphan := secret("helper-orphn")
	kept := secret("helper-keptx")
	session := podspec.SessionPod(podspec.Input{Agent: a, Name: "helper-keptx", Image: "registry.example/picobot:1.0", Sandbox: podspec.SandboxInPod})
	session.OwnerReferences = nil
	g.Expect(k8s.Create(ctx, session)).To(Succeed())

	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(orphan), &corev1.Secret{}))
	}, 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "the orphan is deleted")
	var s corev1.Secret
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(kept), &s)).To(Succeed(), "the Secret of the pod that came is kept")
	g.Eventually(func() []metav1.OwnerReference {
		must(k8s.Get(ctx, client.ObjectKeyFromObject(kept), &s))
		return s.OwnerReferences
	}, 20*time.Second, 100*time.Millisecond).Should(ConsistOf(HaveField("UID", session.UID)))
}
