package podspec

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
)

func TestParseSandboxPlacement(t *testing.T) {
	g := NewWithT(t)
	for _, s := range []string{"container", "pod"} {
		p, err := ParseSandboxPlacement(s)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(p)).To(Equal(s))
	}
	_, err := ParseSandboxPlacement("vm")
	g.Expect(err).To(MatchError(`failed to parse sandbox placement "vm": want "container" or "pod"`))
}

// A session pod with a sandbox pod has no sandbox container and no shared
// socket volume; its runtime gets the relay socket, the pair's name and,
// by reference only, the pair's certificate and token.
func TestSessionPodWithSandboxPod(t *testing.T) {
	g := NewWithT(t)
	p := SessionPod(Input{Agent: agent(), Name: "helper-abcde", Image: "registry.example/picobot:1.0", Sandbox: SandboxInPod})
	g.Expect(p.Spec.InitContainers).To(BeEmpty())
	g.Expect(p.Spec.Containers).To(HaveLen(1))
	for _, v := range p.Spec.Volumes {
		g.Expect(v.Name).NotTo(Or(Equal("sandbox-run"), Equal("sandbox-tmp")))
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	g.Expect(env["PICOBOT_SANDBOX_SOCKET"].Value).To(Equal("/tmp/picobot-exec.sock"))
	g.Expect(env[paircred.EnvPair].Value).To(Equal("helper-abcde-sandbox"))
	g.Expect(env[paircred.EnvCert].ValueFrom.SecretKeyRef).To(Equal(&corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "helper-abcde-sandbox"}, Key: paircred.KeyCert}))
	g.Expect(env[paircred.EnvToken].ValueFrom.SecretKeyRef.Key).To(Equal(paircred.KeyToken))
	g.Expect(env).NotTo(HaveKey(paircred.EnvKey), "the runtime never holds the server's key")

	// The default placement keeps the sandbox container.
	c := SessionPod(Input{Agent: agent(), Name: "helper-abcde"})
	g.Expect(c.Spec.InitContainers).To(HaveLen(1))
	g.Expect(c.Spec.InitContainers[0].Name).To(Equal(ContainerSandbox))
}

func TestSandboxPod(t *testing.T) {
	g := NewWithT(t)
	a := agent(func(a *picobotv1alpha1.Agent) {
		a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{RuntimeClassName: ptr.To("gvisor"), Resources: &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}
	})
	session := SessionPod(Input{Agent: a, Name: "helper-abcde", Image: "registry.example/picobot:1.0", Sandbox: SandboxInPod})
	session.UID = "pod-uid"
	g.Expect(HasSandboxPod(session)).To(BeTrue())
	g.Expect(HasSandboxPod(SessionPod(Input{Agent: a, Name: "helper-abcde"}))).To(BeFalse())
	p := SandboxPod(session)

	g.Expect(p.Name).To(Equal("helper-abcde-sandbox"))
	g.Expect(p.Namespace).To(Equal("team-a"))
	g.Expect(p.Labels).To(Equal(map[string]string{LabelName: "picobot", LabelComponent: ComponentSandbox, LabelManagedBy: "picobot-operator",
		picobotv1alpha1.LabelAgent: "helper", LabelTenant: "team-a", LabelSessionPod: "helper-abcde"}))
	g.Expect(p.OwnerReferences).To(Equal([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "helper-abcde", UID: "pod-uid",
		Controller: ptr.To(true)}}), "it goes with its session pod")
	g.Expect(p.Spec.Containers[0].Image).To(Equal("registry.example/picobot:1.0"))
	g.Expect(p.Spec.Containers[0].Resources.Limits.Memory().String()).To(Equal("1Gi"))

	s := p.Spec
	g.Expect(*s.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(s.ServiceAccountName).To(BeEmpty())
	g.Expect(*s.EnableServiceLinks).To(BeFalse())
	g.Expect(*s.RuntimeClassName).To(Equal("gvisor"))
	g.Expect(s.RestartPolicy).To(Equal(corev1.RestartPolicyAlways))
	g.Expect(*s.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(s.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	g.Expect(s.InitContainers).To(BeEmpty())
	g.Expect(s.Containers).To(HaveLen(1))
	c := s.Containers[0]
	g.Expect(c.Command).To(Equal([]string{"/picobot", "sandbox-server"}))
	g.Expect(c.Args).To(Equal([]string{"--listen=:7443"}))
	g.Expect(c.Ports).To(Equal([]corev1.ContainerPort{{Name: PortExec, ContainerPort: 7443, Protocol: corev1.ProtocolTCP}}))
	g.Expect(*c.SecurityContext.RunAsUser).To(Equal(int64(65533)), "not the runtime's user")
	g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(c.EnvFrom).To(BeEmpty(), "no connection Secret")
	secrets := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			g.Expect(e.ValueFrom.SecretKeyRef).NotTo(BeNil())
			g.Expect(e.ValueFrom.SecretKeyRef.Name).To(Equal("helper-abcde-sandbox"), "its own Secret only")
			secrets[e.Name] = e.ValueFrom.SecretKeyRef.Key
		}
	}
	g.Expect(secrets).To(Equal(map[string]string{paircred.EnvCert: paircred.KeyCert, paircred.EnvKey: paircred.KeyKey, paircred.EnvToken: paircred.KeyToken}))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "workspace", MountPath: "/workspace"}))
	for _, v := range s.Volumes {
		g.Expect(v.EmptyDir).NotTo(BeNil(), "volume %s: nothing but emptyDirs (no token, no Secret volume)", v.Name)
	}
}

