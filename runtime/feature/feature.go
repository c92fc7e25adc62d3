// Package feature is the contract between the agent assembler
// (runtime/agenthost) and the features that add capabilities to an agent
// (memory, skills, schedules, the task queue, messaging, the browser, health):
// a feature imports this package, not the assembler, so the imports run from
// the hosting modes down to the features.
package feature

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// Mode says where an agent runs.
type Mode string

// Modes.
const (
	ModeEmbedded Mode = "embedded"
	ModeCluster  Mode = "cluster"
)

// Feature adds capabilities to an agent; each lives in its own package.
type Feature interface {
	// Name identifies the feature in errors and health reports.
	Name() string
	// Build returns the feature's parts for one agent. An error stops the
	// agent from loading; a feature that merely lacks something optional
	// returns fewer parts and reports it through Health.
	Build(ctx context.Context, a *Agent) (Parts, error)
}

// Parts are what a feature adds to one agent.
type Parts struct {
	// Tools are offered to the model when the agent's tool policy allows
	// them (policy names in policy.DefaultCatalog).
	Tools []tool.Tool
	// Prompt returns a system prompt section for a turn ("" for none).
	Prompt func(ctx context.Context, turn session.PromptInput) string
	// Health reports the feature's requirements for this agent.
	Health func(ctx context.Context) []health.Check
	// Close releases what Build started.
	Close func()
}

// Host is what the hosting process offers features.
type Host struct {
	Mode   Mode
	Tenant string
	Store  store.Store
	// StateDir is a local folder for the agent's working files (an emptyDir
	// in a pod).
	StateDir string
	// Kube is the cluster client in cluster mode, nil in embedded mode.
	Kube client.Client
	Log  *slog.Logger
	// Secrets returns a Secret of the agent's namespace by name (values
	// included), nil when missing: the Secrets the Agent references
	// (spec.tools.secrets among them), from Secret manifests or
	// PICOBOT_SECRET_ variables in embedded mode and from the session pod's
	// environment in cluster mode. Nil when the host offers none.
	Secrets func(name string) *corev1.Secret
	// MaxCronJobs returns the tenant's maxCronJobs (its TenantQuota, else
	// the platform's default); ok is false when there is no cap. Nil when
	// the host caps nothing.
	MaxCronJobs func(ctx context.Context, tenant string) (limit int32, ok bool)
}

// Agent is an agent being assembled, as features see it.
type Agent struct {
	Spec *picobotv1alpha1.Agent
	Host *Host
	// Provider is the agent's model chain (with retry and fallbacks); it
	// answers with a no_model error when the agent has no usable model.
	Provider                llm.Provider
	ProviderName, ModelName string
	// Model is the effective model and where it came from (spec, fallback,
	// namespace default); nil when the agent has none, and ModelReason (a
	// condition reason such as ReasonNoModelConfigured) and ModelMessage
	// then say why.
	Model                     *picobotv1alpha1.EffectiveModel
	ModelReason, ModelMessage string
	// Endpoint is the model endpoint the agent calls first, key included
	// (what a reachability probe asks); nil without a usable model.
	Endpoint *provider.Config
	Policy   policy.Result
}
