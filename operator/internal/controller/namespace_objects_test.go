package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	network := rc.Network
	network.APIServer = apiServerOf(t)

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
				g.Expect(o.(*networkingv1.NetworkPolicy).Spec).To(Equal(podspec.NetworkPolicy(ns, network).Spec))
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
				g.Expect(o.(*networkingv1.NetworkPolicy).Spec).To(Equal(podspec.NetworkPolicy(ns, network).Spec))
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

// apiServerOf reads where the test's API server answers, as the operator
// should: the kubernetes Service's cluster IP and port, and its endpoints.
func apiServerOf(t *testing.T) podspec.APIServer {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	var svc corev1.Service
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &svc)).To(Succeed())
	var eps discoveryv1.EndpointSliceList
	g.Expect(k8s.List(ctx, &eps, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"})).To(Succeed())
	api := podspec.APIServer{CIDRs: []string{svc.Spec.ClusterIP + "/32"}, Ports: []int32{svc.Spec.Ports[0].Port}}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			api.CIDRs = append(api.CIDRs, e.Addresses[0]+"/32")
		}
		api.Ports = append(api.Ports, *s.Ports[0].Port)
	}
	g.Expect(eps.Items).NotTo(BeEmpty(), "the API server publishes its own endpoints")
	api.Normalize()
	return api
}

// TestSessionPodsReachTheAPIServer: the session pods' NetworkPolicy lets them
// reach the API server where it really answers (its endpoint address and
// port, usually private and not 443, as on the real node where every session
// pod otherwise exited with "failed to read agent … connection refused"), and
// the sandbox pods' policy does not.
func TestSessionPodsReachTheAPIServer(t *testing.T) {
	ns := newRuntimeNamespace(t)
	startRuntimeManager(t, ns, nil)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "helper", "openai"))).To(Succeed())
	api := apiServerOf(t)
	g.Expect(api.Ports).To(ContainElement(Not(BeEquivalentTo(443))), "envtest's API server listens on a port of its own")

	want := networkingv1.NetworkPolicyEgressRule{}
	tcp := corev1.ProtocolTCP
	for _, c := range api.CIDRs {
		want.To = append(want.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	for _, p := range api.Ports {
		port := intstr.FromInt32(p)
		want.Ports = append(want.Ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port})
	}
	g.Eventually(func(g Gomega) {
		var np networkingv1.NetworkPolicy
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.NetworkPolicyName}, &np)).To(Succeed())
		g.Expect(np.Spec.Egress).To(ContainElement(want))
	}).Should(Succeed())

	sandbox := podspec.SandboxNetworkPolicy(ns, podspec.Network{APIServer: api})
	for _, r := range sandbox.Spec.Egress {
		for _, p := range r.To {
			if p.IPBlock != nil {
				g.Expect(api.CIDRs).NotTo(ContainElement(p.IPBlock.CIDR), "sandbox pods never reach the API server")
			}
		}
	}
}
