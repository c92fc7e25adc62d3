package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
)

// SandboxPlacement is where the tools' programs of a session pod run: the
// platform's choice (the operator's --sandbox-placement).
type SandboxPlacement string

const (
	// SandboxInContainer runs them in a sandbox container of the session
	// pod, reached over a Unix socket in a shared emptyDir: no network
	// boundary between the runtime and the programs (they share the pod's
	// network namespace and NetworkPolicy).
	SandboxInContainer SandboxPlacement = "container"
	// SandboxInPod runs them in a sandbox pod of their own, one per session
	// pod, with its own NetworkPolicy (SandboxNetworkPolicy), reached over
	// TCP and TLS with the pair's credentials.
	SandboxInPod SandboxPlacement = "pod"
)

// ParseSandboxPlacement checks a placement name.
func ParseSandboxPlacement(s string) (SandboxPlacement, error) {
	switch p := SandboxPlacement(s); p {
	case SandboxInContainer, SandboxInPod:
		return p, nil
	}
	return "", fmt.Errorf("failed to parse sandbox placement %q: want %q or %q", s, SandboxInContainer, SandboxInPod)
}

// Names and labels of sandbox pods and their objects.
const (
	// ComponentSandbox is the LabelComponent of sandbox pods and their
	// Secrets, address ConfigMaps and NetworkPolicy.
	ComponentSandbox = "sandbox"
	// LabelSandboxPlacement on a namespace (the platform team's) sets the
	// sandbox placement of its session pods, over the operator's default.
	LabelSandboxPlacement = "agents.picobot.io/sandbox-placement"
	// LabelSandbox on a session pod says where its tools run ("pod": in
	// a sandbox pod; absent: in its sandbox container).
	LabelSandbox = "agents.picobot.io/sandbox"
	// LabelSessionPod is set on a sandbox pod, its Secret and its address
	// ConfigMap: the name of the session pod of the pair.
	LabelSessionPod = "agents.picobot.io/session-pod"
	// SandboxNetworkPolicyName is the policy of sandbox pods in a
	// namespace.
	SandboxNetworkPolicyName = "picobot-sandbox-pods"
	// SandboxPort is where a sandbox pod's exec server listens (TLS), the
	// container port PortExec.
	SandboxPort int32 = 7443
	PortExec          = "exec"
	// relaySocket is where the runtime of a session pod with a sandbox
	// pod serves the exec server protocol to its own tools (its private
	// /tmp).
	relaySocket = "/tmp/picobot-exec.sock"
)

// PairName names the sandbox pod of session pod pod, and the pair's Secret
// and address ConfigMap.
func PairName(pod string) string {
	name := pod + "-sandbox"
	if len(name) <= maxName {
		return name
	}
	return shortened(name, maxName)
}

// SandboxLabels select the sandbox pod of session pod pod.
func SandboxLabels(a *picobotv1alpha1.Agent, pod string) map[string]string {
	return map[string]string{
		LabelName:                  "picobot",
		LabelComponent:             ComponentSandbox,
		LabelManagedBy:             "picobot-operator",
		picobotv1alpha1.LabelAgent: LabelValue(a.Name),
		LabelTenant:                a.Namespace,
		LabelSessionPod:            LabelValue(pod),
	}
}

// sessionOwner makes session pod p the controller of a pair's object.
func sessionOwner(p *corev1.Pod) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}
}

// SandboxPod returns the sandbox pod of a session pod, built from the
// session pod alone (its runtime's image and resources, its RuntimeClass,
// agent and tenant), so the two always agree: the exec server on
// SandboxPort as another user, with the workspace volume, no
// ServiceAccount token, no environment but its own settings and its pair's
// credentials (the only Secret it reads), read-only root, no capabilities.
// It restarts its container in place (the workspace stays); the operator
// replaces the pod when it is gone.
func SandboxPod(session *corev1.Pod) *corev1.Pod {
	var rt corev1.Container
	for _, c := range session.Spec.Containers {
		if c.Name == ContainerRuntime {
			rt = c
		}
	}
	name := PairName(session.Name)
	secretEnv := func(env, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
	}
	labels := map[string]string{LabelName: "picobot", LabelComponent: ComponentSandbox, LabelManagedBy: "picobot-operator",
		LabelSessionPod: LabelValue(session.Name)}
	for _, k := range []string{picobotv1alpha1.LabelAgent, LabelTenant} {
		if v, ok := session.Labels[k]; ok {
			labels[k] = v
		}
	}
	sc := restrictedContainerSecurity()
	sc.RunAsUser, sc.RunAsGroup = ptr.To[int64](sandboxUID), ptr.To[int64](sandboxUID)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: session.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{sessionOwner(session)}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			ShareProcessNamespace:         ptr.To(false),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			RuntimeClassName:              session.Spec.RuntimeClassName,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			SecurityContext:               restrictedPodSecurity(),
			Containers: []corev1.Container{{
				Name:    ContainerSandbox,
				Image:   rt.Image,
				Command: []string{"/picobot", "sandbox-server"},
				Args:    []string{fmt.Sprintf("--listen=:%d", SandboxPort)},
				Env: []corev1.EnvVar{{Name: "PICOBOT_SANDBOX_WORKSPACE", Value: sandboxWorkspaces},
					secretEnv(paircred.EnvCert, paircred.KeyCert), secretEnv(paircred.EnvKey, paircred.KeyKey),
					secretEnv(paircred.EnvToken, paircred.KeyToken)},
				Ports:           []corev1.ContainerPort{{Name: PortExec, ContainerPort: SandboxPort, Protocol: corev1.ProtocolTCP}},
				Resources:       rt.Resources,
				SecurityContext: sc,
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: workspaceDir},
					{Name: "sandbox-tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "sandbox-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resourceQuantity64Mi)}}},
			},
		},
	}
}

