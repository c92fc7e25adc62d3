package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

var _ store.CronStore = (*Store)(nil)

// CreateCronJob implements store.CronStore.
func (s *Store) CreateCronJob(ctx context.Context, j store.CronJob) (store.CronJob, error) {
	if err := j.Validate(); err != nil {
		return store.CronJob{}, fmt.Errorf("failed to create cron job %q: %w", j.Name, err)
	}
	created := s.now()
	if !j.CreatedAt.IsZero() {
		created = micros(j.CreatedAt)
	}
	out, err := one(ctx, s, true, scanCronJob, sqlCreateCronJob, j.Name, j.DisplayName, j.Agent, string(j.Spec), created, j.Origin)
	if err != nil {
		return store.CronJob{}, fmt.Errorf("failed to create cron job %q: %w", j.Name, err)
	}
	return out, nil
}

// GetCronJob implements store.CronStore.
func (s *Store) GetCronJob(ctx context.Context, name string) (store.CronJob, error) {
	out, err := one(ctx, s, false, scanCronJob, sqlGetCronJob, name)
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
	var spec *string
	if u.Spec != nil {
		v := string(u.Spec)
		spec = &v
	}
	out, err := one(ctx, s, true, scanCronJob, sqlUpdateCronJob, name, u.DisplayName, spec, u.IfVersion, s.now())
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
	res, err := exec(ctx, s, sqlDeleteCronJob, name)
	if err == nil {
		if n, rerr := res.RowsAffected(); rerr != nil {
			err = rerr
		} else if n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("failed to delete cron job %q: %w", name, err)
	}
	return nil
}

// ClaimCronRuns implements store.CronStore: every insert goes in one write
// transaction.
func (s *Store) ClaimCronRuns(ctx context.Context, claims []store.CronClaim) ([]bool, error) {
	for _, c := range claims {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("failed to claim cron run %q of %q: %w", c.Run.RunID, c.Run.Job, err)
		}
	}
	won := make([]bool, len(claims))
	if len(claims) == 0 {
		return won, nil
	}
	err := s.write(ctx, func(tx *txn, tenant string) error {
		for i, c := range claims {
			r, d := c.Run, c.Detail
			state := r.State
			if state == "" {
				state = store.CronClaimed
			}
			res, err := tx.ExecContext(ctx, sqlClaimCronRunDetailed, tenant, r.Job, r.RunID, micros(r.ScheduledTime), string(state),
				string(r.Outcome), r.Message, microsPtr(r.StartedAt), microsPtr(r.FinishedAt), string(r.Delivery), d.Agent,
				d.SessionID, d.Channel, d.ChatID, d.DeliveryError)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			won[i] = n == 1
		}
		return nil
	})
	if err = classify(err); err != nil {
		return nil, fmt.Errorf("failed to claim %d cron runs: %w", len(claims), err)
	}
	return won, nil
}

// UpdateCronRunDetail implements store.CronStore.
func (s *Store) UpdateCronRunDetail(ctx context.Context, runID string, u store.CronRunUpdate, d store.CronRunDetailUpdate) (store.DetailedCronRun, error) {
	if err := errors.Join(u.Validate(), d.Validate()); err != nil {
		return store.DetailedCronRun{}, fmt.Errorf("failed to update cron run %q: %w", runID, err)
	}
	out, err := one(ctx, s, true, scanDetailedCronRun, sqlUpdateCronRunDetail, runID, (*string)(u.State), (*string)(u.Outcome),
		u.Message, microsPtr(u.StartedAt), microsPtr(u.FinishedAt), (*string)(u.Delivery), d.Agent, d.SessionID, d.Channel,
		d.ChatID, d.DeliveryError)
	if err != nil {
		return store.DetailedCronRun{}, fmt.Errorf("failed to update cron run %q: %w", runID, err)
	}
	return out, nil
}

// GetDetailedCronRun implements store.CronStore.
func (s *Store) GetDetailedCronRun(ctx context.Context, runID string) (store.DetailedCronRun, error) {
	out, err := one(ctx, s, false, scanDetailedCronRun, sqlGetDetailedCronRun, runID)
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
		at  int64
	}
	jobs := make([][2]any, 0, len(until))
	for job, t := range until {
		jobs = append(jobs, [2]any{job, micros(t)})
	}
	list, err := json.Marshal(jobs)
	if err != nil {
		return nil, fmt.Errorf("failed to encode job names: %w", err)
	}
	rows, err := many(ctx, s, func(row scanner) (last, error) {
		var l last
		err := row.Scan(&l.job, &l.at)
		return l, err
	}, sqlLastCronRunTimes, string(list))
	if err != nil {
		return nil, fmt.Errorf("failed to read the last runs of %d cron jobs: %w", len(jobs), err)
	}
	out := make(map[string]time.Time, len(rows))
	for _, l := range rows {
		out[l.job] = fromMicros(l.at)
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

func scanCronJob(row scanner) (store.CronJob, error) {
	var (
		j                store.CronJob
		spec             string
		created, updated int64
	)
	err := row.Scan(&j.Tenant, &j.Name, &j.DisplayName, &j.Agent, &spec, &j.Version, &created, &updated, &j.Origin)
	j.Spec = json.RawMessage(spec)
	j.CreatedAt, j.UpdatedAt = fromMicros(created), fromMicros(updated)
	return j, err
}

func scanDetailedCronRun(row scanner) (store.DetailedCronRun, error) {
	var (
		r                        store.DetailedCronRun
		state, outcome, delivery string
		scheduled                int64
		started, finished        sql.NullInt64
	)
	err := row.Scan(&r.Tenant, &r.Job, &r.RunID, &scheduled, &state, &outcome, &r.Message, &started, &finished,
		&delivery, &r.Detail.Agent, &r.Detail.SessionID, &r.Detail.Channel, &r.Detail.ChatID, &r.Detail.DeliveryError)
	r.State, r.Outcome, r.Delivery = store.CronRunState(state), store.CronOutcome(outcome), store.CronDelivery(delivery)
	r.ScheduledTime, r.StartedAt, r.FinishedAt = fromMicros(scheduled), fromNull(started), fromNull(finished)
	return r, err
}
