package podspec

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

func browserInput(mut ...func(*BrowserInput)) BrowserInput {
	in := BrowserInput{Name: wire.ProfileName("shop"), Namespace: "team-a", Agents: []string{"helper"},
		Image: "registry.example/picobot:1.0",
		Owner: metav1.OwnerReference{APIVersion: "agents.picobot.io/v1alpha1", Kind: "BrowserProfile", Name: "shop", UID: "uid-bp", Controller: ptr.To(true)}}
	for _, m := range mut {
		m(&in)
	}
	return in
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func TestBrowserPod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    BrowserInput
		check func(g Gomega, p *corev1.Pod)
	}{
		{"hardened, no token, no service links", browserInput(), func(g Gomega, p *corev1.Pod) {
			sc := p.Spec.SecurityContext
			g.Expect(*sc.RunAsNonRoot).To(BeTrue())
			g.Expect(*sc.RunAsUser).To(Equal(int64(65532)))
			g.Expect(sc.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
			g.Expect(*p.Spec.AutomountServiceAccountToken).To(BeFalse())
			g.Expect(*p.Spec.EnableServiceLinks).To(BeFalse())
			g.Expect(p.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
			c := p.Spec.Containers[0]
			g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
			g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
			g.Expect(*c.SecurityContext.Privileged).To(BeFalse())
			g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
			g.Expect(c.VolumeMounts).To(ConsistOf(corev1.VolumeMount{Name: "profile", MountPath: "/browser"}, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}))
			for _, v := range p.Spec.Volumes {
				g.Expect(v.EmptyDir).NotTo(BeNil(), v.Name)
			}
		}},
		{"runs picobot browser on the DevTools port with the profile in its working folder", browserInput(), func(g Gomega, p *corev1.Pod) {
			c := p.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("registry.example/picobot:1.0"))
			g.Expect(c.Command).To(Equal([]string{"/picobot", "browser"}))
			g.Expect(c.Args).To(Equal([]string{"--listen=:9222", "--user-data-dir=chrome"}))
			g.Expect(c.WorkingDir).To(Equal("/browser"))
			g.Expect(c.Ports).To(ConsistOf(corev1.ContainerPort{Name: "devtools", ContainerPort: 9222, Protocol: corev1.ProtocolTCP}))
			g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/healthz"))
			g.Expect(c.ReadinessProbe.HTTPGet.Port.IntValue()).To(Equal(9222))
			g.Expect(c.Resources).To(Equal(DefaultBrowserResources()))
		}},
		{"the token only by reference", browserInput(), func(g Gomega, p *corev1.Pod) {
			env := envOf(p.Spec.Containers[0])
			g.Expect(env).To(HaveKey(wire.EnvToken))
			ref := env[wire.EnvToken].ValueFrom.SecretKeyRef
			g.Expect(ref.Name).To(Equal("browser-shop"))
			g.Expect(ref.Key).To(Equal(wire.SecretKeyToken))
			g.Expect(env[wire.EnvToken].Value).To(BeEmpty())
			g.Expect(env).NotTo(HaveKey(wire.EnvRestoreURL), "an ephemeral browser keeps nothing")
			g.Expect(env[wire.EnvNoSandbox].Value).To(Equal("true"), "the pod is the sandbox")
		}},
		{"an s3 profile restores and saves through presigned URLs", browserInput(func(in *BrowserInput) {
			in.Persistence = &picobotv1alpha1.Persistence{}
		}), func(g Gomega, p *corev1.Pod) {
			env := envOf(p.Spec.Containers[0])
			g.Expect(env[wire.EnvRestoreURL].ValueFrom.SecretKeyRef.Key).To(Equal(wire.SecretKeyRestoreURL))
			g.Expect(env[wire.EnvSaveURL].ValueFrom.SecretKeyRef.Key).To(Equal(wire.SecretKeySaveURL))
			g.Expect(p.Spec.Volumes[0].EmptyDir).NotTo(BeNil())
			g.Expect(*p.Spec.TerminationGracePeriodSeconds).To(BeNumerically(">=", 30), "time to save")
		}},
		{"a pvc profile mounts its claim and needs no URLs", browserInput(func(in *BrowserInput) {
			in.Persistence = &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StoragePVC}
		}), func(g Gomega, p *corev1.Pod) {
			g.Expect(p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName).To(Equal("browser-shop"))
			g.Expect(envOf(p.Spec.Containers[0])).NotTo(HaveKey(wire.EnvSaveURL))
		}},
		{"allowed domains, sorted, and the settings of the operator", browserInput(func(in *BrowserInput) {
			in.Domains = []string{"shop.example.com", "*.cdn.example.com"}
			in.Port = 9333
			in.RuntimeClassName = ptr.To("gvisor")
			in.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
		}), func(g Gomega, p *corev1.Pod) {
			c := p.Spec.Containers[0]
			g.Expect(c.Args).To(ContainElements("--listen=:9333", "--allowed-domains=*.cdn.example.com,shop.example.com"))
			g.Expect(*p.Spec.RuntimeClassName).To(Equal("gvisor"))
			g.Expect(c.Resources.Limits.Memory().String()).To(Equal("2Gi"))
		}},
		{"named, labelled and owned for its browser", browserInput(), func(g Gomega, p *corev1.Pod) {
			g.Expect(p.Name).To(BeEmpty())
			g.Expect(p.GenerateName).To(Equal("browser-shop-"))
			g.Expect(p.Namespace).To(Equal("team-a"))
			g.Expect(p.Labels).To(HaveKeyWithValue(LabelComponent, ComponentBrowser))
			g.Expect(p.Labels).To(HaveKeyWithValue(wire.LabelBrowser, "browser-shop"))
			g.Expect(p.Labels).NotTo(HaveKey(picobotv1alpha1.LabelAgent), "the agent's session pods are selected by that label")
			g.Expect(p.OwnerReferences).To(HaveLen(1))
			g.Expect(p.OwnerReferences[0].Kind).To(Equal("BrowserProfile"))
			g.Expect(p.Annotations).To(HaveKey(AnnotationBrowserSpec))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(NewWithT(t), BrowserPod(tc.in))
		})
	}
}

