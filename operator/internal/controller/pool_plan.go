package controller

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
)

// maxUnclaimed bounds the wakes one plan makes pods for, so a flood of wakes
// (or a stream nobody reads) cannot ask for thousands of pods at once.
const maxUnclaimed = 1000

// poolPod is what the pool planner knows of one listed session pod.
type poolPod struct {
	Name string
	// Terminating pods (deletion requested) are neither live nor reaped.
	Terminating bool
	Phase       corev1.PodPhase
	// Failure explains a failed pod's exit (set for PodFailed only).
	Failure string
	// Problem is why the pod cannot start (image pull, config, crash loop).
	Problem *metav1.Condition
	// Session is the pod's current LabelSession value.
	Session string
}

// poolPodOf reduces a listed pod to what the planner decides from.
func poolPodOf(p *corev1.Pod) poolPod {
	pp := poolPod{Name: p.Name, Terminating: p.DeletionTimestamp != nil, Phase: p.Status.Phase,
		Problem: podProblem(p), Session: p.Labels[podspec.LabelSession]}
	if p.Status.Phase == corev1.PodFailed {
		pp.Failure = podFailure(p)
	}
	return pp
}

// finished reports a pod whose runtime exited: it is reaped.
func (p poolPod) finished() bool {
	return p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed
}

// live reports a pod that counts toward the pool.
func (p poolPod) live() bool { return !p.Terminating && !p.finished() }

// poolInput is everything the pool plan is decided from, read beforehand.
type poolInput struct {
	// Pods are the agent's session pods as listed, in list order (the first
	// problem found is the one reported).
	Pods []poolPod
	// Registry is the Redis pod registry: pod name -> "warm" or
	// "busy <channel> <chat>".
	Registry map[string]string
	// Gone holds, for registry entries without a live listed pod, whether
	// the API server confirms the pod is gone; an entry not confirmed (a pod
	// the cache has not seen yet) is kept.
	Gone map[string]bool
	// Answered holds the chats ("<channel> <chat>") of busy registry
	// entries of gone pods that have nothing unread or pending: the pod
	// answered them before it went (a pod deleted during its idle
	// timeout), so there is nothing for a re-wake to reclaim.
	Answered map[string]bool
	// Wakes are the chats of the wakes no pod has read yet, each once
	// ("<channel> <chat>"), before this plan's re-wakes.
	Wakes []string
	// WarmPool is how many idle pods to keep; MaxSessions, when set, caps
	// active sessions plus the unclaimed wakes given pods.
	WarmPool    int32
	MaxSessions *int32
	// NamespaceRoom, when set, caps the unclaimed wakes given pods by the
	// sessions the namespace's policy still allows.
	NamespaceRoom *int32
	// CanRun is false without an effective model: a pod could answer
	// nothing, and the gateway answers wakes with the reason instead.
	CanRun bool
	// WarmRoom, when set, caps the warm pool by the tenant's maxWarmPods
	// less the warm pods of its other Agents.
	WarmRoom *int32
}

// rewake is the chat of a pod that died mid-chat, to be woken again.
type rewake struct {
	Pod, Channel, Chat string
}

// sessionLabel is a busy pod whose LabelSession must become Value.
type sessionLabel struct {
	Pod, Value string
}

// poolPlan is what to do to an agent's session pods, and the counts status
// reports. Lists are sorted by pod name, except Reap (list order).
type poolPlan struct {
	// Reap are finished pods to delete.
	Reap []string
	// Rewake are chats to wake again, before their entries are dropped.
	Rewake []rewake
	// Drop are registry entries of pods that are gone.
	Drop []string
	// Label are busy pods to label with their session.
	Label []sessionLabel
	// Create is how many pods to create.
	Create int32
	// Active, Warm and Starting count live pods (busy, idle, unregistered).
	Active, Warm, Starting int32
	// Problem, when set, is the RuntimeReady condition to report; no pods
	// are created while it stands.
	Problem *metav1.Condition
	// Requeue asks for a resync: pods or wakes change state in Redis, which
	// sends no events.
	Requeue bool
	// WakeNeed is how many of Create are for waiting chats (the rest fill
	// the warm pool): a cap on pods that holds these back leaves chats
	// without a runtime.
	WakeNeed int32
	// WarmHeld is how far WarmRoom keeps the warm pool below the Agent's.
	WarmHeld int32
}

