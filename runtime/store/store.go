// Package store defines PicoBot's durable state — sessions and their messages,
// memories, cron runs, agent runs, deliveries, artifacts and session leases —
// and the Store interface the runtime and the operator use to reach it.
//
// Every operation is scoped to a tenant carried in the context (WithTenant).
// A call without one fails with ErrNoTenant rather than running unscoped.
// Implementations: store/postgres (cluster mode; isolation enforced by
// PostgreSQL row-level security) and store/sqlite (embedded mode). Both pass
// the conformance suite in store/storetest.
package store

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors; implementations wrap them with context, so match them with
// errors.Is.
var (
	// ErrNotFound: no such record in the caller's tenant. Records of other
	// tenants are reported the same way, so their existence does not leak.
	ErrNotFound = errors.New("not found")
	// ErrExists: a record with that identity already exists.
	ErrExists = errors.New("already exists")
	// ErrLeaseLost: another holder owns the session lease now.
	ErrLeaseLost = errors.New("lease lost")
	// ErrNoTenant: the context carries no tenant (see WithTenant).
	ErrNoTenant = errors.New("no tenant in context")
	// ErrInvalid: the input breaks a rule of the data model (empty id, unknown
	// role or state, NUL byte in text). Nothing was written.
	ErrInvalid = errors.New("invalid input")
	// ErrUnavailable: the store could not be reached (a database restart or
	// outage). Nothing is known to be written; retrying later is safe for the
	// idempotent writes (appends keyed by message id, leases).
	ErrUnavailable = errors.New("store unavailable")
)

// DefaultListLimit caps List* results when the filter sets no limit, so an
// unbounded listing cannot be asked for by accident.
const DefaultListLimit = 100

