package podrunner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/picobot/picobot/test/controlplane"
)

func TestPodsRunAsLocalProcesses(t *testing.T) {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	t.Cleanup(func() { _ = env.Stop() })
	g := NewWithT(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	work := t.TempDir()
	r := New(Config{Client: cs, Images: map[string]string{"local/sh": "/bin/sh"}, WorkDir: work, Env: []string{"RUNNER_ONLY=kubeconfig-stand-in"}})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("runner ended: %v", err)
		}
	})

	ns := "runner-test"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keys"},
		Data: map[string][]byte{"token": []byte("s3cret"), "CONN": []byte("redis://x")}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	pod := func(name, image, script string, env ...corev1.EnvVar) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: image, Command: []string{"/bin/sh", "-c", script}, Env: env,
				EnvFrom:      []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/workspace"}}}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return p
	}
	get := func(name string) func() *corev1.Pod {
		return func() *corev1.Pod {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil
			}
			return p
		}
	}
	phase := func(p *corev1.Pod) corev1.PodPhase {
		if p == nil {
			return "Gone"
		}
		return p.Status.Phase
	}

	// Env from values, field refs, Secret keys and envFrom; the mount path
	// is the pod's own folder.
	pod("ok", "local/sh", `echo "$POD $NS $TOKEN $CONN" > "$OUT/result"`,
		corev1.EnvVar{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		corev1.EnvVar{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}, Key: "token"}}},
		corev1.EnvVar{Name: "OUT", Value: "/workspace"})
	g.Eventually(get("ok"), 20*time.Second, 50*time.Millisecond).Should(WithTransform(phase, Equal(corev1.PodSucceeded)))
	p := get("ok")()
	g.Expect(p.Spec.NodeName).To(Equal("local-runner"))
	out, err := os.ReadFile(filepath.Join(work, ns+"_ok", "volumes", "work", "result"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal("ok runner-test s3cret redis://x\n"))

	// A failing process reports its exit code and last stderr line.
	pod("fails", "local/sh", `echo "boom: no model" >&2; exit 3`)
	g.Eventually(get("fails"), 20*time.Second, 50*time.Millisecond).Should(WithTransform(phase, Equal(corev1.PodFailed)))
	term := get("fails")().Status.ContainerStatuses[0].State.Terminated
	g.Expect(term.ExitCode).To(Equal(int32(3)))
	g.Expect(term.Message).To(Equal("boom: no model"))

	// An unknown image waits with ErrImagePull; a missing Secret key with
	// CreateContainerConfigError.
	pod("noimage", "registry.example/nope:1", "true")
	g.Eventually(func() string {
		if p := get("noimage")(); p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil {
			return p.Status.ContainerStatuses[0].State.Waiting.Reason
		}
		return ""
	}, 20*time.Second, 50*time.Millisecond).Should(Equal("ErrImagePull"))
	pod("nokey", "local/sh", "true", corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}, Key: "missing"}}})
	g.Eventually(func() string {
		if p := get("nokey")(); p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil {
			return p.Status.ContainerStatuses[0].State.Waiting.Message
		}
		return ""
	}, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("couldn't find key missing in Secret runner-test/keys"))

	// A long-running pod: Kill makes it Failed (137); deleting another stops
	// its process and the pod goes away.
	pod("killme", "local/sh", "sleep 300")
	g.Eventually(get("killme"), 20*time.Second, 50*time.Millisecond).Should(WithTransform(phase, Equal(corev1.PodRunning)))
	g.Expect(r.Kill(get("killme")().UID)).To(BeTrue())
	g.Eventually(get("killme"), 20*time.Second, 50*time.Millisecond).Should(WithTransform(phase, Equal(corev1.PodFailed)))
	g.Expect(get("killme")().Status.ContainerStatuses[0].State.Terminated.ExitCode).To(Equal(int32(137)))

	pod("deleteme", "local/sh", "sleep 300")
	g.Eventually(get("deleteme"), 20*time.Second, 50*time.Millisecond).Should(WithTransform(phase, Equal(corev1.PodRunning)))
	g.Expect(r.Running()).To(Equal(1))
	g.Expect(cs.CoreV1().Pods(ns).Delete(ctx, "deleteme", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() bool {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "deleteme", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 50*time.Millisecond).Should(BeTrue())
	g.Expect(r.Running()).To(Equal(0))

	// Two containers: a native sidecar as another user (runAsUser, with
	// the fsGroup) without a token, and a main container with a projected
	// token that runs as the runner. They share an emptyDir; the pod ends
	// when the main container does, and the sidecar is stopped.
	if os.Geteuid() == 0 {
		twoContainers(t, g, cs, ns, work, get, phase)
		g.Eventually(r.Running, 30*time.Second, 50*time.Millisecond).Should(Equal(0))
	}
}

func twoContainers(t *testing.T, g Gomega, cs kubernetes.Interface, ns, work string, get func(string) func() *corev1.Pod, phase func(*corev1.Pod) corev1.PodPhase) {
	// The ServiceAccount the audience-bound token is issued for (no
	// kube-controller-manager here to make "default").
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	mounts := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: ns}, Spec: corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		ServiceAccountName:           "default",
		AutomountServiceAccountToken: ptr.To(false),
		SecurityContext:              &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532)},
		InitContainers: []corev1.Container{{Name: "side", Image: "local/sh", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Command: []string{"/bin/sh", "-c", `env > "$D/side-env"; id -u > "$D/side-uid.tmp"; id -G > "$D/side-groups"; mv "$D/side-uid.tmp" "$D/side-uid"; exec sleep 300`},
			Env:     []corev1.EnvVar{{Name: "D", Value: "/shared"}}, VolumeMounts: mounts,
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](65533), RunAsGroup: ptr.To[int64](65533)}}},
		Containers: []corev1.Container{{Name: "main", Image: "local/sh",
			Command: []string{"/bin/sh", "-c", `while [ ! -f "$D/side-uid" ]; do sleep 0.05; done; id -u > "$D/main-uid"; echo "$RUNNER_ONLY" > "$D/main-env"; cat "$T" > "$D/main-token"`},
			Env:     []corev1.EnvVar{{Name: "D", Value: "/shared"}, {Name: "T", Value: "/var/run/secrets/test.picobot.io/token"}},
			VolumeMounts: append(mounts, corev1.VolumeMount{Name: "token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
				corev1.VolumeMount{Name: "audience-token", MountPath: "/var/run/secrets/test.picobot.io"})}},
		Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
			{Name: "audience-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "test.picobot.io", ExpirationSeconds: ptr.To[int64](600)}}}}}}},
	}}
	_, err = cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(get("two"), 30*time.Second, 50*time.Millisecond).Should(WithTransform(phase, Equal(corev1.PodSucceeded)))
	done := get("two")()
	g.Expect(done.Status.InitContainerStatuses).To(HaveLen(1))
	g.Expect(done.Status.InitContainerStatuses[0].Name).To(Equal("side"))
	g.Expect(done.Status.ContainerStatuses[0].State.Terminated.ExitCode).To(BeZero())
	shared := filepath.Join(work, ns+"_two", "volumes", "shared")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(shared, name))
		g.Expect(err).NotTo(HaveOccurred())
		return strings.TrimSpace(string(b))
	}
	g.Expect(read("side-uid")).To(Equal("65533"))
	g.Expect(strings.Fields(read("side-groups"))).To(ContainElements("65533", "65532"))
	g.Expect(read("side-env")).NotTo(ContainSubstring("RUNNER_ONLY"), "the sidecar gets no runner environment")
	g.Expect(read("side-env")).NotTo(ContainSubstring("KUBECONFIG"))
	g.Expect(read("main-uid")).To(Equal("0"), "the container with a token runs as the runner")
	g.Expect(read("main-env")).To(Equal("kubeconfig-stand-in"))
	// The audience-bound token is the API server's, for the pod's
	// ServiceAccount, bound to the pod, as the kubelet's would be.
	review, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: read("main-token"), Audiences: []string{"test.picobot.io"}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(review.Status.Authenticated).To(BeTrue(), review.Status.Error)
	g.Expect(review.Status.User.Username).To(Equal("system:serviceaccount:" + ns + ":default"))
	g.Expect(review.Status.User.Extra).To(HaveKeyWithValue("authentication.kubernetes.io/pod-name", authenticationv1.ExtraValue{"two"}))
	fi, err := os.Stat(filepath.Join(work, ns+"_two", "volumes", "audience-token", "token"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), "only the runner's user (the container with the token) reads it")
	fi, err = os.Stat(shared)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o770)))
	g.Expect(fi.Mode() & os.ModeSetgid).NotTo(BeZero())
}

// TestListenOnThePodsAddress: an env value naming only a port the container
// declares moves to the pod's address, as --listen=: arguments do; other
// values, and ports the container does not declare, stay.
func TestListenOnThePodsAddress(t *testing.T) {
	c := corev1.Container{Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}}}
	got := listenOn([]string{"PICOBOT_METRICS_ADDR=:9090", "OTHER=:8080", "URL=http://x:9090", "EMPTY="}, c, "127.1.0.7")
	NewWithT(t).Expect(got).To(Equal([]string{"PICOBOT_METRICS_ADDR=127.1.0.7:9090", "OTHER=:8080", "URL=http://x:9090", "EMPTY="}))
}