func TestPairSecretAndAddress(t *testing.T) {
	g := NewWithT(t)
	cred, err := paircred.Generate("helper-abcde-sandbox", time.Unix(1_700_000_000, 0))
	g.Expect(err).NotTo(HaveOccurred())
	sec := PairSecret(agent(), "helper-abcde", cred)
	g.Expect(sec.Name).To(Equal("helper-abcde-sandbox"))
	g.Expect(sec.OwnerReferences[0].Kind).To(Equal("Agent"), "owned by the Agent until the session pod exists")
	g.Expect(sec.Labels).To(HaveKeyWithValue(LabelComponent, ComponentSandbox))
	g.Expect(sec.Data).To(HaveKeyWithValue(paircred.KeyToken, []byte(cred.Token)))
	g.Expect(sec.Data).To(HaveKeyWithValue(paircred.KeyCert, cred.CertPEM))
	g.Expect(sec.Data).To(HaveKeyWithValue(paircred.KeyKey, cred.KeyPEM))

	session := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "helper-abcde", Namespace: "team-a", UID: "pod-uid"}}
	SetPairOwner(sec, session)
	g.Expect(sec.OwnerReferences).To(HaveLen(1))
	g.Expect(sec.OwnerReferences[0].UID).To(BeEquivalentTo("pod-uid"))

	cm := PairAddress(session, "10.1.2.3:7443")
	g.Expect(cm.Name).To(Equal("helper-abcde-sandbox"))
	g.Expect(cm.Data).To(Equal(map[string]string{"address": "10.1.2.3:7443"}))
	g.Expect(cm.OwnerReferences[0].Name).To(Equal("helper-abcde"))

	long := PairName(string(make([]byte, 260)))
	g.Expect(len(long)).To(BeNumerically("<=", 253))
}

func TestSandboxNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	np := SandboxNetworkPolicy("team-a", Network{SystemNamespace: "picobot-system", ServicePorts: []int32{5432, 6379, 443}})
	g.Expect(np.Name).To(Equal("picobot-sandbox-pods"))
	g.Expect(np.Labels).To(HaveKeyWithValue(LabelComponent, ComponentSandbox))
	g.Expect(np.Spec.PodSelector.MatchLabels).To(Equal(map[string]string{LabelName: "picobot", LabelComponent: ComponentSandbox}))
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))

	g.Expect(np.Spec.Ingress).To(HaveLen(1))
	in := np.Spec.Ingress[0]
	g.Expect(in.Ports).To(HaveLen(1))
	g.Expect(in.Ports[0].Port.IntValue()).To(Equal(7443))
	g.Expect(in.From).To(HaveLen(1))
	g.Expect(in.From[0].NamespaceSelector).To(BeNil(), "this namespace's pods only")
	g.Expect(in.From[0].PodSelector.MatchLabels).To(HaveKeyWithValue(LabelComponent, ComponentSession))

	g.Expect(np.Spec.Egress).To(HaveLen(2))
	g.Expect(np.Spec.Egress[0].To[0].NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": "kube-system"}))
	g.Expect(np.Spec.Egress[0].Ports).To(HaveLen(2))
	g.Expect(np.Spec.Egress[1].Ports).To(BeEmpty())
	g.Expect(np.Spec.Egress[1].To[0].IPBlock.CIDR).To(Equal("0.0.0.0/0"))
	g.Expect(np.Spec.Egress[1].To[0].IPBlock.Except).To(ContainElements("10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8"))
	for _, r := range np.Spec.Egress {
		for _, to := range r.To {
			if to.NamespaceSelector != nil {
				g.Expect(to.NamespaceSelector.MatchLabels).NotTo(ContainElement("picobot-system"), "never the system namespace")
			}
		}
	}

	// The session pods' policy lets them reach sandbox pods' exec port.
	sp := NetworkPolicy("team-a", Network{SandboxPort: SandboxPort})
	last := sp.Spec.Egress[len(sp.Spec.Egress)-1]
	g.Expect(last.To[0].PodSelector.MatchLabels).To(HaveKeyWithValue(LabelComponent, ComponentSandbox))
	g.Expect(last.Ports[0].Port.IntValue()).To(Equal(7443))
	g.Expect(NetworkPolicy("team-a", Network{}).Spec.Egress).To(HaveLen(2), "no such rule with sandbox containers")
}

// The names and labels docs/sandbox.md documents, which tests outside the
// operator (the cluster e2e, the real-node test) assert by value.
func TestSandboxNamesAreDocumented(t *testing.T) {
	g := NewWithT(t)
	g.Expect(LabelSandboxPlacement).To(Equal("agents.picobot.io/sandbox-placement"))
	g.Expect(LabelSandbox).To(Equal("agents.picobot.io/sandbox"))
	g.Expect(LabelSessionPod).To(Equal("agents.picobot.io/session-pod"))
	g.Expect(LabelComponent).To(Equal("app.kubernetes.io/component"))
	g.Expect(ComponentSandbox).To(Equal("sandbox"))
	g.Expect(SandboxNetworkPolicyName).To(Equal("picobot-sandbox-pods"))
	g.Expect(NetworkPolicyName).To(Equal("picobot-session-pods"))
	g.Expect(SandboxPort).To(Equal(int32(7443)))
	g.Expect(PairName("helper-abcde")).To(Equal("helper-abcde-sandbox"))
}
