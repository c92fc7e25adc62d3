package sqlite

import (
	"context"
	"fmt"
	"time"

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
	at := s.now()
	if !r.CreatedAt.IsZero() {
		at = micros(r.CreatedAt)
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
	var since, afterAt *int64
	var afterID string
	if !f.Since.IsZero() {
		v := micros(f.Since)
		since = &v
	}
	if f.After != nil {
		v := micros(f.After.At)
		afterAt, afterID = &v, f.After.ID
	}
	out, err := many(ctx, s, func(row scanner) (store.AuditRecord, error) {
		var r store.AuditRecord
		var us, at int64
		err := row.Scan(&r.ID, &r.Actor, &r.Agent, &r.SessionID, &r.Tool, &r.ArgsDigest, &r.Outcome, &us, &at)
		r.Duration, r.CreatedAt = time.Duration(us)*time.Microsecond, fromMicros(at)
		return r, err
	}, sqlListAudit, f.Agent, f.SessionID, f.Tool, since, afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("failed to list the audit log: %w", err)
	}
	return out, nil
}

// DeleteAudit implements store.Store.
func (s *Store) DeleteAudit(ctx context.Context, before time.Time) (int, error) {
	res, err := exec(ctx, s, sqlDeleteAudit, micros(before))
	if err != nil {
		return 0, fmt.Errorf("failed to delete old audit records: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("failed to delete old audit records: %w", err)
	}
	return int(n), nil
}
