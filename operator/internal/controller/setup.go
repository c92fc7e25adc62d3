// Package controller holds the operator's reconcilers: Agent (model, tools and
// references into status), CronJob (schedule and next run) and BrowserProfile.
package controller

import (
	"context"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/picobot/picobot/runtime/tool/policy"
)

// Config is what the reconcilers need from the operator's command line.
type Config struct {
	// Catalog of built-in tools the tool policy resolves over.
	Catalog policy.Catalog
	// Concurrency is the number of parallel reconciles per controller.
	Concurrency int
	// Clock is injected so tests can move time; the real clock by default.
	Clock clock.PassiveClock
	// Runtime turns on session pods (nil: status only).
	Runtime *RuntimeConfig
	// GatewayNamespace is where API-key hashes and channel credentials are
	// published for the gateway (empty: nothing is published).
	GatewayNamespace string
	// Quota are the caps of tenants whose TenantQuota leaves them unset.
	Quota QuotaDefaults
	// Usage, when set, is read for the usage in TenantQuota and Agent
	// status (nil: the operator has no store; usage is not shown).
	Usage UsageStore
}

// Setup registers the field indexes and every reconciler with mgr. main and
// the integration tests share it, so tests run exactly what ships.
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config) error {
	if err := SetupIndexes(ctx, mgr); err != nil {
		return err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	var usage *UsageReader
	if cfg.Usage != nil {
		usage = &UsageReader{Store: cfg.Usage, Clock: cfg.Clock, Refresh: DefaultUsageRefresh}
	}
	if err := (&TenantQuotaReconciler{Client: mgr.GetClient(), Usage: usage, MaxConcurrentReconciles: cfg.Concurrency}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&AgentReconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("picobot-operator"),
		Catalog:                 cfg.Catalog,
		MaxConcurrentReconciles: cfg.Concurrency,
		Runtime:                 cfg.Runtime,
		Quota:                   cfg.Quota,
		Usage:                   usage,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if cfg.Runtime != nil {
		nsr := NewNamespaceObjectsReconciler(mgr.GetClient(), cfg.Runtime)
		nsr.MaxConcurrentReconciles = cfg.Concurrency
		if err := nsr.SetupWithManager(mgr); err != nil {
			return err
		}
		// Any namespace may place its sandboxes in pods
		// (podspec.LabelSandboxPlacement).
		if err := (&SandboxPairReconciler{Client: mgr.GetClient(), MaxConcurrentReconciles: cfg.Concurrency,
			SecretGrace: cfg.Runtime.PairSecretGrace}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if cfg.GatewayNamespace != "" {
		if err := (&GatewayPublishReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Namespace: cfg.GatewayNamespace, MaxConcurrentReconciles: cfg.Concurrency}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if err := (&CronJobReconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("picobot-operator"),
		Clock:                   cfg.Clock,
		MaxConcurrentReconciles: cfg.Concurrency,
		Quota:                   cfg.Quota,
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	browserPods, err := BrowserPodsFromRuntime(ctx, cfg.Runtime)
	if err != nil {
		return err
	}
	if browserPods != nil {
		browserPods.Quota = cfg.Quota
	}
	return setupBrowsers(mgr, cfg, browserPods)
}
