package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// loosenIdleTimeout drops the schema rule of the Agent's
// spec.runtime.idleTimeout, as an older chart's CRD had none, and returns
// the function that puts it back.
func loosenIdleTimeout(t *testing.T) (restore func()) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	field := func(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		rt := spec.Properties["runtime"]
		idle := rt.Properties["idleTimeout"]
		return &idle
	}
	set := func(v apiextensionsv1.ValidationRules) {
		g.Eventually(func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: "agents.agents.picobot.io"}, crd); err != nil {
				return err
			}
			spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			rt := spec.Properties["runtime"]
			idle := rt.Properties["idleTimeout"]
			idle.XValidations = v
			rt.Properties["idleTimeout"] = idle
			spec.Properties["runtime"] = rt
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
			return c.Update(ctx, crd)
		}).WithTimeout(eventually).Should(Succeed())
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "agents.agents.picobot.io"}, crd)).To(Succeed())
	rules := field(crd).XValidations
	g.Expect(rules).NotTo(BeEmpty(), "the schema checks idleTimeout")
	set(nil)
	restored := false
	restore = func() {
		if !restored {
			restored = true
			set(rules)
		}
	}
	t.Cleanup(restore)
	return restore
}

// An Agent stored with a duration the schema now refuses (written before an
// upgrade) is decoded all the same: it says what is wrong, and every other
// tenant's Agents keep reconciling; fixed, it reconciles as usual.
func TestInvalidStoredDurationStallsNoOne(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	bad, good := newNamespace(t), newNamespace(t)

	restore := loosenIdleTimeout(t)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.picobot.io/v1alpha1", "kind": "Agent",
		"metadata": map[string]any{"namespace": bad, "name": "forever"},
		"spec":     map[string]any{"instructions": "x", "runtime": map[string]any{"idleTimeout": "forever"}},
	}}
	// The API server takes the loosened schema a moment after the update.
	g.Eventually(func() error { return k8s.Create(ctx, obj.DeepCopy()) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	restore()
	g.Eventually(func() error {
		o := obj.DeepCopy()
		o.SetName("forever-2")
		return k8s.Create(ctx, o)
	}).WithTimeout(eventually).WithPolling(poll).Should(MatchError(ContainSubstring(
		`spec.runtime.idleTimeout: Invalid value: "forever": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`)))

	g.Expect(k8s.Create(ctx, secret(good, "openai", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, openAIAgent(good, "assistant", "openai"))).To(Succeed())
	expectCondition(t, good, "assistant", picobotv1alpha1.ConditionReady, metav1.ConditionTrue, picobotv1alpha1.ReasonReady)

	a := expectCondition(t, bad, "forever", picobotv1alpha1.ConditionReady, metav1.ConditionFalse, picobotv1alpha1.ReasonInvalidSpec)
	g.Expect(cond(a, picobotv1alpha1.ConditionSpecValid).Message).To(Equal(
		`spec.runtime.idleTimeout: "forever" is not a duration; fix the object (the API server refuses such values now)`))
	g.Expect(a.Spec.Runtime.IdleTimeout.Invalid).To(Equal("forever"))
	// Only a spec change can fix it: Stalled, as kstatus reads it.
	g.Expect(cond(a, picobotv1alpha1.ConditionStalled)).To(HaveField("Status", metav1.ConditionTrue))
	g.Expect(cond(a, picobotv1alpha1.ConditionStalled).Reason).To(Equal(picobotv1alpha1.ReasonInvalidSpec))
	g.Expect(cond(a, picobotv1alpha1.ConditionStalled).Message).To(Equal(
		`SpecValid: spec.runtime.idleTimeout: "forever" is not a duration; fix the object (the API server refuses such values now)`))

	// Fixed, the condition goes and the Agent reconciles on.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"runtime":{"idleTimeout":"15m"}}}`))
	g.Expect(k8s.Patch(ctx, a, patch)).To(Succeed())
	a = expectCondition(t, bad, "forever", picobotv1alpha1.ConditionReady, metav1.ConditionFalse, picobotv1alpha1.ReasonNoModelConfigured)
	g.Expect(cond(a, picobotv1alpha1.ConditionSpecValid)).To(BeNil())
	g.Expect(cond(a, picobotv1alpha1.ConditionStalled)).To(BeNil(), "a missing model is not a spec problem")
	g.Expect(a.Spec.Runtime.IdleTimeout.Duration.Minutes()).To(Equal(15.0))
}
