package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/localrun"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/bottask"
	"github.com/picobot/picobot/runtime/tool/cron"
)

// SchedulerOptions turn on scheduled runs in embedded mode: the CronJobs of
// the manifests folder and the jobs agents make with the cron tools (kept in
// the state database) fire in this process, each run a fresh in-process
// session of its agent. With them set, agents get the cron tools.
type SchedulerOptions struct {
	// Deliverer sends run outcomes to channels (the outbound dispatcher);
	// without one they are recorded as failed deliveries saying so.
	Deliverer scheduler.Deliverer
	// Clock drives firing; tests pass a fake one. Real when nil.
	Clock clock.Clock
	// NoMaintenance skips creating the daily routine-maintenance job.
	NoMaintenance bool
	// MaintenanceTZ is the maintenance job's time zone ("" for UTC).
	MaintenanceTZ string
	// MaxConcurrentRuns caps runs in progress (DefaultMaxConcurrentRuns
	// when 0): they are model turns, and a laptop has one model budget.
	MaxConcurrentRuns int
}

// DefaultMaxConcurrentRuns is embedded mode's cap on runs in progress.
const DefaultMaxConcurrentRuns = 4

// schedulerHost is the running scheduler of a Runtime.
type schedulerHost struct {
	opts     SchedulerOptions
	sched    *scheduler.Scheduler
	jobs     store.CronStore
	manifest map[string][]picobotv1alpha1.CronJob // by tenant
	started  time.Time
}

// prepareScheduler builds the scheduler (before the agents, whose cron
// tools talk to it) and returns the features agents get: the given ones,
// plus the cron tools when the scheduler is on.
func (r *Runtime) prepareScheduler(set *manifest.Set) ([]agenthost.Feature, error) {
	so := r.opts.Scheduler
	if so == nil {
		return r.opts.Features, nil
	}
	jobs, ok := r.state.Store.(store.CronStore)
	if !ok {
		return nil, fmt.Errorf("the state database (%T) cannot keep scheduled jobs", r.state.Store)
	}
	if so.Clock == nil {
		so.Clock = clock.RealClock{}
	}
	if so.MaxConcurrentRuns <= 0 {
		so.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	h := &schedulerHost{opts: *so, jobs: jobs, manifest: map[string][]picobotv1alpha1.CronJob{}, started: so.Clock.Now()}
	for _, cj := range set.CronJobs {
		if !r.tenants[cj.Namespace] {
			r.log.Warn("Ignoring a CronJob of a namespace this runtime does not serve", "cronjob", cj.Name, "namespace", cj.Namespace)
			continue
		}
		h.manifest[cj.Namespace] = append(h.manifest[cj.Namespace], cj)
	}
	runner := localrun.New(func(name string) (localrun.Agent, bool) {
		a := r.agents[name] // complete before the scheduler starts
		if a == nil {
			return localrun.Agent{}, false
		}
		return a.gen().RunTarget(), true
	}, localrun.WithWorkspace(func(tenant, agent string) func(session.ID) string {
		return workspaceFunc(r.opts.StateDir, tenant, agent)
	}))
	// Every tenant of the process shares the folder's Agents, so they share
	// its root agent.
	root := func(context.Context, string) (string, error) { return agentspec.RootAgent(set.Agents) }
	s, err := scheduler.New(scheduler.Options{Store: jobs, Runner: runner, Deliverer: so.Deliverer, Clock: so.Clock, RootAgent: root,
		Log: r.log.With("component", "scheduler"), MaxConcurrentRuns: so.MaxConcurrentRuns, TracerProvider: r.opts.TracerProvider,
		OnRunDone: func(j scheduler.Job, run store.DetailedCronRun) { r.opts.Metrics.CronRunDone(j.Tenant, run) },
		OnMissed:  func(j scheduler.Job, ran bool, n int) { r.opts.Metrics.CronMissed(j.Tenant, ran, n) },
		// This process is the only scheduler of its database: whatever a
		// previous process left unfinished was interrupted.
		StaleAfter: time.Nanosecond})
	if err != nil {
		return nil, err
	}
	h.sched = s
	r.sched = h
	agentNames := make([]string, len(set.Agents))
	for i, a := range set.Agents {
		agentNames[i] = a.Name
	}
	tools := cron.NewFeature(cron.Config{Clock: so.Clock,
		Manifest: func(tenant string) []picobotv1alpha1.CronJob { return h.manifest[tenant] },
		Changed:  func(ctx context.Context, tenant, name string) { r.jobChanged(ctx, tenant, name) },
		Agents:   func(string) []string { return agentNames }})
	// bot_task and bot_agenda keep their schedules as jobs of the same
	// scheduler.
	tasks := bottask.NewFeature(bottask.Config{Clock: so.Clock, TimeZone: so.MaintenanceTZ,
		Changed: func(ctx context.Context, tenant, name string) { r.jobChanged(ctx, tenant, name) }})
	return append(slices.Clone(r.opts.Features), tools, tasks), nil
}

// startScheduler creates the maintenance jobs, schedules every job and
// starts firing; Close stops it with the runtime.
func (r *Runtime) startScheduler() error {
	h := r.sched
	if h == nil {
		return nil
	}
	for tenant := range r.tenants {
		ctx := store.WithTenant(r.ctx, tenant)
		if !h.opts.NoMaintenance {
			if err := ensureMaintenance(ctx, h.jobs, h.opts.MaintenanceTZ); err != nil {
				return err
			}
		}
		for _, cj := range h.manifest[tenant] {
			if err := h.sched.Upsert(h.manifestJob(tenant, cj)); err != nil {
				r.log.Warn("Not scheduling a CronJob of the manifests folder", "cronjob", cj.Name, "err", err)
			}
		}
		recs, err := h.jobs.ListCronJobs(ctx, store.CronJobFilter{Limit: 100_000})
		if err != nil {
			return fmt.Errorf("failed to load scheduled jobs of tenant %q: %w", tenant, err)
		}
		for _, rec := range recs {
			if err := h.upsertRecord(tenant, rec); err != nil {
				r.log.Warn("Not scheduling a job", "job", rec.Name, "tenant", tenant, "err", err)
			}
		}
	}
	r.wg.Go(func() { _ = h.sched.Run(r.ctx) })
	return nil
}

// ensureMaintenance creates the daily routine-maintenance job unless the
// tenant has one: a user's change or suspension stays across restarts.
func ensureMaintenance(ctx context.Context, jobs store.CronStore, tz string) error {
	spec, err := json.Marshal(scheduler.MaintenanceSpec(tz))
	if err != nil {
		return fmt.Errorf("failed to encode the maintenance job: %w", err)
	}
	_, err = jobs.CreateCronJob(ctx, store.CronJob{Name: scheduler.MaintenanceJobName, DisplayName: "Routine maintenance", Spec: spec})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("failed to create the maintenance job: %w", err)
	}
	return nil
}