// Store is PicoBot's durable state. All methods are safe for concurrent use and
// scoped to the tenant in ctx.
type Store interface {
	MemorySearcher
	MessageSearcher

	// CreateSession stores a new session. ID may be left empty when Channel,
	// ChatID and DialogID are set, and vice versa; both given must agree.
	// Zero timestamps are set by the store. Fails with ErrExists on a duplicate.
	CreateSession(ctx context.Context, s Session) (Session, error)
	// GetSession returns a session, soft-deleted ones included (DeletedAt set).
	GetSession(ctx context.Context, id string) (Session, error)
	// ListSessions returns sessions newest LastMessageAt first.
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
	// UpdateSession changes the fields set in u and returns the result.
	UpdateSession(ctx context.Context, id string, u SessionUpdate) (Session, error)
	// SetCurrentDialog records which dialog a chat is talking to.
	SetCurrentDialog(ctx context.Context, channel, chatID, dialogID string) error
	// CurrentDialog returns the chat's current dialog id, ErrNotFound if
	// none or if its session is missing or deleted (in one read).
	CurrentDialog(ctx context.Context, channel, chatID string) (string, error)

	// AppendMessages stores msgs at the end of the session in one transaction:
	// either every new message is stored or none is. Seq is assigned by the
	// store. A message whose ID is already stored in the session (an earlier
	// attempt of the same write, or an earlier message of the same batch) is
	// not stored again: the result holds the stored copy with Duplicate set.
	// The session's LastMessageAt and UpdatedAt move forward. Appending to a
	// soft-deleted session is allowed: a turn in flight when the user
	// deleted it still lands.
	AppendMessages(ctx context.Context, sessionID string, msgs ...Message) ([]Message, error)
	// LoadMessages returns the session's messages in ascending Seq order.
	LoadMessages(ctx context.Context, sessionID string, opts LoadOptions) ([]Message, error)
	// CountMessages returns how many messages the session holds.
	CountMessages(ctx context.Context, sessionID string) (int64, error)

	// AcquireLease makes holder the owner of the session for ttl. It succeeds
	// when the lease is free, expired, or already held by holder (which renews
	// it), and returns false when someone else holds it. Expiry is judged by
	// the database's clock so replicas with skewed clocks agree.
	AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (bool, error)
	// RenewLease extends holder's lease by ttl from now; ErrLeaseLost when
	// another holder took it or it was released.
	RenewLease(ctx context.Context, sessionID, holder string, ttl time.Duration) error
	// ReleaseLease gives the lease up if holder still has it; otherwise it is
	// a no-op.
	ReleaseLease(ctx context.Context, sessionID, holder string) error

	// PutMemory stores m, replacing the memory with the same Agent and Key
	// (whose ID and CreatedAt are kept). An empty ID is generated.
	PutMemory(ctx context.Context, m Memory) (Memory, error)
	// GetMemory returns the agent's memory with the given key.
	GetMemory(ctx context.Context, agent, key string) (Memory, error)
	// DeleteMemory removes the agent's memory with the given key.
	DeleteMemory(ctx context.Context, agent, key string) error
	// ListMemories returns the agent's memories matching f, newest first
	// (restoring timeline context; maintenance).
	ListMemories(ctx context.Context, f MemoryFilter) ([]Memory, error)

	// ClaimCronRun records run (State claimed) unless a run of the same Job and
	// ScheduledTime exists. Of many concurrent claimers exactly one gets true.
	// Claimers use distinct RunIDs; one that lost the reply to its claim can
	// GetCronRun its RunID to learn whether the claim landed.
	ClaimCronRun(ctx context.Context, run CronRun) (bool, error)
	// GetCronRun returns a cron run by RunID.
	GetCronRun(ctx context.Context, runID string) (CronRun, error)
	// UpdateCronRun changes the fields set in u and returns the result.
	UpdateCronRun(ctx context.Context, runID string, u CronRunUpdate) (CronRun, error)
	// ListCronRuns returns a job's runs, latest ScheduledTime first.
	ListCronRuns(ctx context.Context, job string, limit int) ([]CronRun, error)

	// CreateAgentRun stores a new run; ErrExists on a duplicate ID.
	CreateAgentRun(ctx context.Context, r AgentRun) (AgentRun, error)
	// GetAgentRun returns a run by ID.
	GetAgentRun(ctx context.Context, id string) (AgentRun, error)
	// UpdateAgentRun changes the fields set in u and returns the result.
	UpdateAgentRun(ctx context.Context, id string, u AgentRunUpdate) (AgentRun, error)
	// ListAgentRuns returns runs matching f, newest first.
	ListAgentRuns(ctx context.Context, f AgentRunFilter) ([]AgentRun, error)
	// DeleteAgentRuns removes the ended runs last updated before before
	// whose completion slot has nothing left to deliver, with their
	// signals, and the signals created before before; it returns how many
	// runs it removed (retention).
	DeleteAgentRuns(ctx context.Context, before time.Time) (int, error)

	// CreateAgentSignal stores a signal of a background run to its parent
	// session; ErrExists on a duplicate ID.
	CreateAgentSignal(ctx context.Context, s AgentSignal) (AgentSignal, error)
	// ListAgentSignals returns signals matching f, oldest first.
	ListAgentSignals(ctx context.Context, f AgentSignalFilter) ([]AgentSignal, error)
	// MarkAgentSignals moves the pending signals with the given ids, or
	// (with runID set) every pending signal of that run, to state; it
	// returns how many it moved.
	MarkAgentSignals(ctx context.Context, ids []string, runID string, state SignalState) (int, error)

	// GetSessionPlan returns the session's todo plan as the todo tool
	// stored it (JSON); ErrNotFound when it has none.
	GetSessionPlan(ctx context.Context, sessionID string) ([]byte, error)
	// PutSessionPlan replaces the session's todo plan (JSON, at most
	// MaxPlanBytes).
	PutSessionPlan(ctx context.Context, sessionID string, plan []byte) error

	// PutTurnError records why the turn of a user message failed (what its
	// client was told), replacing an earlier record of the same message. It
	// is kept beside the messages, never among them: the model's history
	// and the resumption of turns read messages only.
	PutTurnError(ctx context.Context, e TurnError) error
	// TurnErrors returns the recorded failures of the session's turns whose
	// user messages have the given ids (at most MaxTurnErrorIDs of them).
	TurnErrors(ctx context.Context, sessionID string, messageIDs []string) ([]TurnError, error)

	// AddUsage adds d to the tenant's usage of d.Agent on d.Day, atomically
	// (concurrent adds from many runtimes all count).
	AddUsage(ctx context.Context, d UsageDelta) error
	// ListUsage returns the tenant's usage per agent and day in f's range,
	// oldest day first.
	ListUsage(ctx context.Context, f UsageFilter) ([]UsageDay, error)
	// UsageTotals sums the tenant's usage of every agent on day and in the
	// month of day (from its first day up to day).
	UsageTotals(ctx context.Context, day time.Time) (UsageTotals, error)
	// ClaimNotice records that the tenant was told what key names (a soft
	// limit reached, a chat told its budget is spent) until expires, and
	// reports whether this call is the first to claim it: true when key
	// was never claimed or its last claim expired at or before now. It is
	// atomic, so of many runtimes claiming at once exactly one wins, and
	// the notice goes out once however many there are.
	ClaimNotice(ctx context.Context, key string, now, expires time.Time) (bool, error)

	// AppendAudit records one tool call in the tenant's audit log.
	AppendAudit(ctx context.Context, r AuditRecord) error
	// ListAudit returns the tenant's audit records matching f, newest
	// first (CreatedAt, then ID, descending).
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error)
	// DeleteAudit removes the tenant's audit records created before
	// before and returns how many it removed (retention).
	DeleteAudit(ctx context.Context, before time.Time) (int, error)

	// RegisterNode records the hello of a paired device (`picobot node`):
	// a node not seen before is stored as NodePending; a known one gets its
	// name, platform, version and capabilities replaced and LastSeenAt moved
	// on, and keeps its state (so a reconnect needs no new approval, and a
	// rejected or revoked node stays refused).
	RegisterNode(ctx context.Context, n Node) (Node, error)
	// GetNode returns a node by ID.
	GetNode(ctx context.Context, id string) (Node, error)
	// ListNodes returns the tenant's nodes in state (all when empty),
	// oldest first.
	ListNodes(ctx context.Context, state NodeState) ([]Node, error)
	// SetNodeState moves a node to state and returns it; ErrNotFound when
	// the tenant has no such node.
	SetNodeState(ctx context.Context, id string, state NodeState) (Node, error)

	// CreateDelivery stores a new outbound delivery; ErrExists on a duplicate ID.
	CreateDelivery(ctx context.Context, d Delivery) (Delivery, error)
	// GetDelivery returns a delivery by ID.
	GetDelivery(ctx context.Context, id string) (Delivery, error)
	// UpdateDelivery records an attempt's result and returns the delivery.
	UpdateDelivery(ctx context.Context, id string, u DeliveryUpdate) (Delivery, error)
	// ListDeliveries returns deliveries matching f, oldest first (the order a
	// dispatcher retries them in).
	ListDeliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, error)

	// CreateArtifact records a blob's metadata; ErrExists on a duplicate ID.
	CreateArtifact(ctx context.Context, a Artifact) (Artifact, error)
	// GetArtifact returns an artifact by ID.
	GetArtifact(ctx context.Context, id string) (Artifact, error)
	// ListArtifacts returns a session's artifacts, oldest first.
	ListArtifacts(ctx context.Context, sessionID string) ([]Artifact, error)
	// DeleteArtifact removes an artifact's record (not the blob).
	DeleteArtifact(ctx context.Context, id string) error

	// Close releases the store's connections.
	Close() error
}

type tenantKey struct{}

// WithTenant returns a context whose store calls are scoped to tenant (the
// Kubernetes namespace in cluster mode).
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant in ctx, or ErrNoTenant when there is none (or
// it is empty): store calls must never fall back to an unscoped query.
func TenantFrom(ctx context.Context) (string, error) {
	t, _ := ctx.Value(tenantKey{}).(string)
	if t == "" {
		return "", ErrNoTenant
	}
	return t, nil
}
