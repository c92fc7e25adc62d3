// Package v1alpha1 holds the PicoBot API types: Agent, CronJob, BrowserProfile and
// TenantQuota.
// It imports only k8s.io/apimachinery and k8s.io/api so that clients and the
// embedded-mode loader can depend on it without pulling in the operator.
//
// +kubebuilder:object:generate=true
// +groupName=agents.picobot.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "agents.picobot.io", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this group-version to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Agent{}, &AgentList{},
		&CronJob{}, &CronJobList{},
		&BrowserProfile{}, &BrowserProfileList{},
		&TenantQuota{}, &TenantQuotaList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
