package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/controller"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	opscheduler "github.com/picobot/picobot/operator/internal/scheduler"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store/postgres"
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
// store of --postgres-url) is set.
func (s *schedulerOptions) setup(mgr ctrl.Manager, rc *controller.RuntimeConfig, st *postgres.Store, om *opmetrics.Metrics) error {
	if !s.enabled || st == nil {
		ctrl.Log.Info("CronJob scheduler is off", "enabled", s.enabled, "postgres", st != nil)
		return nil
	}
	// Runs go to session pods and outcomes to the gateway's dispatcher,
	// both through Redis; without session pods they are recorded as failed.
	var runner scheduler.Runner = unwiredRunner{}
	var deliverer scheduler.Deliverer
	if rc != nil {
		runner = wake.Runner{Bus: rc.Bus, Redis: rc.Redis}
		deliverer = wake.RunNotices{Bus: rc.Bus, Redis: rc.Redis, Owner: channelOwner(mgr.GetClient())}
	}
	_, err := opscheduler.Add(mgr, opscheduler.Config{Store: st, Runner: runner, Deliverer: deliverer, Maintenance: s.maintenance,
		MaintenanceTZ: s.maintenanceTZ, Metrics: om})
	return err
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