// manifestEpoch anchors the `every` intervals of manifest CronJobs, which
// carry no creation time: a fixed grid keeps their ticks put across
// restarts.
var manifestEpoch = time.Unix(0, 0).UTC()

func (h *schedulerHost) manifestJob(tenant string, cj picobotv1alpha1.CronJob) scheduler.Job {
	created := cj.CreationTimestamp.Time
	if created.IsZero() {
		// A job without runs counts missed ticks from when this process
		// first saw it.
		created = h.started
	}
	return scheduler.Job{Tenant: tenant, Name: cj.Name, DisplayName: cj.Annotations[scheduler.AnnotationDisplayName], Spec: cj.Spec,
		Created: created, Anchor: manifestEpoch, Version: "manifest"}
}

func (h *schedulerHost) upsertRecord(tenant string, rec store.CronJob) error {
	var spec picobotv1alpha1.CronJobSpec
	if err := json.Unmarshal(rec.Spec, &spec); err != nil {
		return fmt.Errorf("failed to decode job %q: %w", rec.Name, err)
	}
	return h.sched.Upsert(scheduler.Job{Tenant: tenant, Name: rec.Name, DisplayName: rec.DisplayName, Spec: spec,
		Created: rec.CreatedAt, NotBefore: notBefore(rec), Version: strconv.FormatInt(rec.Version, 10), Origin: rec.Origin})
}

// notBefore: ticks before a job's last change were not due under its
// current definition (the first version has none).
func notBefore(rec store.CronJob) time.Time {
	if rec.Version <= 1 {
		return time.Time{}
	}
	return rec.UpdatedAt
}

// jobChanged passes a change the cron tools made to the scheduler.
func (r *Runtime) jobChanged(ctx context.Context, tenant, name string) {
	h := r.sched
	if h == nil {
		return
	}
	rec, err := h.jobs.GetCronJob(store.WithTenant(ctx, tenant), name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		h.sched.Remove(tenant, name)
	case err != nil:
		r.log.Error("Failed to read a changed job", "job", name, "tenant", tenant, "err", err)
	default:
		if err := h.upsertRecord(tenant, rec); err != nil {
			r.log.Warn("Not scheduling a job", "job", name, "tenant", tenant, "err", err)
		}
	}
}
