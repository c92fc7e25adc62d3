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

// PutMemory implements store.Store.
func (s *Store) PutMemory(ctx context.Context, m store.Memory) (store.Memory, error) {
	if err := m.Validate(); err != nil {
		return store.Memory{}, fmt.Errorf("failed to put memory %q: %w", m.Key, err)
	}
	if m.ID == "" {
		m.ID = store.NewID()
	}
	// The store stamps the times; the terms are indexed in the same
	// transaction (memsearch.go).
	m.CreatedAt, m.UpdatedAt = time.Time{}, time.Time{}
	var out store.Memory
	err := s.write(ctx, func(tx *txn, tenant string) error {
		var err error
		out, err = putMemory(ctx, tx, tenant, m, s.now())
		return err
	})
	if err = classify(err); err != nil {
		return store.Memory{}, fmt.Errorf("failed to put memory %q: %w", m.Key, err)
	}
	return out, nil
}

// GetMemory implements store.Store.
func (s *Store) GetMemory(ctx context.Context, agent, key string) (store.Memory, error) {
	out, err := one(ctx, s, false, scanMemory, sqlGetMemory, agent, key)
	if err != nil {
		return store.Memory{}, fmt.Errorf("failed to get memory %q of agent %q: %w", key, agent, err)
	}
	return out, nil
}

// DeleteMemory implements store.Store.
func (s *Store) DeleteMemory(ctx context.Context, agent, key string) error {
	res, err := exec(ctx, s, sqlDeleteMemory, agent, key)
	if err == nil {
		err = atLeastOne(res)
	}
	if err != nil {
		return fmt.Errorf("failed to delete memory %q of agent %q: %w", key, agent, err)
	}
	return nil
}

// ListMemories implements store.Store.
func (s *Store) ListMemories(ctx context.Context, f store.MemoryFilter) ([]store.Memory, error) {
	out, err := many(ctx, s, scanMemory, sqlListMemories, f.Agent, string(f.Category), f.SessionID, store.ListLimit(f.Limit),
		f.KeyPrefix)
	if err != nil {
		return nil, fmt.Errorf("failed to list memories of agent %q: %w", f.Agent, err)
	}
	return out, nil
}

// ClaimCronRun implements store.Store.
func (s *Store) ClaimCronRun(ctx context.Context, r store.CronRun) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, fmt.Errorf("failed to claim cron run %q of %q: %w", r.RunID, r.Job, err)
	}
	res, err := exec(ctx, s, sqlClaimCronRun, r.Job, r.RunID, micros(r.ScheduledTime), string(r.Outcome), r.Message,
		microsPtr(r.StartedAt), microsPtr(r.FinishedAt), string(r.Delivery))
	if err != nil {
		return false, fmt.Errorf("failed to claim cron run %q of %q: %w", r.RunID, r.Job, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("failed to claim cron run %q of %q: %w", r.RunID, r.Job, err)
	}
	return n == 1, nil
}

// GetCronRun implements store.Store.
func (s *Store) GetCronRun(ctx context.Context, runID string) (store.CronRun, error) {
	out, err := one(ctx, s, false, scanCronRun, sqlGetCronRun, runID)
	if err != nil {
		return store.CronRun{}, fmt.Errorf("failed to get cron run %q: %w", runID, err)
	}
	return out, nil
}

// UpdateCronRun implements store.Store.
func (s *Store) UpdateCronRun(ctx context.Context, runID string, u store.CronRunUpdate) (store.CronRun, error) {
	if err := u.Validate(); err != nil {
		return store.CronRun{}, fmt.Errorf("failed to update cron run %q: %w", runID, err)
	}
	out, err := one(ctx, s, true, scanCronRun, sqlUpdateCronRun, runID, (*string)(u.State), (*string)(u.Outcome),
		u.Message, microsPtr(u.StartedAt), microsPtr(u.FinishedAt), (*string)(u.Delivery))
	if err != nil {
		return store.CronRun{}, fmt.Errorf("failed to update cron run %q: %w", runID, err)
	}
	return out, nil
}

