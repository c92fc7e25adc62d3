package store

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/llm"
)

// SessionID joins a session's parts into its id "<channel>:<chat_id>:<dialog_id>".
func SessionID(channel, chatID, dialogID string) string {
	return channel + ":" + chatID + ":" + dialogID
}

// ParseSessionID splits a session id into its parts. The chat id may itself
// contain colons (some channels use them); channel and dialog id may not.
func ParseSessionID(id string) (channel, chatID, dialogID string, err error) {
	first := strings.IndexByte(id, ':')
	last := strings.LastIndexByte(id, ':')
	if first <= 0 || last == first || last == len(id)-1 || last-first == 1 {
		return "", "", "", fmt.Errorf("%w: session id %q is not <channel>:<chat_id>:<dialog_id>", ErrInvalid, id)
	}
	return id[:first], id[first+1 : last], id[last+1:], nil
}

// NewID returns a random (version 4) UUID, for records whose id the caller
// does not choose.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// invalid reports a rule violation as ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// required checks named fields are non-empty and NUL-free.
func required(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return invalid("%s is empty", fields[i])
		}
	}
	return noNUL(fields...)
}

// noNUL checks named text fields for NUL bytes, which PostgreSQL text and
// jsonb reject: refusing them in both implementations keeps embedded and
// cluster mode in agreement.
func noNUL(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.IndexByte(fields[i+1], 0) >= 0 {
			return invalid("%s contains a NUL byte", fields[i])
		}
	}
	return nil
}

func oneOf[T ~string](field string, v T, allowed ...T) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return invalid("%s %q is not one of %v", field, v, allowed)
}

// Validate checks a session for CreateSession: its parts are set and agree
// with ID when ID is set.
func (s Session) Validate() error {
	if err := required("channel", s.Channel, "chat_id", s.ChatID, "dialog_id", s.DialogID); err != nil {
		return err
	}
	if strings.Contains(s.Channel, ":") || strings.Contains(s.DialogID, ":") {
		return invalid("channel %q and dialog_id %q must not contain ':'", s.Channel, s.DialogID)
	}
	if s.ID != "" && s.ID != SessionID(s.Channel, s.ChatID, s.DialogID) {
		return invalid("session id %q does not match its parts %q", s.ID, SessionID(s.Channel, s.ChatID, s.DialogID))
	}
	return noNUL("agent", s.Agent, "title", s.Title)
}

