package podspec

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
)

func agent(mut ...func(*picobotv1alpha1.Agent)) *picobotv1alpha1.Agent {
	a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "team-a", UID: "uid-1"}}
	for _, m := range mut {
		m(a)
	}
	return a
}

func TestSessionPod(t *testing.T) {
	keys := []corev1.SecretKeySelector{
		{LocalObjectReference: corev1.LocalObjectReference{Name: "model-keys"}, Key: "openai"},
		{LocalObjectReference: corev1.LocalObjectReference{Name: "mcp.tokens"}, Key: "github-token"},
		{LocalObjectReference: corev1.LocalObjectReference{Name: "model-keys"}, Key: "openai"}, // a repeat
	}
	for _, tc := range []struct {
		name  string
		agent *picobotv1alpha1.Agent
		check func(g Gomega, p *corev1.Pod)
	}{
		{"hardened by default", agent(), func(g Gomega, p *corev1.Pod) {
			sc := p.Spec.SecurityContext
			g.Expect(*sc.RunAsNonRoot).To(BeTrue())
			g.Expect(*sc.RunAsUser).To(Equal(int64(65532)))
			g.Expect(sc.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
			c := p.Spec.Containers[0]
			g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
			g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
			g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
			g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "workspace", MountPath: "/workspace"}))
			g.Expect(p.Spec.Volumes[0].EmptyDir).NotTo(BeNil())
			g.Expect(p.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
			g.Expect(p.Spec.ServiceAccountName).To(Equal("picobot-agent-helper"))
			g.Expect(p.Spec.RuntimeClassName).To(BeNil())
			g.Expect(c.Image).To(Equal("registry.example/picobot:1.0"))
			g.Expect(c.Command).To(Equal([]string{"/picobot", "session"}))
		}},
		{"owned by and labelled for its agent and tenant", agent(), func(g Gomega, p *corev1.Pod) {
			g.Expect(p.Namespace).To(Equal("team-a"))
			g.Expect(p.OwnerReferences).To(HaveLen(1))
			g.Expect(p.OwnerReferences[0].Kind).To(Equal("Agent"))
			g.Expect(p.OwnerReferences[0].UID).To(BeEquivalentTo("uid-1"))
			g.Expect(*p.OwnerReferences[0].Controller).To(BeTrue())
			g.Expect(p.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "helper"))
			g.Expect(p.Labels).To(HaveKeyWithValue(LabelTenant, "team-a"))
			g.Expect(p.Labels).To(HaveKeyWithValue(LabelComponent, ComponentSession))
		}},
		{"secrets only by reference, never values or args", agent(), func(g Gomega, p *corev1.Pod) {
			c := p.Spec.Containers[0]
			var secretEnv []string
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secretEnv = append(secretEnv, e.Name)
					g.Expect(e.Value).To(BeEmpty())
				}
			}
			g.Expect(secretEnv).To(Equal([]string{"PICOBOT_SECRET_MCP_TOKENS_GITHUB_TOKEN", "PICOBOT_SECRET_MODEL_KEYS_OPENAI"}))
			g.Expect(c.Args).To(BeEmpty())
			g.Expect(c.EnvFrom).To(HaveLen(1))
			g.Expect(c.EnvFrom[0].SecretRef.Name).To(Equal(ConnectionSecret))
		}},
		{"runtime settings of the agent apply", agent(func(a *picobotv1alpha1.Agent) {
			a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{Image: "mine/runtime:2", RuntimeClassName: ptr.To("gvisor"),
				Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}
		}), func(g Gomega, p *corev1.Pod) {
			c := p.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("mine/runtime:2"))
			g.Expect(*p.Spec.RuntimeClassName).To(Equal("gvisor"))
			g.Expect(c.Resources.Limits.Memory().String()).To(Equal("256Mi"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := SessionPod(Input{Agent: tc.agent, Name: "helper-abc12", Image: "registry.example/picobot:1.0", SecretKeys: keys})
			tc.check(NewWithT(t), p)
		})
	}
}

func TestSecretEnvNameMatchesTheRuntime(t *testing.T) {
	g := NewWithT(t)
	for _, c := range [][2]string{{"model-keys", "openai"}, {"a.b--c", "KEY_1"}, {"x", "y.z"}, {"déjà", "vu"}} {
		g.Expect(SecretEnvName(c[0], c[1])).To(Equal(agenthost.SecretEnvName(c[0], c[1])), "%v", c)
	}
}

func TestRoleGrantsOnlyWhatTheToolsNeed(t *testing.T) {
	g := NewWithT(t)
	r := Role(agent())
	var verbs = map[string][]string{}
	for _, rule := range r.Rules {
		for _, res := range rule.Resources {
			verbs[res] = rule.Verbs
		}
	}
	g.Expect(verbs).To(HaveLen(6))
	g.Expect(verbs["agents"]).To(ConsistOf("get", "watch"))
	g.Expect(r.Rules[0].ResourceNames).To(Equal([]string{"helper"}))
	g.Expect(verbs["configmaps"]).NotTo(ContainElement("create"))
	// One Secret only: the agent's browser endpoints, read-only.
	g.Expect(verbs["secrets"]).To(Equal([]string{"get"}))
	for _, rule := range r.Rules {
		if slices.Contains(rule.Resources, "secrets") {
			g.Expect(rule.ResourceNames).To(Equal([]string{"picobot-browsers-helper"}))
		}
	}
	g.Expect(verbs).NotTo(HaveKey("pods"))
	rb := RoleBinding(agent())
	g.Expect(rb.Subjects[0].Name).To(Equal(ServiceAccount(agent()).Name))
	g.Expect(rb.RoleRef.Name).To(Equal(r.Name))
}

func TestNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	np := NetworkPolicy("team-a", Network{SystemNamespace: "picobot-system", ServicePorts: []int32{5432, 6379, 8333}})
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
	g.Expect(np.Spec.Ingress).To(BeEmpty(), "nothing may connect to a session pod")
	g.Expect(np.Spec.PodSelector.MatchLabels).To(HaveKeyWithValue(LabelComponent, ComponentSession))
	var internet *networkingv1.IPBlock
	for _, r := range np.Spec.Egress {
		for _, p := range r.To {
			g.Expect(p.PodSelector).To(BeNil(), "no rule opens other pods of any namespace")
			if p.IPBlock != nil && p.IPBlock.CIDR == "0.0.0.0/0" {
				internet = p.IPBlock
			}
		}
	}
	g.Expect(internet).NotTo(BeNil())
	g.Expect(internet.Except).To(ContainElements("10.0.0.0/8", "169.254.0.0/16", "192.168.0.0/16"))
	g.Expect(np.Spec.Egress).To(HaveLen(3))
	g.Expect(np.Spec.Egress[2].Ports).To(HaveLen(3))
}
