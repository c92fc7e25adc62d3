package embedded

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/quota"
)

// tenantQuotas are the budgets and price tables of a manifests folder's
// TenantQuotas, by tenant (the quota's namespace). A tenant without one
// has no budget and the built-in prices.
type tenantQuotas struct {
	budgets map[string]quota.Budget
	prices  map[string]quota.Prices
	limits  map[string]quota.Limits
	// cronCaps are the quotas' maxCronJobs, for cron_add.
	cronCaps map[string]int32
}

// quotasOf reads the TenantQuotas of set and the price ConfigMaps they
// name (in their namespace, from the same folder). A quota whose price
// table is missing or unreadable is an error: the folder is not run with a
// budget priced otherwise than its author wrote.
func quotasOf(set *manifest.Set) (*tenantQuotas, error) {
	out := &tenantQuotas{budgets: map[string]quota.Budget{}, prices: map[string]quota.Prices{}, limits: map[string]quota.Limits{}, cronCaps: map[string]int32{}}
	for i := range set.TenantQuotas {
		q := &set.TenantQuotas[i]
		b, err := quota.BudgetOf(q)
		if err != nil {
			return nil, err
		}
		out.budgets[q.Namespace] = b
		out.limits[q.Namespace] = quota.LimitsOf(q)
		if q.Spec.MaxCronJobs != nil {
			out.cronCaps[q.Namespace] = *q.Spec.MaxCronJobs
		}
		if q.Spec.PricesConfigMap == nil {
			continue
		}
		cm := configMap(set, q.Namespace, *q.Spec.PricesConfigMap)
		if cm == nil {
			return nil, fmt.Errorf("TenantQuota %s/%s names pricesConfigMap %q: the folder has no ConfigMap %q in namespace %q",
				q.Namespace, q.Name, *q.Spec.PricesConfigMap, *q.Spec.PricesConfigMap, q.Namespace)
		}
		p, err := quota.PricesOf(cm.Name, cm.Data)
		if err != nil {
			return nil, fmt.Errorf("failed to read the prices of TenantQuota %s/%s: %w", q.Namespace, q.Name, err)
		}
		out.prices[q.Namespace] = p
	}
	return out, nil
}

// configMap finds a ConfigMap of the folder, nil when there is none.
func configMap(set *manifest.Set, namespace, name string) *corev1.ConfigMap {
	for _, u := range set.Other {
		if u.GetKind() != "ConfigMap" || u.GetNamespace() != namespace || u.GetName() != name {
			continue
		}
		cm := &corev1.ConfigMap{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm) == nil {
			return cm
		}
	}
	return nil
}

// budget is agenthost.Host.Budget: the tenant's budget of the current
// generation.
func (r *Runtime) budget(tenant string) quota.Budget {
	if q := r.quotas.Load(); q != nil {
		return q.budgets[tenant]
	}
	return quota.Budget{}
}

// prices is agenthost.Host.Prices; nil is the built-in prices.
func (r *Runtime) prices(tenant string) quota.Prices {
	if q := r.quotas.Load(); q != nil {
		return q.prices[tenant]
	}
	return nil
}

// limits are the tenant's session and message caps of the current
// generation; NoLimits without a quota.
func (r *Runtime) limits(tenant string) quota.Limits {
	if q := r.quotas.Load(); q != nil {
		if l, ok := q.limits[tenant]; ok {
			return l
		}
	}
	return quota.NoLimits
}

// runtimeClock is the runtime's clock (Options.Clock, else the real clock)
// as a clock.PassiveClock.
type runtimeClock struct{ r *Runtime }

func (c runtimeClock) Now() time.Time                  { return c.r.now() }
func (c runtimeClock) Since(t time.Time) time.Duration { return c.r.now().Sub(t) }

// maxCronJobs is agenthost.Host.MaxCronJobs: the tenant's maxCronJobs of
// the current generation.
func (r *Runtime) maxCronJobs(_ context.Context, tenant string) (int32, bool) {
	if q := r.quotas.Load(); q != nil {
		n, ok := q.cronCaps[tenant]
		return n, ok
	}
	return 0, false
}
