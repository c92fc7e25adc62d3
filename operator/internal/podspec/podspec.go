// Package podspec builds the Kubernetes objects of an Agent's session runtime:
// the session pod, its ServiceAccount, Role and RoleBinding, the namespace's
// NetworkPolicy and connection Secret. Every function is pure (inputs in,
// object out) so the rules are table-tested without a cluster.
package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/blob/remoteblob"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// Labels and names shared by the operator and the runtime.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelTenant    = "agents.picobot.io/tenant"
	// LabelSession is set on a busy pod: a hash of the chat it serves
	// (label values cannot hold the chat id itself).
	LabelSession = "agents.picobot.io/session"

	ComponentSession = "session"
	// ConnectionSecret holds the shared services' connection settings in each
	// tenant namespace with agents; session pods read it with envFrom, so no
	// credential appears in a pod spec.
	ConnectionSecret = "picobot-runtime-connection"
	// NetworkPolicyName is the policy of session pods in a namespace.
	NetworkPolicyName = "picobot-session-pods"
	// AnnotationRotateCredentials on the connection Secret asks for new
	// passwords: a value the operator has not acted on yet (e.g. the time)
	// moves the namespace's credentials to their next generation.
	AnnotationRotateCredentials = "agents.picobot.io/rotate-credentials"
	// AnnotationCredentialsRotated is the request the operator acted on
	// last, and AnnotationCredentialsRotatedAt when (RFC 3339): session pods
	// created before then hold the old passwords and are replaced.
	AnnotationCredentialsRotated   = "agents.picobot.io/credentials-rotated"
	AnnotationCredentialsRotatedAt = "agents.picobot.io/credentials-rotated-at"

	workspaceDir = "/workspace"
	runtimeUID   = 65532 // distroless "nonroot"
	// sandboxUID runs the sandbox container: not the runtime's user, so
	// nothing of the runtime's (files, /proc) is the sandbox's to read. It
	// shares only the pod's fsGroup (runtimeUID) with the runtime, for the
	// workspace and the exec socket.
	sandboxUID = 65533

	// ContainerRuntime holds the model keys, the store, bus and API server
	// credentials and the agent loop; ContainerSandbox runs the programs
	// of the shell tools through its exec server and holds no credential.
	ContainerRuntime = "runtime"
	ContainerSandbox = "sandbox"
	// SandboxSocket is the exec server's socket, in an emptyDir both
	// containers mount.
	SandboxSocket = sandboxRunDir + "/exec.sock"
	sandboxRunDir = "/sandbox/run"
	// sandboxWorkspaces is where the sessions' workspaces lie in the
	// workspace volume: the exec server runs programs nowhere else. The
	// runtime's other state there is its own user's (0700).
	sandboxWorkspaces = workspaceDir + "/workspaces"
	// PortMetrics names the container port of a session pod's /metrics
	// (the PodMonitor and the NetworkPolicy refer to it by name).
	PortMetrics = "metrics"
	// EnvMetricsAddr is the listen address of `picobot session
	// --metrics-addr` (its default comes from this variable).
	EnvMetricsAddr = "PICOBOT_METRICS_ADDR"
	// serviceAccountDir is where client-go finds the in-cluster token.
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// blobTokenVolume holds the blob grant service's token.
	blobTokenVolume = "blob-token"
)

// ServiceAccountName names the ServiceAccount, Role and RoleBinding of an
// agent; a name that would exceed 253 characters ends in a hash instead.
func ServiceAccountName(agent string) string {
	name := remoteblob.ServiceAccountPrefix + agent
	if len(name) <= maxName {
		return name
	}
	return shortened(name, maxName)
}

// SessionLabels select an agent's session pods.
func SessionLabels(a *picobotv1alpha1.Agent) map[string]string {
	return map[string]string{
		LabelName:                  "picobot",
		LabelComponent:             ComponentSession,
		LabelManagedBy:             "picobot-operator",
		picobotv1alpha1.LabelAgent: LabelValue(a.Name),
		LabelTenant:                a.Namespace,
	}
}

