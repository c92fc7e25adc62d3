// Package dialog is the dialog operations of the gateway protocol (list,
// create, switch, rename, archive, delete, history), written once for both
// modes: embedded.Runtime and the cluster backend embed a Service, and differ
// only in how they find an agent's session manager for the tenant of a
// request.
package dialog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
)

// Service implements the dialog methods of gateway.Backend. Every method acts
// for the tenant in ctx; the store scopes what it sees to that tenant.
type Service struct {
	Store store.Store
	// Manager returns the session manager of an agent for the tenant in
	// ctx, or a coded error when there is no such agent for the tenant
	// (protocol.CodeUnknownAgent) or the tenant is not served
	// (protocol.CodeForbidden).
	Manager func(ctx context.Context, agent string) (*session.Manager, error)
	// Tenant checks the tenant of ctx for the calls that name no agent
	// (Messages, Usage); nil accepts what the store accepts.
	Tenant func(ctx context.Context) error
	// Now is the time Usage's totals are of; time.Now when nil.
	Now func() time.Time
}

// Dialogs returns the chat's current dialog ("" when it has none, or when it
// was deleted: the next message goes to the most recent remaining dialog) and
// its dialogs.
func (s Service) Dialogs(ctx context.Context, c protocol.Chat) (string, []store.Session, error) {
	m, err := s.Manager(ctx, c.Agent)
	if err != nil {
		return "", nil, err
	}
	cur, err := s.Store.CurrentDialog(ctx, c.ChannelName(), c.Key())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", nil, fmt.Errorf("failed to read the current dialog of %s: %w", c.Key(), err)
	}
	if cur != "" {
		if d, err := s.Store.GetSession(ctx, c.SessionID(cur)); err != nil || d.DeletedAt != nil {
			cur = ""
		}
	}
	list, err := m.List(ctx, c.ChannelName(), c.Key())
	return cur, list, err
}

// CreateDialog starts a dialog in the chat, titled when title is set, and
// makes it current.
func (s Service) CreateDialog(ctx context.Context, c protocol.Chat, title string) (store.Session, error) {
	m, err := s.Manager(ctx, c.Agent)
	if err != nil {
		return store.Session{}, err
	}
	id, err := m.Create(ctx, c.ChannelName(), c.Key())
	if err != nil {
		return store.Session{}, err
	}
	if title != "" {
		if err := m.Rename(ctx, id, title); err != nil {
			return store.Session{}, fmt.Errorf("failed to title dialog %q: %w", id, err)
		}
	}
	return s.Store.GetSession(ctx, id.String())
}

// SwitchDialog makes a dialog of the chat current.
func (s Service) SwitchDialog(ctx context.Context, c protocol.Chat, dialogID string) (store.Session, error) {
	m, id, err := s.live(ctx, c, dialogID)
	if err != nil {
		return store.Session{}, err
	}
	return m.Switch(ctx, id.Channel, id.ChatID, id.DialogID)
}

// RenameDialog sets a dialog's title.
func (s Service) RenameDialog(ctx context.Context, c protocol.Chat, dialogID, title string) (store.Session, error) {
	m, id, err := s.live(ctx, c, dialogID)
	if err != nil {
		return store.Session{}, err
	}
	if err := m.Rename(ctx, id, title); err != nil {
		return store.Session{}, &protocol.CodedError{Code: protocol.CodeBadRequest, Err: err}
	}
	return s.Store.GetSession(ctx, id.String())
}

// ArchiveDialog hides a dialog from the list without deleting it.
func (s Service) ArchiveDialog(ctx context.Context, c protocol.Chat, dialogID string) (store.Session, error) {
	m, id, err := s.live(ctx, c, dialogID)
	if err != nil {
		return store.Session{}, err
	}
	if err := m.Archive(ctx, id); err != nil {
		return store.Session{}, fmt.Errorf("failed to archive %q: %w", id, err)
	}
	return s.Store.GetSession(ctx, id.String())
}

// DeleteDialog soft-deletes a dialog.
func (s Service) DeleteDialog(ctx context.Context, c protocol.Chat, dialogID string) error {
	m, id, err := s.live(ctx, c, dialogID)
	if err != nil {
		return err
	}
	return m.Delete(ctx, id)
}

// SearchMessages finds the chat's messages holding every word of text
// (store.MessageSearcher), newest first.
func (s Service) SearchMessages(ctx context.Context, c protocol.Chat, text string, limit int) ([]store.MessageHit, error) {
	if _, err := s.Manager(ctx, c.Agent); err != nil {
		return nil, err
	}
	hits, err := s.Store.SearchMessages(ctx, store.MessageQuery{Channel: c.ChannelName(), ChatID: c.Key(), Text: text, Limit: limit})
	if errors.Is(err, store.ErrInvalid) {
		return nil, &protocol.CodedError{Code: protocol.CodeBadRequest, Err: err}
	}
	return hits, err
}

