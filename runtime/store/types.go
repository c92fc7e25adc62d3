package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/picobot/picobot/runtime/llm"
)

// Session is one dialog of a chat: the unit a runtime owns, whose messages form
// the model's history. Its ID is "<channel>:<chat_id>:<dialog_id>" (see
// SessionID); a chat has several dialogs and one current one (CurrentDialog).
type Session struct {
	Tenant   string `json:"tenant"`
	ID       string `json:"id"`
	Channel  string `json:"channel"`
	ChatID   string `json:"chat_id"`
	DialogID string `json:"dialog_id"`
	// Agent is the name of the Agent answering in this session.
	Agent string `json:"agent"`
	Title string `json:"title"`
	// TitleIsDefault is true until someone (the user or auto-titling) names the
	// session, so auto-titling knows it may still act.
	TitleIsDefault bool      `json:"title_is_default"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	// LastMessageAt orders session lists; it starts at CreatedAt.
	LastMessageAt time.Time  `json:"last_message_at"`
	ArchivedAt    *time.Time `json:"archived_at,omitempty"`
	// DeletedAt marks a soft-deleted session; its messages are kept.
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
	// LastCompressedAt marks where context compression last cut the history:
	// a restored session loads messages since then and recalls the timeline
	// memories that summarise what came before.
	LastCompressedAt *time.Time `json:"last_compressed_at,omitempty"`
}

// MemoryFilter selects an agent's memories for ListMemories. Empty fields
// match all.
type MemoryFilter struct {
	Agent     string
	Category  MemoryCategory
	SessionID string
	// KeyPrefix keeps memories whose key starts with it.
	KeyPrefix string
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// SessionFilter selects sessions for ListSessions. Empty fields match all.
type SessionFilter struct {
	Channel string
	ChatID  string
	// Agent keeps the sessions of one agent.
	Agent           string
	IncludeArchived bool
	IncludeDeleted  bool
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// SessionUpdate lists the session fields to change; nil fields stay as they
// are. Archived and Deleted set or clear ArchivedAt and DeletedAt (setting an
// already set one keeps its original time).
type SessionUpdate struct {
	Title            *string
	TitleIsDefault   *bool
	Archived         *bool
	Deleted          *bool
	LastCompressedAt *time.Time
}

// Message is one stored entry of a session's conversation: an llm.Message plus
// its place in the session.
type Message struct {
	Tenant    string `json:"tenant"`
	SessionID string `json:"session_id"`
	// Seq orders the session's messages; assigned by the store, strictly
	// increasing from 1.
	Seq int64 `json:"seq"`
	// ID is unique within the session and chosen by the caller (e.g. the
	// inbound message's id), so a retried append does not store it twice.
	ID         string         `json:"id"`
	Role       llm.Role       `json:"role"`
	Content    string         `json:"content,omitempty"`
	ToolCalls  []llm.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
	IsError    bool           `json:"is_error,omitempty"`
	Images     []llm.Image    `json:"images,omitempty"`
	// CreatedAt defaults to the store's clock when zero.
	CreatedAt time.Time         `json:"created_at"`
	Meta      map[string]string `json:"meta,omitempty"`
	// Duplicate is set on a message AppendMessages returns when a message with
	// the same ID was already stored (this copy is the stored one). Not stored.
	Duplicate bool `json:"-"`
}

// UsageCounts are what a tenant's agents used: model tokens, their cost
// (in millionths of the price table's currency unit), model calls, turns,
// tool calls and sessions started.
type UsageCounts struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	CostMicros   int64 `json:"cost_micros"`
	ModelCalls   int64 `json:"model_calls"`
	Turns        int64 `json:"turns"`
	ToolCalls    int64 `json:"tool_calls"`
	Sessions     int64 `json:"sessions"`
}

// Add accumulates c2 into c.
func (c *UsageCounts) Add(c2 UsageCounts) {
	c.InputTokens += c2.InputTokens
	c.OutputTokens += c2.OutputTokens
	c.CostMicros += c2.CostMicros
	c.ModelCalls += c2.ModelCalls
	c.Turns += c2.Turns
	c.ToolCalls += c2.ToolCalls
	c.Sessions += c2.Sessions
}

// Tokens is input plus output tokens.
func (c UsageCounts) Tokens() int64 { return c.InputTokens + c.OutputTokens }

// UsageDelta is what one model call (or turn, or session) adds to an
// agent's usage of a day.
type UsageDelta struct {
	Agent string
	// Day is the UTC day the usage counts for (its time of day is ignored).
	Day time.Time
	UsageCounts
}

// UsageDay is an agent's usage on one UTC day.
type UsageDay struct {
	Agent string `json:"agent"`
	// Day is midnight UTC of the day.
	Day time.Time `json:"day"`
	UsageCounts
}

// UsageFilter selects usage rows: the days from From to To (both
// included; zero: unbounded) of Agent (empty: every agent).
type UsageFilter struct {
	Agent    string
	From, To time.Time
}

// UsageTotals are a tenant's usage on one day and in its month so far.
type UsageTotals struct {
	Day   UsageCounts `json:"day"`
	Month UsageCounts `json:"month"`
}

// TurnError is why the turn of a user message failed, as its client was
// told, so a client shows it again after a reload.
type TurnError struct {
	SessionID string `json:"session_id"`
	// MessageID is the user message's id.
	MessageID string `json:"message_id"`
	// Code is the protocol's error code (internal, model_rejected, ...).
	Code    string `json:"code"`
	Message string `json:"message"`
	// CreatedAt defaults to the store's clock when zero.
	CreatedAt time.Time `json:"created_at"`
}

// Meta keys of a turn's answer: the turn's token counts (decimal), so a
// client shows them after a reload as it did live.
const (
	MetaTokensIn  = "tokens_in"
	MetaTokensOut = "tokens_out"
)

// Meta keys that Messages readers (dialog.Service) put on a user message
// whose turn failed without an answer: the TurnError's code and message.
// They are never stored on a message.
const (
	MetaErrorCode = "error_code"
	MetaError     = "error"
)

// MessageColumns are the JSON-encoded columns of a stored message, as every
// store writes them; nil means SQL NULL (nothing to store).
type MessageColumns struct {
	ToolCalls, Images, Meta []byte
}

// Columns encodes the message's JSON columns.
func (m Message) Columns() (MessageColumns, error) {
	var c MessageColumns
	var err error
	if len(m.ToolCalls) > 0 {
		if c.ToolCalls, err = json.Marshal(m.ToolCalls); err != nil {
			return c, fmt.Errorf("failed to encode tool calls of message %q: %w", m.ID, err)
		}
	}
	if len(m.Images) > 0 {
		if c.Images, err = json.Marshal(m.Images); err != nil {
			return c, fmt.Errorf("failed to encode images of message %q: %w", m.ID, err)
		}
	}
	if len(m.Meta) > 0 {
		if c.Meta, err = json.Marshal(m.Meta); err != nil {
			return c, fmt.Errorf("failed to encode meta of message %q: %w", m.ID, err)
		}
	}
	return c, nil
}

// ToLLM returns the message as the model sees it.
func (m Message) ToLLM() llm.Message {
	return llm.Message{
		Role:       m.Role,
		Content:    m.Content,
		ToolCalls:  m.ToolCalls,
		ToolCallID: m.ToolCallID,
		Name:       m.Name,
		IsError:    m.IsError,
		Images:     m.Images,
	}
}

// FromLLM returns a Message carrying lm's content; the caller sets ID (and
// Meta) before appending it.
func FromLLM(lm llm.Message) Message {
	return Message{
		Role:       lm.Role,
		Content:    lm.Content,
		ToolCalls:  lm.ToolCalls,
		ToolCallID: lm.ToolCallID,
		Name:       lm.Name,
		IsError:    lm.IsError,
		Images:     lm.Images,
	}
}

// LoadOptions selects messages for LoadMessages; zero fields select all.
type LoadOptions struct {
	// AfterSeq keeps messages with Seq > AfterSeq.
	AfterSeq int64
	// Since keeps messages created at or after Since.
	Since time.Time
	// Last keeps only the last Last messages of the selection (still returned
	// in ascending order).
	Last int
}

// MemoryCategory separates long-lived knowledge from conversation summaries.
type MemoryCategory string

// Memory categories.
const (
	// MemoryKnowledge: facts, preferences, patterns; recalled every turn.
	MemoryKnowledge MemoryCategory = "knowledge"
	// MemoryTimeline: summaries of compressed conversation; recalled on demand
	// and cleaned up after a while.
	MemoryTimeline MemoryCategory = "timeline"
)

// MemoryKind refines what a memory records.
type MemoryKind string

// Memory kinds.
const (
	MemoryDecision MemoryKind = "decision"
	MemoryFact     MemoryKind = "fact"
	MemoryFocus    MemoryKind = "focus"
	MemoryNote     MemoryKind = "note"
)

// MemorySource says who wrote a memory.
type MemorySource string

// Memory sources.
const (
	SourceUser  MemorySource = "user"
	SourceAgent MemorySource = "agent"
	SourceTool  MemorySource = "tool"
)

// Memory is one long-term memory of an agent, unique per (Agent, Key): writing
// the same key again replaces the content.
type Memory struct {
	Tenant   string         `json:"tenant"`
	Agent    string         `json:"agent"`
	ID       string         `json:"id"`
	Key      string         `json:"key"`
	Content  string         `json:"content"`
	Category MemoryCategory `json:"category"`
	// Kind and Source are optional.
	Kind   MemoryKind   `json:"kind,omitempty"`
	Source MemorySource `json:"source,omitempty"`
	// SessionID links the memory to the session it came from (optional).
	SessionID string `json:"session_id,omitempty"`
	// Importance ranks recall, 0.0–1.0; timeline summaries use 0.3.
	Importance float64   `json:"importance"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// CronRunState is where a cron run is in its life.
type CronRunState string

// Cron run states.
const (
	CronClaimed CronRunState = "claimed"
	CronRunning CronRunState = "running"
	CronDone    CronRunState = "done"
)

// CronOutcome is how a finished cron run ended; empty until it finishes.
type CronOutcome string

// Cron outcomes.
const (
	OutcomeOK      CronOutcome = "ok"
	OutcomeAlert   CronOutcome = "alert"
	OutcomeFailed  CronOutcome = "failed"
	OutcomeRefused CronOutcome = "refused"
	OutcomeSkipped CronOutcome = "skipped"
)

// CronDelivery says what became of a cron run's message; empty until decided.
type CronDelivery string

// Cron delivery states.
const (
	CronDeliveryPending    CronDelivery = "pending"
	CronDeliveryDelivered  CronDelivery = "delivered"
	CronDeliverySuppressed CronDelivery = "suppressed"
	CronDeliveryFailed     CronDelivery = "failed"
)

// CronRun is one firing of a CronJob. (Tenant, Job, ScheduledTime) is unique,
// which is what makes a tick fire once however many schedulers race for it.
type CronRun struct {
	Tenant string `json:"tenant"`
	// Job is the CronJob's "namespace/name".
	Job           string       `json:"job"`
	RunID         string       `json:"run_id"`
	ScheduledTime time.Time    `json:"scheduled_time"`
	State         CronRunState `json:"state"`
	Outcome       CronOutcome  `json:"outcome,omitempty"`
	Message       string       `json:"message,omitempty"`
	StartedAt     *time.Time   `json:"started_at,omitempty"`
	FinishedAt    *time.Time   `json:"finished_at,omitempty"`
	Delivery      CronDelivery `json:"delivery,omitempty"`
}

// CronRunUpdate lists the cron run fields to change; nil fields stay.
type CronRunUpdate struct {
	State      *CronRunState
	Outcome    *CronOutcome
	Message    *string
	StartedAt  *time.Time
	FinishedAt *time.Time
	Delivery   *CronDelivery
}

// AgentRunStatus is where a (sub-)agent run is in its life.
type AgentRunStatus string

// Agent run statuses.
const (
	RunQueued    AgentRunStatus = "queued"
	RunRunning   AgentRunStatus = "running"
	RunSucceeded AgentRunStatus = "succeeded"
	RunFailed    AgentRunStatus = "failed"
	RunCancelled AgentRunStatus = "cancelled"
)

// AgentRun is one run of an agent outside a session's own turn — a delegated
// sub-agent or a background task — so its result survives the runtime.
type AgentRun struct {
	Tenant      string `json:"tenant"`
	ID          string `json:"id"`
	Agent       string `json:"agent"`
	SessionID   string `json:"session_id,omitempty"`
	ParentRunID string `json:"parent_run_id,omitempty"`
	// ParentAgent is the agent that delegated the run, in session SessionID.
	ParentAgent string `json:"parent_agent,omitempty"`
	// Mode is foreground (the default) or background.
	Mode RunMode `json:"mode,omitempty"`
	// Completion is the background run's reserved inbox slot in its parent
	// session: reserved while it runs, ready once it ended (its outcome
	// waits for the parent's continuation turn), delivered once that turn
	// took it, closed when nothing is to be delivered (cancelled by the
	// parent). Empty for foreground runs, whose caller waits for them.
	Completion RunCompletion `json:"completion,omitempty"`
	// Status defaults to queued on create.
	Status    AgentRunStatus `json:"status"`
	Input     string         `json:"input,omitempty"`
	Result    string         `json:"result,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
}

// Terminal reports whether the run has ended.
func (r AgentRun) Terminal() bool { return r.Status.Terminal() }

// Terminal reports whether s is an end state.
func (s AgentRunStatus) Terminal() bool {
	return s == RunSucceeded || s == RunFailed || s == RunCancelled
}

// RunMode says whether a run's caller waits for it.
type RunMode string

// Run modes.
const (
	RunForeground RunMode = "foreground"
	RunBackground RunMode = "background"
)

// RunCompletion is the state of a background run's completion slot.
type RunCompletion string

// Completion slot states.
const (
	CompletionNone      RunCompletion = ""
	CompletionReserved  RunCompletion = "reserved"
	CompletionReady     RunCompletion = "ready"
	CompletionDelivered RunCompletion = "delivered"
	CompletionClosed    RunCompletion = "closed"
)

// ErrRunFinished is returned by UpdateAgentRun with IfActive for a run that
// has already ended (it exists: a missing run is ErrNotFound).
var ErrRunFinished = errors.New("run has already finished")

// AgentRunUpdate lists the agent run fields to change; nil fields stay.
type AgentRunUpdate struct {
	Status     *AgentRunStatus
	Result     *string
	Completion *RunCompletion
	// IfActive applies the update only to a queued or running run
	// (ErrRunFinished otherwise): a run finishes once, whether it ends or
	// is cancelled.
	IfActive bool
	// IfCompletion, when set, applies the update only while the run's
	// completion slot is in that state (ErrRunFinished otherwise).
	IfCompletion RunCompletion
}

// AgentRunFilter selects agent runs; empty fields match all.
type AgentRunFilter struct {
	Agent       string
	SessionID   string
	ParentRunID string
	Status      AgentRunStatus
	Mode        RunMode
	Completion  RunCompletion
	// Active selects queued and running runs only.
	Active bool
	// CursorCreatedAt and CursorID, set together, page through the
	// result: only runs after that one in the order (older, or as old
	// with a smaller id) are returned.
	CursorCreatedAt time.Time
	CursorID        string
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// DeliveryStatus is the state of an outbound message.
type DeliveryStatus string

// Delivery statuses.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// Delivery records an outbound message to a channel and what really happened
// to it, so a failure is visible and retried instead of lost.
type Delivery struct {
	Tenant    string `json:"tenant"`
	ID        string `json:"id"`
	Channel   string `json:"channel"`
	ChatID    string `json:"chat_id"`
	SessionID string `json:"session_id,omitempty"`
	// Status defaults to pending on create.
	Status      DeliveryStatus `json:"status"`
	Attempts    int            `json:"attempts"`
	LastError   string         `json:"last_error,omitempty"`
	CreatedAt   time.Time      `json:"created_at"`
	DeliveredAt *time.Time     `json:"delivered_at,omitempty"`
}

// DeliveryUpdate records the result of a delivery attempt. Moving to
// delivered sets DeliveredAt.
type DeliveryUpdate struct {
	Status    *DeliveryStatus
	LastError *string
	// AddAttempt increments Attempts in the database, so concurrent
	// dispatchers do not lose a count.
	AddAttempt bool
}

// DeliveryFilter selects deliveries; empty fields match all.
type DeliveryFilter struct {
	Status    DeliveryStatus
	SessionID string
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// Artifact is the metadata of a file a session produced; the bytes live in
// the blob store under BlobKey.
type Artifact struct {
	Tenant    string    `json:"tenant"`
	ID        string    `json:"id"`
	SessionID string    `json:"session_id,omitempty"`
	Name      string    `json:"name"`
	MediaType string    `json:"media_type,omitempty"`
	BlobKey   string    `json:"blob_key"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
}
