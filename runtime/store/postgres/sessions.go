package postgres

import (
	"context"
	"fmt"

	"github.com/picobot/picobot/runtime/store"
)

// CreateSession implements store.Store.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) (store.Session, error) {
	if err := sess.Validate(); err != nil {
		return store.Session{}, fmt.Errorf("failed to create session %q: %w", sess.ID, err)
	}
	if sess.ID == "" {
		sess.ID = store.SessionID(sess.Channel, sess.ChatID, sess.DialogID)
	}
	out, err := one(ctx, s, scanSession, sqlCreateSession, sess.ID, sess.Channel, sess.ChatID, sess.DialogID,
		sess.Agent, sess.Title, sess.TitleIsDefault, nullTime(sess.CreatedAt))
	if err != nil {
		return store.Session{}, fmt.Errorf("failed to create session %q: %w", sess.ID, err)
	}
	return out, nil
}

// GetSession implements store.Store.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	out, err := one(ctx, s, scanSession, sqlGetSession, id)
	if err != nil {
		return store.Session{}, fmt.Errorf("failed to get session %q: %w", id, err)
	}
	return out, nil
}

// ListSessions implements store.Store.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	out, err := many(ctx, s, scanSession, sqlListSessions, f.Channel, f.ChatID, f.IncludeArchived, f.IncludeDeleted,
		store.ListLimit(f.Limit), f.Agent)
	if err != nil {
		return nil, fmt.Errorf("failed to list sessions: %w", err)
	}
	return out, nil
}

// UpdateSession implements store.Store.
func (s *Store) UpdateSession(ctx context.Context, id string, u store.SessionUpdate) (store.Session, error) {
	if err := u.Validate(); err != nil {
		return store.Session{}, fmt.Errorf("failed to update session %q: %w", id, err)
	}
	out, err := one(ctx, s, scanSession, sqlUpdateSession, id, u.Title, u.TitleIsDefault, u.Archived, u.Deleted,
		microPtr(u.LastCompressedAt))
	if err != nil {
		return store.Session{}, fmt.Errorf("failed to update session %q: %w", id, err)
	}
	return out, nil
}

// SetCurrentDialog implements store.Store.
func (s *Store) SetCurrentDialog(ctx context.Context, channel, chatID, dialogID string) error {
	scope := channel + ":" + chatID
	if err := (store.Session{Channel: channel, ChatID: chatID, DialogID: dialogID}).Validate(); err != nil {
		return fmt.Errorf("failed to set current dialog of %q: %w", scope, err)
	}
	if _, err := exec(ctx, s, sqlSetCurrentDialog, channel, chatID, dialogID); err != nil {
		return fmt.Errorf("failed to set current dialog of %q: %w", scope, err)
	}
	return nil
}

// CurrentDialog implements store.Store.
func (s *Store) CurrentDialog(ctx context.Context, channel, chatID string) (string, error) {
	out, err := one(ctx, s, rowToString, sqlCurrentDialog, channel, chatID)
	if err != nil {
		return "", fmt.Errorf("failed to get current dialog of %q: %w", channel+":"+chatID, err)
	}
	return out, nil
}
