// Package scheduler is the operator's CronJob scheduler: a leader-elected
// manager.Runnable that feeds the CronJobs of the manager's informer cache to
// runtime/scheduler (a heap of next ticks; claims in PostgreSQL make every
// tick fire once, even with two operator replicas and across restarts),
// publishes each job's status.lastRun, and creates the daily
// routine-maintenance CronJob in every namespace with Agents.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/runtime/agentspec"
	rtscheduler "github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store"
)

// Defaults of Config.
const (
	// DefaultStatusWorkers is how many status patches run in parallel.
	DefaultStatusWorkers = 4
	// DefaultClaimAhead is how long before its time a tick is claimed: the
	// claims of thousands of CronJobs sharing a tick are written before it,
	// so their runs start on time.
	DefaultClaimAhead = 2 * time.Second
)

// Config configures the Runnable.
type Config struct {
	// Store keeps run records (PostgreSQL in cluster mode); required.
	Store store.CronStore
	// Runner executes runs (the integrator's cluster runner publishes them
	// to session pods); required.
	Runner rtscheduler.Runner
	// Deliverer sends outcomes (the outbound dispatcher).
	Deliverer rtscheduler.Deliverer
	// Clock drives firing; real when nil.
	Clock clock.Clock
	// Maintenance creates the daily routine-maintenance CronJob in every
	// namespace that has an Agent (once; a changed or suspended one is kept).
	Maintenance bool
	// MaintenanceTZ is the time zone of new maintenance jobs ("" for UTC).
	MaintenanceTZ string
	// StatusWorkers patch status.lastRun in parallel (DefaultStatusWorkers
	// when 0). Patches of one CronJob coalesce, so the API server sees at
	// most one per job at a time however fast it fires.
	StatusWorkers int
	// Metrics records the runs' outcomes and fire lag; nil records
	// nothing.
	Metrics *opmetrics.Metrics
	// Tuning sets the scheduler's other options (claim batching, timeouts;
	// ClaimAhead 0 means DefaultClaimAhead, negative claims at the tick);
	// Store, Runner, Deliverer, Clock, Log and OnRunDone are set from here.
	Tuning rtscheduler.Options
}

// +kubebuilder:rbac:groups=agents.picobot.io,resources=cronjobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=agents.picobot.io,resources=cronjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.picobot.io,resources=agents,verbs=get;list;watch

// Runnable fires CronJobs while its operator replica leads.
type Runnable struct {
	mgr    manager.Manager
	cfg    Config
	log    logr.Logger
	client client.Client

	mu       sync.Mutex
	sched    *rtscheduler.Scheduler
	patched  map[types.NamespacedName]time.Time // latest tick whose run is in status.lastRun
	pending  map[types.NamespacedName]store.DetailedCronRun
	status   workqueue.TypedRateLimitingInterface[types.NamespacedName]
	ensured  map[string]bool // namespaces whose maintenance job exists
	ensureCh chan string
}

var (
	_ manager.Runnable               = (*Runnable)(nil)
	_ manager.LeaderElectionRunnable = (*Runnable)(nil)
)

