package store

import (
	"context"
	"time"
)

// TaskStore keeps the dsh-bot task queue (bot_task) and agenda (bot_agenda)
// of agents. Both store implementations provide it; a consumer
// type-asserts its Store. Every operation is scoped to the tenant in ctx,
// like Store's.
type TaskStore interface {
	// CreateTask stores a new task; ErrExists on a duplicate ID. Version
	// becomes 1; zero timestamps are set by the store.
	CreateTask(ctx context.Context, t Task) (Task, error)
	// GetTask returns a task by ID.
	GetTask(ctx context.Context, id string) (Task, error)
	// UpdateTask changes the fields set in u, increments Version and returns
	// the result; ErrVersionConflict when u.IfVersion is set and differs.
	UpdateTask(ctx context.Context, id string, u TaskUpdate) (Task, error)
	// ListTasks returns tasks matching f, most urgent Priority first, then
	// oldest first.
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)

	// CreateAgendaItem stores a new agenda item; ErrExists on a duplicate ID.
	CreateAgendaItem(ctx context.Context, a AgendaItem) (AgendaItem, error)
	// GetAgendaItem returns an agenda item by ID.
	GetAgendaItem(ctx context.Context, id string) (AgendaItem, error)
	// MarkAgendaItemDone sets the item's DoneAt (kept when already done).
	MarkAgendaItemDone(ctx context.Context, id string, at time.Time) (AgendaItem, error)
	// DeleteAgendaItem removes an agenda item.
	DeleteAgendaItem(ctx context.Context, id string) error
	// ListAgendaItems returns items matching f, earliest At first.
	ListAgendaItems(ctx context.Context, f AgendaFilter) ([]AgendaItem, error)
}

// TaskState is where a task stands.
type TaskState string

// Task states. Awaiting is a legitimate intermediate state, not an error:
// the task stopped at a boundary and Task.Awaiting says what it asks for.
const (
	TaskQueued    TaskState = "queued"
	TaskRunning   TaskState = "running"
	TaskAwaiting  TaskState = "awaiting"
	TaskSucceeded TaskState = "succeeded"
	TaskFailed    TaskState = "failed"
	TaskCancelled TaskState = "cancelled"
)

// TaskStates lists every TaskState.
var TaskStates = []TaskState{TaskQueued, TaskRunning, TaskAwaiting, TaskSucceeded, TaskFailed, TaskCancelled}

// Task continuity: what a repeated run starts from.
const (
	// ContinuityContinue: each run starts from the previous run's
	// conclusion (a daily digest builds on the last one).
	ContinuityContinue = "continue"
	// ContinuityFresh: each run starts from zero (an audit that must not
	// rubber-stamp its last verdict).
	ContinuityFresh = "fresh"
)

// Task priorities: 1 is the most urgent.
const (
	MinTaskPriority     = 1
	MaxTaskPriority     = 5
	DefaultTaskPriority = 3
)

