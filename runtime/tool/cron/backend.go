package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/agentjobs"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
)

// errNoJob: the job does not exist (in this tenant).
var errNoJob = errors.New("no such job")

// backend keeps job definitions: CronJob resources in cluster mode, store
// records plus read-only manifests in embedded mode.
type backend interface {
	list(ctx context.Context) ([]*job, error)
	get(ctx context.Context, id string) (*job, error)
	// create stores j, choosing another id if j.ID is taken.
	create(ctx context.Context, j *job) (*job, error)
	// update applies change to the current job and stores it, retrying on
	// concurrent changes; change errors are returned as they are.
	update(ctx context.Context, id string, change func(*job) error) (*job, error)
	remove(ctx context.Context, id string) error
	// agentNames lists the agents a job may name.
	agentNames(ctx context.Context) ([]string, error)
}

// readOnlyError refuses a change to a job the tools do not own.
type readOnlyError struct{ id, why string }

func (e *readOnlyError) Error() string {
	return fmt.Sprintf("job %q is %s and is read-only to agents", e.id, e.why)
}

const createAttempts = 3

// kubeBackend keeps jobs as CronJob resources in the agent's namespace,
// labelled agent-made (agentjobs), so `kubectl get pcj` shows them and GitOps
// can ignore them. CronJobs without the label came from manifests and are
// read-only.
type kubeBackend struct {
	jobs *agentjobs.Kube
	c    client.Client
	ns   string
}

const manifestKube = "defined by a CronJob manifest (kubectl or GitOps); change it there"

func (k *kubeBackend) toJob(cj *picobotv1alpha1.CronJob) *job {
	j := &job{ID: cj.Name, Name: agentjobs.DisplayName(cj), Spec: cj.Spec, Created: cj.CreationTimestamp.Time}
	if !agentjobs.AgentMade(cj) {
		j.ReadOnly = manifestKube
	} else {
		j.Agent = cj.Labels[picobotv1alpha1.LabelAgent]
	}
	if r := cj.Status.LastRun; r != nil {
		j.LastRun = &store.CronRun{RunID: r.ID, ScheduledTime: r.ScheduledTime.Time, Outcome: store.CronOutcome(r.Outcome), State: store.CronDone}
	}
	return j
}

// kubeError maps agentjobs' errors onto the tools'.
func kubeError(id string, err error) error {
	var inv *agentjobs.InvalidError
	switch {
	case errors.Is(err, agentjobs.ErrNotFound):
		return errNoJob
	case errors.Is(err, agentjobs.ErrNotAgentMade):
		return &readOnlyError{id: id, why: manifestKube}
	case errors.As(err, &inv):
		return &invalidError{msg: inv.Error()}
	}
	return err
}

func (k *kubeBackend) list(ctx context.Context) ([]*job, error) {
	cjs, err := k.jobs.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*job, len(cjs))
	for i := range cjs {
		out[i] = k.toJob(&cjs[i])
	}
	return out, nil
}

func (k *kubeBackend) get(ctx context.Context, id string) (*job, error) {
	cj, err := k.jobs.Get(ctx, id)
	if err != nil {
		return nil, kubeError(id, err)
	}
	return k.toJob(cj), nil
}

func (k *kubeBackend) create(ctx context.Context, j *job) (*job, error) {
	for attempt := 0; ; attempt++ {
		cj, err := k.jobs.Create(ctx, j.ID, j.Name, j.Spec)
		if errors.Is(err, agentjobs.ErrExists) && attempt < createAttempts {
			j.ID = newID(j.Name)
			continue
		}
		if err != nil {
			return nil, kubeError(j.ID, err)
		}
		return k.toJob(cj), nil
	}
}

func (k *kubeBackend) update(ctx context.Context, id string, change func(*job) error) (*job, error) {
	cj, err := k.jobs.Update(ctx, id, func(cj *picobotv1alpha1.CronJob) error {
		j := k.toJob(cj)
		if err := change(j); err != nil {
			return err
		}
		cj.Spec = j.Spec
		agentjobs.SetDisplayName(cj, j.Name)
		return nil
	})
	if err != nil {
		return nil, kubeError(id, err)
	}
	return k.toJob(cj), nil
}

func (k *kubeBackend) remove(ctx context.Context, id string) error {
	if err := k.jobs.Delete(ctx, id); err != nil {
		return kubeError(id, err)
	}
	return nil
}

func (k *kubeBackend) agentNames(ctx context.Context) ([]string, error) {
	var l picobotv1alpha1.AgentList
	if err := k.c.List(ctx, &l, client.InNamespace(k.ns)); err != nil {
		return nil, fmt.Errorf("failed to list Agents in namespace %q: %w", k.ns, err)
	}
	names := make([]string, len(l.Items))
	for i, a := range l.Items {
		names[i] = a.Name
	}
	return names, nil
}

// invalidError is input the model can fix.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func isToolError(err error) bool {
	var ro *readOnlyError
	var inv *invalidError
	return errors.As(err, &ro) || errors.As(err, &inv)
}