// Add creates the Runnable and adds it to mgr.
func Add(mgr manager.Manager, cfg Config) (*Runnable, error) {
	if cfg.Store == nil || cfg.Runner == nil {
		return nil, errors.New("failed to create CronJob scheduler: Store and Runner are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.StatusWorkers <= 0 {
		cfg.StatusWorkers = DefaultStatusWorkers
	}
	if cfg.Tuning.ClaimAhead == 0 {
		cfg.Tuning.ClaimAhead = DefaultClaimAhead
	}
	r := &Runnable{mgr: mgr, cfg: cfg, log: ctrl.Log.WithName("scheduler"), client: mgr.GetClient()}
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("failed to add CronJob scheduler: %w", err)
	}
	return r, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader fires (the claims would keep a second one from firing twice, but it
// would do the work for nothing).
func (r *Runnable) NeedLeaderElection() bool { return true }

// Scheduler is the running scheduler (nil before Start), for tests and
// metrics.
func (r *Runnable) Scheduler() *rtscheduler.Scheduler {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched
}

// Start implements manager.Runnable: it runs until ctx ends (leadership
// lost or shutdown), then waits for the runs in progress to be recorded.
func (r *Runnable) Start(ctx context.Context) error {
	opts := r.cfg.Tuning
	opts.Store, opts.Runner, opts.Deliverer, opts.Clock = r.cfg.Store, r.cfg.Runner, r.cfg.Deliverer, r.cfg.Clock
	opts.Log = slog.New(logr.ToSlogHandler(r.log))
	opts.OnRunDone = r.onRunDone
	opts.OnMissed = func(j rtscheduler.Job, ran bool, n int) { r.cfg.Metrics.CronMissed(j.Tenant, ran, n) }
	opts.RootAgent = r.rootAgent
	s, err := rtscheduler.New(opts)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.sched = s
	r.patched = map[types.NamespacedName]time.Time{}
	r.pending = map[types.NamespacedName]store.DetailedCronRun{}
	r.ensured = map[string]bool{}
	r.ensureCh = make(chan string, 1024)
	r.status = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "cronjob-status"})
	r.mu.Unlock()

	cronInformer, err := r.mgr.GetCache().GetInformer(ctx, &picobotv1alpha1.CronJob{})
	if err != nil {
		return fmt.Errorf("failed to get CronJob informer: %w", err)
	}
	reg, err := cronInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.upsert(obj) },
		UpdateFunc: func(_, obj any) { r.upsert(obj) },
		DeleteFunc: r.remove,
	})
	if err != nil {
		return fmt.Errorf("failed to watch CronJobs: %w", err)
	}
	defer func() { _ = cronInformer.RemoveEventHandler(reg) }()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer r.status.ShutDown()
	if r.cfg.Maintenance {
		agentInformer, err := r.mgr.GetCache().GetInformer(ctx, &picobotv1alpha1.Agent{})
		if err != nil {
			return fmt.Errorf("failed to get Agent informer: %w", err)
		}
		areg, err := agentInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: r.agentSeen})
		if err != nil {
			return fmt.Errorf("failed to watch Agents: %w", err)
		}
		defer func() { _ = agentInformer.RemoveEventHandler(areg) }()
		wg.Go(func() { r.ensureLoop(ctx) })
	}
	for range r.cfg.StatusWorkers {
		wg.Go(func() {
			for r.patchNext(ctx) {
			}
		})
	}
	r.log.Info("Starting CronJob scheduler", "maintenance", r.cfg.Maintenance)
	return s.Run(ctx)
}

// rootAgent names the root agent of a namespace (agentspec.RootAgent over
// its Agents, from the informer cache), which runs the jobs naming no agent.
func (r *Runnable) rootAgent(ctx context.Context, namespace string) (string, error) {
	var agents picobotv1alpha1.AgentList
	if err := r.client.List(ctx, &agents, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("failed to list the Agents of namespace %q: %w", namespace, err)
	}
	return agentspec.RootAgent(agents.Items)
}

// JobFrom turns a CronJob into the scheduler's Job.
func JobFrom(cj *picobotv1alpha1.CronJob) rtscheduler.Job {
	name := cj.Annotations[rtscheduler.AnnotationDisplayName]
	notBefore := cj.Annotations[rtscheduler.AnnotationNotBefore]
	j := rtscheduler.Job{Tenant: cj.Namespace, Name: cj.Name, DisplayName: name, Spec: cj.Spec, Created: cj.CreationTimestamp.Time,
		Version: fmt.Sprintf("%d/%s/%s", cj.Generation, notBefore, name), Origin: cj.Annotations[rtscheduler.AnnotationOrigin]}
	if t, err := time.Parse(time.RFC3339, notBefore); err == nil {
		j.NotBefore = t
	}
	return j
}

func (r *Runnable) upsert(obj any) {
	cj, ok := obj.(*picobotv1alpha1.CronJob)
	if !ok {
		return
	}
	if c := meta.FindStatusCondition(cj.Status.Conditions, picobotv1alpha1.ConditionWithinQuota); c != nil && c.Status == metav1.ConditionFalse {
		// Past the tenant's maxCronJobs (the CronJob controller's verdict).
		r.sched.Remove(cj.Namespace, cj.Name)
		return
	}
	if err := r.sched.Upsert(JobFrom(cj)); err != nil {
		// The CronJob controller reports it in the ScheduleValid condition.
		r.log.V(1).Info("Not scheduling CronJob", "cronjob", client.ObjectKeyFromObject(cj), "reason", err.Error())
	}
}

func (r *Runnable) remove(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if cj, ok := obj.(*picobotv1alpha1.CronJob); ok {
		r.sched.Remove(cj.Namespace, cj.Name)
	}
}

