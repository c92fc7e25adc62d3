package controller

import (
	"bytes"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// keysChanged passes Secret and ConfigMap events that can change a referencing
// object's status: creation, deletion, and updates that add or remove keys (or,
// for the namespace defaults ConfigMap, change values; for a Secret, change
// what the cache keeps of its values: placeholders, see StripSecretValues). Periodic resyncs and
// value rotations of unrelated keys are dropped, so they cost no reconcile.
type keysChanged struct{ predicate.Funcs }

func (keysChanged) Create(event.CreateEvent) bool   { return true }
func (keysChanged) Delete(event.DeleteEvent) bool   { return true }
func (keysChanged) Generic(event.GenericEvent) bool { return false }
func (keysChanged) Update(e event.UpdateEvent) bool {
	switch o := e.ObjectOld.(type) {
	case *corev1.Secret:
		n, ok := e.ObjectNew.(*corev1.Secret)
		return !ok || !maps.EqualFunc(o.Data, n.Data, bytes.Equal)
	case *corev1.ConfigMap:
		n, ok := e.ObjectNew.(*corev1.ConfigMap)
		if !ok {
			return true
		}
		if n.Name == picobotv1alpha1.NamespaceDefaultsConfigMap {
			return !maps.Equal(o.Data, n.Data)
		}
		return !sameKeys(o.Data, n.Data) || !sameKeys(o.BinaryData, n.BinaryData)
	}
	return true
}

func sameKeys[V any](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// createOrDelete passes only events that change whether an object exists, for
// watches where existence is all a referencing object checks.
type createOrDelete struct{ predicate.Funcs }

func (createOrDelete) Create(event.CreateEvent) bool   { return true }
func (createOrDelete) Delete(event.DeleteEvent) bool   { return true }
func (createOrDelete) Update(event.UpdateEvent) bool   { return false }
func (createOrDelete) Generic(event.GenericEvent) bool { return false }
