// Package agentconfig implements the root agent's configuration tools:
// reload_config (re-read and validate the configuration, then switch new
// turns to it) and gateway (OpenClaw's tool mapped onto Agent resources:
// config.get, config.schema, config.patch, config.apply and restart).
//
// Who may change the configuration is a trust boundary. The tools are
// offered to the root agent only, and refused in its sub-agent and
// scheduled runs; where the configuration is stored (the manifests folder,
// the Agent resource) the Source enforces the rest — in cluster mode the
// API server's RBAC, which lets a session pod patch its own Agent and no
// other.
package agentconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// Tool names.
const (
	ReloadName  = "reload_config"
	GatewayName = "gateway"
)

// DefaultDelay is how long restart waits by default, so the reply in flight
// is delivered before the runtime goes (OpenClaw's delayMs default).
const DefaultDelay = 2 * time.Second

// maxDelay bounds delayMs.
const maxDelay = 10 * time.Minute

// Source is where the agent's configuration lives: the manifests folder in
// embedded mode, the Agent resource in cluster mode.
type Source interface {
	// Agent returns the agent's Agent as stored now (what a reload would
	// load), not necessarily the generation running.
	Agent(ctx context.Context) (*picobotv1alpha1.Agent, error)
	// Update validates agent, whose spec changed, and stores it; nothing is
	// stored when it is invalid, and the error says why.
	Update(ctx context.Context, agent *picobotv1alpha1.Agent) error
	// Reload validates the whole configuration and switches the turns that
	// start from now on to it; on an error the running generation stays.
	// The answer describes the generation switched to.
	Reload(ctx context.Context) (string, error)
	// Restart restarts the agent's runtime.
	Restart(ctx context.Context) error
}

// Config configures the tools.
type Config struct {
	Source Source
	// Restart enables gateway's restart (spec.tools.gateway.restart).
	Restart bool
	// Clock times restart's delay (the real clock when nil).
	Clock clock.WithDelayedExecution
	Log   *slog.Logger
}

// New returns reload_config and gateway.
func New(cfg Config) []tool.Tool {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	t := &tools{cfg: cfg}
	return []tool.Tool{
		tool.New(ReloadName, reloadDescription, t.reload, tool.Exclusive()),
		tool.New(GatewayName, gatewayDescription, t.gateway, tool.Exclusive(),
			tool.Enum("action", actionGet, actionSchema, actionPatch, actionApply, actionRestart),
			tool.Range("delayMs", tool.Bound(0), tool.Bound(float64(maxDelay/time.Millisecond)))),
	}
}

const reloadDescription = "Re-read and validate the configuration, then switch new turns to it (this turn finishes on the old one). " +
	"Only when the user asks to reload; an invalid configuration is reported and the old one kept."

const gatewayDescription = "Read or change this agent's configuration (its Agent spec). config.get; config.schema (path: a field under spec); " +
	"config.patch (patch: JSON merge patch of spec); config.apply (spec: the whole spec); restart (delayMs, default 2000). " +
	"Changes are validated, then take effect from the next turn."

// Gateway actions.
const (
	actionGet     = "config.get"
	actionSchema  = "config.schema"
	actionPatch   = "config.patch"
	actionApply   = "config.apply"
	actionRestart = "restart"
)

// ReloadArgs are reload_config's (none).
type ReloadArgs struct{}

// GatewayArgs are gateway's arguments.
type GatewayArgs struct {
	Action  string         `json:"action"`
	Path    string         `json:"path,omitempty"`
	Patch   map[string]any `json:"patch,omitempty"`
	Spec    map[string]any `json:"spec,omitempty"`
	DelayMs *int           `json:"delayMs,omitempty"`
}

type tools struct {
	cfg Config
}

// refuse says why a call may not change the configuration here, "" when it
// may: only the root agent's own conversations may, never a sub-agent run
// (which another agent started) nor a scheduled run (nobody asked).
func refuse(ctx context.Context, env tool.Env, name string) string {
	switch {
	case delegate.Depth(ctx) > 0 || strings.HasPrefix(env.SessionID, protocol.ChannelDelegate+":"):
		return fmt.Sprintf("error: %s is for the root agent's own conversations; a sub-agent run may not use it", name)
	case strings.HasPrefix(env.SessionID, protocol.ChannelCron+":"):
		return fmt.Sprintf("error: %s is for the root agent's own conversations; a scheduled run may not use it", name)
	}
	return ""
}

