package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// ComponentBrowser is the LabelComponent of browser pods and their objects.
const ComponentBrowser = wire.ComponentBrowser

// AnnotationBrowserSpec on a browser pod is a hash of what it was built
// from (agents, image, domains, volumes...): a pod whose hash differs from
// the current one is replaced, so a change of who may connect or of the
// allowed domains never leaves an old pod serving.
const AnnotationBrowserSpec = "agents.picobot.io/browser-spec"

// SessionBrowserEgressName is the NetworkPolicy that lets a namespace's
// session pods reach its browser pods (NetworkPolicies add up, so it only
// widens the session pods' own policy by that one destination).
const SessionBrowserEgressName = "picobot-session-browsers"

// BrowserInput is what a browser pod and its objects are built from.
type BrowserInput struct {
	// Name is the browser name (wire.ProfileName or wire.DialogName); the
	// pod is generated from it, its Secret, NetworkPolicy and PVC carry it.
	Name      string
	Namespace string
	// Owner is the controller of every object: the BrowserProfile, or the
	// Lease of an ephemeral browser.
	Owner metav1.OwnerReference
	// Agents may connect: their session pods get ingress.
	Agents []string
	// Image runs `picobot browser`.
	Image string
	// Port of the DevTools proxy (wire.DefaultPort when 0).
	Port int32
	// Domains restricts what the browser may load (empty: the public web).
	Domains []string
	// Persistence of a profile; nil for an ephemeral browser.
	Persistence *picobotv1alpha1.Persistence
	// RuntimeClassName runs the pod under gVisor/Kata when set.
	RuntimeClassName *string
	// Resources of the browser container (DefaultBrowserResources when nil).
	Resources *corev1.ResourceRequirements
}

// DefaultBrowserResources fit one headless Chromium with a few tabs.
func DefaultBrowserResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1536Mi")},
	}
}

// Storage is where the profile lives: "" for an ephemeral browser, else the
// profile's storage (s3 unless it asks for pvc).
func (in BrowserInput) Storage() picobotv1alpha1.ProfileStorage {
	if in.Persistence == nil {
		return ""
	}
	if in.Persistence.Storage == "" {
		return picobotv1alpha1.StorageS3
	}
	return in.Persistence.Storage
}

func (in BrowserInput) port() int32 {
	if in.Port == 0 {
		return wire.DefaultPort
	}
	return in.Port
}

// BrowserSelector selects the pods of one browser.
func BrowserSelector(name string) map[string]string {
	return map[string]string{LabelName: "picobot", LabelComponent: ComponentBrowser, wire.LabelBrowser: name}
}

func (in BrowserInput) meta(name string) metav1.ObjectMeta {
	labels := BrowserSelector(in.Name)
	labels[LabelManagedBy] = "picobot-operator"
	labels[LabelTenant] = in.Namespace
	return metav1.ObjectMeta{Name: name, Namespace: in.Namespace, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{in.Owner}}
}

