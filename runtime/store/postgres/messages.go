package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store"
)

// AppendMessages implements store.Store. The session row is locked for the
// transaction, so concurrent appenders to one session take turns: each reads
// the last Seq and the stored IDs its predecessor committed. Three round
// trips: begin + lock + look up the IDs; the inserts + the session's new
// last_seq; commit.
func (s *Store) AppendMessages(ctx context.Context, sessionID string, msgs ...store.Message) ([]store.Message, error) {
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("failed to append messages to session %q: message %d: %w", sessionID, i, err)
		}
	}
	out, err := s.appendMessages(ctx, sessionID, msgs)
	if err != nil {
		return nil, fmt.Errorf("failed to append messages to session %q: %w", sessionID, classify(err))
	}
	return out, nil
}

func (s *Store) appendMessages(ctx context.Context, sessionID string, msgs []store.Message) (_ []store.Message, err error) {
	ids := make([]string, 0, len(msgs)) // distinct
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var (
		lastSeq int64
		now     time.Time
		stored  []store.Message
	)
	tx, tenant, err := s.beginBatch(ctx, func(b *pgx.Batch, tenant string) {
		b.Queue(sqlLockSessionForAppend, tenant, sessionID)
		for _, id := range ids {
			b.Queue(sqlMessageByID, tenant, sessionID, id)
		}
	}, func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&lastSeq, &now); err != nil {
			return err
		}
		for range ids {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if stored, err = pgx.AppendRows(stored, rows, scanMessage); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	out, lastSeq, lastAt, batch, err := queueNewMessages(tenant, sessionID, msgs, stored, lastSeq, now)
	if err != nil {
		return nil, err
	}
	if batch.Len() > 0 {
		batch.Queue(sqlAdvanceSession, tenant, sessionID, lastSeq, lastAt)
		// Close reports the first failed statement; the rollback above then
		// discards the ones before it.
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// queueNewMessages gives msgs not yet stored the Seqs after lastSeq and a CreatedAt, and queues their inserts; stored ones come back as duplicates.
func queueNewMessages(tenant, sessionID string, msgs, stored []store.Message, lastSeq int64, now time.Time) ([]store.Message, int64, time.Time, *pgx.Batch, error) {
	seen := make(map[string]store.Message, len(stored)+len(msgs))
	for _, m := range stored {
		seen[m.ID] = m
	}
	out := make([]store.Message, len(msgs))
	batch := &pgx.Batch{}
	var lastAt time.Time
	for i, m := range msgs {
		if prev, ok := seen[m.ID]; ok {
			prev.Duplicate = true
			out[i] = prev
			continue
		}
		lastSeq++
		m.Tenant, m.SessionID, m.Seq, m.Duplicate = tenant, sessionID, lastSeq, false
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		m.CreatedAt = micro(m.CreatedAt)
		if m.CreatedAt.After(lastAt) {
			lastAt = m.CreatedAt
		}
		if err := queueInsert(batch, m); err != nil {
			return nil, 0, time.Time{}, nil, err
		}
		seen[m.ID] = m
		out[i] = m
	}
	return out, lastSeq, lastAt, batch, nil
}

// queueInsert queues the insert of one new message (tenant, session and seq
// set).
func queueInsert(batch *pgx.Batch, m store.Message) error {
	c, err := m.Columns()
	if err != nil {
		return err
	}
	batch.Queue(sqlInsertMessage, m.Tenant, m.SessionID, m.Seq, m.ID, string(m.Role), m.Content, c.ToolCalls,
		m.ToolCallID, m.Name, m.IsError, c.Images, c.Meta, m.CreatedAt)
	return nil
}

// LoadMessages implements store.Store. The session's existence is checked in
// the same round trip, to tell an empty session from a missing one.
func (s *Store) LoadMessages(ctx context.Context, sessionID string, opts store.LoadOptions) ([]store.Message, error) {
	var limit *int
	if opts.Last > 0 {
		limit = &opts.Last
	}
	var (
		out    []store.Message
		exists bool
	)
	err := s.batch(ctx, func(b *pgx.Batch, tenant string) {
		b.Queue(sqlLoadMessages, tenant, sessionID, opts.AfterSeq, nullTime(opts.Since), limit)
		b.Queue(sqlSessionExists, tenant, sessionID)
	}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, scanMessage); err != nil {
			return err
		}
		return br.QueryRow().Scan(&exists)
	})
	if err == nil && !exists {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("failed to load messages of session %q: %w", sessionID, classify(err))
	}
	slices.Reverse(out)
	return out, nil
}

// CountMessages implements store.Store.
func (s *Store) CountMessages(ctx context.Context, sessionID string) (int64, error) {
	n, err := one(ctx, s, pgx.RowTo[int64], sqlCountMessages, sessionID)
	if err != nil {
		return 0, fmt.Errorf("failed to count messages of session %q: %w", sessionID, err)
	}
	return n, nil
}
