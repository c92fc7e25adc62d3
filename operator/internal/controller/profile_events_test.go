package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// loosenProfileIdleTimeout drops the schema rules of BrowserProfile
// spec.idleTimeout, as an older chart's CRD had none, until restore.
func loosenProfileIdleTimeout(t *testing.T) (restore func()) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	var rules apiextensionsv1.ValidationRules
	set := func(keep bool) {
		g.Eventually(func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: "browserprofiles.agents.picobot.io"}, crd); err != nil {
				return err
			}
			spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			idle := spec.Properties["idleTimeout"]
			if !keep {
				rules, idle.XValidations = idle.XValidations, nil
			} else {
				idle.XValidations = rules
			}
			spec.Properties["idleTimeout"] = idle
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
			return c.Update(ctx, crd)
		}).WithTimeout(eventually).Should(Succeed())
	}
	set(false)
	g.Expect(rules).NotTo(BeEmpty(), "the schema checks idleTimeout")
	restored := false
	restore = func() {
		if !restored {
			restored = true
			set(true)
		}
	}
	t.Cleanup(restore)
	return restore
}

// TestBrowserProfileTransitionsAreEvents: a BrowserProfile stored with an
// idleTimeout the schema now refuses is not Ready, Stalled, and says so in
// a Warning event, as Agents do.
func TestBrowserProfileTransitionsAreEvents(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	restore := loosenProfileIdleTimeout(t)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.picobot.io/v1alpha1", "kind": "BrowserProfile",
		"metadata": map[string]any{"namespace": ns, "name": "forever"},
		"spec":     map[string]any{"label": "Work", "idleTimeout": "forever"},
	}}
	g.Eventually(func() error { return k8s.Create(ctx, obj.DeepCopy()) }).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	restore()

	const msg = `spec.idleTimeout: "forever" is not a duration; fix the object (the API server refuses such values now)`
	bp := &picobotv1alpha1.BrowserProfile{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forever"}, bp)).To(Succeed())
		ready := meta.FindStatusCondition(bp.Status.Conditions, picobotv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(picobotv1alpha1.ReasonInvalidSpec))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	stalled := meta.FindStatusCondition(bp.Status.Conditions, picobotv1alpha1.ConditionStalled)
	g.Expect(stalled).NotTo(BeNil())
	g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(stalled.Message).To(Equal("SpecValid: " + msg))
	expectEvent(t, ns, "BrowserProfile", "forever", corev1.EventTypeWarning, picobotv1alpha1.ReasonInvalidSpec, "SpecValid: "+msg)

	// Fixed, it is Ready again, without Stalled, and that is an event too.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"idleTimeout":"15m"}}`))
	g.Expect(k8s.Patch(ctx, bp, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forever"}, bp)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(bp.Status.Conditions, picobotv1alpha1.ConditionReady)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(bp.Status.Conditions, picobotv1alpha1.ConditionStalled)).To(BeNil())
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	ready := meta.FindStatusCondition(bp.Status.Conditions, picobotv1alpha1.ConditionReady)
	expectEvent(t, ns, "BrowserProfile", "forever", corev1.EventTypeNormal, picobotv1alpha1.ReasonReady, "Ready: "+ready.Message)
}
