package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/operator/internal/podspec"
)

// namespaceObject is one object the operator keeps in a tenant namespace,
// how a tenant tampers with it, and whether it is as the operator wants.
type namespaceObject struct {
	obj    client.Object
	tamper func(client.Object)
	intact func(Gomega, client.Object)
}

// TestNamespaceObjectsComeBack attacks, on a real API server with the
// operator's manager running, every object the operator writes into a
// tenant namespace: deleted, each is created again; edited (data, rules,
// subjects, NetworkPolicy spec, labels that hide it from the cache, an
// immutable Secret), each is set back.
func TestNamespaceObjectsComeBack(t *testing.T) {
	ns := newRuntimeNamespace(t)
	rc := startRuntimeManager(t, ns, nil)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "helper", "openai"))).To(Succeed())
	sa := podspec.ServiceAccountName("helper")
	wantData := map[string][]byte{"PICOBOT_REDIS_URL": []byte(rc.Connection["PICOBOT_REDIS_URL"])}

	objects := map[string]namespaceObject{
		"connection Secret": {
			obj: &corev1.Secret{},
			tamper: func(o client.Object) {
				o.(*corev1.Secret).Data = map[string][]byte{"PICOBOT_REDIS_URL": []byte("redis://attacker:6379"), "EXTRA": []byte("x")}
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.(*corev1.Secret).Data).To(Equal(wantData))
			},
		},
		"immutable connection Secret": {
			obj: &corev1.Secret{},
			tamper: func(o client.Object) {
				s := o.(*corev1.Secret)
				s.Data, s.Immutable = map[string][]byte{"PICOBOT_REDIS_URL": []byte("redis://attacker:6379")}, ptr(true)
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.(*corev1.Secret).Data).To(Equal(wantData))
				g.Expect(o.(*corev1.Secret).Immutable).To(BeNil())
			},
		},
		"NetworkPolicy": {
			obj: &networkingv1.NetworkPolicy{},
			tamper: func(o client.Object) {
				o.(*networkingv1.NetworkPolicy).Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}} // allow all
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.(*networkingv1.NetworkPolicy).Spec).To(Equal(podspec.NetworkPolicy(ns, rc.Network).Spec))
			},
		},
		"unlabelled NetworkPolicy": {
			obj: &networkingv1.NetworkPolicy{},
			tamper: func(o client.Object) {
				o.SetLabels(nil) // out of the operator's cache
				o.(*networkingv1.NetworkPolicy).Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.GetLabels()).To(HaveKeyWithValue(podspec.LabelManagedBy, "picobot-operator"))
				g.Expect(o.(*networkingv1.NetworkPolicy).Spec).To(Equal(podspec.NetworkPolicy(ns, rc.Network).Spec))
			},
		},
		"Role": {
			obj: &rbacv1.Role{},
			tamper: func(o client.Object) {
				r := o.(*rbacv1.Role)
				r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.(*rbacv1.Role).Rules).To(Equal(podspec.Role(getAgent(g, ns, "helper")).Rules))
			},
		},
		"unlabelled RoleBinding": {
			obj: &rbacv1.RoleBinding{},
			tamper: func(o client.Object) {
				o.SetLabels(nil)
				rb := o.(*rbacv1.RoleBinding)
				rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.(*rbacv1.RoleBinding).Subjects).To(Equal(podspec.RoleBinding(getAgent(g, ns, "helper")).Subjects))
				g.Expect(o.GetLabels()).To(HaveKeyWithValue(podspec.LabelManagedBy, "picobot-operator"))
			},
		},
		"ServiceAccount": {
			obj: &corev1.ServiceAccount{},
			tamper: func(o client.Object) {
				o.(*corev1.ServiceAccount).AutomountServiceAccountToken = ptr(false)
			},
			intact: func(g Gomega, o client.Object) {
				g.Expect(o.(*corev1.ServiceAccount).AutomountServiceAccountToken).To(Equal(ptr(true)))
			},
		},
	}
	nameOf := func(o client.Object) string {
		switch o.(type) {
		case *corev1.Secret:
			return podspec.ConnectionSecret
		case *networkingv1.NetworkPolicy:
			return podspec.NetworkPolicyName
		}
		return sa
	}
	// fetch waits until the object exists, as the operator wants it, with
	// another UID than gone (when set).
	fetch := func(t *testing.T, c namespaceObject, gone types.UID) client.Object {
		t.Helper()
		o := c.obj.DeepCopyObject().(client.Object)
		NewWithT(t).Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: nameOf(c.obj)}, o)).To(Succeed())
			g.Expect(o.GetUID()).NotTo(Equal(gone))
			c.intact(g, o)
		}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
		return o
	}
	for name, c := range objects {
		t.Run(name+" deleted", func(t *testing.T) {
			o := fetch(t, c, "")
			NewWithT(t).Expect(k8s.Delete(ctx, o)).To(Succeed())
			fetch(t, c, o.GetUID())
		})
		t.Run(name+" edited", func(t *testing.T) {
			o := fetch(t, c, "")
			c.tamper(o)
			NewWithT(t).Expect(k8s.Update(ctx, o)).To(Succeed())
			fetch(t, c, "")
		})
	}
}
