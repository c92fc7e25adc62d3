package agentspec

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gitOpsMarks are the labels and annotations GitOps tools put on the objects
// they apply, with the tool each names. An object carrying one is owned by a
// repository: a change made in the cluster would be reverted at the next
// sync, so PicoBot's own config tools refuse to make it.
var gitOpsMarks = []struct{ key, tool string }{
	{"argocd.argoproj.io/instance", "Argo CD"},
	{"argocd.argoproj.io/tracking-id", "Argo CD"},
	{"kustomize.toolkit.fluxcd.io/name", "Flux (Kustomization)"},
	{"helm.toolkit.fluxcd.io/name", "Flux (HelmRelease)"},
}

// gitOpsManagers are the field managers of GitOps controllers that apply
// objects server-side (metadata.managedFields), for objects applied without
// the marks above.
var gitOpsManagers = map[string]string{
	"argocd-controller":             "Argo CD",
	"argocd-application-controller": "Argo CD",
	"kustomize-controller":          "Flux (Kustomization)",
	"helm-controller":               "Flux (HelmRelease)",
}

// GitOpsManager says which GitOps tool manages an object, if any: one of
// the Argo CD or Flux labels and annotations (argocd.argoproj.io/instance,
// argocd.argoproj.io/tracking-id, kustomize.toolkit.fluxcd.io/name,
// helm.toolkit.fluxcd.io/name), a Helm release's label
// app.kubernetes.io/managed-by: Helm, or a field manager of those
// controllers. The answer is the tool and the mark that gave it away.
func GitOpsManager(obj metav1.Object) (tool, mark string, managed bool) {
	for _, m := range gitOpsMarks {
		if v, ok := obj.GetLabels()[m.key]; ok {
			return m.tool, "label " + m.key + "=" + v, true
		}
		if v, ok := obj.GetAnnotations()[m.key]; ok {
			return m.tool, "annotation " + m.key + "=" + v, true
		}
	}
	if obj.GetLabels()["app.kubernetes.io/managed-by"] == "Helm" {
		return "Helm", "label app.kubernetes.io/managed-by=Helm", true
	}
	for _, f := range obj.GetManagedFields() {
		if t, ok := gitOpsManagers[f.Manager]; ok {
			return t, "field manager " + f.Manager, true
		}
	}
	return "", "", false
}
