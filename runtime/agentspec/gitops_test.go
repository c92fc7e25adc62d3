package agentspec_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
)

func TestGitOpsManager(t *testing.T) {
	cases := []struct {
		name       string
		meta       metav1.ObjectMeta
		tool, mark string
	}{
		{name: "plain", meta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}}},
		{name: "agent-made objects are not GitOps'", meta: metav1.ObjectMeta{Labels: map[string]string{"agents.picobot.io/agent-made": "true"}}},
		{name: "Argo CD label", meta: metav1.ObjectMeta{Labels: map[string]string{"argocd.argoproj.io/instance": "apps"}},
			tool: "Argo CD", mark: "label argocd.argoproj.io/instance=apps"},
		{name: "Argo CD tracking annotation", meta: metav1.ObjectMeta{Annotations: map[string]string{"argocd.argoproj.io/tracking-id": "apps:agents.picobot.io/Agent:t/a"}},
			tool: "Argo CD", mark: "annotation argocd.argoproj.io/tracking-id=apps:agents.picobot.io/Agent:t/a"},
		{name: "Flux Kustomization", meta: metav1.ObjectMeta{Labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "tenants"}},
			tool: "Flux (Kustomization)", mark: "label kustomize.toolkit.fluxcd.io/name=tenants"},
		{name: "Flux HelmRelease", meta: metav1.ObjectMeta{Labels: map[string]string{"helm.toolkit.fluxcd.io/name": "agents"}},
			tool: "Flux (HelmRelease)", mark: "label helm.toolkit.fluxcd.io/name=agents"},
		{name: "Helm release", meta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"}},
			tool: "Helm", mark: "label app.kubernetes.io/managed-by=Helm"},
		{name: "managed by the operator is not GitOps", meta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/managed-by": "picobot-operator"}}},
		{name: "server-side applied by Flux", meta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}, {Manager: "kustomize-controller"}}},
			tool: "Flux (Kustomization)", mark: "field manager kustomize-controller"},
		{name: "kubectl only", meta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tool, mark, ok := agentspec.GitOpsManager(&picobotv1alpha1.Agent{ObjectMeta: tc.meta})
			g.Expect(ok).To(Equal(tc.tool != ""))
			g.Expect(tool).To(Equal(tc.tool))
			g.Expect(mark).To(Equal(tc.mark))
		})
	}
}
