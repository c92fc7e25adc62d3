package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store"
)

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, r store.AuditRecord) error {
	if err := store.ValidateAuditRecord(r); err != nil {
		return fmt.Errorf("failed to record a call of tool %q: %w", r.Tool, err)
	}
	if r.ID == "" {
		r.ID = store.NewID()
	}
	var at *time.Time
	if !r.CreatedAt.IsZero() {
		at = &r.CreatedAt
	}
	if _, err := exec(ctx, s, sqlAppendAudit, r.ID, r.Actor, r.Agent, r.SessionID, r.Tool, r.ArgsDigest, r.Outcome,
		r.Duration.Microseconds(), at); err != nil {
		return fmt.Errorf("failed to record a call of tool %q: %w", r.Tool, err)
	}
	return nil
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditRecord, error) {
	limit, err := store.ValidateAuditFilter(f)
	if err != nil {
		return nil, fmt.Errorf("failed to list the audit log: %w", err)
	}
	var since, afterAt *time.Time
	var afterID string
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if f.After != nil {
		afterAt, afterID = &f.After.At, f.After.ID
	}
	out, err := many(ctx, s, func(row pgx.CollectableRow) (store.AuditRecord, error) {
		var r store.AuditRecord
		var us int64
		err := row.Scan(&r.ID, &r.Actor, &r.Agent, &r.SessionID, &r.Tool, &r.ArgsDigest, &r.Outcome, &us, &r.CreatedAt)
		r.Duration, r.CreatedAt = time.Duration(us)*time.Microsecond, r.CreatedAt.UTC()
		return r, err
	}, sqlListAudit, f.Agent, f.SessionID, f.Tool, since, afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("failed to list the audit log: %w", err)
	}
	return out, nil
}

// DeleteAudit implements store.Store.
func (s *Store) DeleteAudit(ctx context.Context, before time.Time) (int, error) {
	tag, err := exec(ctx, s, sqlDeleteAudit, before)
	if err != nil {
		return 0, fmt.Errorf("failed to delete old audit records: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
