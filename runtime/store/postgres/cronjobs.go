package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store"
)

var _ store.CronStore = (*Store)(nil)

// CreateCronJob implements store.CronStore.
func (s *Store) CreateCronJob(ctx context.Context, j store.CronJob) (store.CronJob, error) {
	if err := j.Validate(); err != nil {
		return store.CronJob{}, fmt.Errorf("failed to create cron job %q: %w", j.Name, err)
	}
	out, err := one(ctx, s, scanCronJob, sqlCreateCronJob, j.Name, j.DisplayName, j.Agent, []byte(j.Spec), nullTime(j.CreatedAt), j.Origin)
	if err != nil {
		return store.CronJob{}, fmt.Errorf("failed to create cron job %q: %w", j.Name, err)
	}
	return out, nil
}

// GetCronJob implements store.CronStore.
func (s *Store) GetCronJob(ctx context.Context, name string) (store.CronJob, error) {
	out, err := one(ctx, s, scanCronJob, sqlGetCronJob, name)
	if err != nil {
		return store.CronJob{}, fmt.Errorf("failed to get cron job %q: %w", name, err)
	}
	return out, nil
}

// ListCronJobs implements store.CronStore.
func (s *Store) ListCronJobs(ctx context.Context, f store.CronJobFilter) ([]store.CronJob, error) {
	out, err := many(ctx, s, scanCronJob, sqlListCronJobs, f.Agent, store.ListLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list cron jobs: %w", err)
	}
	return out, nil
}

// UpdateCronJob implements store.CronStore.
func (s *Store) UpdateCronJob(ctx context.Context, name string, u store.CronJobUpdate) (store.CronJob, error) {
	if err := u.Validate(); err != nil {
		return store.CronJob{}, fmt.Errorf("failed to update cron job %q: %w", name, err)
	}
	var spec []byte
	if u.Spec != nil {
		spec = u.Spec
	}
	out, err := one(ctx, s, scanCronJob, sqlUpdateCronJob, name, u.DisplayName, spec, u.IfVersion)
	if errors.Is(err, store.ErrNotFound) && u.IfVersion != 0 {
		if _, gerr := s.GetCronJob(ctx, name); gerr == nil {
			err = store.ErrVersionConflict
		}
	}
	if err != nil {
		return store.CronJob{}, fmt.Errorf("failed to update cron job %q: %w", name, err)
	}
	return out, nil
}

// DeleteCronJob implements store.CronStore.
func (s *Store) DeleteCronJob(ctx context.Context, name string) error {
	tag, err := exec(ctx, s, sqlDeleteCronJob, name)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("failed to delete cron job %q: %w", name, err)
	}
	return nil
}

// ClaimCronRuns implements store.CronStore: the whole batch is one INSERT
// of arrays, so a scheduler firing thousands of jobs in a second makes a
// handful of round trips.
func (s *Store) ClaimCronRuns(ctx context.Context, claims []store.CronClaim) ([]bool, error) {
	n := len(claims)
	won := make([]bool, n)
	if n == 0 {
		return won, nil
	}
	var (
		jobs, ids, states, outcomes, messages, deliveries = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		agents, sessions, channels, chats, errs           = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		scheduled                                         = make([]time.Time, n)
		started, finished                                 = make([]*time.Time, n), make([]*time.Time, n)
		index                                             = make(map[string]int, n)
	)
	for i, c := range claims {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("failed to claim cron run %q of %q: %w", c.Run.RunID, c.Run.Job, err)
		}
		r, d := c.Run, c.Detail
		state := r.State
		if state == "" {
			state = store.CronClaimed
		}
		jobs[i], ids[i], scheduled[i], states[i], outcomes[i], messages[i] = r.Job, r.RunID, micro(r.ScheduledTime), string(state),
			string(r.Outcome), r.Message
		started[i], finished[i], deliveries[i] = microPtr(r.StartedAt), microPtr(r.FinishedAt), string(r.Delivery)
		agents[i], sessions[i], channels[i], chats[i], errs[i] = d.Agent, d.SessionID, d.Channel, d.ChatID, d.DeliveryError
		index[r.RunID] = i
	}
	ids2, err := many(ctx, s, pgx.RowTo[string], sqlClaimCronRuns, jobs, ids, scheduled, states, outcomes, messages, started,
		finished, deliveries, agents, sessions, channels, chats, errs)
	if err != nil {
		return nil, fmt.Errorf("failed to claim %d cron runs: %w", n, err)
	}
	for _, id := range ids2 {
		won[index[id]] = true
	}
	return won, nil
}

