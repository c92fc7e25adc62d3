package controller

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
)

// TestPlanPool checks the whole plan of every case: each row states every
// field, so a row fails on any action or count it does not expect.
func TestPlanPool(t *testing.T) {
	running := func(name string) poolPod { return poolPod{Name: name, Phase: corev1.PodRunning} }
	busyPod := func(name, channel, chat string) poolPod {
		p := running(name)
		p.Session = podspec.SessionValue(channel, chat)
		return p
	}
	imagePull := ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonImagePullFailed,
		"session pod p2 cannot pull its image: not found"))
	crashing := ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPodFailed,
		"session pod p3 keeps crashing: back-off"))
	failedBeforeServing := ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPodFailed,
		"session pod f1 failed before serving: exit code 1: boom"))
	// chats are the unread wakes of n chats.
	chats := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("web w%d", i)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   poolInput
		want poolPlan
	}{
		{"nothing at all: nothing to do", poolInput{CanRun: true},
			poolPlan{}},
		{"empty pool scaled up to warmPool", poolInput{WarmPool: 3, CanRun: true},
			poolPlan{Create: 3}},
		{"starting pods count toward the pool", poolInput{Pods: []poolPod{running("p1")}, WarmPool: 2, CanRun: true},
			poolPlan{Create: 1, Starting: 1, Requeue: true}},
		{"pool full: nothing to do", poolInput{
			Pods:     []poolPod{busyPod("p1", "web", "c1"), running("p2")},
			Registry: map[string]string{"p1": "busy web c1", "p2": "warm"}, WarmPool: 1, CanRun: true},
			poolPlan{Active: 1, Warm: 1, Requeue: true}},
		{"a chat taken: the pool is refilled and the busy pod labelled", poolInput{
			Pods:     []poolPod{running("p1"), running("p2")},
			Registry: map[string]string{"p1": "busy web c1", "p2": "warm"}, WarmPool: 2, CanRun: true},
			poolPlan{Label: []sessionLabel{{Pod: "p1", Value: podspec.SessionValue("web", "c1")}}, Create: 1, Active: 1, Warm: 1, Requeue: true}},
		{"pending wakes need extra pods", poolInput{
			Pods:     []poolPod{running("p1")},
			Registry: map[string]string{"p1": "warm"}, Wakes: chats(2), WarmPool: 1, CanRun: true},
			poolPlan{Create: 2, WakeNeed: 1, Warm: 1, Requeue: true}},
		{"the tenant's warm room holds the pool below warmPool", poolInput{WarmPool: 3, WarmRoom: ptrTo[int32](1), CanRun: true},
			poolPlan{Create: 1, WarmHeld: 2}},
		{"no warm room: pods for waiting chats only", poolInput{Wakes: chats(2), WarmPool: 2, WarmRoom: ptrTo[int32](0), CanRun: true},
			poolPlan{Create: 2, WakeNeed: 2, WarmHeld: 2, Requeue: true}},
		{"a chat woken again while its pod starts gets one pod", poolInput{
			Pods:  []poolPod{{Name: "p1", Phase: corev1.PodPending}},
			Wakes: []string{"web c1"}, CanRun: true},
			poolPlan{Starting: 1, Requeue: true}},
		{"the wakes of a chat a pod serves need no pod", poolInput{
			Pods:     []poolPod{busyPod("p1", "web", "c1")},
			Registry: map[string]string{"p1": "busy web c1"}, Wakes: []string{"web c1", "web c2"}, CanRun: true},
			poolPlan{Create: 1, WakeNeed: 1, Active: 1, Requeue: true}},
		{"a re-woken chat that also has an unread wake is counted once", poolInput{
			Registry: map[string]string{"x": "busy web c1"}, Gone: map[string]bool{"x": true}, Wakes: []string{"web c1"}, CanRun: true},
			poolPlan{Rewake: []rewake{{Pod: "x", Channel: "web", Chat: "c1"}}, Drop: []string{"x"}, Create: 1, WakeNeed: 1, Requeue: true}},
		{"pending wakes get pods up to maxSessions", poolInput{
			Pods:     []poolPod{busyPod("p1", "web", "c1")},
			Registry: map[string]string{"p1": "busy web c1"}, Wakes: chats(5), WarmPool: 1, MaxSessions: ptrTo[int32](3), CanRun: true},
			poolPlan{Create: 3, WakeNeed: 2, Active: 1, Requeue: true}},
		{"the namespace's room caps pods for pending wakes below maxSessions", poolInput{
			Pods:     []poolPod{busyPod("p1", "web", "c1")},
			Registry: map[string]string{"p1": "busy web c1"}, Wakes: chats(5), WarmPool: 1, MaxSessions: ptrTo[int32](3),
			NamespaceRoom: ptrTo[int32](1), CanRun: true},
			poolPlan{Create: 2, WakeNeed: 1, Active: 1, Requeue: true}},
		{"no room in the namespace: the warm pool only", poolInput{
			Wakes: chats(4), WarmPool: 1, NamespaceRoom: ptrTo[int32](0), CanRun: true},
			poolPlan{Create: 1, Requeue: true}},
		{"at maxSessions: no pods for pending wakes", poolInput{
			Pods:     []poolPod{busyPod("p1", "web", "c1"), busyPod("p2", "web", "c2"), running("p3")},
			Registry: map[string]string{"p1": "busy web c1", "p2": "busy web c2", "p3": "warm"}, Wakes: chats(5), WarmPool: 1,
			MaxSessions: ptrTo[int32](2), CanRun: true},
			poolPlan{Active: 2, Warm: 1, Requeue: true}},
		{"pending wakes are capped", poolInput{Wakes: chats(maxUnclaimed), CanRun: true,
			Registry: map[string]string{"x": "busy web c1"}, Gone: map[string]bool{"x": true}},
			poolPlan{Rewake: []rewake{{Pod: "x", Channel: "web", Chat: "c1"}}, Drop: []string{"x"}, Create: maxUnclaimed, WakeNeed: maxUnclaimed, Requeue: true}},
		{"a pod that failed before registering is reaped and reported, not replaced", poolInput{
			Pods:     []poolPod{{Name: "f1", Phase: corev1.PodFailed, Failure: "exit code 1: boom"}, running("p1")},
			Registry: map[string]string{"p1": "warm"}, WarmPool: 2, CanRun: true},
			poolPlan{Reap: []string{"f1"}, Warm: 1, Problem: failedBeforeServing, Requeue: true}},
		{"a registered pod that finished is reaped and replaced, its chat re-woken", poolInput{
			Pods:     []poolPod{{Name: "f1", Phase: corev1.PodFailed, Failure: "exit code 1: boom"}, {Name: "s1", Phase: corev1.PodSucceeded}},
			Registry: map[string]string{"f1": "busy web c1", "s1": "warm"}, Gone: map[string]bool{"f1": true, "s1": true}, WarmPool: 1, CanRun: true},
			poolPlan{Reap: []string{"f1", "s1"}, Rewake: []rewake{{Pod: "f1", Channel: "web", Chat: "c1"}}, Drop: []string{"f1", "s1"},
				Create: 2, WakeNeed: 1, Requeue: true}},
		{"terminating pods are neither counted nor reaped", poolInput{
			Pods:     []poolPod{{Name: "t1", Phase: corev1.PodRunning, Terminating: true}, {Name: "t2", Phase: corev1.PodFailed, Terminating: true}},
			WarmPool: 1, CanRun: true},
			poolPlan{Create: 1}},
		{"stale registry entries are dropped, busy ones re-woken, unconfirmed ones kept", poolInput{
			Pods: []poolPod{running("p1")},
			Registry: map[string]string{"p1": "warm", "gone-warm": "warm", "gone-busy": "busy slack C1 T1", "too-new": "busy web c9",
				"unchecked": "warm"},
			Gone: map[string]bool{"gone-warm": true, "gone-busy": true, "too-new": false}, WarmPool: 1, CanRun: true},
			poolPlan{Rewake: []rewake{{Pod: "gone-busy", Channel: "slack", Chat: "C1 T1"}}, Drop: []string{"gone-busy", "gone-warm"},
				Create: 1, Warm: 1, Requeue: true}},
		{"an answered chat of a gone pod is not re-woken", poolInput{
			Registry: map[string]string{"x": "busy web c1"}, Gone: map[string]bool{"x": true}, Answered: map[string]bool{"web c1": true},
			CanRun: true},
			poolPlan{Drop: []string{"x"}}},
		{"a pod that cannot start stops the pool from growing; the first problem is reported", poolInput{
			Pods:     []poolPod{running("p1"), {Name: "p2", Phase: corev1.PodPending, Problem: imagePull}, {Name: "p3", Phase: corev1.PodPending, Problem: crashing}},
			Registry: map[string]string{"p1": "warm"}, Wakes: chats(1), WarmPool: 4, CanRun: true},
			poolPlan{Warm: 1, Starting: 2, Problem: imagePull, Requeue: true}},
		{"without a model no pod is created", poolInput{Wakes: chats(1), WarmPool: 2},
			poolPlan{Requeue: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(planPool(tc.in)).To(Equal(tc.want))
		})
	}
}