// SessionValue is the LabelSession value of a chat.
func SessionValue(channel, chatKey string) string {
	sum := sha256.Sum256([]byte(channel + ":" + chatKey))
	return hex.EncodeToString(sum[:])[:32]
}

// Input is what a session pod is built from.
type Input struct {
	Agent *picobotv1alpha1.Agent
	// Name of the pod (the operator generates a unique one).
	Name string
	// Image is the operator's runtime image, used when the Agent sets none.
	Image string
	// SecretKeys are the Secret keys the agent needs (model keys, MCP
	// environment); each becomes a PICOBOT_SECRET_<NAME>_<KEY> variable.
	SecretKeys []corev1.SecretKeySelector
	// Env adds settings (lease TTL, idle timeout overrides); never secrets.
	Env []corev1.EnvVar
	// MetricsPort is where the runtime serves PicoBot's metrics, as the
	// container port PortMetrics; 0: not served.
	MetricsPort int32
	// Sandbox is where the tools' programs run; empty means
	// SandboxInContainer. With SandboxInPod the pod has no sandbox
	// container and its runtime reaches the sandbox pod PairName(Name)
	// with the pair's Secret, which must exist before the pod starts.
	Sandbox SandboxPlacement
}

// SecretEnvName mirrors agenthost.SecretEnvName (the operator must not import
// the runtime's agent assembly); a test checks that both agree.
func SecretEnvName(name, key string) string {
	return "PICOBOT_SECRET_" + envName(name) + "_" + envName(key)
}

func envName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToUpper(s) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			under = false
		} else if !under {
			b.WriteByte('_')
			under = true
		}
	}
	return b.String()
}

