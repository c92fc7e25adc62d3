package bottask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler/agentjobs"
	"github.com/picobot/picobot/runtime/store"
)

// jobKeeper keeps the jobs that run tasks and remind of agenda items: store
// records in embedded mode, CronJob resources in cluster mode. Run records
// come from the store in both.
type jobKeeper interface {
	// put creates or replaces the job name.
	put(ctx context.Context, tenant, name, title string, spec picobotv1alpha1.CronJobSpec) error
	// drop deletes the job name; one already gone is fine.
	drop(ctx context.Context, tenant, name string) error
	// current is the job's spec; ok is false when there is no such job.
	current(ctx context.Context, name string) (s picobotv1alpha1.CronJobSpec, ok bool, err error)
}

// storeJobs keeps jobs in embedded mode's store, telling the running
// scheduler about every change.
type storeJobs struct {
	cs      store.CronStore
	agent   string
	changed func(ctx context.Context, tenant, name string)
}

func (s storeJobs) put(ctx context.Context, tenant, name, title string, spec picobotv1alpha1.CronJobSpec) error {
	raw, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("failed to encode job %q: %w", name, err)
	}
	_, err = s.cs.UpdateCronJob(ctx, name, store.CronJobUpdate{DisplayName: &title, Spec: raw})
	if errors.Is(err, store.ErrNotFound) {
		_, err = s.cs.CreateCronJob(ctx, store.CronJob{Name: name, DisplayName: title, Agent: s.agent, Spec: raw})
	}
	if err != nil {
		return fmt.Errorf("failed to schedule job %q: %w", name, err)
	}
	s.changed(ctx, tenant, name)
	return nil
}

func (s storeJobs) drop(ctx context.Context, tenant, name string) error {
	err := s.cs.DeleteCronJob(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("failed to unschedule job %q: %w", name, err)
	}
	s.changed(ctx, tenant, name)
	return nil
}

func (s storeJobs) current(ctx context.Context, name string) (picobotv1alpha1.CronJobSpec, bool, error) {
	var spec picobotv1alpha1.CronJobSpec
	rec, err := s.cs.GetCronJob(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return spec, false, nil
	}
	if err != nil {
		return spec, false, fmt.Errorf("failed to read job %q: %w", name, err)
	}
	if err := json.Unmarshal(rec.Spec, &spec); err != nil {
		return spec, false, fmt.Errorf("failed to decode the spec of job %q: %w", name, err)
	}
	return spec, true, nil
}

// kubeJobs keeps jobs as agent-made CronJob resources in the agent's
// namespace (cluster mode), which the operator's scheduler fires and whose
// runs it records in the store.
type kubeJobs struct{ k *agentjobs.Kube }

func (j kubeJobs) put(ctx context.Context, _, name, title string, spec picobotv1alpha1.CronJobSpec) error {
	_, err := j.k.Update(ctx, name, func(cj *picobotv1alpha1.CronJob) error {
		cj.Spec = spec
		agentjobs.SetDisplayName(cj, title)
		return nil
	})
	if errors.Is(err, agentjobs.ErrNotFound) {
		_, err = j.k.Create(ctx, name, title, spec)
	}
	if err != nil {
		return fmt.Errorf("failed to schedule job %q: %w", name, err)
	}
	return nil
}

func (j kubeJobs) drop(ctx context.Context, _, name string) error {
	if err := j.k.Delete(ctx, name); err != nil && !errors.Is(err, agentjobs.ErrNotFound) {
		return fmt.Errorf("failed to unschedule job %q: %w", name, err)
	}
	return nil
}

func (j kubeJobs) current(ctx context.Context, name string) (picobotv1alpha1.CronJobSpec, bool, error) {
	cj, err := j.k.Get(ctx, name)
	if errors.Is(err, agentjobs.ErrNotFound) {
		return picobotv1alpha1.CronJobSpec{}, false, nil
	}
	if err != nil {
		return picobotv1alpha1.CronJobSpec{}, false, err
	}
	return cj.Spec, true, nil
}
