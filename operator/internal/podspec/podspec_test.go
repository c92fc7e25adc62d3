package podspec

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
			g.Expect(c.Name).To(Equal(ContainerRuntime))
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
		{"no metrics port unless asked for", agent(), func(g Gomega, p *corev1.Pod) {
			g.Expect(p.Spec.Containers[0].Ports).To(BeEmpty())
			for _, e := range p.Spec.Containers[0].Env {
				g.Expect(e.Name).NotTo(Equal(EnvMetricsAddr))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := SessionPod(Input{Agent: tc.agent, Name: "helper-abc12", Image: "registry.example/picobot:1.0", SecretKeys: keys})
			tc.check(NewWithT(t), p)
		})
	}
}

// TestSessionPodMetricsPort: with a metrics port the runtime container (not
// the sandbox) listens there and names the port, for a PodMonitor.
func TestSessionPodMetricsPort(t *testing.T) {
	g := NewWithT(t)
	p := SessionPod(Input{Agent: agent(), Name: "helper-abc12", Image: "registry.example/picobot:1.0", MetricsPort: 9090})
	c := p.Spec.Containers[0]
	g.Expect(c.Ports).To(Equal([]corev1.ContainerPort{{Name: PortMetrics, ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}))
	g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "PICOBOT_METRICS_ADDR", Value: ":9090"}))
	g.Expect(c.Args).To(BeEmpty(), "the address comes from the environment, as the other settings")
	for _, e := range p.Spec.InitContainers[0].Env {
		g.Expect(e.Name).NotTo(Equal(EnvMetricsAddr), "the sandbox serves nothing")
	}
}

