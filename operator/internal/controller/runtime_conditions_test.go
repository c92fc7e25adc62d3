package controller

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
)

// testPolicy is the runtime policy of TestRuntimeReadyTellsTheTruth.
func testPolicy() RuntimePolicy {
	return RuntimePolicy{
		AllowedImages:         []string{"registry.example/extra/*"},
		AllowedRuntimeClasses: []string{"gvisor", "missing"},
		DefaultResources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
		MaxResources:          corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		MaxWarmPodsPerAgent:   ptr[int32](3),
		MaxSessionsPerAgent:   ptr[int32](10),
		// By name: invalid-pod, long-100, long-253, no-such-class (1 each)
		// and ns-warm-a (2) fit; ns-warm-b's 3 more do not; prefix-image
		// and quota (1 each) fit again.
		MaxWarmPodsPerNamespace: ptr[int32](8),
	}
}

// runtimeAgent is an Agent with a usable model and the runtime spec rt.
func runtimeAgent(ns, name string, rt picobotv1alpha1.RuntimeSpec) *picobotv1alpha1.Agent {
	a := openAIAgent(ns, name, "openai")
	a.Spec.Runtime = &rt
	return a
}

// sessionPods lists the session pods of the Agent as the operator labels
// them.
func sessionPods(g Gomega, a *picobotv1alpha1.Agent) []corev1.Pod {
	var l corev1.PodList
	g.Expect(k8s.List(context.Background(), &l, client.InNamespace(a.Namespace), client.MatchingLabels(podspec.SessionLabels(a)))).To(Succeed())
	return l.Items
}