// Validate checks a message for AppendMessages.
func (m Message) Validate() error {
	if err := required("message id", m.ID); err != nil {
		return err
	}
	if err := oneOf("role", m.Role, llm.RoleSystem, llm.RoleUser, llm.RoleAssistant, llm.RoleTool); err != nil {
		return err
	}
	if err := noNUL("content", m.Content, "tool_call_id", m.ToolCallID, "name", m.Name); err != nil {
		return err
	}
	for _, tc := range m.ToolCalls {
		if err := noNUL("tool call id", tc.ID, "tool call name", tc.Name, "tool call arguments", tc.Arguments); err != nil {
			return err
		}
	}
	for _, img := range m.Images {
		if err := noNUL("image media type", img.MediaType); err != nil {
			return err
		}
	}
	for k, v := range m.Meta {
		if err := noNUL("meta key", k, "meta value", v); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a memory for PutMemory (ID may be empty: it is generated).
func (m Memory) Validate() error {
	if err := required("agent", m.Agent, "key", m.Key); err != nil {
		return err
	}
	if err := oneOf("category", m.Category, MemoryKnowledge, MemoryTimeline); err != nil {
		return err
	}
	if err := oneOf("kind", m.Kind, "", MemoryDecision, MemoryFact, MemoryFocus, MemoryNote); err != nil {
		return err
	}
	if err := oneOf("source", m.Source, "", SourceUser, SourceAgent, SourceTool); err != nil {
		return err
	}
	if m.Importance < 0 || m.Importance > 1 {
		return invalid("importance %v is outside 0..1", m.Importance)
	}
	return noNUL("id", m.ID, "content", m.Content, "session_id", m.SessionID)
}

// Validate checks a cron run for ClaimCronRun.
func (r CronRun) Validate() error {
	if err := required("job", r.Job, "run_id", r.RunID); err != nil {
		return err
	}
	if r.ScheduledTime.IsZero() {
		return invalid("scheduled_time is zero")
	}
	return CronRunUpdate{Outcome: &r.Outcome, Delivery: &r.Delivery, Message: &r.Message}.Validate()
}

// Validate checks the values a cron run update sets.
func (u CronRunUpdate) Validate() error {
	if u.State != nil {
		if err := oneOf("state", *u.State, CronClaimed, CronRunning, CronDone); err != nil {
			return err
		}
	}
	if u.Outcome != nil {
		if err := oneOf("outcome", *u.Outcome, "", OutcomeOK, OutcomeAlert, OutcomeFailed, OutcomeRefused, OutcomeSkipped); err != nil {
			return err
		}
	}
	if u.Delivery != nil {
		if err := oneOf("delivery", *u.Delivery, "", CronDeliveryPending, CronDeliveryDelivered, CronDeliverySuppressed, CronDeliveryFailed); err != nil {
			return err
		}
	}
	if u.Message != nil {
		return noNUL("message", *u.Message)
	}
	return nil
}

// Validate checks an agent run for CreateAgentRun (an empty Status means queued).
func (r AgentRun) Validate() error {
	if err := required("id", r.ID, "agent", r.Agent); err != nil {
		return err
	}
	if r.Status != "" {
		if err := (AgentRunUpdate{Status: &r.Status}).Validate(); err != nil {
			return err
		}
	}
	if r.Mode != "" {
		if err := oneOf("mode", r.Mode, RunForeground, RunBackground); err != nil {
			return err
		}
	}
	if r.Completion != "" {
		if err := (AgentRunUpdate{Completion: &r.Completion}).Validate(); err != nil {
			return err
		}
	}
	return noNUL("session_id", r.SessionID, "parent_run_id", r.ParentRunID, "parent_agent", r.ParentAgent,
		"input", r.Input, "result", r.Result)
}

// Validate checks the values an agent run update sets.
func (u AgentRunUpdate) Validate() error {
	if u.Status != nil {
		if err := oneOf("status", *u.Status, RunQueued, RunRunning, RunSucceeded, RunFailed, RunCancelled); err != nil {
			return err
		}
	}
	for _, c := range []*RunCompletion{u.Completion, &u.IfCompletion} {
		if c != nil && *c != "" {
			if err := oneOf("completion", *c, CompletionReserved, CompletionReady, CompletionDelivered, CompletionClosed); err != nil {
				return err
			}
		}
	}
	if u.Result != nil {
		return noNUL("result", *u.Result)
	}
	return nil
}

// Validate checks a delivery for CreateDelivery (an empty Status means pending).
func (d Delivery) Validate() error {
	if err := required("id", d.ID, "channel", d.Channel, "chat_id", d.ChatID); err != nil {
		return err
	}
	if d.Status != "" {
		if err := (DeliveryUpdate{Status: &d.Status}).Validate(); err != nil {
			return err
		}
	}
	if d.Attempts < 0 {
		return invalid("attempts %d is negative", d.Attempts)
	}
	return noNUL("session_id", d.SessionID, "last_error", d.LastError)
}

// Validate checks the values a delivery update sets.
func (u DeliveryUpdate) Validate() error {
	if u.Status != nil {
		if err := oneOf("status", *u.Status, DeliveryPending, DeliveryDelivered, DeliveryFailed); err != nil {
			return err
		}
	}
	if u.LastError != nil {
		return noNUL("last_error", *u.LastError)
	}
	return nil
}

// Validate checks an artifact for CreateArtifact.
func (a Artifact) Validate() error {
	if err := required("id", a.ID, "name", a.Name, "blob_key", a.BlobKey); err != nil {
		return err
	}
	if a.Size < 0 {
		return invalid("size %d is negative", a.Size)
	}
	return noNUL("session_id", a.SessionID, "media_type", a.MediaType)
}

// Validate checks the values a session update sets.
func (u SessionUpdate) Validate() error {
	if u.Title != nil {
		return noNUL("title", *u.Title)
	}
	return nil
}

// ListLimit turns a filter's Limit into the number of rows to return.
func ListLimit(n int) int {
	if n <= 0 {
		return DefaultListLimit
	}
	return n
}

// ValidateLease checks lease arguments. A ttl under a millisecond is refused:
// it would expire before the caller could use it.
func ValidateLease(sessionID, holder string, ttl time.Duration) error {
	if err := required("session id", sessionID, "holder", holder); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return invalid("lease ttl %v is shorter than 1ms", ttl)
	}
	return nil
}

// ValidateUsageDelta checks a usage delta before it is added.
func ValidateUsageDelta(d UsageDelta) error {
	c := d.UsageCounts
	switch {
	case d.Agent == "":
		return fmt.Errorf("%w: usage needs an agent", ErrInvalid)
	case d.Day.IsZero():
		return fmt.Errorf("%w: usage needs a day", ErrInvalid)
	case c.InputTokens < 0 || c.OutputTokens < 0 || c.CostMicros < 0 || c.ModelCalls < 0 || c.Turns < 0 || c.ToolCalls < 0 || c.Sessions < 0:
		return fmt.Errorf("%w: usage only grows (a negative count)", ErrInvalid)
	}
	return nil
}

// UsageDayOf is midnight UTC of t's UTC day.
func UsageDayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// MaxTurnErrorBytes bounds the message of a recorded turn failure, and
// MaxTurnErrorIDs the messages one TurnErrors call asks about.
const (
	MaxTurnErrorBytes = 4 << 10
	MaxTurnErrorIDs   = 1000
)

// ValidateTurnError checks a turn failure before it is stored.
func ValidateTurnError(e TurnError) error {
	switch {
	case e.SessionID == "" || e.MessageID == "":
		return fmt.Errorf("%w: a turn error needs a session id and a message id", ErrInvalid)
	case e.Code == "":
		return fmt.Errorf("%w: a turn error needs a code", ErrInvalid)
	case len(e.Message) > MaxTurnErrorBytes:
		return fmt.Errorf("%w: the turn error's message has %d bytes, more than %d", ErrInvalid, len(e.Message), MaxTurnErrorBytes)
	}
	return nil
}

// MaxPlanBytes bounds a stored todo plan (a plan holds at most 100 items).
const MaxPlanBytes = 256 << 10

// ValidatePlan checks a todo plan before it is stored.
func ValidatePlan(sessionID string, plan []byte) error {
	switch {
	case sessionID == "":
		return fmt.Errorf("%w: empty session id", ErrInvalid)
	case len(plan) > MaxPlanBytes:
		return fmt.Errorf("%w: the plan has %d bytes, more than %d", ErrInvalid, len(plan), MaxPlanBytes)
	case !json.Valid(plan):
		return fmt.Errorf("%w: the plan is not JSON", ErrInvalid)
	}
	return nil
}

// MaxNoticeKeyBytes bounds a notice's key (ClaimNotice).
const MaxNoticeKeyBytes = 512

// ValidateNotice checks a notice claim before it is recorded.
func ValidateNotice(key string, now, expires time.Time) error {
	switch {
	case key == "" || len(key) > MaxNoticeKeyBytes:
		return fmt.Errorf("%w: a notice key has 1 to %d bytes", ErrInvalid, MaxNoticeKeyBytes)
	case now.IsZero() || !expires.After(now):
		return fmt.Errorf("%w: a notice expires after now", ErrInvalid)
	}
	return nil
}