// The session pod runs the tools' programs in a sandbox container holding
// no credential: no Secret (env, envFrom or volume), no ServiceAccount
// token, another user, its own process namespace, the restricted settings.
func TestSessionPodSandboxContainer(t *testing.T) {
	g := NewWithT(t)
	keys := []corev1.SecretKeySelector{{LocalObjectReference: corev1.LocalObjectReference{Name: "model-keys"}, Key: "openai"}}
	p := SessionPod(Input{Agent: agent(func(a *picobotv1alpha1.Agent) {
		a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{RuntimeClassName: ptr.To("gvisor")}
	}), Name: "helper-abc12", Image: "registry.example/picobot:1.0", SecretKeys: keys,
		Env: []corev1.EnvVar{{Name: "PICOBOT_LEASE_TTL", Value: "3s"}}})

	g.Expect(p.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()), "no container gets a token unless it mounts one")
	g.Expect(p.Spec.ShareProcessNamespace).To(HaveValue(BeFalse()))
	g.Expect(*p.Spec.RuntimeClassName).To(Equal("gvisor"), "the pod's RuntimeClass covers both containers")
	g.Expect(p.Spec.InitContainers).To(HaveLen(1))
	sb := p.Spec.InitContainers[0]
	g.Expect(sb.Name).To(Equal(ContainerSandbox))
	g.Expect(sb.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)), "a native sidecar: the pod ends with the runtime")
	g.Expect(sb.Command).To(Equal([]string{"/picobot", "sandbox-server"}))
	g.Expect(sb.Image).To(Equal("registry.example/picobot:1.0"))

	// No credential of any kind.
	g.Expect(sb.EnvFrom).To(BeEmpty())
	for _, e := range sb.Env {
		g.Expect(e.ValueFrom).To(BeNil(), e.Name)
		g.Expect(e.Name).To(BeElementOf("PICOBOT_SANDBOX_SOCKET", "PICOBOT_SANDBOX_WORKSPACE"))
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		volumes[v.Name] = v
		g.Expect(v.Secret).To(BeNil(), "no Secret volume in a session pod")
	}
	var sbMounts []string
	for _, m := range sb.VolumeMounts {
		v := volumes[m.Name]
		g.Expect(v.EmptyDir).NotTo(BeNil(), "the sandbox mounts emptyDirs only, not %q", m.Name)
		sbMounts = append(sbMounts, m.Name+":"+m.MountPath)
	}
	g.Expect(sbMounts).To(ConsistOf("workspace:/workspace", "sandbox-run:/sandbox/run", "sandbox-tmp:/tmp"))

	// Another user, sharing only the pod's fsGroup; restricted settings.
	sc := sb.SecurityContext
	g.Expect(*sc.RunAsUser).To(Equal(int64(65533)))
	g.Expect(*sc.RunAsUser).NotTo(Equal(*p.Spec.SecurityContext.RunAsUser))
	g.Expect(*sc.RunAsGroup).To(Equal(int64(65533)))
	g.Expect(*p.Spec.SecurityContext.FSGroup).To(Equal(int64(65532)))
	g.Expect(*p.Spec.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(p.Spec.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	g.Expect(*sc.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(*sc.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(sc.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))

	// The runtime holds the keys and mounts the projected token; it finds
	// the exec server through the shared socket folder.
	rt := p.Spec.Containers[0]
	g.Expect(rt.Env).To(ContainElement(corev1.EnvVar{Name: "PICOBOT_SANDBOX_SOCKET", Value: "/sandbox/run/exec.sock"}))
	g.Expect(rt.EnvFrom).To(HaveLen(1))
	g.Expect(rt.VolumeMounts).To(ContainElements(
		corev1.VolumeMount{Name: "sandbox-run", MountPath: "/sandbox/run"},
		corev1.VolumeMount{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}))
	token := volumes["kube-api-access"].Projected
	g.Expect(token).NotTo(BeNil())
	g.Expect(token.Sources[0].ServiceAccountToken).NotTo(BeNil())
	g.Expect(*token.Sources[0].ServiceAccountToken.ExpirationSeconds).To(Equal(int64(3607)))
	// The blob grant service's token: its own audience, the shortest
	// lifetime the API server allows, found through the environment.
	g.Expect(rt.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "blob-token", MountPath: "/var/run/secrets/blob.picobot.io", ReadOnly: true}))
	g.Expect(rt.Env).To(ContainElement(corev1.EnvVar{Name: "PICOBOT_BLOB_TOKEN_FILE", Value: "/var/run/secrets/blob.picobot.io/token"}))
	blobToken := volumes["blob-token"].Projected
	g.Expect(blobToken).NotTo(BeNil())
	g.Expect(blobToken.Sources).To(Equal([]corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
		Audience: "blob.picobot.io", ExpirationSeconds: ptr.To[int64](600), Path: "token"}}}))
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name == "kube-api-access" || m.Name == "blob-token" {
				g.Expect(c.Name).To(Equal(ContainerRuntime), "only the runtime mounts a token")
			}
		}
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
	g.Expect(verbs).To(HaveLen(7))
	// The namespace's TenantQuota: read, only the one named default.
	g.Expect(verbs["tenantquotas"]).To(Equal([]string{"get"}))
	for _, rule := range r.Rules {
		if slices.Contains(rule.Resources, "tenantquotas") {
			g.Expect(rule.ResourceNames).To(Equal([]string{picobotv1alpha1.TenantQuotaName}))
		}
	}
	g.Expect(verbs["agents"]).To(ConsistOf("get", "watch"))
	g.Expect(r.Rules[0].ResourceNames).To(Equal([]string{"helper"}))
	// A lead also reads the Agents its delegate edges name, once each.
	lead := agent()
	lead.Spec.Delegates = []picobotv1alpha1.Delegate{{Name: "a", AgentRef: corev1.LocalObjectReference{Name: "researcher"}},
		{Name: "b", AgentRef: corev1.LocalObjectReference{Name: "researcher"}}, {Name: "c", AgentRef: corev1.LocalObjectReference{Name: "helper"}}}
	g.Expect(Role(lead).Rules[0].ResourceNames).To(Equal([]string{"helper", "researcher"}))
	g.Expect(verbs["configmaps"]).NotTo(ContainElement("create"))
	// One Secret only: the agent's browser endpoints, read-only.
	g.Expect(verbs["secrets"]).To(Equal([]string{"get"}))
	for _, rule := range r.Rules {
		if slices.Contains(rule.Resources, "secrets") {
			g.Expect(rule.ResourceNames).To(Equal([]string{"picobot-browsers-helper"}))
		}
	}
	g.Expect(verbs).NotTo(HaveKey("pods"))
	// Patch of an Agent: a root agent's pods, their own Agent only (the
	// gateway tool); no other Agent's pods, even with delegate edges.
	for _, rule := range append(r.Rules, Role(lead).Rules...) {
		if slices.Contains(rule.Resources, "agents") {
			g.Expect(rule.Verbs).NotTo(ContainElement("patch"), "rule %v", rule)
		}
	}
	root := agent()
	root.Spec.Role = ptr.To(picobotv1alpha1.AgentRoleRoot)
	root.Spec.Delegates = lead.Spec.Delegates
	var patches []rbacv1.PolicyRule
	for _, rule := range Role(root).Rules {
		if slices.Contains(rule.Resources, "agents") && slices.Contains(rule.Verbs, "patch") {
			patches = append(patches, rule)
		}
	}
	g.Expect(patches).To(Equal([]rbacv1.PolicyRule{{APIGroups: []string{picobotv1alpha1.GroupVersion.Group}, Resources: []string{"agents"},
		ResourceNames: []string{"helper"}, Verbs: []string{"patch"}}}))
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

// TestNetworkPolicyAdmitsMetricsScrapes: with a metrics port the policy
// admits that port alone, from the given peers or, with none, from
// anywhere (an ingress rule without from); egress does not change.
func TestNetworkPolicyAdmitsMetricsScrapes(t *testing.T) {
	g := NewWithT(t)
	base := Network{SystemNamespace: "picobot-system", ServicePorts: []int32{5432}}
	tcp, port := corev1.ProtocolTCP, intstr.FromInt32(9090)
	onlyMetrics := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}

	anyone := base
	anyone.MetricsPort = 9090
	np := NetworkPolicy("team-a", anyone)
	g.Expect(np.Spec.Ingress).To(Equal([]networkingv1.NetworkPolicyIngressRule{{Ports: onlyMetrics}}))
	g.Expect(np.Spec.Egress).To(Equal(NetworkPolicy("team-a", base).Spec.Egress))

	peers := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}}
	some := anyone
	some.MetricsFrom = peers
	np = NetworkPolicy("team-a", some)
	g.Expect(np.Spec.Ingress).To(Equal([]networkingv1.NetworkPolicyIngressRule{{Ports: onlyMetrics, From: peers}}))

	noPort := base
	noPort.MetricsFrom = peers
	g.Expect(NetworkPolicy("team-a", noPort).Spec.Ingress).To(BeEmpty(), "peers without a port admit nothing")
}