// UpdateCronRunDetail implements store.CronStore.
func (s *Store) UpdateCronRunDetail(ctx context.Context, runID string, u store.CronRunUpdate, d store.CronRunDetailUpdate) (store.DetailedCronRun, error) {
	if err := errors.Join(u.Validate(), d.Validate()); err != nil {
		return store.DetailedCronRun{}, fmt.Errorf("failed to update cron run %q: %w", runID, err)
	}
	out, err := one(ctx, s, scanDetailedCronRun, sqlUpdateCronRunDetail, runID, (*string)(u.State), (*string)(u.Outcome),
		u.Message, microPtr(u.StartedAt), microPtr(u.FinishedAt), (*string)(u.Delivery), d.Agent, d.SessionID, d.Channel,
		d.ChatID, d.DeliveryError)
	if err != nil {
		return store.DetailedCronRun{}, fmt.Errorf("failed to update cron run %q: %w", runID, err)
	}
	return out, nil
}

// GetDetailedCronRun implements store.CronStore.
func (s *Store) GetDetailedCronRun(ctx context.Context, runID string) (store.DetailedCronRun, error) {
	out, err := one(ctx, s, scanDetailedCronRun, sqlGetDetailedCronRun, runID)
	if err != nil {
		return store.DetailedCronRun{}, fmt.Errorf("failed to get cron run %q: %w", runID, err)
	}
	return out, nil
}

// ListDetailedCronRuns implements store.CronStore.
func (s *Store) ListDetailedCronRuns(ctx context.Context, job string, limit int) ([]store.DetailedCronRun, error) {
	out, err := many(ctx, s, scanDetailedCronRun, sqlListDetailedCronRuns, job, store.ListLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list cron runs of %q: %w", job, err)
	}
	return out, nil
}

// LastCronRunTimes implements store.CronStore.
func (s *Store) LastCronRunTimes(ctx context.Context, until map[string]time.Time) (map[string]time.Time, error) {
	type last struct {
		job string
		at  time.Time
	}
	jobs, bounds := make([]string, 0, len(until)), make([]time.Time, 0, len(until))
	for job, t := range until {
		jobs, bounds = append(jobs, job), append(bounds, micro(t))
	}
	rows, err := many(ctx, s, func(row pgx.CollectableRow) (last, error) {
		var l last
		err := row.Scan(&l.job, &l.at)
		return l, err
	}, sqlLastCronRunTimes, jobs, bounds)
	if err != nil {
		return nil, fmt.Errorf("failed to read the last runs of %d cron jobs: %w", len(jobs), err)
	}
	out := make(map[string]time.Time, len(rows))
	for _, l := range rows {
		out[l.job] = utc(l.at)
	}
	return out, nil
}

// ListUnfinishedCronRuns implements store.CronStore.
func (s *Store) ListUnfinishedCronRuns(ctx context.Context, job string, limit int) ([]store.DetailedCronRun, error) {
	out, err := many(ctx, s, scanDetailedCronRun, sqlListUnfinishedCronRuns, job, store.ListLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list unfinished cron runs: %w", err)
	}
	return out, nil
}

func scanCronJob(row pgx.CollectableRow) (store.CronJob, error) {
	var j store.CronJob
	var spec []byte
	err := row.Scan(&j.Tenant, &j.Name, &j.DisplayName, &j.Agent, &spec, &j.Version, &j.CreatedAt, &j.UpdatedAt, &j.Origin)
	j.Spec = spec
	j.CreatedAt, j.UpdatedAt = utc(j.CreatedAt), utc(j.UpdatedAt)
	return j, err
}

func scanDetailedCronRun(row pgx.CollectableRow) (store.DetailedCronRun, error) {
	var (
		r                        store.DetailedCronRun
		state, outcome, delivery string
	)
	err := row.Scan(&r.Tenant, &r.Job, &r.RunID, &r.ScheduledTime, &state, &outcome, &r.Message, &r.StartedAt,
		&r.FinishedAt, &delivery, &r.Detail.Agent, &r.Detail.SessionID, &r.Detail.Channel, &r.Detail.ChatID,
		&r.Detail.DeliveryError)
	r.State, r.Outcome, r.Delivery = store.CronRunState(state), store.CronOutcome(outcome), store.CronDelivery(delivery)
	r.ScheduledTime, r.StartedAt, r.FinishedAt = utc(r.ScheduledTime), utcPtr(r.StartedAt), utcPtr(r.FinishedAt)
	return r, err
}
