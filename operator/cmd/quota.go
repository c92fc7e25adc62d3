package main

import (
	"flag"

	"github.com/picobot/picobot/operator/internal/controller"
)

// quotaOptions are the default caps of tenants (the chart's quotaDefaults):
// they apply where a namespace's TenantQuota leaves a cap unset, or where
// it has none. A negative value is no cap.
type quotaOptions struct {
	sessionPods, warmPods, browserPods, cronJobs int
}

func (q *quotaOptions) bindFlags(fs *flag.FlagSet) {
	fs.IntVar(&q.sessionPods, "default-max-session-pods", -1, "Session pods (warm ones included) of a tenant whose TenantQuota sets no maxSessionPods (negative: no cap).")
	fs.IntVar(&q.warmPods, "default-max-warm-pods", -1, "Warm session pods of a tenant whose TenantQuota sets no maxWarmPods (negative: no cap).")
	fs.IntVar(&q.browserPods, "default-max-browser-pods", -1, "Browser pods of a tenant whose TenantQuota sets no maxBrowserPods (negative: no cap).")
	fs.IntVar(&q.cronJobs, "default-max-cronjobs", -1, "CronJobs of a tenant whose TenantQuota sets no maxCronJobs (negative: no cap).")
}

func (q *quotaOptions) defaults() controller.QuotaDefaults {
	return controller.QuotaDefaults{MaxSessionPods: limit(q.sessionPods), MaxWarmPods: limit(q.warmPods),
		MaxBrowserPods: limit(q.browserPods), MaxCronJobs: limit(q.cronJobs)}
}
