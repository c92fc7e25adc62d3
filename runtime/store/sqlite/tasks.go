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

var _ store.TaskStore = (*Store)(nil)

// CreateTask implements store.TaskStore.
func (s *Store) CreateTask(ctx context.Context, t store.Task) (store.Task, error) {
	if err := t.Validate(); err != nil {
		return store.Task{}, fmt.Errorf("failed to create task %q: %w", t.ID, err)
	}
	t = t.Defaulted()
	created := s.now()
	if !t.CreatedAt.IsZero() {
		created = micros(t.CreatedAt)
	}
	out, err := one(ctx, s, true, scanTask, sqlCreateTask, t.ID, t.Agent, t.Title, t.Note, t.Priority, microsPtr(t.DueAt),
		t.Repeat, t.TZ, t.Continuity, string(t.State), t.Awaiting, t.Result, t.Job, created)
	if err != nil {
		return store.Task{}, fmt.Errorf("failed to create task %q: %w", t.ID, err)
	}
	return out, nil
}

// GetTask implements store.TaskStore.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	out, err := one(ctx, s, false, scanTask, sqlGetTask, id)
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
	out, err := one(ctx, s, true, scanTask, sqlUpdateTask, id, u.Title, u.Note, u.Priority, microsPtr(u.DueAt), u.ClearDueAt,
		u.Repeat, u.TZ, u.Continuity, state, u.Awaiting, u.Result, u.Job, s.now(), u.IfVersion)
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
	states, err := json.Marshal(append([]store.TaskState{}, f.States...))
	if err != nil {
		return nil, fmt.Errorf("failed to encode task states: %w", err)
	}
	out, err := many(ctx, s, scanTask, sqlListTasks, f.Agent, string(states), store.ListLimit(f.Limit))
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
	created := s.now()
	if !a.CreatedAt.IsZero() {
		created = micros(a.CreatedAt)
	}
	out, err := one(ctx, s, true, scanAgendaItem, sqlCreateAgendaItem, a.ID, a.Agent, micros(a.At), a.AllDay, a.Text, a.Job, created)
	if err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to create agenda item %q: %w", a.ID, err)
	}
	return out, nil
}

// GetAgendaItem implements store.TaskStore.
func (s *Store) GetAgendaItem(ctx context.Context, id string) (store.AgendaItem, error) {
	out, err := one(ctx, s, false, scanAgendaItem, sqlGetAgendaItem, id)
	if err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to get agenda item %q: %w", id, err)
	}
	return out, nil
}

// MarkAgendaItemDone implements store.TaskStore.
func (s *Store) MarkAgendaItemDone(ctx context.Context, id string, at time.Time) (store.AgendaItem, error) {
	out, err := one(ctx, s, true, scanAgendaItem, sqlDoneAgendaItem, id, micros(at))
	if err != nil {
		return store.AgendaItem{}, fmt.Errorf("failed to mark agenda item %q done: %w", id, err)
	}
	return out, nil
}

// DeleteAgendaItem implements store.TaskStore.
func (s *Store) DeleteAgendaItem(ctx context.Context, id string) error {
	res, err := exec(ctx, s, sqlDeleteAgendaItem, id)
	if err == nil {
		if n, rerr := res.RowsAffected(); rerr != nil {
			err = rerr
		} else if n == 0 {
			err = store.ErrNotFound
		}
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

func scanTask(row scanner) (store.Task, error) {
	var (
		t                store.Task
		state            string
		due              sql.NullInt64
		created, updated int64
	)
	err := row.Scan(&t.Tenant, &t.ID, &t.Agent, &t.Title, &t.Note, &t.Priority, &due, &t.Repeat, &t.TZ, &t.Continuity,
		&state, &t.Awaiting, &t.Result, &t.Job, &t.Version, &created, &updated)
	t.State, t.DueAt = store.TaskState(state), fromNull(due)
	t.CreatedAt, t.UpdatedAt = fromMicros(created), fromMicros(updated)
	return t, err
}

func scanAgendaItem(row scanner) (store.AgendaItem, error) {
	var (
		a           store.AgendaItem
		at, created int64
		done        sql.NullInt64
	)
	err := row.Scan(&a.Tenant, &a.ID, &a.Agent, &at, &a.AllDay, &a.Text, &a.Job, &done, &created)
	a.At, a.DoneAt, a.CreatedAt = fromMicros(at), fromNull(done), fromMicros(created)
	return a, err
}