// ListCronRuns implements store.Store.
func (s *Store) ListCronRuns(ctx context.Context, job string, limit int) ([]store.CronRun, error) {
	out, err := many(ctx, s, scanCronRun, sqlListCronRuns, job, store.ListLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list cron runs of %q: %w", job, err)
	}
	return out, nil
}

// CreateAgentRun implements store.Store.
func (s *Store) CreateAgentRun(ctx context.Context, r store.AgentRun) (store.AgentRun, error) {
	if err := r.Validate(); err != nil {
		return store.AgentRun{}, fmt.Errorf("failed to create agent run %q: %w", r.ID, err)
	}
	if r.Status == "" {
		r.Status = store.RunQueued
	}
	if r.Mode == "" {
		r.Mode = store.RunForeground
	}
	out, err := one(ctx, s, true, scanAgentRun, sqlCreateAgentRun, r.ID, r.Agent, r.SessionID, r.ParentRunID,
		string(r.Status), r.Input, r.Result, s.now(), string(r.Mode), r.ParentAgent, string(r.Completion))
	if err != nil {
		return store.AgentRun{}, fmt.Errorf("failed to create agent run %q: %w", r.ID, err)
	}
	return out, nil
}

// GetAgentRun implements store.Store.
func (s *Store) GetAgentRun(ctx context.Context, id string) (store.AgentRun, error) {
	out, err := one(ctx, s, false, scanAgentRun, sqlGetAgentRun, id)
	if err != nil {
		return store.AgentRun{}, fmt.Errorf("failed to get agent run %q: %w", id, err)
	}
	return out, nil
}

// UpdateAgentRun implements store.Store.
func (s *Store) UpdateAgentRun(ctx context.Context, id string, u store.AgentRunUpdate) (store.AgentRun, error) {
	if err := u.Validate(); err != nil {
		return store.AgentRun{}, fmt.Errorf("failed to update agent run %q: %w", id, err)
	}
	out, err := one(ctx, s, true, scanAgentRun, sqlUpdateAgentRun, id, (*string)(u.Status), u.Result, s.now(),
		(*string)(u.Completion), u.IfActive, string(u.IfCompletion))
	if errors.Is(err, store.ErrNotFound) && (u.IfActive || u.IfCompletion != "") {
		if _, gerr := s.GetAgentRun(ctx, id); gerr == nil {
			err = store.ErrRunFinished
		}
	}
	if err != nil {
		return store.AgentRun{}, fmt.Errorf("failed to update agent run %q: %w", id, err)
	}
	return out, nil
}

// ListAgentRuns implements store.Store.
func (s *Store) ListAgentRuns(ctx context.Context, f store.AgentRunFilter) ([]store.AgentRun, error) {
	var cursor int64
	if !f.CursorCreatedAt.IsZero() {
		cursor = micros(f.CursorCreatedAt)
	}
	out, err := many(ctx, s, scanAgentRun, sqlListAgentRuns, f.Agent, f.SessionID, f.ParentRunID, string(f.Status),
		store.ListLimit(f.Limit), string(f.Mode), string(f.Completion), cursor, f.CursorID, f.Active)
	if err != nil {
		return nil, fmt.Errorf("failed to list agent runs: %w", err)
	}
	return out, nil
}

// DeleteAgentRuns implements store.Store.
func (s *Store) DeleteAgentRuns(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *txn, tenant string) error {
		res, err := tx.ExecContext(ctx, sqlDeleteAgentRuns, tenant, micros(before))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlDeleteAgentSignals, tenant, micros(before))
		return err
	})
	if err = classify(err); err != nil {
		return 0, fmt.Errorf("failed to delete agent runs: %w", err)
	}
	return int(n), nil
}