func TestBrowserSpecHashFollowsWhatMatters(t *testing.T) {
	g := NewWithT(t)
	hash := func(in BrowserInput) string { return BrowserPod(in).Annotations[AnnotationBrowserSpec] }
	base := hash(browserInput())
	g.Expect(hash(browserInput())).To(Equal(base), "stable")
	g.Expect(hash(browserInput(func(in *BrowserInput) { in.Agents = []string{"helper", "other"} }))).NotTo(Equal(base))
	g.Expect(hash(browserInput(func(in *BrowserInput) { in.Domains = []string{"example.com"} }))).NotTo(Equal(base))
	g.Expect(hash(browserInput(func(in *BrowserInput) { in.Image = "registry.example/picobot:2.0" }))).NotTo(Equal(base))
	g.Expect(hash(browserInput(func(in *BrowserInput) { in.Owner.UID = "other" }))).To(Equal(base), "ownership is not the pod's behaviour")
}

func TestBrowserSecret(t *testing.T) {
	g := NewWithT(t)
	s := BrowserSecret(browserInput(), BrowserSecretData{Token: "t0k3n-0123456789abcdef"})
	g.Expect(s.Name).To(Equal("browser-shop"))
	g.Expect(s.Data).To(Equal(map[string][]byte{wire.SecretKeyToken: []byte("t0k3n-0123456789abcdef")}))
	g.Expect(s.OwnerReferences[0].UID).To(BeEquivalentTo("uid-bp"))
	s = BrowserSecret(browserInput(), BrowserSecretData{Token: "t", RestoreURL: "https://s3/get?sig", SaveURL: "https://s3/put?sig"})
	g.Expect(s.Data).To(HaveKeyWithValue(wire.SecretKeyRestoreURL, []byte("https://s3/get?sig")))
	g.Expect(s.Data).To(HaveKeyWithValue(wire.SecretKeySaveURL, []byte("https://s3/put?sig")))
}

func TestBrowserPVC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     *picobotv1alpha1.Persistence
		size  string
		class *string
	}{
		{"defaults", &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StoragePVC}, "1Gi", nil},
		{"size and class", &picobotv1alpha1.Persistence{Storage: picobotv1alpha1.StoragePVC, Size: ptr.To(resource.MustParse("5Gi")), StorageClassName: ptr.To("fast")}, "5Gi", ptr.To("fast")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := BrowserPVC(browserInput(func(in *BrowserInput) { in.Persistence = tc.p }))
			g.Expect(c.Name).To(Equal("browser-shop"))
			g.Expect(c.Spec.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))
			g.Expect(c.Spec.Resources.Requests.Storage().String()).To(Equal(tc.size))
			g.Expect(c.Spec.StorageClassName).To(Equal(tc.class))
		})
	}
}

func TestBrowserEndpoints(t *testing.T) {
	g := NewWithT(t)
	s := BrowserEndpoints(agent())
	g.Expect(s.Name).To(Equal("picobot-browsers-helper"))
	g.Expect(s.Labels).To(HaveKeyWithValue(picobotv1alpha1.LabelAgent, "helper"))
	g.Expect(s.Labels).To(HaveKeyWithValue(LabelComponent, ComponentBrowser))
	g.Expect(s.OwnerReferences[0].Kind).To(Equal("Agent"))
}

func TestBrowserNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	in := browserInput(func(in *BrowserInput) { in.Agents = []string{"zeta", "helper"} })
	extra := StorageEgress("http://seaweedfs.storage:8333", "picobot-system", nil)
	np := BrowserNetworkPolicy(in, Network{}, extra)
	g.Expect(np.Name).To(Equal("browser-shop"))
	g.Expect(np.Spec.PodSelector.MatchLabels).To(Equal(BrowserSelector("browser-shop")))
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))

	// Ingress: only the session pods of the agents that may connect, only on
	// the DevTools port.
	g.Expect(np.Spec.Ingress).To(HaveLen(1))
	from := np.Spec.Ingress[0].From[0].PodSelector
	g.Expect(from.MatchLabels).To(Equal(map[string]string{LabelName: "picobot", LabelComponent: ComponentSession}))
	g.Expect(from.MatchExpressions).To(Equal([]metav1.LabelSelectorRequirement{{Key: picobotv1alpha1.LabelAgent,
		Operator: metav1.LabelSelectorOpIn, Values: []string{"helper", "zeta"}}}))
	g.Expect(np.Spec.Ingress[0].Ports[0].Port.IntValue()).To(Equal(9222))
	g.Expect(np.Spec.Ingress[0].From[0].NamespaceSelector).To(BeNil(), "same namespace only")

	// Egress: DNS, the internet without private ranges, the profile store.
	g.Expect(np.Spec.Egress).To(HaveLen(3))
	g.Expect(np.Spec.Egress[1].To[0].IPBlock.CIDR).To(Equal("0.0.0.0/0"))
	g.Expect(np.Spec.Egress[1].To[0].IPBlock.Except).To(ContainElements("10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8"))
	g.Expect(np.Spec.Egress[2]).To(Equal(extra[0]))

	// Nobody may connect: no ingress rule at all (deny all).
	none := BrowserNetworkPolicy(browserInput(func(in *BrowserInput) { in.Agents = nil }), Network{}, nil)
	g.Expect(none.Spec.Ingress).To(BeEmpty())
	g.Expect(none.Spec.PolicyTypes).To(ContainElement(networkingv1.PolicyTypeIngress))
}

func TestSessionBrowserEgress(t *testing.T) {
	g := NewWithT(t)
	np := SessionBrowserEgress("team-a", 0)
	g.Expect(np.Name).To(Equal(SessionBrowserEgressName))
	g.Expect(np.Spec.PodSelector.MatchLabels).To(HaveKeyWithValue(LabelComponent, ComponentSession))
	g.Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}), "it must not switch off ingress rules of others")
	g.Expect(np.Spec.Egress).To(HaveLen(1))
	g.Expect(np.Spec.Egress[0].To[0].PodSelector.MatchLabels).To(HaveKeyWithValue(LabelComponent, ComponentBrowser))
	g.Expect(np.Spec.Egress[0].Ports[0].Port.IntValue()).To(Equal(9222))
}

func TestStorageEgress(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		ns, cidr string
		port     int
	}{
		{"http://seaweedfs.storage:8333", "storage", "", 8333},
		{"http://seaweedfs.storage.svc.cluster.local:8333", "storage", "", 8333},
		{"http://seaweedfs:8333", "picobot-system", "", 8333},
		{"https://minio.storage.svc", "storage", "", 443},
		{"http://10.1.2.3:9000", "", "10.1.2.3/32", 9000},
		{"http://127.0.0.1:9000", "", "127.0.0.1/32", 9000},
		{"https://s3.eu-west-1.amazonaws.com", "", "", 0}, // the internet rule covers it
		{"https://203.0.113.7", "", "", 0},
		{"::not a url", "", "", 0},
		{"", "", "", 0},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			g := NewWithT(t)
			rules := StorageEgress(tc.endpoint, "picobot-system", nil)
			if tc.port == 0 {
				g.Expect(rules).To(BeEmpty())
				return
			}
			g.Expect(rules).To(HaveLen(1))
			g.Expect(rules[0].Ports[0].Port.IntValue()).To(Equal(tc.port))
			peer := rules[0].To[0]
			if tc.cidr != "" {
				g.Expect(peer.IPBlock.CIDR).To(Equal(tc.cidr))
				return
			}
			g.Expect(peer.NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": tc.ns}))
		})
	}
}

func TestBrowserNamesAreValidKubernetesNames(t *testing.T) {
	long := "a-very-long-profile-name-that-goes-on.and-on-and-on-well-past-the-sixty-three-character-limit-of-labels"
	for _, name := range []string{wire.ProfileName("shop"), wire.ProfileName("bp-0123456789"), wire.ProfileName(long),
		wire.ProfileName("eph-0123456789abcdef0123"), wire.DialogName("helper", "web:alice:1")} {
		g := NewWithT(t)
		g.Expect(validation.IsValidLabelValue(name)).To(BeEmpty(), name)
		g.Expect(validation.IsDNS1123Subdomain(name+"-abcde")).To(BeEmpty(), name)
		g.Expect(len(name+"-abcde")).To(BeNumerically("<=", 63), name)
		for _, key := range []string{wire.URLKey(name), wire.TokenKey(name), wire.ErrorKey(name)} {
			g.Expect(validation.IsConfigMapKey(key)).To(BeEmpty(), key)
		}
	}
	g := NewWithT(t)
	g.Expect(wire.ProfileName(long)).NotTo(Equal(wire.ProfileName(long + "x")))
	g.Expect(wire.ProfileName("eph-0123456789abcdef0123")).NotTo(HavePrefix("browser-eph-"), "no profile passes for an ephemeral browser")
	g.Expect(wire.DialogName("helper", "web:alice:1")).To(HavePrefix("browser-eph-"))
	g.Expect(wire.DialogName("helper", "web:alice:1")).NotTo(Equal(wire.DialogName("other", "web:alice:1")))
}
