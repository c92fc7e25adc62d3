package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (bool, error) {
	if err := store.ValidateLease(sessionID, holder, ttl); err != nil {
		return false, fmt.Errorf("failed to acquire lease of session %q: %w", sessionID, err)
	}
	_, err := one(ctx, s, rowToString, sqlAcquireLease, sessionID, holder, ttl.Microseconds())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to acquire lease of session %q: %w", sessionID, err)
	}
	return true, nil
}

// RenewLease implements store.Store.
func (s *Store) RenewLease(ctx context.Context, sessionID, holder string, ttl time.Duration) error {
	if err := store.ValidateLease(sessionID, holder, ttl); err != nil {
		return fmt.Errorf("failed to renew lease of session %q: %w", sessionID, err)
	}
	tag, err := exec(ctx, s, sqlRenewLease, sessionID, holder, ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("failed to renew lease of session %q: %w", sessionID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("failed to renew lease of session %q for %q: %w", sessionID, holder, store.ErrLeaseLost)
	}
	return nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, sessionID, holder string) error {
	if _, err := exec(ctx, s, sqlReleaseLease, sessionID, holder); err != nil {
		return fmt.Errorf("failed to release lease of session %q: %w", sessionID, err)
	}
	return nil
}