// BrowserPod returns the pod of one browser: `picobot browser` launching
// headless Chromium behind its authenticating DevTools proxy. It is hardened
// like a session pod (non-root, read-only root, seccomp RuntimeDefault, no
// capabilities) and has no service account token and no service links: the
// browser renders untrusted pages and needs nothing of the cluster. The
// profile lives in the working folder (an emptyDir, or the profile's PVC);
// the token and the S3 save/restore URLs come from the browser's Secret.
func BrowserPod(in BrowserInput) *corev1.Pod {
	port := in.port()
	args := []string{"--listen=:" + strconv.Itoa(int(port)), "--user-data-dir=" + wire.UserDataDir}
	if len(in.Domains) > 0 {
		d := append([]string(nil), in.Domains...)
		sort.Strings(d)
		args = append(args, "--allowed-domains="+strings.Join(d, ","))
	}
	secretEnv := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: in.Name}, Key: key}}}
	}
	env := []corev1.EnvVar{secretEnv(wire.EnvToken, wire.SecretKeyToken), {Name: "HOME", Value: wire.WorkDir},
		{Name: wire.EnvNoSandbox, Value: "true"}}
	if in.Storage() == picobotv1alpha1.StorageS3 {
		env = append(env, secretEnv(wire.EnvRestoreURL, wire.SecretKeyRestoreURL), secretEnv(wire.EnvSaveURL, wire.SecretKeySaveURL))
	}
	resources := DefaultBrowserResources()
	if in.Resources != nil {
		resources = *in.Resources
	}
	profile := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if in.Storage() == picobotv1alpha1.StoragePVC {
		profile = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: in.Name}}
	}
	m := in.meta("")
	m.GenerateName = in.Name + "-"
	pod := &corev1.Pod{
		ObjectMeta: m,
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			RuntimeClassName:              in.RuntimeClassName,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](60), // time to save the profile
			SecurityContext:               restrictedPodSecurity(),
			Containers: []corev1.Container{{
				Name:       "browser",
				Image:      in.Image,
				Command:    []string{"/picobot", "browser"},
				Args:       args,
				WorkingDir: wire.WorkDir,
				Env:        env,
				Ports:      []corev1.ContainerPort{{Name: "devtools", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}},
					PeriodSeconds: 2, FailureThreshold: 3,
				},
				Resources:       resources,
				SecurityContext: restrictedContainerSecurity(),
				VolumeMounts:    []corev1.VolumeMount{{Name: "profile", MountPath: wire.WorkDir}, {Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "profile", VolumeSource: profile},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("512Mi"))}}},
			},
		},
	}
	pod.Annotations = map[string]string{AnnotationBrowserSpec: browserSpecHash(in.Agents, &pod.Spec)}
	return pod
}

// restrictedPodSecurity is the pod security context of session and browser
// pods: non-root (distroless "nonroot"), seccomp RuntimeDefault.
func restrictedPodSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](runtimeUID),
		RunAsGroup:     ptr.To[int64](runtimeUID),
		FSGroup:        ptr.To[int64](runtimeUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// restrictedContainerSecurity is the container security context of session
// and browser pods: read-only root, no privilege escalation, no capabilities.
func restrictedContainerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// browserSpecHash hashes the agents that may connect and the pod spec.
func browserSpecHash(agents []string, spec *corev1.PodSpec) string {
	a := append([]string(nil), agents...)
	sort.Strings(a)
	b, _ := json.Marshal(struct {
		Agents []string        `json:"agents"`
		Spec   *corev1.PodSpec `json:"spec"`
	}{a, spec})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// BrowserSecretData is the browser pod's own Secret content.
type BrowserSecretData struct {
	// Token authenticates DevTools clients.
	Token string
	// RestoreURL and SaveURL are presigned S3 URLs of an s3 profile's archive.
	RestoreURL, SaveURL string
}

// BrowserSecret is the browser pod's Secret: its token and, for profiles
// stored in S3, the presigned URLs it restores from and saves to. Only the
// kubelet reads it (for the pod's environment); sessions get the token from
// their agent's endpoints Secret.
func BrowserSecret(in BrowserInput, d BrowserSecretData) *corev1.Secret {
	data := map[string][]byte{wire.SecretKeyToken: []byte(d.Token)}
	if d.RestoreURL != "" {
		data[wire.SecretKeyRestoreURL] = []byte(d.RestoreURL)
	}
	if d.SaveURL != "" {
		data[wire.SecretKeySaveURL] = []byte(d.SaveURL)
	}
	return &corev1.Secret{ObjectMeta: in.meta(in.Name), Type: corev1.SecretTypeOpaque, Data: data}
}

// BrowserPVC is the claim of a profile with storage pvc.
func BrowserPVC(in BrowserInput) *corev1.PersistentVolumeClaim {
	size := resource.MustParse("1Gi")
	var class *string
	if p := in.Persistence; p != nil {
		if p.Size != nil {
			size = *p.Size
		}
		class = p.StorageClassName
	}
	return &corev1.PersistentVolumeClaim{ObjectMeta: in.meta(in.Name), Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: class,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
	}}
}

// BrowserEndpoints is an agent's endpoints Secret, in which the operator
// publishes the address and token of each browser the agent may use. The
// agent's session pods need `get` on it (and on nothing else of the kind).
func BrowserEndpoints(a *picobotv1alpha1.Agent) *corev1.Secret {
	m := meta(a, wire.EndpointsSecret(a.Name))
	m.Labels[LabelComponent] = ComponentBrowser
	return &corev1.Secret{ObjectMeta: m, Type: corev1.SecretTypeOpaque}
}

// BrowserNetworkPolicy isolates one browser pod: ingress only from the
// session pods of the agents that may use it, on the DevTools port; egress to
// DNS, the public internet (private, link-local and metadata ranges
// excluded) and the profile store (extra, see StorageEgress). The browser's
// egress proxy refuses private addresses too; this is the second wall.
func BrowserNetworkPolicy(in BrowserInput, n Network, extra []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	private := n.PrivateCIDRs
	if len(private) == 0 {
		private = DefaultPrivateCIDRs
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	dns, port := intstr.FromInt32(53), intstr.FromInt32(in.port())
	agents := make([]string, 0, len(in.Agents))
	for _, a := range in.Agents {
		agents = append(agents, LabelValue(a)) // as session pods carry them
	}
	sort.Strings(agents)
	ingress := []networkingv1.NetworkPolicyIngressRule{}
	if len(agents) > 0 {
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentSession},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: picobotv1alpha1.LabelAgent,
					Operator: metav1.LabelSelectorOpIn, Values: agents}},
			}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
		})
	}
	egress := []networkingv1.NetworkPolicyEgressRule{
		{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
		},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: private}}}},
	}
	egress = append(egress, extra...)
	return &networkingv1.NetworkPolicy{ObjectMeta: in.meta(in.Name), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: BrowserSelector(in.Name)},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     ingress,
		Egress:      egress,
	}}
}

