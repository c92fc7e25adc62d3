package controller

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// TestRuntimePolicyCheck: every per-Agent rule, what the policy makes of
// the resources, and the effective maxSessions.
func TestRuntimePolicyCheck(t *testing.T) {
	q := resource.MustParse
	p := RuntimePolicy{
		AllowedImages:         []string{"reg.example/picobot:*", "reg.example/exact:1"},
		AllowedRuntimeClasses: []string{"gvisor"},
		DefaultResources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m")},
			Limits: corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}},
		MaxResources:        corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("4Gi")},
		MaxWarmPodsPerAgent: ptrTo[int32](3),
		MaxSessionsPerAgent: ptrTo[int32](10),
	}
	defaults := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m")},
		Limits: corev1.ResourceList{corev1.ResourceMemory: q("1Gi"), corev1.ResourceCPU: q("2")}}
	for _, tc := range []struct {
		name      string
		rt        *picobotv1alpha1.RuntimeSpec
		violation string
		resources corev1.ResourceRequirements
		sessions  *int32
	}{
		{"no runtime spec: defaults, capped limits, the policy's maxSessions", nil, "", defaults, ptrTo[int32](10)},
		{"the runtime image itself", &picobotv1alpha1.RuntimeSpec{Image: "op.example/picobot:1"}, "", defaults, ptrTo[int32](10)},
		{"an image under an allowed prefix", &picobotv1alpha1.RuntimeSpec{Image: "reg.example/picobot:2"}, "", defaults, ptrTo[int32](10)},
		{"an exact allowed image", &picobotv1alpha1.RuntimeSpec{Image: "reg.example/exact:1"}, "", defaults, ptrTo[int32](10)},
		{"another tag of an exact image", &picobotv1alpha1.RuntimeSpec{Image: "reg.example/exact:2"},
			`image "reg.example/exact:2" is not allowed (allowed: op.example/picobot:1, reg.example/picobot:*, reg.example/exact:1)`, corev1.ResourceRequirements{}, ptrTo[int32](10)},
		{"an allowed RuntimeClass", &picobotv1alpha1.RuntimeSpec{RuntimeClassName: ptrTo("gvisor")}, "", defaults, ptrTo[int32](10)},
		{"another RuntimeClass", &picobotv1alpha1.RuntimeSpec{RuntimeClassName: ptrTo("kata")},
			`runtimeClassName "kata" is not allowed (allowed: gvisor)`, corev1.ResourceRequirements{}, ptrTo[int32](10)},
		{"a request over the maximum", &picobotv1alpha1.RuntimeSpec{Resources: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: q("8Gi")}}},
			"resources.requests.memory 8Gi exceeds the maximum 4Gi", corev1.ResourceRequirements{}, ptrTo[int32](10)},
		{"the Agent's own resources within the maxima win over defaults", &picobotv1alpha1.RuntimeSpec{Resources: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("1")}, Limits: corev1.ResourceList{corev1.ResourceCPU: q("2")}}}, "",
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1")},
				Limits: corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("1Gi")}}, ptrTo[int32](10)},
		{"warm pool at the maximum", &picobotv1alpha1.RuntimeSpec{WarmPool: ptrTo[int32](3)}, "", defaults, ptrTo[int32](10)},
		{"warm pool over it", &picobotv1alpha1.RuntimeSpec{WarmPool: ptrTo[int32](4)}, "warmPool 4 exceeds the maximum of 3 per Agent", defaults, ptrTo[int32](10)},
		{"fewer sessions than the maximum", &picobotv1alpha1.RuntimeSpec{MaxSessions: ptrTo[int32](2)}, "", defaults, ptrTo[int32](2)},
		{"more sessions than the maximum", &picobotv1alpha1.RuntimeSpec{MaxSessions: ptrTo[int32](11)},
			"maxSessions 11 exceeds the maximum of 10 per Agent", defaults, ptrTo[int32](10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: picobotv1alpha1.AgentSpec{Runtime: tc.rt}}
			res := p.check(a, "op.example/picobot:1")
			g.Expect(res.violation).To(Equal(tc.violation))
			g.Expect(res.maxSessions).To(Equal(tc.sessions))
			if tc.violation == "" {
				g.Expect(res.resources).To(Equal(tc.resources))
			}
		})
	}
	// An empty policy limits nothing but the image: only the runtime image.
	g := NewWithT(t)
	empty := &RuntimePolicy{}
	g.Expect(empty.check(&picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{Runtime: &picobotv1alpha1.RuntimeSpec{
		Image: "any.example/x:1"}}}, "op.example/picobot:1").violation).To(Equal(`image "any.example/x:1" is not allowed (allowed: op.example/picobot:1)`))
	res := empty.check(&picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{Runtime: &picobotv1alpha1.RuntimeSpec{
		Image: "op.example/picobot:1", WarmPool: ptrTo[int32](100)}}}, "op.example/picobot:1")
	g.Expect(res.violation).To(BeEmpty())
	g.Expect(res.maxSessions).To(BeNil())
	g.Expect(res.resources.Requests).To(BeEmpty())
	g.Expect(res.resources.Limits).To(BeEmpty())
}

