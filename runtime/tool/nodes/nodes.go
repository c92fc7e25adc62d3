// Package nodes implements the nodes tool: the agent finds the tenant's
// paired devices (`picobot node`), answers pairing requests when its user
// asks it to, and has an approved node notify its user, run a command (which
// the node's own user approves unless the node's allowlist permits it),
// capture its screen or camera, or tell its location, where the node's OS
// offers that. Calls reach the node through node.Service: in the same
// process in embedded mode, through the gateway replica that holds the
// node's connection in cluster mode.
package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Name is the tool's name.
const Name = "nodes"

// Feature adds the nodes tool to agents.
type Feature struct {
	svc   *node.Service
	files tool.WorkspaceFiles
}

var _ feature.Feature = (*Feature)(nil)

// NewFeature returns the nodes feature over svc; a nil svc adds nothing.
// files, when set, saves captured media where the programs' files are (a
// sandbox pod's workspace); nil saves them in the runtime's own folder.
func NewFeature(svc *node.Service, files tool.WorkspaceFiles) *Feature {
	return &Feature{svc: svc, files: files}
}

// Name implements feature.Feature.
func (f *Feature) Name() string { return Name }

// Build implements feature.Feature.
func (f *Feature) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	if f.svc == nil {
		return feature.Parts{}, nil
	}
	return feature.Parts{Tools: []tool.Tool{New(f.svc, a.Host.Tenant, f.files)}}, nil
}

const description = "Paired devices of the user (picobot node). status lists them; describe shows one's capabilities; " +
	"pending/approve/reject answer pairing requests (only when the user asks); notify shows a desktop notification; " +
	"run runs a command (argv array) that the device's owner approves on the device; camera_snap, camera_clip, " +
	"screen_record, location_get capture where the device supports it. node is a node id or name (optional with one connected node)."

// Actions of the tool.
const (
	actionStatus   = "status"
	actionDescribe = "describe"
	actionPending  = "pending"
	actionApprove  = "approve"
	actionReject   = "reject"
)

type args struct {
	Action string `json:"action"`
	Node   string `json:"node,omitempty" jsonschema:"node id or name"`
	// run
	Command              []string `json:"command,omitempty" jsonschema:"run: argv array, e.g. [\"echo\",\"hi\"]"`
	Cwd                  string   `json:"cwd,omitempty" jsonschema:"run: working folder on the node"`
	Env                  []string `json:"env,omitempty" jsonschema:"run: extra environment as KEY=VAL"`
	CommandTimeoutMs     int64    `json:"commandTimeoutMs,omitempty" jsonschema:"run: kill the command after this many ms"`
	InvokeTimeoutMs      int64    `json:"invokeTimeoutMs,omitempty" jsonschema:"how long to wait for the node's answer (its user's approval included)"`
	NeedsScreenRecording bool     `json:"needsScreenRecording,omitempty" jsonschema:"run: the command needs screen recording permission"`
	// notify
	Title string `json:"title,omitempty" jsonschema:"notify: title"`
	Body  string `json:"body,omitempty" jsonschema:"notify: text"`
	// camera_clip, screen_record
	DurationMs int64 `json:"durationMs,omitempty" jsonschema:"camera_clip/screen_record: length in ms (default 3000, at most 60000)"`
}