// TestPoolPodOf checks what the planner is told of a listed pod.
func TestPoolPodOf(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want poolPod
	}{
		{"pending", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			poolPod{Name: "p", Phase: corev1.PodPending}},
		{"busy and terminating", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionTimestamp: &now, Labels: map[string]string{podspec.LabelSession: "abc"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			poolPod{Name: "p", Phase: corev1.PodRunning, Terminating: true, Session: "abc"}},
		{"failed", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}}}}},
			poolPod{Name: "p", Phase: corev1.PodFailed, Failure: "exit code 2 (Error)"}},
		{"cannot pull", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "nope"}}}}}},
			poolPod{Name: "p", Phase: corev1.PodPending, Problem: ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false,
				picobotv1alpha1.ReasonImagePullFailed, "session pod p cannot pull its image: nope"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(poolPodOf(&tc.pod)).To(Equal(tc.want))
		})
	}
}

// TestUnregisteredOrphans: only entries without a live listed pod are
// checked against the API server.
func TestUnregisteredOrphans(t *testing.T) {
	pods := []poolPod{{Name: "live", Phase: corev1.PodRunning}, {Name: "done", Phase: corev1.PodSucceeded},
		{Name: "leaving", Phase: corev1.PodRunning, Terminating: true}, {Name: "unregistered", Phase: corev1.PodPending}}
	registry := map[string]string{"live": "warm", "done": "warm", "leaving": "busy web c1", "unlisted": "warm"}
	NewWithT(t).Expect(unregisteredOrphans(pods, registry)).To(Equal([]string{"done", "leaving", "unlisted"}))
	NewWithT(t).Expect(unregisteredOrphans(nil, nil)).To(BeNil())
}
