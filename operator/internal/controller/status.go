package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// patchStatusIfChanged writes the status subresource once, and only when the
// status differs from the snapshot taken before reconciling, so a no-op resync
// performs zero writes.
//
// The patch carries the snapshot's resourceVersion (an optimistic lock): a
// merge patch only names what changed from the snapshot, so one computed
// from a cache that has not yet seen this controller's previous write would
// leave that write's fields in place (seen: a cleared fallbackIndex kept
// beside a condition saying the primary model is used). A stale snapshot
// gets a conflict instead, and the requeued reconcile reads the newer object.
func patchStatusIfChanged(ctx context.Context, c client.Client, obj client.Object, before client.Object, oldStatus, newStatus any) error {
	if equality.Semantic.DeepEqual(oldStatus, newStatus) {
		return nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to patch status of %s %q: %w", obj.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// transitioned says whether a condition change is worth an event: a status or
// reason change, or a condition that first appears unhealthy. A condition
// appearing healthy on creation is not news.
func transitioned(prev *metav1.Condition, c metav1.Condition) bool {
	if prev == nil {
		return c.Status != metav1.ConditionTrue || c.Reason == picobotv1alpha1.ReasonResolvedWithWarnings
	}
	return prev.Status != c.Status || prev.Reason != c.Reason
}

// setConditions applies conds to the list, keeping LastTransitionTime when a
// condition's status did not change (meta.SetStatusCondition's contract), and
// stamps every condition with the generation it describes.
func setConditions(list *[]metav1.Condition, generation int64, conds ...metav1.Condition) (changed []metav1.Condition) {
	for _, c := range conds {
		c.ObservedGeneration = generation
		// Copy: SetStatusCondition updates the element the pointer refers to.
		var prev *metav1.Condition
		if p := meta.FindStatusCondition(*list, c.Type); p != nil {
			cp := *p
			prev = &cp
		}
		meta.SetStatusCondition(list, c)
		if transitioned(prev, c) {
			changed = append(changed, c)
		}
	}
	return changed
}

// readySummary computes the Ready condition from the other conditions: True when
// all of them are True, otherwise False naming the first that is not, in the
// order given.
func readySummary(conds []metav1.Condition) metav1.Condition {
	var notReady []string
	for _, c := range conds {
		if c.Status != metav1.ConditionTrue {
			notReady = append(notReady, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	if len(notReady) == 0 {
		return metav1.Condition{Type: picobotv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: picobotv1alpha1.ReasonReady, Message: "All conditions hold"}
	}
	first := conds[0]
	for _, c := range conds {
		if c.Status != metav1.ConditionTrue {
			first = c
			break
		}
	}
	return metav1.Condition{Type: picobotv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: first.Reason, Message: strings.Join(notReady, "; ")}
}

// specCondition is SpecValid=False for the stored fields the schema refuses;
// ok is false when there are none, and a SpecValid left in list from before
// the object was fixed is removed.
func specCondition(list *[]metav1.Condition, invalid []string) (metav1.Condition, bool) {
	if len(invalid) == 0 {
		meta.RemoveStatusCondition(list, picobotv1alpha1.ConditionSpecValid)
		return metav1.Condition{}, false
	}
	return condition(picobotv1alpha1.ConditionSpecValid, false, picobotv1alpha1.ReasonInvalidSpec,
		strings.Join(invalid, "; ")+"; fix the object (the API server refuses such values now)"), true
}

// progressConditions are kstatus' Stalled and Reconciling for conds (the
// conditions Ready summarises), so GitOps tools tell an object that will
// become Ready from one that will not:
//
//   - Stalled=True, with the cause's reason, when a condition says the object
//     cannot become Ready until its spec (or the platform's configuration)
//     changes: kstatus reads Failed, Argo CD Degraded;
//   - otherwise Reconciling=True, with the cause's reason, while a condition
//     is not True for a reason the operator retries or waits out (a Secret
//     or Agent not there yet, a pod starting or failing to pull its image),
//     or while progressing (say, a warm pool filling) is given: kstatus reads
//     InProgress, Argo CD Progressing;
//   - neither when all hold: kstatus reads Current, Argo CD Healthy.
//
// The type not returned is removed from list, so a fixed object carries
// neither.
func progressConditions(list *[]metav1.Condition, conds []metav1.Condition, progressing ...metav1.Condition) []metav1.Condition {
	var stalled, reconciling *metav1.Condition
	for _, c := range conds {
		if c.Status == metav1.ConditionTrue {
			continue
		}
		if needsSpecChange(c.Reason) {
			stalled = ptrTo(condition(picobotv1alpha1.ConditionStalled, true, c.Reason, c.Type+": "+c.Message))
			break
		}
		if reconciling == nil {
			reconciling = ptrTo(condition(picobotv1alpha1.ConditionReconciling, true, c.Reason, c.Type+": "+c.Message))
		}
	}
	if stalled == nil && reconciling == nil && len(progressing) > 0 {
		p := progressing[0]
		reconciling = ptrTo(condition(picobotv1alpha1.ConditionReconciling, true, p.Reason, p.Type+": "+p.Message))
	}
	var out []metav1.Condition
	if stalled != nil {
		out = append(out, *stalled)
		reconciling = nil
	} else {
		meta.RemoveStatusCondition(list, picobotv1alpha1.ConditionStalled)
	}
	if reconciling != nil {
		out = append(out, *reconciling)
	} else {
		meta.RemoveStatusCondition(list, picobotv1alpha1.ConditionReconciling)
	}
	return out
}

// needsSpecChange reports the reasons no waiting or retrying can clear:
// only a change to the object (or to the platform's configuration: its
// runtime policy, the operator's browser image or S3 bucket) can.
func needsSpecChange(reason string) bool {
	switch reason {
	case picobotv1alpha1.ReasonInvalidSpec, picobotv1alpha1.ReasonInvalidToolPolicy, picobotv1alpha1.ReasonInvalidReference,
		picobotv1alpha1.ReasonPolicyViolation, picobotv1alpha1.ReasonPodCreateFailed, picobotv1alpha1.ReasonInvalidSchedule,
		picobotv1alpha1.ReasonAtInPast, picobotv1alpha1.ReasonBrowserPodsDisabled, picobotv1alpha1.ReasonStorageNotConfigured:
		return true
	}
	return false
}

// withSummary appends to conds their Ready summary and their kstatus
// conditions (progressConditions).
func withSummary(list *[]metav1.Condition, conds []metav1.Condition, progressing ...metav1.Condition) []metav1.Condition {
	out := append(conds, readySummary(conds))
	return append(out, progressConditions(list, conds, progressing...)...)
}

// recordTransitions records one event per changed condition, except those
// of the types in skip (summaries that repeat a cause with its own event);
// the API server's event series de-duplicate repeats of the same reason.
func recordTransitions(rec events.EventRecorder, obj runtime.Object, changed []metav1.Condition, skip ...string) {
	if rec == nil {
		return
	}
	for _, c := range changed {
		if slices.Contains(skip, c.Type) {
			continue
		}
		typ := corev1.EventTypeNormal
		if (c.Status != metav1.ConditionTrue && c.Reason != picobotv1alpha1.ReasonBrowserStarting) || c.Reason == picobotv1alpha1.ReasonResolvedWithWarnings {
			typ = corev1.EventTypeWarning
		}
		rec.Eventf(obj, nil, typ, c.Reason, "Reconcile", "%s: %s", c.Type, c.Message)
	}
}

func condition(typ string, ok bool, reason, msg string) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
}

func sortedUnique(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	sort.Strings(in)
	out := in[:1]
	for _, s := range in[1:] {
		if s != out[len(out)-1] {
			out = append(out, s)
		}
	}
	return out
}
