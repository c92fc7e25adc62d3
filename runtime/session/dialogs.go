package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/store"
)

// The dialogs of a chat: which one a message goes to, and the operations
// the slash commands and the gateway's dialog API run on them.

// Resolve picks the dialog a chat's message goes to: the chat's current
// dialog, else its most recently active one, else a new "default" dialog.
func (m *Manager) Resolve(ctx context.Context, channel, chatID string) (ID, error) {
	base := ID{Channel: channel, ChatID: chatID, DialogID: DefaultDialog}
	if err := base.Validate(); err != nil {
		return ID{}, err
	}
	cur, err := m.cfg.Store.CurrentDialog(ctx, channel, chatID)
	switch {
	case err == nil:
		return ID{Channel: channel, ChatID: chatID, DialogID: cur}, nil
	case !errors.Is(err, store.ErrNotFound):
		return ID{}, fmt.Errorf("failed to read current dialog of %s: %w", base.ChatScope(), err)
	}
	recent, err := m.cfg.Store.ListSessions(ctx, store.SessionFilter{Channel: channel, ChatID: chatID, Limit: 1})
	if err != nil {
		return ID{}, fmt.Errorf("failed to list dialogs of %s: %w", base.ChatScope(), err)
	}
	if len(recent) > 0 {
		id := ID{Channel: channel, ChatID: chatID, DialogID: recent[0].DialogID}
		return id, m.cfg.Store.SetCurrentDialog(ctx, channel, chatID, id.DialogID)
	}
	return m.create(ctx, base)
}

// Create starts a new dialog in the chat and makes it current.
func (m *Manager) Create(ctx context.Context, channel, chatID string) (ID, error) {
	return m.create(ctx, ID{Channel: channel, ChatID: chatID, DialogID: NewDialogID()})
}

func (m *Manager) create(ctx context.Context, id ID) (ID, error) {
	if err := id.Validate(); err != nil {
		return ID{}, err
	}
	_, err := m.cfg.Store.CreateSession(ctx, store.Session{ID: id.String(), Channel: id.Channel, ChatID: id.ChatID,
		DialogID: id.DialogID, Agent: m.cfg.Agent, Title: DefaultTitle, TitleIsDefault: true})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return ID{}, fmt.Errorf("failed to create session %q: %w", id, err)
	}
	if err := m.cfg.Store.SetCurrentDialog(ctx, id.Channel, id.ChatID, id.DialogID); err != nil {
		return ID{}, fmt.Errorf("failed to make %q current: %w", id, err)
	}
	return id, nil
}

// Switch makes an existing, not deleted dialog current.
func (m *Manager) Switch(ctx context.Context, channel, chatID, dialogID string) (store.Session, error) {
	id := ID{Channel: channel, ChatID: chatID, DialogID: dialogID}
	if err := id.Validate(); err != nil {
		return store.Session{}, err
	}
	s, err := m.cfg.Store.GetSession(ctx, id.String())
	if errors.Is(err, store.ErrNotFound) || err == nil && s.DeletedAt != nil {
		return store.Session{}, fmt.Errorf("no conversation %q in this chat; /sessions lists them", dialogID)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("failed to read session %q: %w", id, err)
	}
	return s, m.cfg.Store.SetCurrentDialog(ctx, channel, chatID, dialogID)
}

// List returns the chat's 10 most recent dialogs.
func (m *Manager) List(ctx context.Context, channel, chatID string) ([]store.Session, error) {
	return m.cfg.Store.ListSessions(ctx, store.SessionFilter{Channel: channel, ChatID: chatID, Limit: recentDialogs})
}

// Rename sets a dialog's title.
func (m *Manager) Rename(ctx context.Context, id ID, title string) error {
	title = strings.TrimSpace(title)
	if title == "" || utf8.RuneCountInString(title) > 200 {
		return errors.New("a title needs 1 to 200 characters")
	}
	f := false
	_, err := m.cfg.Store.UpdateSession(ctx, id.String(), store.SessionUpdate{Title: &title, TitleIsDefault: &f})
	return err
}

// Delete soft-deletes a dialog; the chat's next message goes to its most
// recent remaining dialog (or a new one).
func (m *Manager) Delete(ctx context.Context, id ID) error {
	t := true
	if _, err := m.cfg.Store.UpdateSession(ctx, id.String(), store.SessionUpdate{Deleted: &t}); err != nil {
		return fmt.Errorf("failed to delete session %q: %w", id, err)
	}
	return nil
}

// Archive hides a dialog from the list without deleting it.
func (m *Manager) Archive(ctx context.Context, id ID) error {
	t := true
	_, err := m.cfg.Store.UpdateSession(ctx, id.String(), store.SessionUpdate{Archived: &t})
	return err
}
