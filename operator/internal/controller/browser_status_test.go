package controller

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

func TestBrowserProfileCondition(t *testing.T) {
	s3 := picobotv1alpha1.StorageS3
	for _, tc := range []struct {
		name   string
		view   profileView
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"idle", profileView{storage: s3, storageOK: true}, metav1.ConditionTrue, picobotv1alpha1.ReasonReady,
			"Profile stored in s3; no browser running"},
		{"idle and restricted", profileView{storage: picobotv1alpha1.StoragePVC, domains: 2}, metav1.ConditionTrue, picobotv1alpha1.ReasonReady,
			"Profile stored in pvc; no browser running; restricted to 2 domains"},
		{"asked for, no pod yet", profileView{storage: s3, storageOK: true, wanted: true}, metav1.ConditionFalse, picobotv1alpha1.ReasonBrowserStarting,
			"Starting a browser pod"},
		{"asked for, pod starting", profileView{storage: s3, storageOK: true, wanted: true, pod: "browser-shop-x1"}, metav1.ConditionFalse, picobotv1alpha1.ReasonBrowserStarting,
			"Waiting for browser pod browser-shop-x1 to serve"},
		{"serving", profileView{storage: s3, storageOK: true, wanted: true, pod: "browser-shop-x1", ready: true}, metav1.ConditionTrue, picobotv1alpha1.ReasonReady,
			"Browser running in pod browser-shop-x1; profile stored in s3"},
		{"saving after use", profileView{storage: s3, storageOK: true, pod: "browser-shop-x1", ready: true}, metav1.ConditionTrue, picobotv1alpha1.ReasonReady,
			"Browser running in pod browser-shop-x1; profile stored in s3"},
		{"no bucket for an s3 profile", profileView{storage: s3}, metav1.ConditionFalse, picobotv1alpha1.ReasonStorageNotConfigured,
			"Profile stored in s3, but the operator has no S3 bucket configured (PICOBOT_S3_BUCKET); it cannot keep the profile"},
		{"pvc needs no bucket", profileView{storage: picobotv1alpha1.StoragePVC}, metav1.ConditionTrue, picobotv1alpha1.ReasonReady,
			"Profile stored in pvc; no browser running"},
		{"a problem wins", profileView{storage: s3, storageOK: true, wanted: true, pod: "p", problem: &browserProblem{picobotv1alpha1.ReasonImagePullFailed, "browser pod p cannot pull its image: nope"}},
			metav1.ConditionFalse, picobotv1alpha1.ReasonImagePullFailed, "browser pod p cannot pull its image: nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := browserProfileCondition(tc.view)
			g.Expect(c.Type).To(Equal(picobotv1alpha1.ConditionReady))
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.msg))
		})
	}
}

func TestBrowserPodStates(t *testing.T) {
	waiting := func(reason, msg string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b-1"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}}
	}
	running := func(ip string, ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
	}
	failed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b-1"}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
		ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "chromium exited"}}}}}}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		ready  bool
		reason string
		msg    string
	}{
		{"pending", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, false, "", ""},
		{"serving", running("10.0.0.7", corev1.ConditionTrue), true, "", ""},
		{"running, probe not passing", running("10.0.0.7", corev1.ConditionFalse), false, "", ""},
		{"running without an address", running("", corev1.ConditionTrue), false, "", ""},
		{"image", waiting("ImagePullBackOff", "no such image"), false, picobotv1alpha1.ReasonImagePullFailed, "browser pod b-1 cannot pull its image: no such image"},
		{"config", waiting("CreateContainerConfigError", `secret "browser-shop" not found`), false, picobotv1alpha1.ReasonPodConfigError,
			`browser pod b-1 cannot start: secret "browser-shop" not found`},
		{"crash loop", waiting("CrashLoopBackOff", "back-off"), false, picobotv1alpha1.ReasonPodFailed, "browser pod b-1 keeps crashing: back-off"},
		{"failed", failed, false, picobotv1alpha1.ReasonPodFailed, "browser pod b-1 failed: exit code 1: chromium exited"},
		{"creating", waiting("ContainerCreating", ""), false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(browserPodReady(tc.pod)).To(Equal(tc.ready))
			p := browserPodProblem(tc.pod)
			if tc.reason == "" {
				g.Expect(p).To(BeNil())
				return
			}
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.reason).To(Equal(tc.reason))
			g.Expect(p.message).To(Equal(tc.msg))
		})
	}
}

func TestProfileArchiveKey(t *testing.T) {
	g := NewWithT(t)
	key, err := profileArchiveKey("team-a", "bp-0123456789")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(key).To(Equal("tenants/team-a/browser-profiles/bp-0123456789.tar.gz"))
	_, err = profileArchiveKey("Not A Namespace", "x")
	g.Expect(err).To(HaveOccurred())
}

// A session pod's sandbox sidecar that cannot start keeps the runtime
// container at PodInitializing: the problem is in the init container
// statuses.
func TestSessionPodSidecarProblem(t *testing.T) {
	g := NewWithT(t)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s-1"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "no such image"}}}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "runtime", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}}
	c := podProblem(p)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonImagePullFailed))
	g.Expect(c.Message).To(Equal("session pod s-1 cannot pull its image: no such image"))
}
