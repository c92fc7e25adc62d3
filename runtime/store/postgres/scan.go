package postgres

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// Scanners for the *Columns lists in queries.go, in the same order.

func scanSession(row pgx.CollectableRow) (store.Session, error) {
	var s store.Session
	err := row.Scan(&s.Tenant, &s.ID, &s.Channel, &s.ChatID, &s.DialogID, &s.Agent, &s.Title, &s.TitleIsDefault,
		&s.CreatedAt, &s.UpdatedAt, &s.LastMessageAt, &s.ArchivedAt, &s.DeletedAt, &s.LastCompressedAt)
	s.CreatedAt, s.UpdatedAt, s.LastMessageAt = utc(s.CreatedAt), utc(s.UpdatedAt), utc(s.LastMessageAt)
	s.ArchivedAt, s.DeletedAt, s.LastCompressedAt = utcPtr(s.ArchivedAt), utcPtr(s.DeletedAt), utcPtr(s.LastCompressedAt)
	return s, err
}

func scanMessage(row pgx.CollectableRow) (store.Message, error) {
	var (
		m                       store.Message
		role                    string
		toolCalls, images, meta []byte
	)
	if err := row.Scan(&m.Tenant, &m.SessionID, &m.Seq, &m.ID, &role, &m.Content, &toolCalls, &m.ToolCallID, &m.Name,
		&m.IsError, &images, &meta, &m.CreatedAt); err != nil {
		return m, err
	}
	m.Role = llm.Role(role)
	m.CreatedAt = utc(m.CreatedAt)
	if err := decodeJSON(toolCalls, &m.ToolCalls); err != nil {
		return m, fmt.Errorf("failed to decode tool calls of message %q: %w", m.ID, err)
	}
	if err := decodeJSON(images, &m.Images); err != nil {
		return m, fmt.Errorf("failed to decode images of message %q: %w", m.ID, err)
	}
	if err := decodeJSON(meta, &m.Meta); err != nil {
		return m, fmt.Errorf("failed to decode meta of message %q: %w", m.ID, err)
	}
	return m, nil
}

func scanMemory(row pgx.CollectableRow) (store.Memory, error) {
	var (
		m                      store.Memory
		category, kind, source string
	)
	err := row.Scan(&m.Tenant, &m.Agent, &m.ID, &m.Key, &m.Content, &category, &kind, &source, &m.SessionID,
		&m.Importance, &m.CreatedAt, &m.UpdatedAt)
	m.Category, m.Kind, m.Source = store.MemoryCategory(category), store.MemoryKind(kind), store.MemorySource(source)
	m.CreatedAt, m.UpdatedAt = utc(m.CreatedAt), utc(m.UpdatedAt)
	return m, err
}

func scanCronRun(row pgx.CollectableRow) (store.CronRun, error) {
	var (
		r                        store.CronRun
		state, outcome, delivery string
	)
	err := row.Scan(&r.Tenant, &r.Job, &r.RunID, &r.ScheduledTime, &state, &outcome, &r.Message, &r.StartedAt,
		&r.FinishedAt, &delivery)
	r.State, r.Outcome, r.Delivery = store.CronRunState(state), store.CronOutcome(outcome), store.CronDelivery(delivery)
	r.ScheduledTime, r.StartedAt, r.FinishedAt = utc(r.ScheduledTime), utcPtr(r.StartedAt), utcPtr(r.FinishedAt)
	return r, err
}

func scanAgentRun(row pgx.CollectableRow) (store.AgentRun, error) {
	var (
		r      store.AgentRun
		status string
	)
	var mode, completion string
	err := row.Scan(&r.Tenant, &r.ID, &r.Agent, &r.SessionID, &r.ParentRunID, &status, &r.Input, &r.Result,
		&r.CreatedAt, &r.UpdatedAt, &mode, &r.ParentAgent, &completion)
	r.Status, r.Mode, r.Completion = store.AgentRunStatus(status), store.RunMode(mode), store.RunCompletion(completion)
	r.CreatedAt, r.UpdatedAt = utc(r.CreatedAt), utc(r.UpdatedAt)
	return r, err
}

func scanAgentSignal(row pgx.CollectableRow) (store.AgentSignal, error) {
	var (
		s               store.AgentSignal
		delivery, state string
	)
	err := row.Scan(&s.Tenant, &s.ID, &s.RunID, &s.SessionID, &delivery, &s.Kind, &s.Body, &state, &s.CreatedAt, &s.UpdatedAt)
	s.Delivery, s.State = store.SignalDelivery(delivery), store.SignalState(state)
	s.CreatedAt, s.UpdatedAt = utc(s.CreatedAt), utc(s.UpdatedAt)
	return s, err
}

func scanDelivery(row pgx.CollectableRow) (store.Delivery, error) {
	var (
		d      store.Delivery
		status string
	)
	err := row.Scan(&d.Tenant, &d.ID, &d.Channel, &d.ChatID, &d.SessionID, &status, &d.Attempts, &d.LastError,
		&d.CreatedAt, &d.DeliveredAt)
	d.Status = store.DeliveryStatus(status)
	d.CreatedAt, d.DeliveredAt = utc(d.CreatedAt), utcPtr(d.DeliveredAt)
	return d, err
}

func scanArtifact(row pgx.CollectableRow) (store.Artifact, error) {
	var a store.Artifact
	err := row.Scan(&a.Tenant, &a.ID, &a.SessionID, &a.Name, &a.MediaType, &a.BlobKey, &a.Size, &a.CreatedAt)
	a.CreatedAt = utc(a.CreatedAt)
	return a, err
}

// decodeJSON reads a jsonb column; NULL leaves v as it is.
func decodeJSON(b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// micro rounds t the way PostgreSQL stores it (microseconds, UTC), so what a
// method returns equals what a later read returns.
func micro(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// microPtr is micro for optional times; nil stays nil (SQL NULL).
func microPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := micro(*t)
	return &v
}

// nullTime passes a zero time as SQL NULL, letting the query default it.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return microPtr(&t)
}

func utc(t time.Time) time.Time {
	return t.UTC()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC()
	return &v
}

func rowToString(row pgx.CollectableRow) (string, error) {
	var s string
	err := row.Scan(&s)
	return s, err
}