// SessionPod returns the pod of one session runtime.
func SessionPod(in Input) *corev1.Pod {
	a := in.Agent
	image := in.Image
	var rt picobotv1alpha1.RuntimeSpec
	if a.Spec.Runtime != nil {
		rt = *a.Spec.Runtime
	}
	if rt.Image != "" {
		image = rt.Image
	}
	env := []corev1.EnvVar{
		{Name: "PICOBOT_TENANT", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "PICOBOT_POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "PICOBOT_AGENT", Value: a.Name},
		{Name: "PICOBOT_STATE_DIR", Value: workspaceDir},
		{Name: "HOME", Value: workspaceDir},
	}
	keys := append([]corev1.SecretKeySelector(nil), in.SecretKeys...)
	sort.Slice(keys, func(i, j int) bool {
		return SecretEnvName(keys[i].Name, keys[i].Key) < SecretEnvName(keys[j].Name, keys[j].Key)
	})
	seen := map[string]bool{}
	for _, k := range keys {
		name := SecretEnvName(k.Name, k.Key)
		if seen[name] {
			continue
		}
		seen[name] = true
		env = append(env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: k.Name}, Key: k.Key}}})
	}
	env = append(env, in.Env...)
	var resources corev1.ResourceRequirements
	if rt.Resources != nil {
		resources = *rt.Resources
	}
	inPod := in.Sandbox == SandboxInPod
	if inPod {
		env = append(env, sandboxRuntimeEnv(in.Name)...)
	} else {
		env = append(env, corev1.EnvVar{Name: "PICOBOT_SANDBOX_SOCKET", Value: SandboxSocket})
	}
	env = append(env, corev1.EnvVar{Name: remoteblob.EnvTokenFile, Value: remoteblob.TokenFile})
	var ports []corev1.ContainerPort
	if in.MetricsPort > 0 {
		env = append(env, corev1.EnvVar{Name: EnvMetricsAddr, Value: ":" + strconv.Itoa(int(in.MetricsPort))})
		ports = []corev1.ContainerPort{{Name: PortMetrics, ContainerPort: in.MetricsPort, Protocol: corev1.ProtocolTCP}}
	}
	mounts := []corev1.VolumeMount{{Name: "workspace", MountPath: workspaceDir}, {Name: "tmp", MountPath: "/tmp"},
		{Name: "sandbox-run", MountPath: sandboxRunDir},
		{Name: "kube-api-access", MountPath: serviceAccountDir, ReadOnly: true},
		{Name: blobTokenVolume, MountPath: path.Dir(remoteblob.TokenFile), ReadOnly: true}}
	volumes := []corev1.Volume{
		{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resourceQuantity64Mi)}}},
		{Name: "sandbox-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resourceQuantity1Mi)}}},
		{Name: "sandbox-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resourceQuantity64Mi)}}},
		kubeAPIAccess(),
		blobToken(),
	}
	// The sandbox is a native sidecar: it starts first and ends when the
	// runtime has ended, so the pod still completes.
	sidecars := []corev1.Container{sandboxContainer(image, resources)}
	if inPod {
		// The runtime's workspace volume keeps its own state (sessions'
		// folders it makes, MCP folders); the programs' workspace is the
		// sandbox pod's.
		mounts = slices.DeleteFunc(mounts, func(m corev1.VolumeMount) bool { return m.Name == "sandbox-run" })
		volumes = slices.DeleteFunc(volumes, func(v corev1.Volume) bool { return v.Name == "sandbox-run" || v.Name == "sandbox-tmp" })
		sidecars = nil
	}
	labels := SessionLabels(a)
	if inPod {
		labels[LabelSandbox] = string(SandboxInPod)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            in.Name,
			Namespace:       a.Namespace,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(a)},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: ServiceAccountName(a.Name),
			// Only the runtime container mounts a token (kubeAPIAccess); the
			// sandbox container gets none.
			AutomountServiceAccountToken: ptr.To(false),
			ShareProcessNamespace:        ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			// One RuntimeClass for the whole pod: Kubernetes has no
			// per-container one, so gVisor or Kata wraps both containers.
			RuntimeClassName:              rt.RuntimeClassName,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			SecurityContext:               restrictedPodSecurity(),
			InitContainers:                sidecars,
			Containers: []corev1.Container{{
				Name:    ContainerRuntime,
				Image:   image,
				Command: []string{"/picobot", "session"},
				Env:     env,
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: ConnectionSecret}}}},
				Ports:           ports,
				Resources:       resources,
				SecurityContext: restrictedContainerSecurity(),
				VolumeMounts:    mounts,
			}},
			Volumes: volumes,
		},
	}
}

// sandboxContainer runs the exec server that starts the shell tools'
// programs: another user, no environment but its own settings, no Secret,
// no token, only the sessions' workspaces and the socket folder.
func sandboxContainer(image string, resources corev1.ResourceRequirements) corev1.Container {
	sc := restrictedContainerSecurity()
	sc.RunAsUser, sc.RunAsGroup = ptr.To[int64](sandboxUID), ptr.To[int64](sandboxUID)
	return corev1.Container{
		Name:          ContainerSandbox,
		Image:         image,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Command:       []string{"/picobot", "sandbox-server"},
		Env: []corev1.EnvVar{{Name: "PICOBOT_SANDBOX_SOCKET", Value: SandboxSocket},
			{Name: "PICOBOT_SANDBOX_WORKSPACE", Value: sandboxWorkspaces}},
		Resources:       resources,
		SecurityContext: sc,
		VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: workspaceDir},
			{Name: "sandbox-run", MountPath: sandboxRunDir}, {Name: "sandbox-tmp", MountPath: "/tmp"}},
	}
}

// kubeAPIAccess is the volume the kubelet would mount in every container
// with automountServiceAccountToken: a short-lived projected token, the
// cluster's CA and the namespace, here mounted by the runtime container only.
func kubeAPIAccess() corev1.Volume {
	return corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}}
}