// unregisteredOrphans lists the registry entries without a live listed pod,
// sorted: the caller asks the API server whether each is gone (poolInput.Gone).
func unregisteredOrphans(pods []poolPod, registry map[string]string) []string {
	live := map[string]bool{}
	for _, p := range pods {
		if p.live() {
			live[p.Name] = true
		}
	}
	var out []string
	for name := range registry {
		if !live[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// planPool decides the warm pool: reap finished pods, drop the registry
// entries of gone pods (re-waking the chats of busy ones, so the next runtime
// reclaims the unacknowledged message), label busy pods with their session,
// and create pods up to active + warmPool + unclaimed wakes (the wakes capped
// by maxSessions). It reads nothing and changes nothing.
func planPool(in poolInput) poolPlan {
	var plan poolPlan
	live := map[string]poolPod{}
	for _, p := range in.Pods {
		switch {
		case p.Terminating:
			continue
		case p.finished():
			if p.Phase == corev1.PodFailed && in.Registry[p.Name] == "" && plan.Problem == nil {
				plan.Problem = ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPodFailed,
					fmt.Sprintf("session pod %s failed before serving: %s", p.Name, p.Failure)))
			}
			plan.Reap = append(plan.Reap, p.Name)
			continue
		}
		live[p.Name] = p
		if p.Problem != nil && plan.Problem == nil {
			plan.Problem = p.Problem
		}
	}
	planRegistry(&plan, in, live)
	unclaimed := waitingChats(in, live, plan.Rewake)
	demand := min(unclaimed, maxUnclaimed)
	if in.MaxSessions != nil && plan.Active+demand > *in.MaxSessions {
		demand = max(0, *in.MaxSessions-plan.Active)
	}
	if in.NamespaceRoom != nil && demand > *in.NamespaceRoom {
		demand = max(0, *in.NamespaceRoom)
	}
	warmPool := in.WarmPool
	if in.WarmRoom != nil && warmPool > *in.WarmRoom {
		warmPool = max(0, *in.WarmRoom)
		plan.WarmHeld = in.WarmPool - warmPool
	}
	if want, have := plan.Active+warmPool+demand, int32(len(live)); in.CanRun && plan.Problem == nil && want > have {
		plan.Create = want - have
		plan.WakeNeed = min(plan.Create, max(0, plan.Active+demand-have))
	}
	plan.Requeue = len(live) > 0 || unclaimed > 0
	return plan
}

// waitingChats counts the chats that wait for a pod: those of the unread
// wakes and of this plan's re-wakes (they join the stream once applied;
// counting them here gives their chats pods in this pass), each once, less
// the chats a live pod serves (a chat woken again while its pod started:
// the pod that reads the wake acks it, as another runtime owns the chat).
func waitingChats(in poolInput, live map[string]poolPod, rewakes []rewake) int32 {
	served := map[string]bool{}
	for name, v := range in.Registry {
		if st := parseState(v); st.busy {
			if _, ok := live[name]; ok {
				served[st.channel+" "+st.chat] = true
			}
		}
	}
	waiting := map[string]bool{}
	for _, c := range in.Wakes {
		if !served[c] {
			waiting[c] = true
		}
	}
	for _, w := range rewakes {
		if c := w.Channel + " " + w.Chat; !served[c] {
			waiting[c] = true
		}
	}
	return int32(len(waiting))
}

// planRegistry fills the plan's registry part: entries of confirmed-gone pods
// are dropped (busy ones re-woken), live busy pods are counted and labelled,
// live idle ones counted warm, and live pods not registered yet are starting.
func planRegistry(plan *poolPlan, in poolInput, live map[string]poolPod) {
	names := make([]string, 0, len(in.Registry))
	for name := range in.Registry {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		st := parseState(in.Registry[name])
		p, ok := live[name]
		switch {
		case !ok && !in.Gone[name]:
			continue
		case !ok:
			if st.busy && !in.Answered[st.channel+" "+st.chat] {
				plan.Rewake = append(plan.Rewake, rewake{Pod: name, Channel: st.channel, Chat: st.chat})
			}
			plan.Drop = append(plan.Drop, name)
		case st.busy:
			plan.Active++
			if v := podspec.SessionValue(st.channel, st.chat); p.Session != v {
				plan.Label = append(plan.Label, sessionLabel{Pod: name, Value: v})
			}
		default:
			plan.Warm++
		}
	}
	for name := range live {
		if _, ok := in.Registry[name]; !ok {
			plan.Starting++
		}
	}
}

// podState is a pod's entry in the Redis registry.
type podState struct {
	busy          bool
	channel, chat string
}

// parseState reads a registry value; anything but "busy <channel> <chat>"
// is an idle pod.
func parseState(v string) podState {
	f := strings.SplitN(v, " ", 3)
	if len(f) == 3 && f[0] == "busy" {
		return podState{busy: true, channel: f[1], chat: f[2]}
	}
	return podState{}
}
