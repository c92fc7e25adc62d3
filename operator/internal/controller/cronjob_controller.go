package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/schedule"
)

// CronJobReconciler validates a CronJob's schedule and Agent reference and
// publishes the next run time. Firing is the scheduler's (a separate Runnable).
type CronJobReconciler struct {
	client.Client
	// Recorder records condition transitions as events (nil: none).
	Recorder                recorder.EventRecorder
	Clock                   clock.PassiveClock
	MaxConcurrentReconciles int
	// Quota are the default caps of tenants (TenantQuota fields unset).
	Quota QuotaDefaults
}

// +kubebuilder:rbac:groups=agents.picobot.io,resources=cronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.picobot.io,resources=cronjobs/status,verbs=get;update;patch

// Reconcile computes the CronJob's status and requeues at its next run so the
// published next run time rolls forward.
func (r *CronJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cj := &picobotv1alpha1.CronJob{}
	if err := r.Get(ctx, req.NamespacedName, cj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := cj.DeepCopy()
	now := r.Clock.Now()

	sched := scheduleStatus(cj, now)
	refs := referencesCondition(nil, nil)
	if ref := cj.Spec.AgentRef; ref != nil {
		err := r.Get(ctx, types.NamespacedName{Namespace: cj.Namespace, Name: ref.Name}, &picobotv1alpha1.Agent{})
		switch {
		case apierrors.IsNotFound(err):
			refs = referencesCondition([]string{fmt.Sprintf("Agent %q", ref.Name)}, nil)
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("failed to get Agent %q: %w", ref.Name, err)
		}
	}
	conds := []metav1.Condition{sched.condition, refs}
	quota, err := r.quotaCondition(ctx, cj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if quota != nil {
		conds = append(conds, *quota)
		if quota.Status != metav1.ConditionTrue {
			sched.next, sched.requeue = nil, 0 // the scheduler skips it (see scheduler.upsert)
		}
	} else {
		meta.RemoveStatusCondition(&cj.Status.Conditions, picobotv1alpha1.ConditionWithinQuota)
	}
	if c, ok := specCondition(&cj.Status.Conditions, cj.InvalidFields()); ok {
		conds = append([]metav1.Condition{c}, conds...)
	}
	conds = withSummary(&cj.Status.Conditions, conds)
	cj.Status.ObservedGeneration = cj.Generation
	cj.Status.NextRunTime = sched.next
	changed := setConditions(&cj.Status.Conditions, cj.Generation, conds...)
	if err := patchStatusIfChanged(ctx, r.Client, cj, before, before.Status, cj.Status); err != nil {
		return ctrl.Result{}, err
	}
	recordTransitions(r.Recorder, cj, changed, picobotv1alpha1.ConditionReady, picobotv1alpha1.ConditionStalled, picobotv1alpha1.ConditionReconciling)
	if sched.next != nil {
		return ctrl.Result{RequeueAfter: sched.next.Sub(now)}, nil
	}
	if sched.requeue > 0 {
		return ctrl.Result{RequeueAfter: sched.requeue}, nil
	}
	return ctrl.Result{}, nil
}

// quotaCondition is the CronJob's WithinQuota condition under the tenant's
// maxCronJobs (nil: no cap, or a CronJob that does not count).
func (r *CronJobReconciler) quotaCondition(ctx context.Context, cj *picobotv1alpha1.CronJob) (*metav1.Condition, error) {
	caps, err := tenantCapsOf(ctx, r.Client, r.Quota, cj.Namespace)
	if err != nil || caps.cronJobs == nil || !countsTowardCronJobs(cj) {
		return nil, err
	}
	var list picobotv1alpha1.CronJobList
	if err := r.List(ctx, &list, client.InNamespace(cj.Namespace)); err != nil {
		return nil, fmt.Errorf("failed to list the CronJobs of namespace %q: %w", cj.Namespace, err)
	}
	if !slices.ContainsFunc(list.Items, func(o picobotv1alpha1.CronJob) bool { return o.Name == cj.Name }) {
		list.Items = append(list.Items, *cj) // not in the cache yet
	}
	if !cronJobsOverCap(list.Items, *caps.cronJobs)[cj.Name] {
		return ptrTo(withinQuota("", "")), nil
	}
	return ptrTo(withinQuota(picobotv1alpha1.ReasonCronJobLimit, fmt.Sprintf(
		"Not scheduled: the tenant's maxCronJobs is %d and older CronJobs of the namespace take them all; it is scheduled once one is deleted or the cap is raised",
		*caps.cronJobs))), nil
}

type cronScheduleStatus struct {
	condition metav1.Condition
	next      *metav1.Time
	requeue   time.Duration
}

// atFiringGrace is how long a one-shot CronJob whose time has come counts as
// firing rather than in the past, until the scheduler publishes its lastRun.
const atFiringGrace = 2 * time.Minute

// scheduleStatus is the pure part of CronJob status: whether the schedule is
// valid, and when it fires next after now.
func scheduleStatus(cj *picobotv1alpha1.CronJob, now time.Time) cronScheduleStatus {
	s, err := schedule.Parse(cj.Spec.Schedule, cj.CreationTimestamp.Time)
	if err != nil {
		return cronScheduleStatus{condition: condition(picobotv1alpha1.ConditionScheduleValid, false, picobotv1alpha1.ReasonInvalidSchedule, err.Error())}
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return cronScheduleStatus{condition: condition(picobotv1alpha1.ConditionScheduleValid, true, picobotv1alpha1.ReasonSuspended, "Suspended; no runs until spec.suspend is false")}
	}
	next := s.Next(now)
	if next.IsZero() {
		if cj.Status.LastRun != nil {
			return cronScheduleStatus{condition: condition(picobotv1alpha1.ConditionScheduleValid, true, picobotv1alpha1.ReasonCompleted, "The one-shot schedule has run")}
		}
		at := time.UnixMilli(*cj.Spec.Schedule.At).UTC()
		if late := now.Sub(at); late < atFiringGrace && !at.Before(cj.CreationTimestamp.Time) {
			return cronScheduleStatus{requeue: atFiringGrace - late, condition: condition(picobotv1alpha1.ConditionScheduleValid, true,
				picobotv1alpha1.ReasonScheduled, "Due at "+at.Format(time.RFC3339)+"; waiting for the scheduler to record the run")}
		}
		return cronScheduleStatus{condition: condition(picobotv1alpha1.ConditionScheduleValid, false, picobotv1alpha1.ReasonAtInPast,
			fmt.Sprintf("at %s is in the past; a one-shot schedule must lie in the future", at.Format(time.RFC3339)))}
	}
	t := metav1.NewTime(next.Truncate(time.Second))
	return cronScheduleStatus{next: &t, condition: condition(picobotv1alpha1.ConditionScheduleValid, true, picobotv1alpha1.ReasonScheduled,
		"Next run at "+next.UTC().Format(time.RFC3339))}
}

// SetupWithManager watches CronJobs and the Agents they name.
func (r *CronJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 1
	}
	err := ctrl.NewControllerManagedBy(mgr).
		For(&picobotv1alpha1.CronJob{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, oneShotRan{}))).
		Watches(&picobotv1alpha1.Agent{}, handler.EnqueueRequestsFromMapFunc(requestsByIndex(mgr.GetClient(), &picobotv1alpha1.CronJobList{}, indexCronJobAgent)), builder.WithPredicates(createOrDelete{})).
		// Under maxCronJobs, one CronJob created or deleted moves the others
		// in or out of the cap, and so does a changed TenantQuota.
		Watches(&picobotv1alpha1.CronJob{}, handler.EnqueueRequestsFromMapFunc(namespaceCronJobs(mgr.GetClient())), builder.WithPredicates(createOrDelete{})).
		Watches(&picobotv1alpha1.TenantQuota{}, handler.EnqueueRequestsFromMapFunc(namespaceCronJobs(mgr.GetClient()))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("cronjob").
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up cronjob controller: %w", err)
	}
	return nil
}

// namespaceCronJobs maps an object to every CronJob of its namespace.
func namespaceCronJobs(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		var list picobotv1alpha1.CronJobList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			log.FromContext(ctx).Error(err, "Failed to list CronJobs", "namespace", o.GetNamespace())
			return nil
		}
		reqs := make([]ctrl.Request, 0, len(list.Items))
		for _, cj := range list.Items {
			reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: cj.Namespace, Name: cj.Name}})
		}
		return reqs
	}
}

// oneShotRan passes the status update in which the scheduler publishes the
// run of a one-shot (`at`) CronJob, so its condition becomes Completed.
type oneShotRan struct{ predicate.Funcs }

// Update implements predicate.Predicate.
func (oneShotRan) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*picobotv1alpha1.CronJob)
	n, ok2 := e.ObjectNew.(*picobotv1alpha1.CronJob)
	return ok1 && ok2 && n.Spec.Schedule.At != nil && o.Status.LastRun == nil && n.Status.LastRun != nil
}