// blobToken is the token the runtime container shows the blob grant
// service (remoteblob): audience-bound, so it is good for that service only
// (not for the API server), and short-lived. Mounted by the runtime
// container only, like kubeAPIAccess.
func blobToken() corev1.Volume {
	return corev1.Volume{Name: blobTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: remoteblob.Audience, ExpirationSeconds: ptr.To[int64](remoteblob.TokenExpirationSeconds), Path: path.Base(remoteblob.TokenFile)}}},
	}}}
}

func ownerRef(a *picobotv1alpha1.Agent) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: picobotv1alpha1.GroupVersion.String(), Kind: "Agent", Name: a.Name, UID: a.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func meta(a *picobotv1alpha1.Agent, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: a.Namespace, Labels: map[string]string{
		LabelName: "picobot", LabelManagedBy: "picobot-operator", picobotv1alpha1.LabelAgent: LabelValue(a.Name)},
		OwnerReferences: []metav1.OwnerReference{ownerRef(a)}}
}

// ServiceAccount is the identity of an agent's session pods.
func ServiceAccount(a *picobotv1alpha1.Agent) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: meta(a, ServiceAccountName(a.Name)), AutomountServiceAccountToken: ptr.To(true)}
}

// Role grants a session pod exactly what its runtime and tools need: read its
// own Agent and those its delegate edges name (the delegate tool reads a
// target's readiness and effective tools) and, for a root agent
// (spec.role: root), patch its own Agent (the gateway tool's config.patch
// and config.apply; no other Agent), the namespace defaults, watch
// skill ConfigMaps, get the namespace's TenantQuota, and manage the CronJobs and BrowserProfiles its tools
// create (the tools label them agent-made; the label is what GitOps tools
// ignore).
func Role(a *picobotv1alpha1.Agent) *rbacv1.Role {
	agents := []string{a.Name}
	for _, d := range a.Spec.Delegates {
		if !slices.Contains(agents, d.AgentRef.Name) {
			agents = append(agents, d.AgentRef.Name)
		}
	}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{picobotv1alpha1.GroupVersion.Group}, Resources: []string{"agents"}, ResourceNames: agents, Verbs: []string{"get", "watch"}},
		{APIGroups: []string{picobotv1alpha1.GroupVersion.Group}, Resources: []string{"cronjobs", "browserprofiles"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		// The namespace's quota (its model budget and price table ConfigMap),
		// read by the runtime before model calls; never written.
		{APIGroups: []string{picobotv1alpha1.GroupVersion.Group}, Resources: []string{"tenantquotas"},
			ResourceNames: []string{picobotv1alpha1.TenantQuotaName}, Verbs: []string{"get"}},
		// Browser pods: the session asks for one with a Lease and reads its
		// endpoint and token from the agent's own endpoints Secret.
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{wire.EndpointsSecret(a.Name)}, Verbs: []string{"get"}},
	}
	if agentspec.IsRoot(a) {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{picobotv1alpha1.GroupVersion.Group}, Resources: []string{"agents"},
			ResourceNames: []string{a.Name}, Verbs: []string{"patch"}})
	}
	return &rbacv1.Role{ObjectMeta: meta(a, ServiceAccountName(a.Name)), Rules: rules}
}

// RoleBinding binds the Role to the ServiceAccount.
func RoleBinding(a *picobotv1alpha1.Agent) *rbacv1.RoleBinding {
	name := ServiceAccountName(a.Name)
	return &rbacv1.RoleBinding{ObjectMeta: meta(a, name),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: a.Namespace}}}
}

