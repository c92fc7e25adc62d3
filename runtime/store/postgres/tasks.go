package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store"
)

var _ store.TaskStore = (*Store)(nil)

// CreateTask implements store.TaskStore.
func (s *Store) CreateTask(ctx context.Context, t store.Task) (store.Task, error) {
	if err := t.Validate(); err != nil {
		return store.Task{}, fmt.Errorf("failed to create task %q: %w", t.ID, err)
	}
	t = t.Defaulted()
	out, err := one(ctx, s, scanTask, sqlCreateTask, t.ID, t.Agent, t.Title, t.Note, t.Priority, microPtr(t.DueAt),
		t.Repeat, t.TZ, t.Continuity, string(t.State), t.Awaiting, t.Result, t.Job, nullTime(t.CreatedAt))
	if err != nil {
		return store.Task{}, fmt.Errorf("failed to create task %q: %w", t.ID, err)
	}
	return out, nil
}

// GetTask implements store.TaskStore.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	out, err := one(ctx, s, scanTask, sqlGetTask, id)
	if err != nil {
		return store.Task{}, fmt.Errorf("failed to get task %q: %w", id, err)
	}
	return out, nil
}

// UpdateTask implements store.TaskStore.
func (s *Store) UpdateTask(ctx context.Context, id string, u store.TaskUpdate) (store.Task, error) {
	if err := u.Validate(); err != nil {
		return store.Task{}, fmt.Errorf("failed to update task %q: %w", id, err)
	}
	var state *string
	if u.State != nil {
		state = new(string(*u.State))
	}
	out, err := one(ctx, s, scanTask, sqlUpdateTask, id, u.Title, u.Note, u.Priority, microPtr(u.DueAt), u.ClearDueAt,
		u.Repeat, u.TZ, u.Continuity, state, u.Awaiting, u.Result, u.Job, u.IfVersion)
	if errors.Is(err, store.ErrNotFound) && u.IfVersion != 0 {
		if _, gerr := s.GetTask(ctx, id); gerr == nil {
			err = store.ErrVersionConflict
		}
	}
	if err != nil {
		return store.Task{}, fmt.Errorf("failed to update task %q: %w", id, err)
	}
	return out, nil
}

// ListTasks implements store.TaskStore.
func (s *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	states := make([]string, len(f.States))
	for i, st := range f.States {
		states[i] = string(st)
	}
	out, err := many(ctx, s, scanTask, sqlListTasks, f.Agent, states, store.ListLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list tasks: %w", err)
	}
	return out, nil
}

// CreateAgendaItem implements store.TaskStore.
func (s *Store) CreateAgendaItem(ctx context.Context, a store.AgendaItem) (store.AgendaItem, error) {
	if err := a.Validate(); err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to create agenda item %q: %w", a.ID, err)
	}
	out, err := one(ctx, s, scanAgendaItem, sqlCreateAgendaItem, a.ID, a.Agent, micro(a.At), a.AllDay, a.Text, a.Job,
		nullTime(a.CreatedAt))
	if err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to create agenda item %q: %w", a.ID, err)
	}
	return out, nil
}

// GetAgendaItem implements store.TaskStore.
func (s *Store) GetAgendaItem(ctx context.Context, id string) (store.AgendaItem, error) {
	out, err := one(ctx, s, scanAgendaItem, sqlGetAgendaItem, id)
	if err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to get agenda item %q: %w", id, err)
	}
	return out, nil
}

// MarkAgendaItemDone implements store.TaskStore.
func (s *Store) MarkAgendaItemDone(ctx context.Context, id string, at time.Time) (store.AgendaItem, error) {
	out, err := one(ctx, s, scanAgendaItem, sqlDoneAgendaItem, id, micro(at))
	if err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to mark agenda item %q done: %w", id, err)
	}
	return out, nil
}

// DeleteAgendaItem implements store.TaskStore.
func (s *Store) DeleteAgendaItem(ctx context.Context, id string) error {
	tag, err := exec(ctx, s, sqlDeleteAgendaItem, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("failed to delete agenda item %q: %w", id, err)
	}
	return nil
}

// ListAgendaItems implements store.TaskStore.
func (s *Store) ListAgendaItems(ctx context.Context, f store.AgendaFilter) ([]store.AgendaItem, error) {
	out, err := many(ctx, s, scanAgendaItem, sqlListAgendaItems, f.Agent, f.IncludeDone, store.ListLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("failed to list agenda items: %w", err)
	}
	return out, nil
}

func scanTask(row pgx.CollectableRow) (store.Task, error) {
	var (
		t     store.Task
		state string
	)
	err := row.Scan(&t.Tenant, &t.ID, &t.Agent, &t.Title, &t.Note, &t.Priority, &t.DueAt, &t.Repeat, &t.TZ, &t.Continuity,
		&state, &t.Awaiting, &t.Result, &t.Job, &t.Version, &t.CreatedAt, &t.UpdatedAt)
	t.State, t.DueAt = store.TaskState(state), utcPtr(t.DueAt)
	t.CreatedAt, t.UpdatedAt = utc(t.CreatedAt), utc(t.UpdatedAt)
	return t, err
}

func scanAgendaItem(row pgx.CollectableRow) (store.AgendaItem, error) {
	var a store.AgendaItem
	err := row.Scan(&a.Tenant, &a.ID, &a.Agent, &a.At, &a.AllDay, &a.Text, &a.Job, &a.DoneAt, &a.CreatedAt)
	a.At, a.DoneAt, a.CreatedAt = utc(a.At), utcPtr(a.DoneAt), utc(a.CreatedAt)
	return a, err
}