// storeBackend keeps embedded mode's agent-made jobs in the store, beside the
// read-only CronJobs of the manifests folder. changed tells the running
// scheduler about every write.
type storeBackend struct {
	cs store.CronStore
	// tenant is the agent's; a call's own tenant (store.WithTenant) wins, as
	// one embedded runtime may serve several.
	tenant   string
	agent    string
	manifest func(tenant string) []picobotv1alpha1.CronJob
	changed  func(ctx context.Context, tenant, name string)
	agents   func(tenant string) []string
}

const manifestFolder = "defined in the manifests folder; change its file there"

func (s *storeBackend) tenantOf(ctx context.Context) string {
	if t, err := store.TenantFrom(ctx); err == nil {
		return t
	}
	return s.tenant
}

func (s *storeBackend) manifestOf(ctx context.Context) []picobotv1alpha1.CronJob {
	if s.manifest == nil {
		return nil
	}
	return s.manifest(s.tenantOf(ctx))
}

func (s *storeBackend) fromManifest(ctx context.Context, id string) *job {
	manifest := s.manifestOf(ctx)
	for i := range manifest {
		if cj := &manifest[i]; cj.Name == id {
			return &job{ID: cj.Name, Name: cj.Annotations[scheduler.AnnotationDisplayName], Spec: cj.Spec,
				Created: cj.CreationTimestamp.Time, ReadOnly: manifestFolder}
		}
	}
	return nil
}

func fromRecord(r store.CronJob) (*job, error) {
	j := &job{ID: r.Name, Name: r.DisplayName, Agent: r.Agent, Created: r.CreatedAt}
	if err := json.Unmarshal(r.Spec, &j.Spec); err != nil {
		return nil, fmt.Errorf("failed to decode the spec of job %q: %w", r.Name, err)
	}
	return j, nil
}

func (s *storeBackend) list(ctx context.Context) ([]*job, error) {
	var out []*job
	for _, cj := range s.manifestOf(ctx) {
		out = append(out, s.fromManifest(ctx, cj.Name))
	}
	recs, err := s.cs.ListCronJobs(ctx, store.CronJobFilter{Limit: 10_000})
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		j, err := fromRecord(r)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

func (s *storeBackend) get(ctx context.Context, id string) (*job, error) {
	if j := s.fromManifest(ctx, id); j != nil {
		return j, nil
	}
	r, err := s.cs.GetCronJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNoJob
	}
	if err != nil {
		return nil, err
	}
	return fromRecord(r)
}

func (s *storeBackend) create(ctx context.Context, j *job) (*job, error) {
	spec, err := json.Marshal(j.Spec)
	if err != nil {
		return nil, fmt.Errorf("failed to encode job spec: %w", err)
	}
	for attempt := 0; ; attempt++ {
		r, err := store.CronJob{}, store.ErrExists // a manifest job's name is taken
		if s.fromManifest(ctx, j.ID) == nil {
			r, err = s.cs.CreateCronJob(ctx, store.CronJob{Name: j.ID, DisplayName: j.Name, Agent: s.agent, Spec: spec,
				Origin: tracing.Traceparent(ctx)})
		}
		if errors.Is(err, store.ErrExists) && attempt < createAttempts {
			j.ID = newID(j.Name)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.changed(ctx, s.tenantOf(ctx), r.Name)
		return fromRecord(r)
	}
}

func (s *storeBackend) update(ctx context.Context, id string, change func(*job) error) (*job, error) {
	if j := s.fromManifest(ctx, id); j != nil {
		return nil, &readOnlyError{id: id, why: j.ReadOnly}
	}
	for attempt := 0; ; attempt++ {
		r, err := s.cs.GetCronJob(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, errNoJob
		}
		if err != nil {
			return nil, err
		}
		j, err := fromRecord(r)
		if err != nil {
			return nil, err
		}
		if err := change(j); err != nil {
			return nil, err
		}
		spec, err := json.Marshal(j.Spec)
		if err != nil {
			return nil, fmt.Errorf("failed to encode job spec: %w", err)
		}
		updated, err := s.cs.UpdateCronJob(ctx, id, store.CronJobUpdate{DisplayName: &j.Name, Spec: spec, IfVersion: r.Version})
		if errors.Is(err, store.ErrVersionConflict) && attempt < createAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.changed(ctx, s.tenantOf(ctx), id)
		return fromRecord(updated)
	}
}

func (s *storeBackend) remove(ctx context.Context, id string) error {
	if j := s.fromManifest(ctx, id); j != nil {
		return &readOnlyError{id: id, why: j.ReadOnly}
	}
	err := s.cs.DeleteCronJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return errNoJob
	}
	if err != nil {
		return err
	}
	s.changed(ctx, s.tenantOf(ctx), id)
	return nil
}

func (s *storeBackend) agentNames(ctx context.Context) ([]string, error) {
	if s.agents == nil {
		return nil, nil
	}
	return s.agents(s.tenantOf(ctx)), nil
}