// Network says where the shared services live, for the NetworkPolicy.
type Network struct {
	// SystemNamespace runs PostgreSQL, Redis and S3 (or proxies to them);
	// session pods may reach it on ServicePorts.
	SystemNamespace string
	ServicePorts    []int32
	// ServiceCIDRs are extra destinations for external services (managed
	// databases), reached on ServicePorts.
	ServiceCIDRs []string
	// PrivateCIDRs are excluded from the internet egress rule, so pods reach
	// model endpoints but not other pods, nodes or metadata addresses.
	PrivateCIDRs []string
	// MetricsPort, when set, is the one port the policy admits connections
	// to: the runtime's /metrics (Input.MetricsPort), from MetricsFrom
	// (empty: from anywhere, as the chart's networkPolicy.metricsFrom).
	MetricsPort int32
	MetricsFrom []networkingv1.NetworkPolicyPeer
	// SandboxPort, when set (sandbox placement "pod"), lets session pods
	// reach the namespace's sandbox pods on it.
	SandboxPort int32
	// APIServer is where the Kubernetes API server answers: session pods
	// read their Agent there when they start, and its addresses usually
	// lie in the private ranges the internet rule leaves out.
	APIServer APIServer
}

// APIServer is the API server's addresses (one-address CIDRs) and ports.
type APIServer struct {
	CIDRs []string
	Ports []int32
}

// Normalize sorts both lists and drops repeats, so equal readings compare
// equal and the policy does not change from one reading to the next.
func (a *APIServer) Normalize() {
	slices.Sort(a.CIDRs)
	a.CIDRs = slices.Compact(a.CIDRs)
	slices.Sort(a.Ports)
	a.Ports = slices.Compact(a.Ports)
}

// DefaultPrivateCIDRs are RFC 1918, CGNAT, link-local (cloud metadata) and
// loopback ranges.
var DefaultPrivateCIDRs = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}

// NetworkPolicy isolates the session pods of a namespace: no ingress but
// scrapes of their metrics port (when they serve one); egress to DNS, the
// shared services and the public internet only (model endpoints, web
// tools), never to other tenants' pods.
func NetworkPolicy(namespace string, n Network) *networkingv1.NetworkPolicy {
	private := n.PrivateCIDRs
	if len(private) == 0 {
		private = DefaultPrivateCIDRs
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dns := intstr.FromInt32(53)
	var svcPorts []networkingv1.NetworkPolicyPort
	for _, p := range n.ServicePorts {
		port := intstr.FromInt32(p)
		svcPorts = append(svcPorts, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port})
	}
	egress := []networkingv1.NetworkPolicyEgressRule{
		{ // DNS in kube-system
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
		},
		{ // the public internet: model endpoints and web tools
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: private}}},
		},
	}
	if n.SystemNamespace != "" {
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": n.SystemNamespace}}}},
			Ports: svcPorts,
		})
	}
	if n.SandboxPort > 0 {
		port := intstr.FromInt32(n.SandboxPort)
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentSandbox}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}})
	}
	for _, cidr := range n.ServiceCIDRs {
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}, Ports: svcPorts})
	}
	if api := n.APIServer; len(api.CIDRs) > 0 && len(api.Ports) > 0 {
		rule := networkingv1.NetworkPolicyEgressRule{}
		for _, cidr := range api.CIDRs {
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
		}
		for _, p := range api.Ports {
			port := intstr.FromInt32(p)
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port})
		}
		egress = append(egress, rule)
	}
	var ingress []networkingv1.NetworkPolicyIngressRule
	if n.MetricsPort > 0 {
		port := intstr.FromInt32(n.MetricsPort)
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			From:  append([]networkingv1.NetworkPolicyPeer(nil), n.MetricsFrom...)})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: namespace,
			Labels: map[string]string{LabelName: "picobot", LabelManagedBy: "picobot-operator"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentSession}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     ingress,
			Egress:      egress,
		},
	}
}

// Connection returns the connection Secret of a namespace.
func Connection(namespace string, data map[string]string) *corev1.Secret {
	d := make(map[string][]byte, len(data))
	for k, v := range data {
		d[k] = []byte(v)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ConnectionSecret, Namespace: namespace,
		Labels: map[string]string{LabelName: "picobot", LabelManagedBy: "picobot-operator"}}, Data: d}
}

var (
	resourceQuantity64Mi = resource.MustParse("64Mi")
	resourceQuantity1Mi  = resource.MustParse("1Mi")
)
