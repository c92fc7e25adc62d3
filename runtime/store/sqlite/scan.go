package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// Scanners for the *Columns lists in queries.go, in the same order.

func scanSession(row scanner) (store.Session, error) {
	var (
		s                                 store.Session
		created, updated, lastMessage     int64
		archived, deleted, lastCompressed sql.NullInt64
	)
	err := row.Scan(&s.Tenant, &s.ID, &s.Channel, &s.ChatID, &s.DialogID, &s.Agent, &s.Title, &s.TitleIsDefault,
		&created, &updated, &lastMessage, &archived, &deleted, &lastCompressed)
	s.CreatedAt, s.UpdatedAt, s.LastMessageAt = fromMicros(created), fromMicros(updated), fromMicros(lastMessage)
	s.ArchivedAt, s.DeletedAt, s.LastCompressedAt = fromNull(archived), fromNull(deleted), fromNull(lastCompressed)
	return s, err
}

func scanMessage(row scanner) (store.Message, error) {
	var (
		m                       store.Message
		role                    string
		created                 int64
		toolCalls, images, meta sql.NullString
	)
	if err := row.Scan(&m.Tenant, &m.SessionID, &m.Seq, &m.ID, &role, &m.Content, &toolCalls, &m.ToolCallID, &m.Name,
		&m.IsError, &images, &meta, &created); err != nil {
		return m, err
	}
	m.Role = llm.Role(role)
	m.CreatedAt = fromMicros(created)
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

func scanMemory(row scanner) (store.Memory, error) {
	var (
		m                      store.Memory
		category, kind, source string
		created, updated       int64
	)
	err := row.Scan(&m.Tenant, &m.Agent, &m.ID, &m.Key, &m.Content, &category, &kind, &source, &m.SessionID,
		&m.Importance, &created, &updated)
	m.Category, m.Kind, m.Source = store.MemoryCategory(category), store.MemoryKind(kind), store.MemorySource(source)
	m.CreatedAt, m.UpdatedAt = fromMicros(created), fromMicros(updated)
	return m, err
}

func scanCronRun(row scanner) (store.CronRun, error) {
	var (
		r                        store.CronRun
		state, outcome, delivery string
		scheduled                int64
		started, finished        sql.NullInt64
	)
	err := row.Scan(&r.Tenant, &r.Job, &r.RunID, &scheduled, &state, &outcome, &r.Message, &started, &finished,
		&delivery)
	r.State, r.Outcome, r.Delivery = store.CronRunState(state), store.CronOutcome(outcome), store.CronDelivery(delivery)
	r.ScheduledTime, r.StartedAt, r.FinishedAt = fromMicros(scheduled), fromNull(started), fromNull(finished)
	return r, err
}

func scanAgentRun(row scanner) (store.AgentRun, error) {
	var (
		r                store.AgentRun
		status           string
		created, updated int64
	)
	var mode, completion string
	err := row.Scan(&r.Tenant, &r.ID, &r.Agent, &r.SessionID, &r.ParentRunID, &status, &r.Input, &r.Result,
		&created, &updated, &mode, &r.ParentAgent, &completion)
	r.Status, r.Mode, r.Completion = store.AgentRunStatus(status), store.RunMode(mode), store.RunCompletion(completion)
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	return r, err
}

func scanAgentSignal(row scanner) (store.AgentSignal, error) {
	var (
		s                store.AgentSignal
		delivery, state  string
		created, updated int64
	)
	err := row.Scan(&s.Tenant, &s.ID, &s.RunID, &s.SessionID, &delivery, &s.Kind, &s.Body, &state, &created, &updated)
	s.Delivery, s.State = store.SignalDelivery(delivery), store.SignalState(state)
	s.CreatedAt, s.UpdatedAt = fromMicros(created), fromMicros(updated)
	return s, err
}

func scanDelivery(row scanner) (store.Delivery, error) {
	var (
		d         store.Delivery
		status    string
		created   int64
		delivered sql.NullInt64
	)
	err := row.Scan(&d.Tenant, &d.ID, &d.Channel, &d.ChatID, &d.SessionID, &status, &d.Attempts, &d.LastError,
		&created, &delivered)
	d.Status = store.DeliveryStatus(status)
	d.CreatedAt, d.DeliveredAt = fromMicros(created), fromNull(delivered)
	return d, err
}

func scanArtifact(row scanner) (store.Artifact, error) {
	var (
		a       store.Artifact
		created int64
	)
	err := row.Scan(&a.Tenant, &a.ID, &a.SessionID, &a.Name, &a.MediaType, &a.BlobKey, &a.Size, &created)
	a.CreatedAt = fromMicros(created)
	return a, err
}

func scanString(row scanner) (string, error) {
	var s string
	err := row.Scan(&s)
	return s, err
}

func scanInt64(row scanner) (int64, error) {
	var n int64
	err := row.Scan(&n)
	return n, err
}

// text is an encoded JSON column as SQLite stores it: TEXT, or NULL for nil.
func text(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

func decodeJSON(s sql.NullString, v any) error {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.Unmarshal([]byte(s.String), v)
}

// micros is how the schema stores a time: microseconds since the epoch, the
// precision PostgreSQL keeps.
func micros(t time.Time) int64 {
	return t.UnixMicro()
}

// microsPtr is micros for optional times; nil stays nil (SQL NULL).
func microsPtr(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := t.UnixMicro()
	return &v
}

func fromMicros(us int64) time.Time {
	return time.UnixMicro(us).UTC()
}

func fromNull(us sql.NullInt64) *time.Time {
	if !us.Valid {
		return nil
	}
	t := fromMicros(us.Int64)
	return &t
}
