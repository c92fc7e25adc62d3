package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProfileStorage is where a persistent browser profile lives between uses.
// +kubebuilder:validation:Enum=s3;pvc
type ProfileStorage string

const (
	// StorageS3 saves the Chrome profile to the artifact store on close and
	// restores it on open.
	StorageS3 ProfileStorage = "s3"
	// StoragePVC keeps the Chrome profile on a PersistentVolumeClaim.
	StoragePVC ProfileStorage = "pvc"
)

// Persistence says how a browser identity survives pod restarts.
// +kubebuilder:validation:XValidation:rule="self.storage == 'pvc' || (!has(self.size) && !has(self.storageClassName))",message="size and storageClassName apply only to storage pvc"
type Persistence struct {
	// storage is "s3" (default: saved on close, restored on open) or "pvc".
	// +optional
	// +kubebuilder:default=s3
	Storage ProfileStorage `json:"storage,omitempty"`

	// size of the PersistentVolumeClaim for storage pvc.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName of the PersistentVolumeClaim for storage pvc.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// BrowserProfileSpec is a persistent browser identity.
// +kubebuilder:validation:XValidation:rule="has(oldSelf.persistence) == has(self.persistence)",message="persistence is immutable; create a new BrowserProfile instead"
type BrowserProfileSpec struct {
	// label is a human name for the identity (1-80 characters). It identifies;
	// tools select profiles by their exact name, never by label.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	// +kubebuilder:validation:XValidation:rule="size(self) >= 1 && size(self) <= 80 && self.trim() != ''",message="label must be 1-80 characters and not blank"
	Label string `json:"label,omitempty"`

	// allowedDomains restricts what the browser of this profile may load
	// ("example.com", "*.example.com"); empty allows the public internet.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	AllowedDomains []string `json:"allowedDomains,omitempty"`

	// persistence says where cookies, logins and local storage live between uses.
	// It cannot be changed after creation.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="persistence is immutable; create a new BrowserProfile instead"
	Persistence *Persistence `json:"persistence,omitempty"`

	// idleTimeout after which the browser pod of this profile is stopped (its
	// profile is saved first).
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h"
	IdleTimeout *Duration `json:"idleTimeout,omitempty"`
}

// BrowserProfileStatus is what the operator observed about the profile.
type BrowserProfileStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation this status describes; 0
	// until the operator has looked at the object, so that kstatus (Flux,
	// cli-utils) reads a new object as InProgress, not Current.
	// +kubebuilder:default=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// activePod is the browser pod serving this profile, if any.
	// +optional
	ActivePod string `json:"activePod,omitempty"`

	// lastUsed is when a session last used this profile.
	// +optional
	LastUsed *metav1.Time `json:"lastUsed,omitempty"`
}

// BrowserProfile is a persistent browser identity (cookies, logins, local
// storage) that agents reuse across dialogs and pod restarts.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bp,categories=picobot
// +kubebuilder:printcolumn:name="Label",type=string,JSONPath=`.spec.label`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.activePod`
// +kubebuilder:printcolumn:name="Last Used",type=date,JSONPath=`.status.lastUsed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BrowserProfile struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the identity.
	// +optional
	Spec BrowserProfileSpec `json:"spec,omitempty"`

	// status is written by the operator. It defaults to an empty status
	// (observedGeneration 0) until then.
	// +kubebuilder:default={}
	// +optional
	Status BrowserProfileStatus `json:"status,omitempty"`
}

// BrowserProfileList is a list of BrowserProfiles.
// +kubebuilder:object:root=true
type BrowserProfileList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BrowserProfile `json:"items"`
}
