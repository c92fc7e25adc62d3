package quotasource

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/quota"
)

// Limits is the cluster gateway's view of every tenant's session and
// message caps (maxConcurrentSessions, messagesPerMinute of the
// TenantQuota of the tenant's namespace). Like a session pod's Source it
// reads a tenant's quota on its first message and again on a message that
// comes Every or more after the last read: the API server sees at most one
// GET per tenant per replica per Every, and a change reaches every replica
// within Every. A tenant whose quota cannot be read keeps the caps read
// last (none before the first good read).
type Limits struct {
	Kube client.Reader
	// Every is how often a tenant's quota is re-read (DefaultEvery when 0).
	Every time.Duration
	Clock clock.PassiveClock
	Log   *slog.Logger
	// Defaults are the platform's default quota (quota.DefaultsEnv): they
	// fill what a tenant's TenantQuota leaves unset, or stand for it.
	Defaults *picobotv1alpha1.TenantQuotaSpec

	mu      sync.Mutex
	tenants map[string]*tenantLimits
}

type tenantLimits struct {
	mu      sync.Mutex // held while reading: one GET per tenant at a time
	read    time.Time
	limits  quota.Limits
	problem string // the last read's error, logged when it changes
}

// Limits returns the tenant's caps now (cluster.BackendConfig.Limits).
func (s *Limits) Limits(ctx context.Context, tenant string) quota.Limits {
	s.mu.Lock()
	if s.tenants == nil {
		s.tenants = map[string]*tenantLimits{}
	}
	t := s.tenants[tenant]
	if t == nil {
		t = &tenantLimits{limits: quota.NoLimits}
		s.tenants[tenant] = t
	}
	s.mu.Unlock()

	every := s.Every
	if every <= 0 {
		every = DefaultEvery
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.read.IsZero() || s.Clock.Since(t.read) >= every {
		t.read = s.Clock.Now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		l, err := s.load(rctx, tenant)
		cancel()
		problem := ""
		if err != nil {
			problem = err.Error()
		} else {
			t.limits = l
		}
		if problem != t.problem {
			if err != nil {
				s.Log.Warn("Failed to read the tenant's TenantQuota; the caps read last stay in force", "tenant", tenant, "err", err)
			} else {
				s.Log.Info("Read the tenant's TenantQuota again", "tenant", tenant)
			}
			t.problem = problem
		}
	}
	return t.limits
}

func (s *Limits) load(ctx context.Context, tenant string) (quota.Limits, error) {
	var q picobotv1alpha1.TenantQuota
	err := s.Kube.Get(ctx, client.ObjectKey{Namespace: tenant, Name: picobotv1alpha1.TenantQuotaName}, &q)
	switch {
	case apierrors.IsNotFound(err):
		return quota.LimitsOf(quota.WithDefaults(nil, s.Defaults)), nil
	case err != nil:
		return quota.Limits{}, fmt.Errorf("failed to read TenantQuota %s/%s: %w", tenant, picobotv1alpha1.TenantQuotaName, err)
	}
	return quota.LimitsOf(quota.WithDefaults(&q, s.Defaults)), nil
}