// onRunDone queues the run for status.lastRun, keeping only the latest tick
// per CronJob.
func (r *Runnable) onRunDone(j rtscheduler.Job, run store.DetailedCronRun) {
	r.cfg.Metrics.CronRunDone(j.Tenant, run)
	key := types.NamespacedName{Namespace: j.Tenant, Name: j.Name}
	r.mu.Lock()
	if cur, ok := r.pending[key]; ok && cur.ScheduledTime.After(run.ScheduledTime) {
		r.mu.Unlock()
		return
	}
	r.pending[key] = run
	r.mu.Unlock()
	r.status.Add(key)
}

// patchNext writes one CronJob's status.lastRun; false when the queue shut
// down.
func (r *Runnable) patchNext(ctx context.Context) bool {
	key, shutdown := r.status.Get()
	if shutdown {
		return false
	}
	defer r.status.Done(key)
	r.mu.Lock()
	run, ok := r.pending[key]
	delete(r.pending, key)
	stale := !r.patched[key].IsZero() && !run.ScheduledTime.After(r.patched[key])
	r.mu.Unlock()
	if !ok || stale {
		r.status.Forget(key)
		return true
	}
	if err := r.patchLastRun(ctx, key, run); err != nil {
		if ctx.Err() != nil {
			return true
		}
		r.log.Error(err, "Failed to publish the last run of a CronJob", "cronjob", key)
		r.mu.Lock()
		if cur, ok := r.pending[key]; !ok || !cur.ScheduledTime.After(run.ScheduledTime) {
			r.pending[key] = run
		}
		r.mu.Unlock()
		r.status.AddRateLimited(key)
		return true
	}
	r.status.Forget(key)
	r.mu.Lock()
	r.patched[key] = run.ScheduledTime
	r.mu.Unlock()
	return true
}

func (r *Runnable) patchLastRun(ctx context.Context, key types.NamespacedName, run store.DetailedCronRun) error {
	last := picobotv1alpha1.CronRun{ID: run.RunID, ScheduledTime: metav1.NewTime(run.ScheduledTime), Outcome: picobotv1alpha1.RunOutcome(run.Outcome)}
	if run.StartedAt != nil {
		last.StartTime = &metav1.Time{Time: *run.StartedAt}
	}
	if run.FinishedAt != nil {
		last.CompletionTime = &metav1.Time{Time: *run.FinishedAt}
	}
	data, err := json.Marshal(map[string]any{"status": map[string]any{"lastRun": last}})
	if err != nil {
		return fmt.Errorf("failed to encode status of CronJob %s: %w", key, err)
	}
	cj := &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	err = r.client.Status().Patch(ctx, cj, client.RawPatch(types.MergePatchType, data))
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("failed to patch status of CronJob %s: %w", key, err)
	}
	return nil
}

func (r *Runnable) agentSeen(obj any) {
	a, ok := obj.(*picobotv1alpha1.Agent)
	if !ok {
		return
	}
	r.mu.Lock()
	seen := r.ensured[a.Namespace]
	r.ensured[a.Namespace] = true
	r.mu.Unlock()
	if !seen {
		select {
		case r.ensureCh <- a.Namespace:
		default: // full: the namespace is retried with the next Agent event
			r.mu.Lock()
			delete(r.ensured, a.Namespace)
			r.mu.Unlock()
		}
	}
}

// ensureLoop creates the maintenance CronJob of each namespace handed to it,
// unless one exists: a user's change or suspension is never overwritten.
func (r *Runnable) ensureLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ns := <-r.ensureCh:
			if err := EnsureMaintenance(ctx, r.client, ns, r.cfg.MaintenanceTZ); err != nil && ctx.Err() == nil {
				r.log.Error(err, "Failed to create the maintenance CronJob", "namespace", ns)
				r.mu.Lock()
				delete(r.ensured, ns) // retried with the next Agent event
				r.mu.Unlock()
			}
		}
	}
}

// EnsureMaintenance creates the routine-maintenance CronJob in ns when it
// does not exist. It is labelled agent-made (PicoBot made it, not GitOps),
// so the cron tools may change or disable it.
func EnsureMaintenance(ctx context.Context, c client.Client, ns, tz string) error {
	cj := &picobotv1alpha1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rtscheduler.MaintenanceJobName,
			Labels:      map[string]string{picobotv1alpha1.LabelAgentMade: "true"},
			Annotations: map[string]string{rtscheduler.AnnotationDisplayName: "Routine maintenance"}},
		Spec: rtscheduler.MaintenanceSpec(tz),
	}
	if err := c.Create(ctx, cj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create CronJob %s/%s: %w", ns, cj.Name, err)
	}
	return nil
}
