package store

import (
	"fmt"
	"strings"
	"time"
)

// Outcomes of an audited tool call.
const (
	AuditOK    = "ok"
	AuditError = "error"
)

// Bounds of an audit record's text and of one ListAudit page.
const (
	// MaxAuditField bounds the actor, agent, session and tool of a record.
	MaxAuditField = 512
	// MaxAuditLimit is the largest page ListAudit returns.
	MaxAuditLimit = 1000
)

// AuditRecord is one tool call as the audit log keeps it: who asked, which
// agent ran it in which session, the tool, a digest of its arguments (never
// the arguments: they may hold what the user typed or a secret the model
// saw), how it ended and how long it took.
type AuditRecord struct {
	// ID is generated when empty.
	ID string `json:"id"`
	// Actor is who the turn acted for as far as the runtime knows it: the
	// API key ("key:<id>"), a chat platform's user ("<channel>:<user>"),
	// the agent that delegated the run ("agent:<name>"), a CronJob
	// ("cron:<namespace>/<name>"), else the chat's channel
	// ("channel:<name>"); "" when unknown.
	Actor     string `json:"actor"`
	Agent     string `json:"agent"`
	SessionID string `json:"session_id"`
	Tool      string `json:"tool"`
	// ArgsDigest is "sha256:" and the hex SHA-256 of the call's arguments
	// as the model sent them.
	ArgsDigest string `json:"args_digest"`
	// Outcome is AuditOK or AuditError (the result the model was given
	// was an error).
	Outcome  string        `json:"outcome"`
	Duration time.Duration `json:"duration"`
	// CreatedAt is when the call started; the store's clock when zero.
	CreatedAt time.Time `json:"created_at"`
}

// AuditCursor is the position after the last record of a page: the next
// page holds the records that sort after it (older, or as old with a
// smaller ID).
type AuditCursor struct {
	At time.Time
	ID string
}

// AuditFilter selects audit records; empty fields select all.
type AuditFilter struct {
	Agent, SessionID, Tool string
	// Since selects records created at or after it.
	Since time.Time
	// After continues a listing past a page's last record.
	After *AuditCursor
	// Limit caps the page (DefaultListLimit when 0, at most MaxAuditLimit).
	Limit int
}

// ValidateAuditRecord checks a record before it is stored.
func ValidateAuditRecord(r AuditRecord) error {
	switch {
	case r.Agent == "" || r.Tool == "":
		return fmt.Errorf("%w: an audit record needs an agent and a tool", ErrInvalid)
	case r.Outcome != AuditOK && r.Outcome != AuditError:
		return fmt.Errorf("%w: audit outcome %q is neither %q nor %q", ErrInvalid, r.Outcome, AuditOK, AuditError)
	case !strings.HasPrefix(r.ArgsDigest, "sha256:") || len(r.ArgsDigest) != len("sha256:")+64:
		return fmt.Errorf("%w: audit digest %q is not sha256:<64 hex digits>", ErrInvalid, r.ArgsDigest)
	case r.Duration < 0:
		return fmt.Errorf("%w: negative audit duration %s", ErrInvalid, r.Duration)
	}
	for name, v := range map[string]string{"actor": r.Actor, "agent": r.Agent, "session": r.SessionID, "tool": r.Tool, "id": r.ID} {
		if len(v) > MaxAuditField {
			return fmt.Errorf("%w: audit %s has %d bytes, more than %d", ErrInvalid, name, len(v), MaxAuditField)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: audit %s holds a NUL byte", ErrInvalid, name)
		}
	}
	return nil
}

// ValidateAuditFilter checks a filter and returns its effective limit.
func ValidateAuditFilter(f AuditFilter) (int, error) {
	switch {
	case f.Limit < 0 || f.Limit > MaxAuditLimit:
		return 0, fmt.Errorf("%w: audit limit %d is not within 0..%d", ErrInvalid, f.Limit, MaxAuditLimit)
	case f.After != nil && (f.After.At.IsZero() || f.After.ID == ""):
		return 0, fmt.Errorf("%w: an audit cursor needs a time and an id", ErrInvalid)
	}
	if f.Limit == 0 {
		return DefaultListLimit, nil
	}
	return f.Limit, nil
}
