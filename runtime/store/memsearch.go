package store

import (
	"context"
	"time"
)

// MemorySearcher finds and maintains an agent's memories by their text. Both
// stores index the search terms of runtime/memory/segment (Chinese as
// character bigrams, other scripts as words) of every memory's key and
// content: PostgreSQL in a postings table derived from a tsvector column,
// SQLite in an FTS5 table.
type MemorySearcher interface {
	// SearchMemories returns the agent's memories matching q, best first:
	// full-text relevance (any query term may match; each counts by how rare
	// it is, and a match in the key half again), then importance, then the
	// most recently updated. To keep its cost bounded whatever the number of
	// memories, a search ranks on the query's rarer terms while their
	// matches fit a budget, and a query of only very common terms ranks the
	// most recent of their matches (see internal/memindex). When full-text
	// search finds nothing and q.FullTextOnly is false, the most recently
	// written memories containing any query word (or, for Chinese, any of
	// its characters) as a substring are returned instead
	// (MemoryHit.Substring set). A query without a searchable term returns
	// no hits and no error: whatever the text holds (punctuation, FTS or SQL
	// syntax), it is never parsed by the database as a query language.
	SearchMemories(ctx context.Context, q MemoryQuery) ([]MemoryHit, error)
	// ImportMemories stores many memories at once (restores, migrations from
	// other assistants, benchmark seeding) with PutMemory's semantics: a
	// memory replaces the one with the same Agent and Key; of several with
	// one key in ms the last wins. Zero CreatedAt/UpdatedAt are set by the
	// store; given ones are kept. It returns how many memories were written.
	ImportMemories(ctx context.Context, ms []Memory) (int, error)
	// PruneMemories deletes the agent's memories of category last updated
	// before before (timeline retention) and returns how many went.
	PruneMemories(ctx context.Context, agent string, category MemoryCategory, before time.Time) (int64, error)
}

// MaxMemoryQueryBytes caps the text of a MemoryQuery; a longer one is
// refused with ErrInvalid before it reaches the database.
const MaxMemoryQueryBytes = 16 << 10

// MemoryQuery selects memories for SearchMemories. Empty fields match all.
type MemoryQuery struct {
	// Agent is required.
	Agent string
	// Text holds the keywords; the store segments it into terms.
	Text      string
	Category  MemoryCategory
	SessionID string
	// Kinds keeps memories of any of these kinds ("" is the kind of a memory
	// stored without one).
	Kinds []MemoryKind
	// Since and Until bound UpdatedAt (inclusive); zero leaves a side open.
	Since, Until time.Time
	// Limit caps the hits; 0 means 10.
	Limit int
	// FullTextOnly turns off the substring fallback (e.g. when the query is
	// a whole user message, where substrings would match nearly anything).
	FullTextOnly bool
}

// DefaultSearchLimit is the number of hits of a MemoryQuery without Limit.
const DefaultSearchLimit = 10

// MemoryHit is one search result.
type MemoryHit struct {
	Memory
	// Score is the full-text relevance (higher is better), or the number of
	// query words found for a substring hit; comparable within one result.
	Score float64 `json:"score"`
	// Substring marks a hit of the substring fallback.
	Substring bool `json:"substring,omitempty"`
}

// Validate checks a query for SearchMemories.
func (q MemoryQuery) Validate() error {
	if err := required("agent", q.Agent); err != nil {
		return err
	}
	if len(q.Text) > MaxMemoryQueryBytes {
		return invalid("query is %d bytes long, more than %d", len(q.Text), MaxMemoryQueryBytes)
	}
	if q.Category != "" {
		if err := oneOf("category", q.Category, MemoryKnowledge, MemoryTimeline); err != nil {
			return err
		}
	}
	for _, k := range q.Kinds {
		if err := oneOf("kind", k, "", MemoryDecision, MemoryFact, MemoryFocus, MemoryNote); err != nil {
			return err
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return invalid("until %s is before since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	if q.Limit < 0 {
		return invalid("limit %d is negative", q.Limit)
	}
	return noNUL("text", q.Text, "session_id", q.SessionID)
}

// SearchLimit turns a query's Limit into the number of hits to return.
func SearchLimit(n int) int {
	if n <= 0 {
		return DefaultSearchLimit
	}
	return min(n, DefaultListLimit)
}

// KindStrings returns kinds as strings, for query parameters.
func KindStrings(kinds []MemoryKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}
