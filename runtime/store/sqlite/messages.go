package sqlite

import (
	"context"
	"fmt"
	"slices"

	"github.com/picobot/picobot/runtime/store"
)

// AppendMessages implements store.Store. The single writer connection and
// BEGIN IMMEDIATE serialise appends, so reading last_seq and writing the new
// messages happen without interleaving. A message whose id the session
// already has is not written again (the insert changes no row) and comes
// back as stored, marked Duplicate.
func (s *Store) AppendMessages(ctx context.Context, sessionID string, msgs ...store.Message) ([]store.Message, error) {
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("failed to append messages to session %q: message %d: %w", sessionID, i, err)
		}
	}
	now := s.now()
	var out []store.Message
	err := s.write(ctx, func(tx *txn, tenant string) (err error) {
		var lastSeq int64
		if err := tx.QueryRowContext(ctx, sqlSessionLastSeq, tenant, sessionID).Scan(&lastSeq); err != nil {
			return err
		}
		out = make([]store.Message, len(msgs))
		inserted, lastAt := 0, int64(0)
		for i, m := range msgs {
			m.Tenant, m.SessionID, m.Seq, m.Duplicate = tenant, sessionID, lastSeq+1, false
			created := now
			if !m.CreatedAt.IsZero() {
				created = micros(m.CreatedAt)
			}
			m.CreatedAt = fromMicros(created)
			c, err := m.Columns()
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, sqlInsertMessage, tenant, sessionID, m.Seq, m.ID, string(m.Role), m.Content, text(c.ToolCalls),
				m.ToolCallID, m.Name, m.IsError, text(c.Images), text(c.Meta), created)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				// Stored before (a redelivery, or the same id twice in
				// msgs): return the stored message, marked.
				prev, err := scanMessage(tx.QueryRowContext(ctx, sqlMessageByID, tenant, sessionID, m.ID))
				if err != nil {
					return err
				}
				prev.Duplicate = true
				out[i] = prev
				continue
			}
			lastSeq = m.Seq
			lastAt = max(lastAt, created)
			out[i] = m
			inserted++
		}
		if inserted == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, sqlAdvanceSession, tenant, sessionID, lastSeq, lastAt, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to append messages to session %q: %w", sessionID, classify(err))
	}
	return out, nil
}

// LoadMessages implements store.Store.
func (s *Store) LoadMessages(ctx context.Context, sessionID string, opts store.LoadOptions) ([]store.Message, error) {
	limit := -1 // SQLite: no limit
	if opts.Last > 0 {
		limit = opts.Last
	}
	var since *int64
	if !opts.Since.IsZero() {
		v := micros(opts.Since)
		since = &v
	}
	var out []store.Message
	err := s.read(ctx, func(tx *txn, tenant string) error {
		var err error
		out, err = queryAll(ctx, tx, scanMessage, sqlLoadMessages, tenant, sessionID, opts.AfterSeq, since, limit)
		if err != nil {
			return err
		}
		if len(out) == 0 {
			return sessionExists(ctx, tx, tenant, sessionID)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to load messages of session %q: %w", sessionID, classify(err))
	}
	slices.Reverse(out)
	return out, nil
}

// CountMessages implements store.Store.
func (s *Store) CountMessages(ctx context.Context, sessionID string) (int64, error) {
	n, err := one(ctx, s, false, scanInt64, sqlCountMessages, sessionID)
	if err != nil {
		return 0, fmt.Errorf("failed to count messages of session %q: %w", sessionID, err)
	}
	return n, nil
}

// sessionExists tells an empty session from a missing one (ErrNotFound).
func sessionExists(ctx context.Context, tx *txn, tenant, sessionID string) error {
	var ok bool
	if err := tx.QueryRowContext(ctx, sqlSessionExists, tenant, sessionID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return store.ErrNotFound
	}
	return nil
}