// HasSandboxPod says whether session pod p runs its tools in a sandbox pod.
func HasSandboxPod(p *corev1.Pod) bool {
	return p.Labels[LabelComponent] == ComponentSession && p.Labels[LabelSandbox] == string(SandboxInPod)
}

// PairSecret holds a pair's credentials. It is made before the session
// pod (whose runtime reads it), owned by the Agent until the operator
// hands it to the session pod (SetPairOwner).
func PairSecret(a *picobotv1alpha1.Agent, pod string, c paircred.Credentials) *corev1.Secret {
	m := meta(a, PairName(pod))
	m.Labels[LabelComponent] = ComponentSandbox
	m.Labels[LabelSessionPod] = LabelValue(pod)
	return &corev1.Secret{ObjectMeta: m, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{
		paircred.KeyCert: c.CertPEM, paircred.KeyKey: c.KeyPEM, paircred.KeyToken: []byte(c.Token)}}
}

// SetPairOwner makes session pod p the only owner of a pair's object, so
// it goes with the pod.
func SetPairOwner(obj metav1.Object, p *corev1.Pod) {
	obj.SetOwnerReferences([]metav1.OwnerReference{sessionOwner(p)})
}

// PairAddress is the ConfigMap the runtime of session pod p reads its
// sandbox pod's address from (host:port); the operator rewrites it when
// the sandbox pod is replaced. Its runtime reads ConfigMaps already (skills);
// an address is no secret.
func PairAddress(p *corev1.Pod, addr string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: PairName(p.Name), Namespace: p.Namespace,
			Labels: map[string]string{LabelName: "picobot", LabelManagedBy: "picobot-operator", LabelComponent: ComponentSandbox,
				LabelSessionPod: LabelValue(p.Name)},
			OwnerReferences: []metav1.OwnerReference{sessionOwner(p)}},
		Data: map[string]string{paircred.KeyAddress: addr},
	}
}

// sandboxRuntimeEnv is what the runtime of a session pod with a sandbox
// pod needs: its relay's socket, the pair's name, certificate and token.
func sandboxRuntimeEnv(pod string) []corev1.EnvVar {
	name := PairName(pod)
	ref := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	return []corev1.EnvVar{{Name: "PICOBOT_SANDBOX_SOCKET", Value: relaySocket}, {Name: paircred.EnvPair, Value: name},
		{Name: paircred.EnvCert, ValueFrom: ref(paircred.KeyCert)}, {Name: paircred.EnvToken, ValueFrom: ref(paircred.KeyToken)}}
}

// SandboxNetworkPolicy isolates the sandbox pods of a namespace: ingress
// only to the exec port and only from the namespace's session pods (the
// pair's token and certificate tell the pairs apart); egress to DNS and
// the public internet only. No rule names the PicoBot system namespace or
// any other pod, and the private, link-local (metadata) and loopback
// ranges are excluded from the internet rule: the store, bus, S3, the API
// server and the runtime's own ports are out of reach by address, not only
// by port.
func SandboxNetworkPolicy(namespace string, n Network) *networkingv1.NetworkPolicy {
	private := n.PrivateCIDRs
	if len(private) == 0 {
		private = DefaultPrivateCIDRs
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dns, exec := intstr.FromInt32(53), intstr.FromInt32(SandboxPort)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: SandboxNetworkPolicyName, Namespace: namespace,
			Labels: map[string]string{LabelName: "picobot", LabelManagedBy: "picobot-operator", LabelComponent: ComponentSandbox}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentSandbox}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &exec}},
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentSession}}}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{ // DNS in kube-system
					To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
				{ // the public internet: what the tools fetch
					To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: private}}},
				},
			},
		},
	}
}