// CreateAgentSignal implements store.Store.
func (s *Store) CreateAgentSignal(ctx context.Context, sig store.AgentSignal) (store.AgentSignal, error) {
	if err := sig.Validate(); err != nil {
		return store.AgentSignal{}, fmt.Errorf("failed to create agent signal %q: %w", sig.ID, err)
	}
	if sig.State == "" {
		sig.State = store.SignalPending
	}
	out, err := one(ctx, s, true, scanAgentSignal, sqlCreateAgentSignal, sig.ID, sig.RunID, sig.SessionID,
		string(sig.Delivery), sig.Kind, sig.Body, string(sig.State), s.now())
	if err != nil {
		return store.AgentSignal{}, fmt.Errorf("failed to create agent signal %q: %w", sig.ID, err)
	}
	return out, nil
}

// ListAgentSignals implements store.Store.
func (s *Store) ListAgentSignals(ctx context.Context, f store.AgentSignalFilter) ([]store.AgentSignal, error) {
	out, err := many(ctx, s, scanAgentSignal, sqlListAgentSignals, f.SessionID, f.RunID, string(f.Delivery),
		string(f.State), store.ListLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list agent signals: %w", err)
	}
	return out, nil
}

// MarkAgentSignals implements store.Store.
func (s *Store) MarkAgentSignals(ctx context.Context, ids []string, runID string, state store.SignalState) (int, error) {
	if err := (store.AgentSignal{ID: "x", RunID: "x", SessionID: "x", Body: "x", Delivery: store.SignalQueue, State: state}).Validate(); err != nil {
		return 0, fmt.Errorf("failed to mark agent signals: %w", err)
	}
	var list any
	if ids != nil {
		b, err := json.Marshal(ids)
		if err != nil {
			return 0, fmt.Errorf("failed to mark agent signals: %w", err)
		}
		list = string(b)
	}
	res, err := exec(ctx, s, sqlMarkAgentSignals, list, runID, string(state), s.now())
	if err != nil {
		return 0, fmt.Errorf("failed to mark agent signals: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// CreateDelivery implements store.Store.
func (s *Store) CreateDelivery(ctx context.Context, d store.Delivery) (store.Delivery, error) {
	if err := d.Validate(); err != nil {
		return store.Delivery{}, fmt.Errorf("failed to create delivery %q: %w", d.ID, err)
	}
	if d.Status == "" {
		d.Status = store.DeliveryPending
	}
	out, err := one(ctx, s, true, scanDelivery, sqlCreateDelivery, d.ID, d.Channel, d.ChatID, d.SessionID,
		string(d.Status), d.Attempts, d.LastError, s.now())
	if err != nil {
		return store.Delivery{}, fmt.Errorf("failed to create delivery %q: %w", d.ID, err)
	}
	return out, nil
}

// GetDelivery implements store.Store.
func (s *Store) GetDelivery(ctx context.Context, id string) (store.Delivery, error) {
	out, err := one(ctx, s, false, scanDelivery, sqlGetDelivery, id)
	if err != nil {
		return store.Delivery{}, fmt.Errorf("failed to get delivery %q: %w", id, err)
	}
	return out, nil
}

// UpdateDelivery implements store.Store.
func (s *Store) UpdateDelivery(ctx context.Context, id string, u store.DeliveryUpdate) (store.Delivery, error) {
	if err := u.Validate(); err != nil {
		return store.Delivery{}, fmt.Errorf("failed to update delivery %q: %w", id, err)
	}
	out, err := one(ctx, s, true, scanDelivery, sqlUpdateDelivery, id, (*string)(u.Status), u.LastError, u.AddAttempt,
		s.now())
	if err != nil {
		return store.Delivery{}, fmt.Errorf("failed to update delivery %q: %w", id, err)
	}
	return out, nil
}

// ListDeliveries implements store.Store.
func (s *Store) ListDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.Delivery, error) {
	out, err := many(ctx, s, scanDelivery, sqlListDeliveries, string(f.Status), f.SessionID, store.ListLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list deliveries: %w", err)
	}
	return out, nil
}

// CreateArtifact implements store.Store.
func (s *Store) CreateArtifact(ctx context.Context, a store.Artifact) (store.Artifact, error) {
	if err := a.Validate(); err != nil {
		return store.Artifact{}, fmt.Errorf("failed to create artifact %q: %w", a.ID, err)
	}
	out, err := one(ctx, s, true, scanArtifact, sqlCreateArtifact, a.ID, a.SessionID, a.Name, a.MediaType, a.BlobKey,
		a.Size, s.now())
	if err != nil {
		return store.Artifact{}, fmt.Errorf("failed to create artifact %q: %w", a.ID, err)
	}
	return out, nil
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, id string) (store.Artifact, error) {
	out, err := one(ctx, s, false, scanArtifact, sqlGetArtifact, id)
	if err != nil {
		return store.Artifact{}, fmt.Errorf("failed to get artifact %q: %w", id, err)
	}
	return out, nil
}

// ListArtifacts implements store.Store.
func (s *Store) ListArtifacts(ctx context.Context, sessionID string) ([]store.Artifact, error) {
	out, err := many(ctx, s, scanArtifact, sqlListArtifacts, sessionID)
	if err != nil {
		return nil, fmt.Errorf("failed to list artifacts of session %q: %w", sessionID, err)
	}
	return out, nil
}

// DeleteArtifact implements store.Store.
func (s *Store) DeleteArtifact(ctx context.Context, id string) error {
	res, err := exec(ctx, s, sqlDeleteArtifact, id)
	if err == nil {
		err = atLeastOne(res)
	}
	if err != nil {
		return fmt.Errorf("failed to delete artifact %q: %w", id, err)
	}
	return nil
}

// atLeastOne turns a statement that touched no row into ErrNotFound.
func atLeastOne(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// GetSessionPlan implements store.Store.
func (s *Store) GetSessionPlan(ctx context.Context, sessionID string) ([]byte, error) {
	plan, err := one(ctx, s, false, func(row scanner) ([]byte, error) {
		var p string
		err := row.Scan(&p)
		return []byte(p), err
	}, sqlGetSessionPlan, sessionID)
	if err != nil {
		return nil, fmt.Errorf("failed to get the plan of session %q: %w", sessionID, err)
	}
	return plan, nil
}

// PutSessionPlan implements store.Store.
func (s *Store) PutSessionPlan(ctx context.Context, sessionID string, plan []byte) error {
	if err := store.ValidatePlan(sessionID, plan); err != nil {
		return fmt.Errorf("failed to store the plan of session %q: %w", sessionID, err)
	}
	if _, err := exec(ctx, s, sqlPutSessionPlan, sessionID, string(plan), s.now()); err != nil {
		return fmt.Errorf("failed to store the plan of session %q: %w", sessionID, err)
	}
	return nil
}

// PutTurnError implements store.Store.
func (s *Store) PutTurnError(ctx context.Context, e store.TurnError) error {
	if err := store.ValidateTurnError(e); err != nil {
		return fmt.Errorf("failed to record the error of message %q: %w", e.MessageID, err)
	}
	at := s.now()
	if !e.CreatedAt.IsZero() {
		at = micros(e.CreatedAt)
	}
	if _, err := exec(ctx, s, sqlPutTurnError, e.SessionID, e.MessageID, e.Code, e.Message, at); err != nil {
		return fmt.Errorf("failed to record the error of message %q: %w", e.MessageID, err)
	}
	return nil
}

// TurnErrors implements store.Store.
func (s *Store) TurnErrors(ctx context.Context, sessionID string, messageIDs []string) ([]store.TurnError, error) {
	if len(messageIDs) > store.MaxTurnErrorIDs {
		return nil, fmt.Errorf("%w: %d message ids, more than %d", store.ErrInvalid, len(messageIDs), store.MaxTurnErrorIDs)
	}
	if len(messageIDs) == 0 {
		return nil, nil
	}
	ids, err := json.Marshal(messageIDs)
	if err != nil {
		return nil, err
	}
	out, err := many(ctx, s, func(row scanner) (store.TurnError, error) {
		var e store.TurnError
		var at int64
		err := row.Scan(&e.SessionID, &e.MessageID, &e.Code, &e.Message, &at)
		e.CreatedAt = fromMicros(at)
		return e, err
	}, sqlTurnErrors, sessionID, string(ids))
	if err != nil {
		return nil, fmt.Errorf("failed to read the turn errors of session %q: %w", sessionID, err)
	}
	return out, nil
}

// AddUsage implements store.Store.
func (s *Store) AddUsage(ctx context.Context, d store.UsageDelta) error {
	if err := store.ValidateUsageDelta(d); err != nil {
		return fmt.Errorf("failed to add usage of agent %q: %w", d.Agent, err)
	}
	c := d.UsageCounts
	if _, err := exec(ctx, s, sqlAddUsage, d.Agent, usageDay(d.Day),
		c.InputTokens, c.OutputTokens, c.CostMicros, c.ModelCalls, c.Turns, c.ToolCalls, c.Sessions); err != nil {
		return fmt.Errorf("failed to add usage of agent %q: %w", d.Agent, err)
	}
	return nil
}

// usageRange is f's days, unbounded ends replaced by far dates.
func usageRange(f store.UsageFilter) (from, to time.Time) {
	from, to = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	if !f.From.IsZero() {
		from = store.UsageDayOf(f.From)
	}
	if !f.To.IsZero() {
		to = store.UsageDayOf(f.To)
	}
	return from, to
}

// ListUsage implements store.Store.
func (s *Store) ListUsage(ctx context.Context, f store.UsageFilter) ([]store.UsageDay, error) {
	from, to := usageRange(f)
	out, err := many(ctx, s, func(row scanner) (store.UsageDay, error) {
		var u store.UsageDay
		var day string
		c := &u.UsageCounts
		err := row.Scan(&u.Agent, &day, &c.InputTokens, &c.OutputTokens, &c.CostMicros, &c.ModelCalls, &c.Turns, &c.ToolCalls, &c.Sessions)
		if err != nil {
			return u, err
		}
		u.Day, err = time.Parse(time.DateOnly, day)
		return u, err
	}, sqlListUsage, f.Agent, usageDay(from), usageDay(to))
	if err != nil {
		return nil, fmt.Errorf("failed to list usage: %w", err)
	}
	return out, nil
}

// UsageTotals implements store.Store.
func (s *Store) UsageTotals(ctx context.Context, day time.Time) (store.UsageTotals, error) {
	d := store.UsageDayOf(day)
	first := time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC)
	t, err := one(ctx, s, false, func(row scanner) (store.UsageTotals, error) {
		var t store.UsageTotals
		a, b := &t.Day, &t.Month
		err := row.Scan(&a.InputTokens, &a.OutputTokens, &a.CostMicros, &a.ModelCalls, &a.Turns, &a.ToolCalls, &a.Sessions,
			&b.InputTokens, &b.OutputTokens, &b.CostMicros, &b.ModelCalls, &b.Turns, &b.ToolCalls, &b.Sessions)
		return t, err
	}, sqlUsageTotals, usageDay(d), usageDay(first))
	if err != nil {
		return store.UsageTotals{}, fmt.Errorf("failed to sum usage: %w", err)
	}
	return t, nil
}

// usageDay is the schema's form of a usage day (YYYY-MM-DD, which sorts
// and compares as the dates do).
func usageDay(t time.Time) string { return store.UsageDayOf(t).Format(time.DateOnly) }

// ClaimNotice implements store.Store.
func (s *Store) ClaimNotice(ctx context.Context, key string, now, expires time.Time) (bool, error) {
	if err := store.ValidateNotice(key, now, expires); err != nil {
		return false, fmt.Errorf("failed to claim notice %q: %w", key, err)
	}
	res, err := exec(ctx, s, sqlClaimNotice, key, micros(now), micros(expires))
	if err != nil {
		return false, fmt.Errorf("failed to claim notice %q: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("failed to claim notice %q: %w", key, err)
	}
	return n == 1, nil
}
