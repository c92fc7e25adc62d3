// Package quotasource is a session pod's view of its namespace's
// TenantQuota: the model budget and the price table (its pricesConfigMap)
// the runtime checks and prices every model call with.
//
// The pod's ServiceAccount may get the TenantQuota named default in its own
// namespace and nothing else of that kind (operator/internal/podspec.Role);
// it reads its namespace's ConfigMaps already (skills). The quota is read
// at start and again when a call asks after Every has passed, so a change
// the platform team makes reaches running pods within Every, and the API
// server sees one GET per pod per Every at most, never one per call.
package quotasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/quota"
)

// DefaultEvery is how often a pod re-reads its quota.
const DefaultEvery = 30 * time.Second

// readTimeout bounds one refresh made on a model call's path.
const readTimeout = 5 * time.Second

// Source holds the namespace's budget and prices for agenthost.Host.
type Source struct {
	Kube      client.Reader
	Namespace string
	// Every is how often the quota is re-read (DefaultEvery when 0).
	Every time.Duration
	Clock clock.PassiveClock
	Log   *slog.Logger
	// Defaults are the platform's default quota (quota.DefaultsEnv): their
	// budget fills what the namespace's TenantQuota leaves unset, or stands
	// for it.
	Defaults *picobotv1alpha1.TenantQuotaSpec

	mu     sync.Mutex
	read   time.Time // last refresh; zero before the first
	budget quota.Budget
	prices quota.Prices // nil: the built-in prices
	// cronCap is the quota's maxCronJobs (defaults applied); nil: no cap.
	cronCap *int32
	// problem is the last refresh's error text, logged when it changes.
	problem string
}

// Refresh reads the TenantQuota and its price ConfigMap now. No quota is
// the default budget (Defaults), else none. On an error the budget and prices read before are kept (a pod
// does not drop its tenant's budget because the API server was briefly
// unreachable), and an unreadable price table leaves the built-in prices
// with the budget applied.
func (s *Source) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshLocked(ctx)
}

func (s *Source) refreshLocked(ctx context.Context) error {
	s.read = s.Clock.Now()
	err := s.load(ctx)
	problem := ""
	if err != nil {
		problem = err.Error()
	}
	if problem != s.problem {
		if err != nil {
			s.Log.Warn("Failed to read the namespace's TenantQuota; the last one read stays in force", "namespace", s.Namespace, "err", err)
		} else if s.problem != "" {
			s.Log.Info("Read the namespace's TenantQuota again", "namespace", s.Namespace)
		}
		s.problem = problem
	}
	return err
}

func (s *Source) load(ctx context.Context) error {
	var q picobotv1alpha1.TenantQuota
	err := s.Kube.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: picobotv1alpha1.TenantQuotaName}, &q)
	if apierrors.IsNotFound(err) {
		d := quota.WithDefaults(nil, s.Defaults)
		b, err := quota.BudgetOf(d)
		if err != nil {
			return err
		}
		s.budget, s.prices, s.cronCap = b, nil, nil
		if d != nil {
			s.cronCap = d.Spec.MaxCronJobs
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read TenantQuota %s/%s: %w", s.Namespace, picobotv1alpha1.TenantQuotaName, err)
	}
	merged := quota.WithDefaults(&q, s.Defaults)
	b, err := quota.BudgetOf(merged)
	if err != nil {
		return err
	}
	s.budget, s.cronCap = b, merged.Spec.MaxCronJobs
	if q.Spec.PricesConfigMap == nil {
		s.prices = nil
		return nil
	}
	var cm corev1.ConfigMap
	if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: *q.Spec.PricesConfigMap}, &cm); err != nil {
		return fmt.Errorf("failed to read the price table ConfigMap %s/%s of TenantQuota %s: %w", s.Namespace, *q.Spec.PricesConfigMap, q.Name, err)
	}
	p, err := quota.PricesOf(cm.Name, cm.Data)
	if err != nil {
		return errors.Join(fmt.Errorf("TenantQuota %s/%s", s.Namespace, q.Name), err)
	}
	s.prices = p
	return nil
}

// MaxCronJobs is agenthost.Host.MaxCronJobs: the namespace's maxCronJobs
// (defaults applied), read as the budget is.
func (s *Source) MaxCronJobs(_ context.Context, tenant string) (int32, bool) {
	if tenant != s.Namespace {
		return 0, false
	}
	s.current()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cronCap == nil {
		return 0, false
	}
	return *s.cronCap, true
}

// current refreshes when Every has passed and returns what is in force.
func (s *Source) current() (quota.Budget, quota.Prices) {
	s.mu.Lock()
	defer s.mu.Unlock()
	every := s.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if s.read.IsZero() || s.Clock.Since(s.read) >= every {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		_ = s.refreshLocked(ctx) // logged; the last good quota stays
		cancel()
	}
	return s.budget, s.prices
}

// Budget is agenthost.Host.Budget: the namespace's budget; another tenant
// (there is none in a session pod) has none.
func (s *Source) Budget(tenant string) quota.Budget {
	if tenant != s.Namespace {
		return quota.Budget{}
	}
	b, _ := s.current()
	return b
}

// Prices is agenthost.Host.Prices; nil is the built-in prices.
func (s *Source) Prices(tenant string) quota.Prices {
	if tenant != s.Namespace {
		return nil
	}
	_, p := s.current()
	return p
}
