// Package agentsource is a session pod's view of its own Agent resource as
// the configuration the root agent's reload_config and gateway tools read
// and change (agentconfig.Source).
//
// The pod's ServiceAccount may get, watch and patch its own Agent and no
// other (operator/internal/podspec.Role grants patch to root agents only):
// the API server's RBAC, not this package, is what refuses a change of
// another Agent, and its schema and CEL rules validate every change.
package agentsource

import (
	"context"
	"fmt"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// FieldOwner is the field manager of the changes the tools make.
const FieldOwner = "picobot-gateway-tool"

// Source is an Agent resource as agentconfig.Source.
type Source struct {
	Kube      client.Client
	Namespace string
	Name      string
	// Switch builds the Agent read by Reload and switches the pod's new
	// turns to it; an error keeps the running generation.
	Switch func(ctx context.Context, a *picobotv1alpha1.Agent) (string, error)
	// Stop ends the pod the way SIGTERM does (it drains: the turn
	// running finishes); the chat's next message wakes a pod that reads the
	// current Agent.
	Stop func()
}

func (s *Source) key() client.ObjectKey {
	return client.ObjectKey{Namespace: s.Namespace, Name: s.Name}
}

// Agent implements agentconfig.Source: the Agent as the API server has it.
func (s *Source) Agent(ctx context.Context) (*picobotv1alpha1.Agent, error) {
	var a picobotv1alpha1.Agent
	if err := s.Kube.Get(ctx, s.key(), &a); err != nil {
		return nil, fmt.Errorf("failed to get agent %q: %w", s.Namespace+"/"+s.Name, err)
	}
	return &a, nil
}

// Update implements agentconfig.Source: a merge patch of the Agent from
// its current state, tried first as a server-side dry run (schema, CEL
// rules, admission) and then for real. a must be of the Agent's current
// generation: a spec changed by someone else since a was read is not
// overwritten. The patch carries the resourceVersion just read, so nothing
// slips in between; a conflict with a status write is tried again.
func (s *Source) Update(ctx context.Context, a *picobotv1alpha1.Agent) error {
	if a.Namespace != s.Namespace || a.Name != s.Name {
		return fmt.Errorf("this pod changes Agent %s/%s only, not %s/%s", s.Namespace, s.Name, a.Namespace, a.Name)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := s.Agent(ctx)
		if err != nil {
			return err
		}
		if cur.Generation != a.Generation {
			return fmt.Errorf("agent %s/%s changed since it was read (generation %d, now %d); read it again (config.get)",
				s.Namespace, s.Name, a.Generation, cur.Generation)
		}
		next := a.DeepCopy()
		next.ResourceVersion = cur.ResourceVersion
		patch := client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})
		if err := s.Kube.Patch(ctx, next.DeepCopy(), patch, client.DryRunAll, client.FieldOwner(FieldOwner)); err != nil {
			return err
		}
		return s.Kube.Patch(ctx, next, patch, client.FieldOwner(FieldOwner))
	})
	if err != nil {
		return fmt.Errorf("failed to patch agent %q: %w", s.Namespace+"/"+s.Name, err)
	}
	return nil
}

// Reload implements agentconfig.Source: the Agent's current generation,
// switched to by Switch.
func (s *Source) Reload(ctx context.Context) (string, error) {
	a, err := s.Agent(ctx)
	if err != nil {
		return "", err
	}
	return s.Switch(ctx, a)
}

// Restart implements agentconfig.Source.
func (s *Source) Restart(context.Context) error {
	if s.Stop == nil {
		return fmt.Errorf("this pod cannot restart")
	}
	s.Stop()
	return nil
}