func (t *tools) reload(ctx context.Context, env tool.Env, _ ReloadArgs) (tool.Result, error) {
	if why := refuse(ctx, env, ReloadName); why != "" {
		return tool.Errorf("%s", why), nil
	}
	gen, err := t.cfg.Source.Reload(ctx)
	if err != nil {
		return tool.Errorf("error: the configuration was not reloaded, the running one stays: %v", err), nil
	}
	return tool.Text("Reloaded: " + gen + ". This turn finishes on the previous configuration; the next one uses the new."), nil
}

func (t *tools) gateway(ctx context.Context, env tool.Env, a GatewayArgs) (tool.Result, error) {
	if why := refuse(ctx, env, GatewayName); why != "" {
		return tool.Errorf("%s", why), nil
	}
	switch a.Action {
	case actionGet:
		ag, err := t.cfg.Source.Agent(ctx)
		if err != nil {
			return tool.Errorf("error: failed to read the configuration: %v", err), nil
		}
		b, err := json.Marshal(view(ag))
		if err != nil {
			return tool.Result{}, fmt.Errorf("failed to encode agent %q: %w", ag.Name, err)
		}
		return tool.Text(string(b)), nil
	case actionSchema:
		s, err := SchemaOf(a.Path)
		if err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		return tool.Text(s), nil
	case actionPatch, actionApply:
		return t.write(ctx, env, a)
	case actionRestart:
		return t.restart(ctx, a)
	}
	return tool.Errorf("error: unknown action %q; use config.get, config.schema, config.patch, config.apply or restart", a.Action), nil
}

// view is what config.get shows: the Agent's name, labels, annotations,
// generation and spec. The spec names Secrets (secretKeyRef) but holds no
// secret value; literal environment values of MCP servers, which may be
// credentials written in clear, are masked.
func view(a *picobotv1alpha1.Agent) map[string]any {
	spec := a.Spec.DeepCopy()
	for i := range spec.MCPServers {
		for j := range spec.MCPServers[i].Env {
			if spec.MCPServers[i].Env[j].Value != "" {
				spec.MCPServers[i].Env[j].Value = "(hidden)"
			}
		}
	}
	return map[string]any{"name": a.Name, "namespace": a.Namespace, "generation": a.Generation,
		"labels": a.Labels, "annotations": a.Annotations, "spec": spec}
}

// write is config.patch and config.apply: refused for an Agent a GitOps
// tool manages, otherwise the new spec is validated and stored by the
// Source, then reloaded.
func (t *tools) write(ctx context.Context, env tool.Env, a GatewayArgs) (tool.Result, error) {
	var doc map[string]any
	switch a.Action {
	case actionPatch:
		if len(a.Patch) == 0 {
			return tool.Errorf("error: config.patch needs patch: a JSON merge patch of spec, e.g. {\"instructions\": \"...\"}"), nil
		}
		doc = a.Patch
	default:
		if len(a.Spec) == 0 {
			return tool.Errorf("error: config.apply needs spec: the whole new spec (config.get shows the current one)"), nil
		}
		doc = a.Spec
	}
	cur, err := t.cfg.Source.Agent(ctx)
	if err != nil {
		return tool.Errorf("error: failed to read the configuration: %v", err), nil
	}
	if gitops, mark, ok := agentspec.GitOpsManager(cur); ok {
		return tool.Errorf("error: Agent %s is managed by %s (%s): a change made here would be reverted at the next sync. "+
			"Change it in its Git repository instead; config.get and config.schema still work", cur.Name, gitops, mark), nil
	}
	next, err := newSpec(cur, a.Action == actionPatch, doc)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if hasMaskedValue(next) {
		return tool.Errorf("error: the spec carries \"(hidden)\", config.get's mask of an MCP server's env value; leave those entries out of the patch or give the real value"), nil
	}
	refused, err := confirm(ctx, env, a.Action, doc)
	if err != nil {
		return tool.Result{}, err
	}
	if refused != nil {
		return *refused, nil
	}
	if err := t.cfg.Source.Update(ctx, next); err != nil {
		return tool.Errorf("error: the change is invalid and was not saved: %v", err), nil
	}
	gen, err := t.cfg.Source.Reload(ctx)
	if err != nil {
		return tool.Errorf("error: the change was saved, but reloading it failed and the running configuration stays: %v", err), nil
	}
	return tool.Text("Saved and reloaded: " + gen + ". The next turn uses it."), nil
}