// TestRuntimeReadyTellsTheTruth runs the operator with session pods and a
// runtime policy on a real API server, and checks RuntimeReady, Ready,
// Stalled and the events for every way session pods can be refused: each
// rule of the policy, a RuntimeClass that does not exist, a pod the API
// server finds invalid, a full quota; and that names of 100 and 253
// characters get pods and reach Ready.
func TestRuntimeReadyTellsTheTruth(t *testing.T) {
	ns := newRuntimeNamespace(t)
	startRuntimeManager(t, ns, func(rc *RuntimeConfig) { rc.Policy = testPolicy() })
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	cpu := func(req, lim string) *corev1.ResourceRequirements {
		r := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(lim)}}
		if req != "" {
			r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req)}
		}
		return r
	}
	long100, long253 := strings.Repeat("l", 96)+"-100", strings.Repeat("m", 249)+"-253"
	cases := []struct {
		name    string
		rt      picobotv1alpha1.RuntimeSpec
		reason  string
		message string // exact, or the prefix before the API server's pod name when prefix is set
		prefix  bool
		stalled bool
		pods    int
	}{
		{name: "image", rt: picobotv1alpha1.RuntimeSpec{Image: "evil.example/miner:1"}, reason: picobotv1alpha1.ReasonPolicyViolation, stalled: true,
			message: `Runtime policy: image "evil.example/miner:1" is not allowed (allowed: registry.example/picobot:test, registry.example/extra/*)`},
		{name: "runtime-class", rt: picobotv1alpha1.RuntimeSpec{RuntimeClassName: ptr("kata")}, reason: picobotv1alpha1.ReasonPolicyViolation, stalled: true,
			message: `Runtime policy: runtimeClassName "kata" is not allowed (allowed: gvisor, missing)`},
		{name: "cpu", rt: picobotv1alpha1.RuntimeSpec{Resources: cpu("", "4")}, reason: picobotv1alpha1.ReasonPolicyViolation, stalled: true,
			message: `Runtime policy: resources.limits.cpu 4 exceeds the maximum 2`},
		{name: "warm", rt: picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](4)}, reason: picobotv1alpha1.ReasonPolicyViolation, stalled: true,
			message: `Runtime policy: warmPool 4 exceeds the maximum of 3 per Agent`},
		{name: "sessions", rt: picobotv1alpha1.RuntimeSpec{MaxSessions: ptr[int32](11)}, reason: picobotv1alpha1.ReasonPolicyViolation, stalled: true,
			message: `Runtime policy: maxSessions 11 exceeds the maximum of 10 per Agent`},
		{name: "ns-warm-a", rt: picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](2)}, reason: picobotv1alpha1.ReasonPodsReady, pods: 2},
		{name: "ns-warm-b", rt: picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](3)}, reason: picobotv1alpha1.ReasonPolicyViolation, stalled: true,
			message: `Runtime policy: the namespace's Agents up to this one (by name) ask for 9 warm pods; the maximum is 8 per namespace`},
		{name: "prefix-image", rt: picobotv1alpha1.RuntimeSpec{Image: "registry.example/extra/picobot:2", WarmPool: ptr[int32](1)}, reason: picobotv1alpha1.ReasonPodsReady, pods: 1},
		{name: "no-such-class", rt: picobotv1alpha1.RuntimeSpec{RuntimeClassName: ptr("missing"), WarmPool: ptr[int32](1)},
			reason: picobotv1alpha1.ReasonRuntimeClassNotFound, prefix: true, message: `Cannot create session pods: `},
		{name: "invalid-pod", rt: picobotv1alpha1.RuntimeSpec{Resources: cpu("1", "500m"), WarmPool: ptr[int32](1)}, reason: picobotv1alpha1.ReasonPodCreateFailed, prefix: true, stalled: true,
			message: `Cannot create session pods: Pod is invalid: [spec.containers[0].resources.requests: Invalid value: "1": must be less than or equal to cpu limit of 500m`},
		{name: long100, rt: picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](1)}, reason: picobotv1alpha1.ReasonPodsReady, pods: 1},
		{name: long253, rt: picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](1)}, reason: picobotv1alpha1.ReasonPodsReady, pods: 1},
	}
	// ns-warm-b comes last: the warm pods it is judged against must be
	// those of Agents the operator has already seen (judged earlier, it
	// would get its pods, and an Agent keeps the pods it has).
	var last *picobotv1alpha1.Agent
	for _, tc := range cases {
		if tc.name == "ns-warm-b" {
			last = runtimeAgent(ns, tc.name, tc.rt)
			continue
		}
		g.Expect(k8s.Create(ctx, runtimeAgent(ns, tc.name, tc.rt))).To(Succeed(), tc.name)
	}
	for _, tc := range cases {
		if tc.pods > 0 || tc.reason == picobotv1alpha1.ReasonRuntimeClassNotFound || tc.reason == picobotv1alpha1.ReasonPodCreateFailed {
			status := metav1.ConditionFalse
			if tc.reason == picobotv1alpha1.ReasonPodsReady {
				status = metav1.ConditionTrue
			}
			expectCondition(t, ns, tc.name, picobotv1alpha1.ConditionRuntimeReady, status, tc.reason)
		}
	}
	g.Expect(k8s.Create(ctx, last)).To(Succeed())
	for _, tc := range cases {
		t.Run(tc.name[:min(len(tc.name), 20)], func(t *testing.T) {
			g := NewWithT(t)
			status := metav1.ConditionFalse
			if tc.reason == picobotv1alpha1.ReasonPodsReady {
				status = metav1.ConditionTrue
			}
			a := expectCondition(t, ns, tc.name, picobotv1alpha1.ConditionRuntimeReady, status, tc.reason)
			rr := cond(a, picobotv1alpha1.ConditionRuntimeReady)
			ready := cond(a, picobotv1alpha1.ConditionReady)
			stalled := cond(a, picobotv1alpha1.ConditionStalled)
			if status == metav1.ConditionTrue {
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
				g.Expect(stalled).To(BeNil())
				g.Eventually(func(g Gomega) { g.Expect(sessionPods(g, a)).To(HaveLen(tc.pods)) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
				return
			}
			if tc.prefix {
				g.Expect(rr.Message).To(HavePrefix(tc.message))
			} else {
				g.Expect(rr.Message).To(Equal(tc.message))
			}
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(tc.reason))
			g.Expect(ready.Message).To(Equal("RuntimeReady: " + rr.Message))
			if tc.stalled {
				g.Expect(stalled).NotTo(BeNil())
				g.Expect(stalled.Reason).To(Equal(tc.reason))
				g.Expect(stalled.Message).To(Equal("RuntimeReady: " + rr.Message))
				g.Expect(cond(a, picobotv1alpha1.ConditionReconciling)).To(BeNil(), "never both")
			} else {
				g.Expect(stalled).To(BeNil(), "fixed outside the Agent, it can become Ready")
				reconciling := cond(a, picobotv1alpha1.ConditionReconciling)
				g.Expect(reconciling).NotTo(BeNil())
				g.Expect(reconciling.Reason).To(Equal(tc.reason))
				g.Expect(reconciling.Message).To(Equal("RuntimeReady: " + rr.Message))
			}
			g.Expect(sessionPods(g, a)).To(BeEmpty())
			expectEvent(t, ns, "Agent", tc.name, corev1.EventTypeWarning, tc.reason, "RuntimeReady: "+rr.Message)
		})
	}

	// The RuntimeClass message carries the API server's own reason.
	a := getAgent(g, ns, "no-such-class")
	g.Expect(cond(a, picobotv1alpha1.ConditionRuntimeReady).Message).To(ContainSubstring(`RuntimeClass "missing" not found`))

	// The policy's defaults and caps reach the pods: the default memory
	// request, the maximum as limit where none was set.
	pods := sessionPods(g, getAgent(g, ns, "prefix-image"))
	g.Expect(pods).To(HaveLen(1))
	c := pods[0].Spec.Containers[0]
	g.Expect(c.Image).To(Equal("registry.example/extra/picobot:2"))
	g.Expect(c.Resources.Requests.Memory().String()).To(Equal("256Mi"))
	g.Expect(c.Resources.Limits.Cpu().String()).To(Equal("2"))
	g.Expect(c.Resources.Limits.Memory().String()).To(Equal("4Gi"))

	// Fixed, the Agent runs: Stalled goes and pods come.
	a = getAgent(g, ns, "image")
	a.Spec.Runtime.Image, a.Spec.Runtime.WarmPool = "", ptr[int32](0)
	g.Expect(k8s.Update(ctx, a)).To(Succeed())
	a = expectCondition(t, ns, "image", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)
	g.Expect(cond(a, picobotv1alpha1.ConditionStalled)).To(BeNil())

	// A quota the namespace has used up: the next pod is refused with the
	// quota's message. (No controller-manager computes quota usage here:
	// the test writes the status it would.)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	g.Expect(k8s.Create(ctx, q)).To(Succeed())
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	g.Expect(k8s.Status().Update(ctx, q)).To(Succeed())
	g.Expect(k8s.Create(ctx, runtimeAgent(ns, "quota", picobotv1alpha1.RuntimeSpec{WarmPool: ptr[int32](1)}))).To(Succeed())
	a = expectCondition(t, ns, "quota", picobotv1alpha1.ConditionRuntimeReady, metav1.ConditionFalse, picobotv1alpha1.ReasonQuotaExceeded)
	g.Expect(cond(a, picobotv1alpha1.ConditionRuntimeReady).Message).To(Equal(
		`Cannot create session pods: pods is forbidden: exceeded quota: pods, requested: pods=1, used: pods=0, limited: pods=0`))
	g.Expect(cond(a, picobotv1alpha1.ConditionStalled)).To(BeNil())
	g.Expect(cond(a, picobotv1alpha1.ConditionReconciling)).To(HaveField("Reason", picobotv1alpha1.ReasonQuotaExceeded))
	expectEvent(t, ns, "Agent", "quota", corev1.EventTypeWarning, picobotv1alpha1.ReasonQuotaExceeded, "RuntimeReady: "+cond(a, picobotv1alpha1.ConditionRuntimeReady).Message)
}
