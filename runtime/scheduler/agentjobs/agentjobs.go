// Package agentjobs keeps the scheduled jobs that agents' tools make (the
// cron tools, bot_task, bot_agenda) as CronJob resources in the agent's
// namespace, for cluster mode, where the operator's scheduler fires them.
//
// Every CronJob made here carries the agent-made label and the name of the
// agent that made it, so `kubectl get pcj` shows it and GitOps tools can
// ignore it. Its display name and not-before time are annotations the
// operator's scheduler reads: not-before is stamped at every write, so a
// rescheduled job does not count the ticks it skipped as missed. CronJobs
// without the label came from manifests; Update refuses them.
package agentjobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/tracing"
)

var (
	// ErrNotFound says there is no CronJob of that name in the namespace.
	ErrNotFound = errors.New("no such CronJob")
	// ErrExists says Create found the name taken.
	ErrExists = errors.New("a CronJob of that name exists")
	// ErrNotAgentMade says Update was asked to change a CronJob of a manifest.
	ErrNotAgentMade = errors.New("the CronJob was not made by an agent")
)

// InvalidError is the API server's refusal of a job (schema, CEL rules):
// input the model can fix.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// Kube keeps one agent's jobs in one namespace.
type Kube struct {
	c     client.Client
	ns    string
	agent string
	now   func() time.Time
}

// New returns the jobs of agent in namespace ns; now stamps not-before.
func New(c client.Client, ns, agent string, now func() time.Time) *Kube {
	if now == nil {
		now = time.Now
	}
	return &Kube{c: c, ns: ns, agent: agent, now: now}
}

// AgentMade reports whether an agent's tools made cj (and may change it).
func AgentMade(cj *picobotv1alpha1.CronJob) bool {
	return cj.Labels[picobotv1alpha1.LabelAgentMade] == "true"
}

// DisplayName is a job's human name ("" when it has none).
func DisplayName(cj *picobotv1alpha1.CronJob) string {
	return cj.Annotations[scheduler.AnnotationDisplayName]
}

// SetDisplayName sets (or, with "", removes) a job's human name.
func SetDisplayName(cj *picobotv1alpha1.CronJob, name string) {
	if name == "" {
		delete(cj.Annotations, scheduler.AnnotationDisplayName)
		return
	}
	if cj.Annotations == nil {
		cj.Annotations = map[string]string{}
	}
	cj.Annotations[scheduler.AnnotationDisplayName] = name
}

func (k *Kube) stampNotBefore(cj *picobotv1alpha1.CronJob) {
	if cj.Annotations == nil {
		cj.Annotations = map[string]string{}
	}
	cj.Annotations[scheduler.AnnotationNotBefore] = k.now().UTC().Format(time.RFC3339)
}

// List returns every CronJob of the namespace, agent-made or not.
func (k *Kube) List(ctx context.Context) ([]picobotv1alpha1.CronJob, error) {
	var l picobotv1alpha1.CronJobList
	if err := k.c.List(ctx, &l, client.InNamespace(k.ns)); err != nil {
		return nil, fmt.Errorf("failed to list CronJobs in namespace %q: %w", k.ns, err)
	}
	return l.Items, nil
}

// Get returns the CronJob name, agent-made or not.
func (k *Kube) Get(ctx context.Context, name string) (*picobotv1alpha1.CronJob, error) {
	cj := &picobotv1alpha1.CronJob{}
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: name}, cj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("failed to get CronJob %q: %w", name, err)
	}
	return cj, nil
}

// Create makes the CronJob name, labelled agent-made by this agent; a taken
// name is ErrExists.
func (k *Kube) Create(ctx context.Context, name, displayName string, spec picobotv1alpha1.CronJobSpec) (*picobotv1alpha1.CronJob, error) {
	cj := &picobotv1alpha1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{
			picobotv1alpha1.LabelAgentMade: "true", picobotv1alpha1.LabelAgent: k.agent}},
		Spec: spec,
	}
	SetDisplayName(cj, displayName)
	k.stampNotBefore(cj)
	if tp := tracing.Traceparent(ctx); tp != "" {
		// The job's fires link back to the turn that made it.
		if cj.Annotations == nil {
			cj.Annotations = map[string]string{}
		}
		cj.Annotations[scheduler.AnnotationOrigin] = tp
	}
	if err := k.c.Create(ctx, cj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, ErrExists
		}
		return nil, apiError("create", name, err)
	}
	return cj, nil
}

// Update applies change to the current CronJob and writes it, retrying on
// concurrent changes. A CronJob of a manifest is ErrNotAgentMade; change's
// own errors are returned as they are.
func (k *Kube) Update(ctx context.Context, name string, change func(*picobotv1alpha1.CronJob) error) (*picobotv1alpha1.CronJob, error) {
	var out *picobotv1alpha1.CronJob
	var changeErr error
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cj := &picobotv1alpha1.CronJob{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: name}, cj); err != nil {
			return err
		}
		if !AgentMade(cj) {
			changeErr = fmt.Errorf("failed to update CronJob %q: %w", name, ErrNotAgentMade)
			return changeErr
		}
		if changeErr = change(cj); changeErr != nil {
			return changeErr
		}
		k.stampNotBefore(cj)
		if err := k.c.Update(ctx, cj); err != nil {
			return err
		}
		out = cj
		return nil
	})
	switch {
	case changeErr != nil:
		return nil, changeErr
	case apierrors.IsNotFound(err):
		return nil, ErrNotFound
	case err != nil:
		return nil, apiError("update", name, err)
	}
	return out, nil
}

// Delete removes the CronJob name; one already gone is ErrNotFound.
func (k *Kube) Delete(ctx context.Context, name string) error {
	err := k.c.Delete(ctx, &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns}})
	if apierrors.IsNotFound(err) {
		return ErrNotFound
	}
	if err != nil {
		return apiError("delete", name, err)
	}
	return nil
}

// apiError passes the API server's rejection of invalid input (CEL rules,
// schema) on as an InvalidError; other failures are errors.
func apiError(verb, name string, err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return &InvalidError{msg: fmt.Sprintf("the API server refused to %s job %q: %v", verb, name, err)}
	}
	return fmt.Errorf("failed to %s CronJob %q: %w", verb, name, err)
}
