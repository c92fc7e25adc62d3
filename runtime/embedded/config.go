package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway"
)

// modelKeyName is the Secret (and its manifest file) the configuration
// page writes an agent's model key to.
func modelKeyName(agent string) string { return agent + "-model-key" }

// AgentConfig implements gateway.ConfigEditor: the agent's model, key and
// tool policy as its manifest in the folder says.
func (r *Runtime) AgentConfig(ctx context.Context, name string) (gateway.AgentConfig, error) {
	a, _, err := r.scope(ctx, name)
	if err != nil {
		return gateway.AgentConfig{}, err
	}
	path, spec, _, err := (&folderSource{r: r, agent: name}).find()
	if err != nil {
		return gateway.AgentConfig{}, err
	}
	c := gateway.AgentConfig{Agent: name, Mode: "embedded", Editable: r.editable(ctx), Edit: path}
	if m := spec.Spec.Model; m != nil {
		c.Provider, c.Model, c.BaseURL = string(m.Provider), m.Model, m.BaseURL
		if ref := m.APIKeySecretRef; ref != nil {
			if s := a.gen().secrets(ref.Name); s != nil && len(s.Data[ref.Key]) > 0 {
				c.KeySet = true
			}
			c.KeySource = fmt.Sprintf("Secret %s, key %s", ref.Name, ref.Key)
		}
	}
	if t := spec.Spec.Tools; t != nil {
		c.Profile, c.Allow, c.Deny = string(t.Profile), t.Allow, t.Deny
	}
	return c, nil
}

// editable: the configuration page may change the folder for the
// installation's own tenant only (the agents are shared by every tenant
// this runtime serves).
func (r *Runtime) editable(ctx context.Context) bool {
	t, err := r.tenantOf(ctx)
	return err == nil && t == r.opts.Tenant
}

// UpdateAgentConfig implements gateway.ConfigEditor: the agent's manifest
// is rewritten with the new model and tool policy, and a new key goes to a
// Secret manifest of its own (mode 0600) the Agent then refers to, through
// the loader's validation (the file is left as it was when the new Agent
// or the folder does not validate); then the agents are reloaded as by
// reload_config. When the reload fails the files are put back.
func (r *Runtime) UpdateAgentConfig(ctx context.Context, name string, u gateway.AgentConfigUpdate) (gateway.AgentConfig, error) {
	if _, _, err := r.scope(ctx, name); err != nil {
		return gateway.AgentConfig{}, err
	}
	if !r.editable(ctx) {
		return gateway.AgentConfig{}, &gateway.CodedError{Code: gateway.CodeForbidden,
			Err: fmt.Errorf("only tenant %s may change the agents of this installation", r.opts.Tenant)}
	}
	src := &folderSource{r: r, agent: name}
	path, a, _, err := src.find()
	if err != nil {
		return gateway.AgentConfig{}, err
	}
	oldAgent, err := os.ReadFile(path)
	if err != nil {
		return gateway.AgentConfig{}, fmt.Errorf("failed to read %s: %w", path, err)
	}
	if a.Spec.Model == nil {
		a.Spec.Model = &picobotv1alpha1.ModelSpec{}
	}
	m := a.Spec.Model
	m.Provider, m.Model, m.BaseURL = picobotv1alpha1.ModelProvider(u.Provider), u.Model, u.BaseURL
	if a.Spec.Tools == nil {
		a.Spec.Tools = &picobotv1alpha1.ToolsSpec{}
	}
	a.Spec.Tools.Profile, a.Spec.Tools.Allow, a.Spec.Tools.Deny = picobotv1alpha1.ToolProfile(u.Profile), nonEmpty(u.Allow), nonEmpty(u.Deny)

	restoreKey := func() error { return nil }
	if u.APIKey != "" {
		keyPath := filepath.Join(r.opts.Dir, modelKeyName(name)+".yaml")
		restoreKey, err = writeKeySecret(keyPath, modelKeyName(name), u.APIKey)
		if err != nil {
			return gateway.AgentConfig{}, err
		}
		m.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: modelKeyName(name)}, Key: "apiKey"}
	}
	if err := src.Update(ctx, a); err != nil {
		return gateway.AgentConfig{}, errors.Join(&gateway.CodedError{Code: gateway.CodeBadRequest, Err: err}, restoreKey())
	}
	if _, err := r.Reload(ctx); err != nil {
		return gateway.AgentConfig{}, errors.Join(&gateway.CodedError{Code: gateway.CodeBadRequest, Err: err}, writeAtomic(path, oldAgent), restoreKey())
	}
	return r.AgentConfig(ctx, name)
}

// writeKeySecret writes a Secret manifest holding key and returns what puts
// the file back as it was.
func writeKeySecret(path, name, key string) (func() error, error) {
	old, readErr := os.ReadFile(path)
	data, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name},
		"stringData": map[string]string{"apiKey": key}})
	if err != nil {
		return nil, fmt.Errorf("failed to encode Secret %q: %w", name, err)
	}
	if readErr != nil {
		// A new file: private from the start (writeAtomic keeps an old
		// file's mode).
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return nil, fmt.Errorf("failed to write %s: %w", path, err)
		}
	}
	if err := writeAtomic(path, data); err != nil {
		return nil, err
	}
	return func() error {
		if readErr != nil {
			return os.Remove(path)
		}
		return writeAtomic(path, old)
	}, nil
}

func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

var _ gateway.ConfigEditor = (*Runtime)(nil)