// Bounds of the arguments.
const (
	maxArgv          = 256
	maxArgBytes      = 32 << 10
	maxEnv           = 64
	maxNotifyBytes   = 4 << 10
	maxCommandTimout = 10 * time.Minute
	defaultDuration  = 3 * time.Second
	maxDuration      = time.Minute
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

type nodesTool struct {
	svc    *node.Service
	tenant string
	files  tool.WorkspaceFiles
}

// New returns the nodes tool over svc for the agent's tenant (a call's own
// tenant in ctx wins); files, when set, saves captured media (see
// NewFeature).
func New(svc *node.Service, tenant string, files tool.WorkspaceFiles) tool.Tool {
	t := &nodesTool{svc: svc, tenant: tenant, files: files}
	actions := []any{actionStatus, actionDescribe, actionPending, actionApprove, actionReject}
	for _, a := range node.Actions() {
		actions = append(actions, a)
	}
	return tool.New(Name, description, t.run, tool.Enum("action", actions...),
		tool.Range("commandTimeoutMs", tool.Bound(1), tool.Bound(float64(maxCommandTimout.Milliseconds()))),
		tool.Range("invokeTimeoutMs", tool.Bound(1), tool.Bound(float64(node.MaxInvokeTimeout.Milliseconds()))),
		tool.Range("durationMs", tool.Bound(1), tool.Bound(float64(maxDuration.Milliseconds()))))
}

func (t *nodesTool) ctx(ctx context.Context) context.Context {
	if _, err := store.TenantFrom(ctx); err == nil {
		return ctx
	}
	return store.WithTenant(ctx, t.tenant)
}

func (t *nodesTool) run(ctx context.Context, env tool.Env, a args) (tool.Result, error) {
	ctx = t.ctx(ctx)
	switch a.Action {
	case actionStatus:
		return t.status(ctx)
	case actionPending:
		return t.pending(ctx)
	case actionApprove, actionReject:
		return t.decide(ctx, a)
	case actionDescribe:
		st, res, ok := t.pick(ctx, a.Node, false)
		if !ok {
			return res, nil
		}
		return jsonResult(describe(st))
	}
	return t.invoke(ctx, env, a)
}

// view is a node as the model sees it.
type view struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Platform     string   `json:"platform"`
	State        string   `json:"state"`
	Connected    bool     `json:"connected"`
	Capabilities []string `json:"capabilities,omitempty"`
	Version      string   `json:"version,omitempty"`
	LastSeenAt   string   `json:"last_seen_at,omitempty"`
}

func describe(s node.Status) view {
	return view{ID: s.ID, Name: s.Name, Platform: s.Platform, State: string(s.State), Connected: s.Connected,
		Capabilities: s.Capabilities, Version: s.Version, LastSeenAt: s.LastSeenAt.UTC().Format(time.RFC3339)}
}