// TestNamespaceWarmViolation: warm pools are counted in name order; Agents
// outside the per-Agent rules or over the namespace's maximum do not count.
func TestNamespaceWarmViolation(t *testing.T) {
	p := RuntimePolicy{MaxWarmPodsPerAgent: ptrTo[int32](5), MaxWarmPodsPerNamespace: ptrTo[int32](4)}
	agent := func(name string, warm int32) picobotv1alpha1.Agent {
		return picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: picobotv1alpha1.AgentSpec{Runtime: &picobotv1alpha1.RuntimeSpec{WarmPool: ptrTo(warm)}}}
	}
	agents := []picobotv1alpha1.Agent{agent("d", 1), agent("a", 2), agent("b", 9), agent("c", 3), agent("e", 0)}
	want := map[string]string{
		"a": "",
		// b is over the per-Agent maximum: its own rule says so first (the
		// namespace rule is not asked), and it is not counted for the others.
		"c": "the namespace's Agents up to this one (by name) ask for 5 warm pods; the maximum is 4 per namespace",
		"d": "", // c did not count: 2 + 1
		"e": "", // no warm pool, never over
	}
	for name, v := range want {
		NewWithT(t).Expect(p.namespaceWarmViolation(agents, name, "img")).To(Equal(v), name)
	}
	NewWithT(t).Expect((&RuntimePolicy{}).namespaceWarmViolation(agents, "c", "img")).To(BeEmpty())
}

// TestProgressConditions: Stalled follows the first condition only a
// change to the object can fix; otherwise Reconciling follows the first
// that is not True, or the progress given; neither when all hold. The one
// not set is removed from the list.
func TestProgressConditions(t *testing.T) {
	ok := func(typ string) metav1.Condition { return condition(typ, true, picobotv1alpha1.ReasonResolved, "fine") }
	noKey := condition(picobotv1alpha1.ConditionModelResolved, false, picobotv1alpha1.ReasonSecretNotFound, "no key")
	policy := condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPolicyViolation, "Runtime policy: x")
	filling := condition(picobotv1alpha1.ConditionRuntimeReady, true, picobotv1alpha1.ReasonPodsStarting, "Warm pool filling: 0 of 1 warm, 1 starting")
	cases := []struct {
		name        string
		conds       []metav1.Condition
		progressing []metav1.Condition
		want        []metav1.Condition
	}{
		{name: "spec problem after a transient one stalls", conds: []metav1.Condition{noKey, policy},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionStalled, true, picobotv1alpha1.ReasonPolicyViolation, "RuntimeReady: Runtime policy: x")}},
		{name: "stalled wins over progress", conds: []metav1.Condition{policy}, progressing: []metav1.Condition{filling},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionStalled, true, picobotv1alpha1.ReasonPolicyViolation, "RuntimeReady: Runtime policy: x")}},
		{name: "transient problems reconcile", conds: []metav1.Condition{ok("A"), noKey,
			condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonRuntimeClassNotFound, "missing")},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionReconciling, true, picobotv1alpha1.ReasonSecretNotFound, "ModelResolved: no key")}},
		{name: "problem wins over progress", conds: []metav1.Condition{noKey}, progressing: []metav1.Condition{filling},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionReconciling, true, picobotv1alpha1.ReasonSecretNotFound, "ModelResolved: no key")}},
		{name: "progress of a Ready object", conds: []metav1.Condition{ok("A")}, progressing: []metav1.Condition{filling},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionReconciling, true, picobotv1alpha1.ReasonPodsStarting, "RuntimeReady: Warm pool filling: 0 of 1 warm, 1 starting")}},
		{name: "browser starting", conds: []metav1.Condition{condition(picobotv1alpha1.ConditionReady, false, picobotv1alpha1.ReasonBrowserStarting, "Starting a browser pod")},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionReconciling, true, picobotv1alpha1.ReasonBrowserStarting, "Ready: Starting a browser pod")}},
		{name: "operator without browser pods", conds: []metav1.Condition{condition(picobotv1alpha1.ConditionReady, false, picobotv1alpha1.ReasonBrowserPodsDisabled, "no pods")},
			want: []metav1.Condition{condition(picobotv1alpha1.ConditionStalled, true, picobotv1alpha1.ReasonBrowserPodsDisabled, "Ready: no pods")}},
		{name: "all hold", conds: []metav1.Condition{ok("A"), ok("B")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			list := []metav1.Condition{
				{Type: picobotv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old"},
				{Type: picobotv1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: "Old"},
			}
			got := progressConditions(&list, tc.conds, tc.progressing...)
			g.Expect(got).To(Equal(tc.want))
			var left []string
			for _, c := range list {
				left = append(left, c.Type)
			}
			var kept []string
			for _, c := range tc.want {
				kept = append(kept, c.Type)
			}
			g.Expect(left).To(Equal(kept), "the type not set is removed")
		})
	}
}
