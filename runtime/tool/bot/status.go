package bot

import (
	"context"
	"encoding/json"
	"fmt"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

const statusDescription = "This agent's state: instances and heartbeats, queue depth, and the effective model with where it came from " +
	"(spec, fallback, namespace default), or why there is none."

// Model states of bot_status: each "no model" says what kind of fix it
// needs.
const (
	ModelOK            = "ok"
	ModelNotConfigured = "not_configured" // nothing configured: configure one
	ModelUnusable      = "unusable"       // configured, but a key is missing or invalid: fix that
	ModelUnreachable   = "unreachable"    // configured, but this runtime cannot reach it: network or endpoint
)

// ModelStatus is bot_status's model line.
type ModelStatus struct {
	State    string `json:"state"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Source   string `json:"source,omitempty"`
	// Says is the line to read to the user.
	Says string `json:"says"`
}

type statusOut struct {
	Agent     string      `json:"agent"`
	Mode      string      `json:"mode"`
	Model     ModelStatus `json:"model"`
	Instances []Instance  `json:"instances"`
	Queue     *Queue      `json:"queue,omitempty"`
	// Unknown names what this host does not report, and why.
	Unknown []string `json:"unknown,omitempty"`
}

func newStatus(cfg Config, a *feature.Agent) tool.Tool {
	s := &status{cfg: cfg, a: a}
	return tool.New("bot_status", statusDescription, s.run)
}

type status struct {
	cfg Config
	a   *feature.Agent
}

func (s *status) run(ctx context.Context, _ tool.Env, _ struct{}) (tool.Result, error) {
	tenant := s.a.Host.Tenant
	if t, err := store.TenantFrom(ctx); err == nil {
		tenant = t
	}
	out := statusOut{Agent: s.a.Spec.Name, Mode: string(s.a.Host.Mode), Model: ModelLine(ctx, s.a, s.cfg.Probe), Instances: []Instance{}}
	if s.cfg.Instances == nil {
		out.Unknown = append(out.Unknown, "instances: this host does not report them")
	} else if in, err := s.cfg.Instances(ctx, tenant, s.a.Spec.Name); err != nil {
		out.Unknown = append(out.Unknown, "instances: "+err.Error())
	} else {
		out.Instances = in
	}
	if s.cfg.Queue == nil {
		out.Unknown = append(out.Unknown, "queue: this host does not report it")
	} else if q, err := s.cfg.Queue(ctx, tenant, s.a.Spec.Name); err != nil {
		out.Unknown = append(out.Unknown, "queue: "+err.Error())
	} else {
		out.Queue = &q
	}
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode the status of agent %q: %w", s.a.Spec.Name, err)
	}
	return tool.Text(string(b)), nil
}

// sourceNames are the model sources as bot_status words them.
var sourceNames = map[picobotv1alpha1.ModelSource]string{
	picobotv1alpha1.ModelSourceSpec:             "spec",
	picobotv1alpha1.ModelSourceFallback:         "fallback",
	picobotv1alpha1.ModelSourceNamespaceDefault: "namespace default",
}

// ModelLine is bot_status's model line for an agent: the effective model
// and its source, or which kind of "no model" it is. probe (optional)
// checks a configured model's reachability.
func ModelLine(ctx context.Context, a *feature.Agent, probe ModelProbe) ModelStatus {
	e := a.Model
	if e == nil {
		if a.ModelReason == picobotv1alpha1.ReasonNoModelConfigured {
			return ModelStatus{State: ModelNotConfigured, Says: "No model is configured for this agent: " + a.ModelMessage +
				". Nothing is unreachable; configure spec.model or the namespace default (ConfigMap " +
				picobotv1alpha1.NamespaceDefaultsConfigMap + ")."}
		}
		return ModelStatus{State: ModelUnusable, Says: "A model is configured but cannot be used: " + a.ModelMessage +
			". This is a configuration problem (key or default), not the network; fix what it names."}
	}
	src := sourceNames[e.Source]
	if src == "" {
		src = string(e.Source)
	}
	m := ModelStatus{State: ModelOK, Provider: string(e.Provider), Model: e.Model, Source: src}
	if probe == nil {
		m.Says = fmt.Sprintf("Using %s/%s (from %s). Reachability is not probed here.", e.Provider, e.Model, src)
		return m
	}
	if ok, detail := probe(ctx, a); !ok {
		m.State = ModelUnreachable
		m.Says = fmt.Sprintf("A model is configured (%s/%s from %s) but this runtime cannot reach it: %s. The configuration is complete; "+
			"check the endpoint and the network.", e.Provider, e.Model, src, detail)
		return m
	}
	m.Says = fmt.Sprintf("Using %s/%s (from %s); it answered a probe.", e.Provider, e.Model, src)
	return m
}