// maxShownChange bounds the change an approval request shows.
const maxShownChange = 2000

// confirm asks the turn's user to approve a change of the agent's own
// configuration, in the chat the turn belongs to (the exec approval flow:
// the web UI and the terminal show Approve/Deny, chat platforms get a
// code). The session pod's RBAC lets the root agent patch its Agent; what
// keeps a model steered by a page it read from lifting its own limits
// (exec approvals, allowed paths and ports, MCP servers) unseen is that a
// person says yes. It returns nil when approved, else the result the model
// gets; a turn without a user to ask (stateless) is refused.
func confirm(ctx context.Context, env tool.Env, action string, doc map[string]any) (*tool.Result, error) {
	if env.Approver == nil {
		r := tool.Errorf("error: %s changes the agent's configuration only with its user's approval, and this turn has no user to ask; nothing was changed", action)
		return &r, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the change: %w", err)
	}
	shown := string(b)
	if len(shown) > maxShownChange {
		shown = strings.ToValidUTF8(shown[:maxShownChange], "") + "…"
	}
	ok, why, err := env.Approver.Approve(ctx, tool.ApprovalRequest{Tool: GatewayName, Command: action + " " + shown,
		Reason: "the agent asks to change its own configuration", Timeout: approval.DefaultTimeout, SessionID: env.SessionID})
	if err != nil {
		return nil, fmt.Errorf("failed to get an approval for the change: %w", err)
	}
	if !ok {
		r := tool.Errorf("error: the configuration was not changed: %s. Do not retry it unchanged; ask the user what to do instead.", why)
		return &r, nil
	}
	return nil, nil
}

// newSpec applies a merge patch to the current spec, or replaces it.
func newSpec(cur *picobotv1alpha1.Agent, patch bool, doc map[string]any) (*picobotv1alpha1.Agent, error) {
	if patch {
		old, err := json.Marshal(cur.Spec)
		if err != nil {
			return nil, fmt.Errorf("failed to encode the current spec: %w", err)
		}
		var target map[string]any
		if err := json.Unmarshal(old, &target); err != nil {
			return nil, fmt.Errorf("failed to decode the current spec: %w", err)
		}
		doc = mergePatch(target, doc)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the new spec: %w", err)
	}
	next := cur.DeepCopy()
	next.Spec = picobotv1alpha1.AgentSpec{}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next.Spec); err != nil {
		return nil, fmt.Errorf("the new spec does not fit the Agent schema (config.schema shows it): %w", err)
	}
	return next, nil
}

func hasMaskedValue(a *picobotv1alpha1.Agent) bool {
	for _, s := range a.Spec.MCPServers {
		for _, e := range s.Env {
			if e.Value == "(hidden)" {
				return true
			}
		}
	}
	return false
}

// restart restarts the agent's runtime after delayMs, so the reply of this
// turn is delivered first. It is off unless the Agent opts in.
func (t *tools) restart(ctx context.Context, a GatewayArgs) (tool.Result, error) {
	if !t.cfg.Restart {
		return tool.Errorf("error: restart is disabled for this agent; it is enabled by spec.tools.gateway.restart: true"), nil
	}
	delay := DefaultDelay
	if a.DelayMs != nil {
		delay = time.Duration(*a.DelayMs) * time.Millisecond
	}
	rctx := context.WithoutCancel(ctx)
	t.cfg.Clock.AfterFunc(delay, func() {
		if err := t.cfg.Source.Restart(rctx); err != nil {
			t.cfg.Log.Error("Failed to restart the agent's runtime", "err", err)
		}
	})
	return tool.Text(fmt.Sprintf("Restarting in %s, after this reply.", delay)), nil
}

// mergePatch applies a JSON merge patch (RFC 7386) to target: objects
// merge, null removes a field, anything else replaces.
func mergePatch(target, patch map[string]any) map[string]any {
	if target == nil {
		target = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(target, k)
		case map[string]any:
			tv, _ := target[k].(map[string]any)
			target[k] = mergePatch(tv, pv)
		default:
			target[k] = v
		}
	}
	return target
}