// Messages returns the last messages of a session of the tenant.
func (s Service) Messages(ctx context.Context, sessionID string, last int) ([]store.Message, error) {
	if s.Tenant != nil {
		if err := s.Tenant(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := session.ParseID(sessionID); err != nil {
		return nil, &protocol.CodedError{Code: protocol.CodeBadRequest, Err: err}
	}
	if _, err := s.Store.GetSession(ctx, sessionID); err != nil {
		return nil, err
	}
	msgs, err := s.Store.LoadMessages(ctx, sessionID, store.LoadOptions{Last: last})
	if err != nil {
		return nil, err
	}
	return s.withTurnErrors(ctx, sessionID, msgs)
}

// withTurnErrors puts on each user message whose turn ended without an
// answer the failure recorded for it (store.MetaErrorCode, MetaError), so
// a client shows the error again after a reload. A turn answered later
// (its message sent again and resumed) shows its answer only.
func (s Service) withTurnErrors(ctx context.Context, sessionID string, msgs []store.Message) ([]store.Message, error) {
	var unanswered []string
	at := map[string]int{}
	for i, m := range msgs {
		if m.Role != llm.RoleUser || m.ID == "" {
			continue
		}
		answered := false
		for _, next := range msgs[i+1:] {
			if next.Role == llm.RoleUser {
				break
			}
			if next.Role == llm.RoleAssistant && len(next.ToolCalls) == 0 {
				answered = true
				break
			}
		}
		if !answered {
			unanswered = append(unanswered, m.ID)
			at[m.ID] = i
		}
	}
	if len(unanswered) == 0 {
		return msgs, nil
	}
	errs, err := s.Store.TurnErrors(ctx, sessionID, unanswered)
	if err != nil {
		return nil, err
	}
	for _, e := range errs {
		i, ok := at[e.MessageID]
		if !ok {
			continue
		}
		meta := maps.Clone(msgs[i].Meta)
		if meta == nil {
			meta = map[string]string{}
		}
		meta[store.MetaErrorCode], meta[store.MetaError] = e.Code, e.Message
		msgs[i].Meta = meta
	}
	return msgs, nil
}

// Usage returns the tenant's model use per agent and day in f's range, and
// its totals of today and this month (UTC).
func (s Service) Usage(ctx context.Context, f store.UsageFilter) ([]store.UsageDay, store.UsageTotals, error) {
	if s.Tenant != nil {
		if err := s.Tenant(ctx); err != nil {
			return nil, store.UsageTotals{}, err
		}
	}
	days, err := s.Store.ListUsage(ctx, f)
	if err != nil {
		return nil, store.UsageTotals{}, err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	t, err := s.Store.UsageTotals(ctx, now())
	if err != nil {
		return nil, store.UsageTotals{}, err
	}
	return days, t, nil
}

// Audit returns the tenant's audit records of tool calls matching f,
// newest first.
func (s Service) Audit(ctx context.Context, f store.AuditFilter) ([]store.AuditRecord, error) {
	if s.Tenant != nil {
		if err := s.Tenant(ctx); err != nil {
			return nil, err
		}
	}
	return s.Store.ListAudit(ctx, f)
}

// live returns the agent's manager and a dialog of the chat that exists and
// is not deleted.
func (s Service) live(ctx context.Context, c protocol.Chat, dialogID string) (*session.Manager, session.ID, error) {
	m, err := s.Manager(ctx, c.Agent)
	if err != nil {
		return nil, session.ID{}, err
	}
	id := session.ID{Channel: c.ChannelName(), ChatID: c.Key(), DialogID: dialogID}
	if err := id.Validate(); err != nil {
		return nil, session.ID{}, &protocol.CodedError{Code: protocol.CodeBadRequest, Err: err}
	}
	d, err := s.Store.GetSession(ctx, id.String())
	if errors.Is(err, store.ErrNotFound) || err == nil && d.DeletedAt != nil {
		return nil, session.ID{}, &protocol.CodedError{Code: protocol.CodeUnknownDialog,
			Err: fmt.Errorf("no dialog %q in chat %s of agent %s", dialogID, c.ChatID, c.Agent)}
	}
	if err != nil {
		return nil, session.ID{}, fmt.Errorf("failed to read session %q: %w", id, err)
	}
	return m, id, nil
}