// SessionBrowserEgress lets a namespace's session pods open connections to
// its browser pods on the DevTools port. Session pods' own policy excludes
// private ranges (pod IPs among them); policies add up, so this allows that
// one destination and nothing else.
func SessionBrowserEgress(namespace string, port int32) *networkingv1.NetworkPolicy {
	if port == 0 {
		port = wire.DefaultPort
	}
	tcp, p := corev1.ProtocolTCP, intstr.FromInt32(port)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: SessionBrowserEgressName, Namespace: namespace,
			Labels: map[string]string{LabelName: "picobot", LabelManagedBy: "picobot-operator", LabelComponent: ComponentBrowser}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentSession}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelName: "picobot", LabelComponent: ComponentBrowser}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}},
			}},
		},
	}
}

// StorageEgress returns the egress a browser pod needs to save and restore
// its profile at the S3 endpoint when the internet rule does not cover it:
// an in-cluster Service ("http://seaweedfs.storage:8333", or a bare name,
// which lives in systemNamespace) or a private address. A public endpoint
// (AWS) needs nothing extra; an endpoint that does not parse, neither.
func StorageEgress(endpoint, systemNamespace string, private []string) []networkingv1.NetworkPolicyEgressRule {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return nil
	}
	tcp, p := corev1.ProtocolTCP, intstr.FromInt32(int32(n))
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		if len(private) == 0 {
			private = DefaultPrivateCIDRs
		}
		for _, c := range private {
			if _, cidr, err := net.ParseCIDR(c); err == nil && cidr.Contains(ip) {
				bits := "/32"
				if ip.To4() == nil {
					bits = "/128"
				}
				return []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: ip.String() + bits}}}, Ports: ports}}
			}
		}
		return nil
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	ns := ""
	switch {
	case len(labels) == 1:
		ns = systemNamespace
	case len(labels) == 2 || (len(labels) > 2 && labels[2] == "svc"):
		ns = labels[1]
	}
	if ns == "" {
		return nil
	}
	return []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}},
		Ports: ports,
	}}
}
