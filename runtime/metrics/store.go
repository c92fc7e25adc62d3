package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picobot/picobot/runtime/store"
)

// storeBuckets are the latencies of store operations: a local SQLite write
// is tens of microseconds, a PostgreSQL round trip a millisecond or so.
var storeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5}

// storeMetrics are the store's metrics.
type storeMetrics struct {
	seconds *prometheus.HistogramVec
	errors  *prometheus.CounterVec
}

func newStoreMetrics() *storeMetrics {
	return &storeMetrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "store", Name: "operation_duration_seconds",
			Help: "Time of the store operations of a turn's hot path, by operation (the store.Store method).", Buckets: storeBuckets},
			[]string{"operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "store", Name: "operation_errors_total",
			Help: "Store operations of a turn's hot path that failed, not counting not-found, by operation."}, []string{"operation"}),
	}
}

func (s *storeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.seconds, s.errors}
}

// Stores are what a process's store implements: the Store and the cron and
// task stores (both store implementations implement all three).
type Stores interface {
	store.Store
	store.CronStore
	store.TaskStore
}

// Store returns st timing the operations of a turn's hot path (sessions,
// messages, leases, memory search, usage, the audit log, turn errors, cron
// claims) by their method's name — a fixed set, so the label is bounded.
// The other operations pass through untimed. It returns st itself when m is
// nil.
func (m *Metrics) Store(st Stores) Stores {
	if m == nil || st == nil {
		return st
	}
	return &meteredStore{Stores: st, m: m}
}

// meteredStore is a store that times the hot path's operations.
type meteredStore struct {
	Stores
	m *Metrics
}

// timed records one operation that started at start and ended with err.
func (s *meteredStore) timed(op string, start time.Time, err error) {
	s.m.store.seconds.WithLabelValues(op).Observe(s.m.clock.Since(start).Seconds())
	if err != nil && !errorsIsNotFound(err) {
		s.m.store.errors.WithLabelValues(op).Inc()
	}
}

func errorsIsNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// CreateSession implements store.Store.
func (s *meteredStore) CreateSession(ctx context.Context, se store.Session) (store.Session, error) {
	start := s.m.clock.Now()
	out, err := s.Stores.CreateSession(ctx, se)
	s.timed("CreateSession", start, err)
	return out, err
}

// GetSession implements store.Store.
func (s *meteredStore) GetSession(ctx context.Context, id string) (store.Session, error) {
	start := s.m.clock.Now()
	out, err := s.Stores.GetSession(ctx, id)
	s.timed("GetSession", start, err)
	return out, err
}

// AppendMessages implements store.Store.
func (s *meteredStore) AppendMessages(ctx context.Context, sessionID string, msgs ...store.Message) ([]store.Message, error) {
	start := s.m.clock.Now()
	out, err := s.Stores.AppendMessages(ctx, sessionID, msgs...)
	s.timed("AppendMessages", start, err)
	return out, err
}

// LoadMessages implements store.Store.
func (s *meteredStore) LoadMessages(ctx context.Context, sessionID string, opts store.LoadOptions) ([]store.Message, error) {
	start := s.m.clock.Now()
	out, err := s.Stores.LoadMessages(ctx, sessionID, opts)
	s.timed("LoadMessages", start, err)
	return out, err
}

// AcquireLease implements store.Store.
func (s *meteredStore) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (bool, error) {
	start := s.m.clock.Now()
	ok, err := s.Stores.AcquireLease(ctx, sessionID, holder, ttl)
	s.timed("AcquireLease", start, err)
	return ok, err
}

// RenewLease implements store.Store.
func (s *meteredStore) RenewLease(ctx context.Context, sessionID, holder string, ttl time.Duration) error {
	start := s.m.clock.Now()
	err := s.Stores.RenewLease(ctx, sessionID, holder, ttl)
	s.timed("RenewLease", start, err)
	return err
}

// SearchMemories implements store.MemorySearcher.
func (s *meteredStore) SearchMemories(ctx context.Context, q store.MemoryQuery) ([]store.MemoryHit, error) {
	start := s.m.clock.Now()
	out, err := s.Stores.SearchMemories(ctx, q)
	s.timed("SearchMemories", start, err)
	return out, err
}

// AddUsage implements store.Store.
func (s *meteredStore) AddUsage(ctx context.Context, d store.UsageDelta) error {
	start := s.m.clock.Now()
	err := s.Stores.AddUsage(ctx, d)
	s.timed("AddUsage", start, err)
	return err
}

// UsageTotals implements store.Store.
func (s *meteredStore) UsageTotals(ctx context.Context, day time.Time) (store.UsageTotals, error) {
	start := s.m.clock.Now()
	out, err := s.Stores.UsageTotals(ctx, day)
	s.timed("UsageTotals", start, err)
	return out, err
}

// AppendAudit implements store.Store.
func (s *meteredStore) AppendAudit(ctx context.Context, r store.AuditRecord) error {
	start := s.m.clock.Now()
	err := s.Stores.AppendAudit(ctx, r)
	s.timed("AppendAudit", start, err)
	return err
}

// PutTurnError implements store.Store.
func (s *meteredStore) PutTurnError(ctx context.Context, e store.TurnError) error {
	start := s.m.clock.Now()
	err := s.Stores.PutTurnError(ctx, e)
	s.timed("PutTurnError", start, err)
	return err
}

// ClaimCronRun implements store.Store.
func (s *meteredStore) ClaimCronRun(ctx context.Context, run store.CronRun) (bool, error) {
	start := s.m.clock.Now()
	ok, err := s.Stores.ClaimCronRun(ctx, run)
	s.timed("ClaimCronRun", start, err)
	return ok, err
}