// Task is one entry of an agent's task queue.
type Task struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	// Agent is the agent whose queue holds the task.
	Agent string `json:"agent,omitempty"`
	Title string `json:"title"`
	Note  string `json:"note,omitempty"`
	// Priority is 1 (most urgent) to 5; 0 on create means
	// DefaultTaskPriority.
	Priority int `json:"priority"`
	// DueAt is when the task is due (its first run when it is scheduled).
	DueAt *time.Time `json:"due_at,omitempty"`
	// Repeat is "", "hour", "day" or "week", optionally with a pinned time
	// ("day 09:00"); the tools own its syntax.
	Repeat string `json:"repeat,omitempty"`
	// TZ is the IANA time zone of Repeat's pinned time ("" for UTC).
	TZ string `json:"tz,omitempty"`
	// Continuity is ContinuityContinue (default on create) or ContinuityFresh.
	Continuity string    `json:"continuity"`
	State      TaskState `json:"state"`
	// Awaiting says what an awaiting task is waiting for.
	Awaiting string `json:"awaiting,omitempty"`
	// Result is the conclusion of the task's latest finished run.
	Result string `json:"result,omitempty"`
	// Job names the scheduled job that runs the task ("" when none).
	Job       string    `json:"job,omitempty"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TaskUpdate lists the task fields to change; nil fields stay.
type TaskUpdate struct {
	Title, Note *string
	Priority    *int
	// DueAt sets the due time; ClearDueAt removes it (DueAt must be nil).
	DueAt      *time.Time
	ClearDueAt bool
	Repeat, TZ *string
	Continuity *string
	State      *TaskState
	Awaiting   *string
	Result     *string
	Job        *string
	// IfVersion, when not zero, applies the update only to that version.
	IfVersion int64
}

// TaskFilter selects tasks; empty fields match all.
type TaskFilter struct {
	Agent  string
	States []TaskState
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// AgendaItem is a dated entry of an agent's agenda: what to do at a moment.
type AgendaItem struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Agent  string `json:"agent,omitempty"`
	// At is the moment (UTC); for an AllDay item, midnight UTC of its date.
	At time.Time `json:"at"`
	// AllDay marks an item given as a date without a time of day.
	AllDay bool   `json:"all_day,omitempty"`
	Text   string `json:"text"`
	// Job names the scheduled job that reminds of the item ("" when none).
	Job       string     `json:"job,omitempty"`
	DoneAt    *time.Time `json:"done_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// AgendaFilter selects agenda items; empty fields match all.
type AgendaFilter struct {
	Agent string
	// IncludeDone lists done items too.
	IncludeDone bool
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// Validate checks a task for CreateTask.
func (t Task) Validate() error {
	if err := required("id", t.ID, "title", t.Title); err != nil {
		return err
	}
	if err := noNUL("agent", t.Agent, "note", t.Note, "repeat", t.Repeat, "tz", t.TZ, "awaiting", t.Awaiting,
		"result", t.Result, "job", t.Job); err != nil {
		return err
	}
	if t.Priority != 0 {
		if err := validPriority(t.Priority); err != nil {
			return err
		}
	}
	if t.Continuity != "" {
		if err := oneOf("continuity", t.Continuity, ContinuityContinue, ContinuityFresh); err != nil {
			return err
		}
	}
	if t.State != "" {
		return oneOf("state", t.State, TaskStates...)
	}
	return nil
}

func validPriority(p int) error {
	if p < MinTaskPriority || p > MaxTaskPriority {
		return invalid("priority %d is not between %d and %d", p, MinTaskPriority, MaxTaskPriority)
	}
	return nil
}

// Validate checks the values a task update sets.
func (u TaskUpdate) Validate() error {
	if u.ClearDueAt && u.DueAt != nil {
		return invalid("due_at is both set and cleared")
	}
	if u.Title != nil {
		if err := required("title", *u.Title); err != nil {
			return err
		}
	}
	if u.Priority != nil {
		if err := validPriority(*u.Priority); err != nil {
			return err
		}
	}
	if u.Continuity != nil {
		if err := oneOf("continuity", *u.Continuity, ContinuityContinue, ContinuityFresh); err != nil {
			return err
		}
	}
	if u.State != nil {
		if err := oneOf("state", *u.State, TaskStates...); err != nil {
			return err
		}
	}
	var fields []string
	for _, f := range []struct {
		name string
		v    *string
	}{{"note", u.Note}, {"repeat", u.Repeat}, {"tz", u.TZ}, {"awaiting", u.Awaiting}, {"result", u.Result}, {"job", u.Job}} {
		if f.v != nil {
			fields = append(fields, f.name, *f.v)
		}
	}
	return noNUL(fields...)
}

// Validate checks an agenda item for CreateAgendaItem.
func (a AgendaItem) Validate() error {
	if err := required("id", a.ID, "text", a.Text); err != nil {
		return err
	}
	if a.At.IsZero() {
		return invalid("at is not set")
	}
	return noNUL("agent", a.Agent, "job", a.Job)
}

// Defaulted returns t with the defaults of a new task filled in.
func (t Task) Defaulted() Task {
	if t.Priority == 0 {
		t.Priority = DefaultTaskPriority
	}
	if t.Continuity == "" {
		t.Continuity = ContinuityContinue
	}
	if t.State == "" {
		t.State = TaskQueued
	}
	return t
}
