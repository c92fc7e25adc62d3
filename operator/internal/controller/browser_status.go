package controller

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// browserProblem is why a pod (a browser, or a session pod) cannot run or
// serve: a condition reason and the message sessions and users see.
type browserProblem struct {
	reason, message string
}

func (p *browserProblem) Error() string { return p.message }

// profileView is what a reconcile observed of a profile and its browser;
// the Ready condition is a pure function of it.
type profileView struct {
	storage picobotv1alpha1.ProfileStorage
	// storageOK is false for an s3 profile when no bucket is configured.
	storageOK bool
	domains   int
	// wanted: a session holds the browser (its Lease is not idle).
	wanted bool
	// pod is the live browser pod ("" when none); ready when it serves.
	pod     string
	ready   bool
	problem *browserProblem
}

// profileStorage is the storage of a profile: s3 unless it asks for pvc.
func profileStorage(bp *picobotv1alpha1.BrowserProfile) picobotv1alpha1.ProfileStorage {
	if p := bp.Spec.Persistence; p != nil && p.Storage != "" {
		return p.Storage
	}
	return picobotv1alpha1.StorageS3
}

// browserProfileCondition is the Ready condition of a profile.
func browserProfileCondition(v profileView) metav1.Condition {
	suffix := ""
	if v.domains > 0 {
		suffix = fmt.Sprintf("; restricted to %d domains", v.domains)
	}
	switch {
	case v.problem != nil:
		return condition(picobotv1alpha1.ConditionReady, false, v.problem.reason, v.problem.message)
	case v.storage == picobotv1alpha1.StorageS3 && !v.storageOK:
		return condition(picobotv1alpha1.ConditionReady, false, picobotv1alpha1.ReasonStorageNotConfigured,
			"Profile stored in s3, but the operator has no S3 bucket configured (PICOBOT_S3_BUCKET); it cannot keep the profile")
	case v.wanted && v.pod == "":
		return condition(picobotv1alpha1.ConditionReady, false, picobotv1alpha1.ReasonBrowserStarting, "Starting a browser pod")
	case v.wanted && !v.ready:
		return condition(picobotv1alpha1.ConditionReady, false, picobotv1alpha1.ReasonBrowserStarting, fmt.Sprintf("Waiting for browser pod %s to serve", v.pod))
	case v.pod != "" && v.ready:
		return condition(picobotv1alpha1.ConditionReady, true, picobotv1alpha1.ReasonReady,
			fmt.Sprintf("Browser running in pod %s; profile stored in %s%s", v.pod, v.storage, suffix))
	}
	return condition(picobotv1alpha1.ConditionReady, true, picobotv1alpha1.ReasonReady,
		fmt.Sprintf("Profile stored in %s; no browser running%s", v.storage, suffix))
}

// browserPodReady reports whether a browser pod serves: running, with an
// address, and its readiness probe passing.
func browserPodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// browserPodProblem reports a browser pod that cannot start or has failed.
func browserPodProblem(p *corev1.Pod) *browserProblem {
	if p.Status.Phase == corev1.PodFailed {
		return &browserProblem{picobotv1alpha1.ReasonPodFailed, fmt.Sprintf("browser pod %s failed: %s", p.Name, podFailure(p))}
	}
	return waitingProblem(p, "browser pod")
}

// waitingProblem reports a container of p (a "session pod", a "browser
// pod") waiting for a reason it will not get over by itself: its image, its
// configuration, or crashing.
func waitingProblem(p *corev1.Pod, what string) *browserProblem {
	// Init containers first: a session pod's sandbox sidecar that cannot
	// start keeps the runtime container at PodInitializing.
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			return &browserProblem{picobotv1alpha1.ReasonImagePullFailed, fmt.Sprintf("%s %s cannot pull its image: %s", what, p.Name, w.Message)}
		case "CreateContainerConfigError", "CreateContainerError":
			return &browserProblem{picobotv1alpha1.ReasonPodConfigError, fmt.Sprintf("%s %s cannot start: %s", what, p.Name, w.Message)}
		case "CrashLoopBackOff":
			return &browserProblem{picobotv1alpha1.ReasonPodFailed, fmt.Sprintf("%s %s keeps crashing: %s", what, p.Name, w.Message)}
		}
	}
	return nil
}
