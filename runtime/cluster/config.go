package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/store"
)

// AgentConfig implements gateway.ConfigEditor: the Agent resource as the
// cluster has it, read-only; Edit is the kubectl command that changes it
// (Agents are managed with kubectl or GitOps, never by the gateway).
func (b *Backend) AgentConfig(ctx context.Context, name string) (gateway.AgentConfig, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return gateway.AgentConfig{}, err
	}
	var a picobotv1alpha1.Agent
	if err := b.cfg.Kube.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return gateway.AgentConfig{}, &gateway.CodedError{Code: gateway.CodeUnknownAgent, Err: fmt.Errorf("no agent %q", name)}
		}
		return gateway.AgentConfig{}, fmt.Errorf("failed to read agent %q: %w", name, err)
	}
	c := gateway.AgentConfig{Agent: name, Mode: "cluster", Edit: kubectlEdit(tenant, name)}
	if m := a.Spec.Model; m != nil {
		c.Provider, c.Model, c.BaseURL = string(m.Provider), m.Model, m.BaseURL
		if ref := m.APIKeySecretRef; ref != nil {
			c.KeySource = fmt.Sprintf("Secret %s/%s, key %s", tenant, ref.Name, ref.Key)
		}
	}
	if e := a.Status.EffectiveModel; e != nil && c.Model == "" {
		c.Provider, c.Model = string(e.Provider), e.Model
	}
	// The operator resolved the model and its key (the gateway reads no
	// Secret).
	c.KeySet = meta.IsStatusConditionTrue(a.Status.Conditions, picobotv1alpha1.ConditionModelResolved)
	if t := a.Spec.Tools; t != nil {
		c.Profile, c.Allow, c.Deny = string(t.Profile), t.Allow, t.Deny
	}
	return c, nil
}

// UpdateAgentConfig implements gateway.ConfigEditor: refused, with the
// kubectl command to use instead.
func (b *Backend) UpdateAgentConfig(ctx context.Context, name string, _ gateway.AgentConfigUpdate) (gateway.AgentConfig, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return gateway.AgentConfig{}, err
	}
	return gateway.AgentConfig{}, &gateway.CodedError{Code: gateway.CodeForbidden,
		Err: fmt.Errorf("agents are configured with kubectl in cluster mode: %s", kubectlEdit(tenant, name))}
}

func kubectlEdit(namespace, name string) string {
	return fmt.Sprintf("kubectl -n %s edit agent %s", namespace, name)
}

var _ gateway.ConfigEditor = (*Backend)(nil)