func (t *nodesTool) status(ctx context.Context) (tool.Result, error) {
	list, err := t.svc.List(ctx, "")
	if err != nil {
		return tool.Result{}, err
	}
	out := make([]view, 0, len(list))
	for _, s := range list {
		if s.State == store.NodeApproved || s.State == store.NodePending {
			v := describe(s)
			v.Capabilities, v.Version = nil, ""
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return tool.Text("No nodes are paired. The user pairs one by running `picobot node --gateway <url>` on the device."), nil
	}
	return jsonResult(map[string]any{"nodes": out})
}

func (t *nodesTool) pending(ctx context.Context) (tool.Result, error) {
	list, err := t.svc.List(ctx, store.NodePending)
	if err != nil {
		return tool.Result{}, err
	}
	if len(list) == 0 {
		return tool.Text("No pairing requests are pending."), nil
	}
	out := make([]view, len(list))
	for i, s := range list {
		out[i] = describe(s)
	}
	return jsonResult(map[string]any{"pending": out})
}

func (t *nodesTool) decide(ctx context.Context, a args) (tool.Result, error) {
	if a.Node == "" {
		return tool.Errorf("error: %s needs node (the id from pending)", a.Action), nil
	}
	st, res, ok := t.pick(ctx, a.Node, true)
	if !ok {
		return res, nil
	}
	n, err := t.svc.Decide(ctx, st.ID, a.Action)
	switch {
	case errors.Is(err, node.ErrTransition):
		return tool.Errorf("error: %v", err), nil
	case err != nil:
		return tool.Result{}, err
	}
	return tool.Text(fmt.Sprintf("Node %s (%s) is %s.", n.ID, n.Name, n.State)), nil
}

// pick resolves the node argument: an id, else a name (case-insensitive);
// empty picks the one approved, connected node. anyState lets pairing
// decisions name a node that is not approved.
func (t *nodesTool) pick(ctx context.Context, ref string, anyState bool) (node.Status, tool.Result, bool) {
	list, err := t.svc.List(ctx, "")
	if err != nil {
		return node.Status{}, tool.Errorf("error: failed to list the nodes: %v", err), false
	}
	var usable []node.Status
	for _, s := range list {
		if anyState || s.State == store.NodeApproved {
			usable = append(usable, s)
		}
	}
	if ref == "" {
		var conn []node.Status
		for _, s := range usable {
			if s.Connected {
				conn = append(conn, s)
			}
		}
		if len(conn) == 1 {
			return conn[0], tool.Result{}, true
		}
		return node.Status{}, tool.Errorf("error: name the node (node: id or name); %s", summary(usable)), false
	}
	for _, s := range usable {
		if s.ID == ref {
			return s, tool.Result{}, true
		}
	}
	var named []node.Status
	for _, s := range usable {
		if strings.EqualFold(s.Name, ref) {
			named = append(named, s)
		}
	}
	if len(named) == 1 {
		return named[0], tool.Result{}, true
	}
	if len(named) > 1 {
		return node.Status{}, tool.Errorf("error: %d nodes are named %q; name one by id: %s", len(named), ref, summary(named)), false
	}
	return node.Status{}, tool.Errorf("error: no approved node %q; %s", ref, summary(usable)), false
}

func summary(list []node.Status) string {
	if len(list) == 0 {
		return "no node is approved (status lists them, pending shows pairing requests)"
	}
	parts := make([]string, len(list))
	for i, s := range list {
		c := "disconnected"
		if s.Connected {
			c = "connected"
		}
		parts[i] = fmt.Sprintf("%s (%q, %s, %s)", s.ID, s.Name, s.State, c)
	}
	return "nodes: " + strings.Join(parts, ", ")
}

// check validates the arguments of a node action; the message is for the
// model.
func check(a args) string {
	if a.Action == node.ActionRun {
		switch {
		case len(a.Command) == 0 || a.Command[0] == "":
			return "run needs command: the argv array, e.g. [\"echo\",\"hi\"]"
		case len(a.Command) > maxArgv:
			return fmt.Sprintf("command has %d arguments; at most %d", len(a.Command), maxArgv)
		case len(a.Env) > maxEnv:
			return fmt.Sprintf("env has %d entries; at most %d", len(a.Env), maxEnv)
		}
		for i, s := range a.Command {
			if len(s) > maxArgBytes || strings.ContainsRune(s, 0) {
				return fmt.Sprintf("command[%d] must be at most %d bytes without NUL", i, maxArgBytes)
			}
		}
		for _, e := range a.Env {
			k, _, ok := strings.Cut(e, "=")
			if !ok || !envName.MatchString(k) || strings.ContainsRune(e, 0) {
				return fmt.Sprintf("env entry %q is not KEY=VAL (KEY of letters, digits and _)", e)
			}
		}
	} else if len(a.Command) > 0 || a.Cwd != "" || len(a.Env) > 0 || a.CommandTimeoutMs != 0 {
		return fmt.Sprintf("command, cwd, env and commandTimeoutMs belong to run, not %s", a.Action)
	}
	if a.Action == node.ActionNotify {
		switch {
		case strings.TrimSpace(a.Body) == "" && strings.TrimSpace(a.Title) == "":
			return "notify needs body (and optionally title)"
		case len(a.Body)+len(a.Title) > maxNotifyBytes:
			return fmt.Sprintf("notify's title and body may have at most %d bytes", maxNotifyBytes)
		}
	}
	return ""
}

func (t *nodesTool) invoke(ctx context.Context, env tool.Env, a args) (tool.Result, error) {
	if msg := check(a); msg != "" {
		return tool.Errorf("error: %s", msg), nil
	}
	st, res, ok := t.pick(ctx, a.Node, false)
	if !ok {
		return res, nil
	}
	if !st.Connected {
		return tool.Errorf("error: node %s (%s) is not connected now; ask the user to start `picobot node` on it", st.ID, st.Name), nil
	}
	if !slices.Contains(st.Capabilities, a.Action) {
		return tool.Errorf("error: %s is not supported on this node (%s, %s); it offers: %s", a.Action, st.ID, st.Platform,
			strings.Join(st.Capabilities, ", ")), nil
	}
	var params any
	switch a.Action {
	case node.ActionRun:
		params = node.RunParams{Command: a.Command, Cwd: a.Cwd, Env: a.Env, CommandTimeoutMS: a.CommandTimeoutMs, NeedsScreenRecording: a.NeedsScreenRecording}
	case node.ActionNotify:
		params = node.NotifyParams{Title: a.Title, Body: a.Body}
	case node.ActionCameraClip, node.ActionScreenRecord:
		d := time.Duration(a.DurationMs) * time.Millisecond
		if d == 0 {
			d = defaultDuration
		}
		params = node.MediaParams{DurationMS: d.Milliseconds()}
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return tool.Result{}, err
	}
	timeout := time.Duration(a.InvokeTimeoutMs) * time.Millisecond
	r, err := t.svc.Invoke(ctx, st.ID, node.Invoke{Action: a.Action, Params: raw}, timeout)
	switch {
	case errors.Is(err, node.ErrNotConnected), errors.Is(err, node.ErrNotApproved), errors.Is(err, node.ErrTimeout):
		return tool.Errorf("error: %v", err), nil
	case err != nil:
		return tool.Result{}, err
	}
	return t.result(ctx, env, st, a.Action, r)
}

// result turns a node's answer into the model's: an error with the node's
// reason, a run's exit code and output, captured media as artifacts (an
// image part and MEDIA:<path>, a video FILE:<path>), a location as JSON.
func (t *nodesTool) result(ctx context.Context, env tool.Env, st node.Status, action string, r node.Result) (tool.Result, error) {
	switch r.Code {
	case "":
	case node.CodeUnsupported:
		return tool.Errorf("error: %s is not supported on this node (%s): %s", action, st.ID, r.Error), nil
	case node.CodeDenied:
		return tool.Errorf("error: the node's user did not allow it: %s", r.Error), nil
	default:
		return tool.Errorf("error: node %s: %s", st.ID, r.Error), nil
	}
	var b strings.Builder
	if r.Text != "" {
		b.WriteString(r.Text)
	}
	if r.ExitCode != nil {
		fmt.Fprintf(&b, "exit code %d\n", *r.ExitCode)
		if r.Stdout != "" {
			fmt.Fprintf(&b, "stdout:\n%s\n", r.Stdout)
		}
		if r.Stderr != "" {
			fmt.Fprintf(&b, "stderr:\n%s\n", r.Stderr)
		}
	}
	if len(r.Data) > 0 {
		b.Write(r.Data)
	}
	out := tool.Result{}
	for _, m := range r.Media {
		name := filepath.Base(m.Name)
		if name == "." || name == "/" || name == "" {
			name = action
		}
		rel := filepath.Join("nodes", st.ID, name)
		switch {
		case env.Workspace != "" && t.files != nil:
			if err := t.files.WriteFile(ctx, env, rel, m.Data); err != nil {
				return tool.Result{}, fmt.Errorf("failed to save %q: %w", rel, err)
			}
		case env.Workspace != "":
			path := env.Resolve(rel)
			if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
				return tool.Result{}, fmt.Errorf("failed to save %q: %w", rel, err)
			}
			if err := os.WriteFile(path, m.Data, 0o640); err != nil {
				return tool.Result{}, fmt.Errorf("failed to save %q: %w", rel, err)
			}
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		if strings.HasPrefix(m.MediaType, "image/") {
			b.WriteString("MEDIA:" + rel)
		} else {
			b.WriteString("FILE:" + rel)
		}
		out.Artifacts = append(out.Artifacts, tool.Artifact{Name: name, MediaType: m.MediaType, Data: m.Data, PresentToUser: true})
	}
	out.Content = strings.TrimSpace(b.String())
	if out.Content == "" {
		out.Content = "done"
	}
	return out, nil
}

func jsonResult(v any) (tool.Result, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Text(string(b)), nil
}
