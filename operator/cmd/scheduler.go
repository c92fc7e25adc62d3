package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/controller"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	opscheduler "github.com/picobot/picobot/operator/internal/scheduler"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/runtime/tracing/otlp"
)

// schedulerOptions are the flags of the CronJob scheduler. It needs the
// PostgreSQL of the run records; without one CronJobs get status but do not
// fire.
type schedulerOptions struct {
	postgresURL   string
	enabled       bool
	maintenance   bool
	maintenanceTZ string
}

func (s *schedulerOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.postgresURL, "postgres-url", os.Getenv("PICOBOT_POSTGRES_URL"),
		"PostgreSQL DSN of the application role, for CronJob run records and the usage shown in TenantQuota and Agent status (default $PICOBOT_POSTGRES_URL); the scheduler needs it.")
	fs.BoolVar(&s.enabled, "scheduler", true, "Fire CronJobs (leader only; needs --postgres-url).")
	fs.BoolVar(&s.maintenance, "scheduler-maintenance", true, "Create the daily routine-maintenance CronJob in every namespace with Agents.")
	fs.StringVar(&s.maintenanceTZ, "scheduler-maintenance-tz", "", "Time zone of new routine-maintenance CronJobs (default UTC).")
}

// openStore opens the store of --postgres-url: the scheduler's run records
// and the usage the operator shows in status. It returns nil without one.
func (s *schedulerOptions) openStore(ctx context.Context) (*postgres.Store, error) {
	if s.postgresURL == "" {
		return nil, nil
	}
	st, err := postgres.Open(ctx, s.postgresURL)
	if err != nil {
		return nil, fmt.Errorf("failed to open the store: %w", err)
	}
	return st, nil
}

// setup adds the scheduler Runnable to mgr when it is enabled and st (the
// store of --postgres-url) is set; the returned function stops its tracing.
func (s *schedulerOptions) setup(ctx context.Context, mgr ctrl.Manager, rc *controller.RuntimeConfig, st *postgres.Store, om *opmetrics.Metrics) (func(), error) {
	if !s.enabled || st == nil {
		ctrl.Log.Info("CronJob scheduler is off", "enabled", s.enabled, "postgres", st != nil)
		return func() {}, nil
	}
	// Runs go to session pods and outcomes to the gateway's dispatcher,
	// both through Redis; without session pods they are recorded as failed.
	var runner scheduler.Runner = unwiredRunner{}
	var deliverer scheduler.Deliverer
	if rc != nil {
		runner = wake.Runner{Bus: rc.Bus, Redis: rc.Redis}
		deliverer = wake.RunNotices{Bus: rc.Bus, Redis: rc.Redis, Owner: channelOwner(mgr.GetClient())}
	}
	// A fire starts a trace that the run's turn in a session pod continues
	// (the standard OTEL_* environment; docs/tracing.md).
	tp, err := otlp.NewProvider(ctx, otlp.Config{ServiceName: "picobot-operator"})
	if err != nil {
		return nil, err
	}
	cfg := opscheduler.Config{Store: st, Runner: runner, Deliverer: deliverer, Maintenance: s.maintenance, MaintenanceTZ: s.maintenanceTZ, Metrics: om}
	closeTracing := func() {}
	if tp != nil {
		cfg.Tuning.TracerProvider = tp
		closeTracing = func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)
		}
	}
	if _, err = opscheduler.Add(mgr, cfg); err != nil {
		closeTracing()
		return nil, err
	}
	return closeTracing, nil
}

// unwiredRunner stands in when the operator runs no session pods
// (--runtime-image unset): every run is recorded as failed, saying so,
// rather than silently dropped.
type unwiredRunner struct{}

func (unwiredRunner) Run(context.Context, scheduler.RunRequest) (scheduler.RunResult, error) {
	return scheduler.RunResult{}, errors.New("this operator runs no session pods (--runtime-image is not set), so scheduled runs cannot execute")
}

// channelOwner finds the agent of a tenant with a channel of that name, so a
// run's outcome goes out through that agent's channel.
func channelOwner(c client.Client) func(ctx context.Context, tenant, channel string) string {
	return func(ctx context.Context, tenant, channel string) string {
		var list picobotv1alpha1.AgentList
		if err := c.List(ctx, &list, client.InNamespace(tenant)); err != nil {
			return ""
		}
		for _, a := range list.Items {
			for _, ch := range a.Spec.Channels {
				if ch.Name == channel || ch.Name == "" && string(ch.Type) == channel {
					return a.Name
				}
			}
		}
		return ""
	}
}
