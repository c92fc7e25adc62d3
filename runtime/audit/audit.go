// Package audit keeps the audit log of tool calls: for every call an agent's
// loop runs, who the turn acted for, the tenant, agent, session and tool, a
// SHA-256 digest of the arguments (never the arguments themselves), the
// outcome and the duration, written to the store (store.AuditRecord), and a
// Sweeper that deletes records past the retention.
//
// A Recorder is an agent.ToolAuditor: agent.Loop calls it around every call,
// which is the one place both modes' session runtimes (and stateless turns,
// scheduled runs and sub-agents, whose loops derive from the agent's) run
// tools.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/logctx"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// DefaultRetention is how long audit records are kept when not configured.
const DefaultRetention = 30 * 24 * time.Hour

// writeTimeout bounds one record's write: a slow store delays the turn's
// next step by at most this much.
const writeTimeout = 5 * time.Second

// maxToolName bounds the tool name recorded: a name the model made up is
// recorded as it was sent, up to this many bytes.
const maxToolName = 128

// Appender is what a Recorder needs of the store.
type Appender interface {
	AppendAudit(ctx context.Context, r store.AuditRecord) error
}

// Recorder writes an audit record for every tool call of an agent's turns.
type Recorder struct {
	Store Appender
	// Tenant is used when the call's context carries none.
	Tenant string
	// Clock times the calls (the real clock when nil).
	Clock clock.PassiveClock
	Log   *slog.Logger
}

type actorKey struct{}

// WithActor returns ctx whose tool calls are recorded as made for actor
// ("key:<id>", "<channel>:<user>", "agent:<name>", "cron:<job>",
// "channel:<name>"; see store.AuditRecord.Actor).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor of ctx, "" when unknown.
func ActorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// Digest is the record's digest of a call's arguments: "sha256:" and the
// hex SHA-256 of the arguments as the model sent them.
func Digest(args string) string {
	sum := sha256.Sum256([]byte(args))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ToolCall implements agent.ToolAuditor: it is called as call starts and
// done as it ends, with whether its result is an error. The record is
// written before done returns, so a call is in the log before the model
// sees its result; a failed write is logged and does not fail the call.
func (r *Recorder) ToolCall(ctx context.Context, env tool.Env, call llm.ToolCall) (done func(isError bool)) {
	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	start := clk.Now()
	return func(isError bool) {
		rec := store.AuditRecord{Actor: truncate(ActorFrom(ctx), store.MaxAuditField), Agent: env.Agent, SessionID: env.SessionID,
			Tool: truncate(call.Name, maxToolName), ArgsDigest: Digest(call.Arguments), Outcome: store.AuditOK,
			Duration: max(clk.Since(start), 0), CreatedAt: start}
		if isError {
			rec.Outcome = store.AuditError
		}
		if rec.Tool == "" {
			rec.Tool = "unnamed"
		}
		// A cancelled turn's calls are recorded too.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
		defer cancel()
		if _, err := store.TenantFrom(wctx); err != nil && r.Tenant != "" {
			wctx = store.WithTenant(wctx, r.Tenant)
		}
		if err := r.Store.AppendAudit(wctx, rec); err != nil {
			logctx.From(ctx, r.Log).Warn("Failed to record a tool call in the audit log", "tool", rec.Tool, "err", err)
		}
	}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// Deleter is what a Sweeper needs of the store.
type Deleter interface {
	DeleteAudit(ctx context.Context, before time.Time) (int, error)
}

// Sweeper deletes audit records past the retention, tenant by tenant.
type Sweeper struct {
	Store Deleter
	// Retention is how long records are kept (DefaultRetention when 0).
	Retention time.Duration
	Clock     clock.PassiveClock
	Log       *slog.Logger
}

// Sweep deletes the records of tenant created before now minus the
// retention and returns how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context, tenant string) (int, error) {
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	ret := s.Retention
	if ret <= 0 {
		ret = DefaultRetention
	}
	n, err := s.Store.DeleteAudit(store.WithTenant(ctx, tenant), clk.Now().Add(-ret))
	if err == nil && n > 0 && s.Log != nil {
		s.Log.Info("Deleted audit records past their retention", "tenant", tenant, "count", n, "retention", ret)
	}
	return n, err
}
