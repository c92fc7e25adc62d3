package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/tool"
)

// SecretOptions configure bot_secret: the browser it types into (Options,
// as the browser tool's) and the saved credentials it may use.
type SecretOptions struct {
	Options
	// Secrets are the Agent's spec.tools.secrets.
	Secrets []picobotv1alpha1.ToolSecret
	// Lookup returns a Secret of the agent's namespace by name, values
	// included (nil when missing).
	Lookup func(name string) *corev1.Secret
}

type secretArgs struct {
	Action       string `json:"action"`
	Name         string `json:"name,omitempty" jsonschema:"type: secret name from list"`
	Ref          string `json:"ref,omitempty" jsonschema:"type: field ref from browser snapshot"`
	Submit       bool   `json:"submit,omitempty" jsonschema:"type: press Enter after"`
	PersistentID string `json:"persistent_id,omitempty"`
}

const secretDescription = "Use a saved credential without seeing it. list: names, types and the sites each belongs to. type: the runtime types the secret into " +
	"the browser field ref (from the browser tool's snapshot, same dialog/persistent_id); its value never reaches you. " +
	"Never ask the user for a saved password or write one down."

// NewSecretTool returns bot_secret.
func NewSecretTool(o SecretOptions) tool.Tool {
	t := &secretTool{o: o, b: &browserTool{o: o.Options}}
	return tool.New("bot_secret", secretDescription, t.run, tool.Enum("action", "list", "type"))
}

type secretTool struct {
	o SecretOptions
	b *browserTool
}

func (t *secretTool) names() string {
	names := make([]string, len(t.o.Secrets))
	for i, s := range t.o.Secrets {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func (t *secretTool) run(ctx context.Context, env tool.Env, a secretArgs) (tool.Result, error) {
	switch a.Action {
	case "list":
		type entry struct {
			Name    string   `json:"name"`
			Type    string   `json:"type"`
			Domains []string `json:"domains"`
		}
		out := make([]entry, len(t.o.Secrets))
		for i, s := range t.o.Secrets {
			out[i] = entry{Name: s.Name, Type: string(secretType(s)), Domains: s.Domains}
		}
		b, err := json.Marshal(map[string]any{"secrets": out})
		if err != nil {
			return tool.Result{}, fmt.Errorf("failed to encode secrets: %w", err)
		}
		return tool.Text(string(b)), nil
	case "type":
		return t.typeSecret(ctx, env, a)
	}
	return tool.Errorf("error: action %q is unknown; use list or type", a.Action), nil
}

func secretType(s picobotv1alpha1.ToolSecret) picobotv1alpha1.ToolSecretType {
	if s.Type == "" {
		return picobotv1alpha1.ToolSecretPassword
	}
	return s.Type
}

func (t *secretTool) typeSecret(ctx context.Context, env tool.Env, a secretArgs) (tool.Result, error) {
	if a.Name == "" || a.Ref == "" {
		return tool.Errorf("error: type needs name (one of: %s) and ref (a field's ref from the browser tool's snapshot)", t.names()), nil
	}
	var spec *picobotv1alpha1.ToolSecret
	for i := range t.o.Secrets {
		if t.o.Secrets[i].Name == a.Name {
			spec = &t.o.Secrets[i]
		}
	}
	if spec == nil {
		return tool.Errorf("error: no saved secret %q; this agent has: %s", a.Name, t.names()), nil
	}
	var value string
	if t.o.Lookup != nil {
		if s := t.o.Lookup(spec.SecretKeyRef.Name); s != nil {
			value = string(s.Data[spec.SecretKeyRef.Key])
		}
	}
	if value == "" {
		return tool.Errorf("error: secret %q has no value here: Secret %q has no key %q; tell the user to provide it", a.Name,
			spec.SecretKeyRef.Name, spec.SecretKeyRef.Key), nil
	}
	key, _, err := t.b.key(ctx, env, a.PersistentID)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if !t.o.Driver.Active(key) {
		return tool.Errorf("error: no browser is open in this dialog%s; open the page with the browser tool and take a snapshot first",
			profileText(a.PersistentID)), nil
	}
	b, release, err := t.o.Driver.Acquire(ctx, key, driver.Options{Domains: t.o.Domains})
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	defer release()
	password := secretType(*spec) == picobotv1alpha1.ToolSecretPassword
	if err := b.TypeSecret(ctx, a.Ref, value, password, spec.Domains); err != nil {
		return tool.Errorf("error: %s", strings.ReplaceAll(err.Error(), value, "[secret]")), nil
	}
	msg := fmt.Sprintf("Typed secret %q (%s) into %s.", a.Name, secretType(*spec), a.Ref)
	if a.Submit {
		if err := b.Press(ctx, "Enter"); err != nil {
			return tool.Errorf("error: typed secret %q, but pressing Enter failed: %s", a.Name, strings.ReplaceAll(err.Error(), value, "[secret]")), nil
		}
		msg += " Pressed Enter; take a snapshot to see the result."
	}
	// Notes come from the page (dialogs, downloads), which now holds the
	// value and may echo it.
	if notes := b.Notes(); len(notes) > 0 {
		msg += "\n\nNotes:\n- " + strings.ReplaceAll(strings.Join(notes, "\n- "), value, "[secret]")
	}
	return tool.Text(msg), nil
}

func profileText(id string) string {
	if id == "" {
		return ""
	}
	return " for profile " + id
}
