// Package longterm is an agent's long-term memory on top of the store:
// Knowledge (facts and preferences, kept until removed) and Timeline
// (summaries of compressed or idle conversations, removed after the
// retention period). It validates and guards what is written — identity,
// social-security and card numbers and credentials are always refused,
// health/finance/legal/family matters unless allowed — and turns search
// results into hits that say how old and how trustworthy they are.
//
// Errors meant for the model are *InputError and *Refusal; any other error
// is the store's and stays in the logs.
package longterm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/memory/segment"
	"github.com/picobot/picobot/runtime/store"
)

// Defaults and limits.
const (
	// DefaultTimelineRetention is how long timeline memories are kept
	// (spec.memory.timelineRetentionDays defaults to 90).
	DefaultTimelineRetention = 90 * 24 * time.Hour
	// DefaultStaleAfter is the age past which a hit is marked stale.
	DefaultStaleAfter = 180 * 24 * time.Hour
	// TimelineImportance is the importance of timeline summaries.
	TimelineImportance = 0.3
	// DefaultImportance is the importance of knowledge stored without one.
	DefaultImportance = 0.5
	// MaxKeyRunes bounds a key.
	MaxKeyRunes = 200
	// MaxContentRunes bounds a knowledge entry: a memory is a fact, not a
	// document.
	MaxContentRunes = 4000
	// MaxTimelineRunes bounds a timeline summary.
	MaxTimelineRunes = 16000
	// MaxQueryRunes bounds a search query: a few keywords.
	MaxQueryRunes = 1000
	// MaxLimit caps the hits of one recall.
	MaxLimit = 50
)

// InputError is a bad argument, explained for the model.
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

func inputErrorf(format string, args ...any) error {
	return &InputError{msg: fmt.Sprintf(format, args...)}
}

// IsForModel reports whether err is meant for the model (an *InputError or a
// *Refusal) rather than an internal failure.
func IsForModel(err error) bool {
	var ie *InputError
	var r *Refusal
	return errors.As(err, &ie) || errors.As(err, &r)
}

// Config configures a Memory.
type Config struct {
	Store store.Store
	// Agent owns the memories.
	Agent string
	// TimelineRetention is how long timeline memories are kept;
	// DefaultTimelineRetention when zero.
	TimelineRetention time.Duration
	// StaleAfter marks older hits stale; DefaultStaleAfter when zero.
	StaleAfter time.Duration
	// AllowSensitive lists the sensitive categories memory may keep.
	AllowSensitive []Sensitive
	Clock          clock.PassiveClock
}

// Memory is one agent's long-term memory. Safe for concurrent use; the
// tenant comes with each call's context.
type Memory struct {
	cfg   Config
	guard Guard
}

// New returns the memory of cfg.Agent.
func New(cfg Config) *Memory {
	if cfg.TimelineRetention <= 0 {
		cfg.TimelineRetention = DefaultTimelineRetention
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Memory{cfg: cfg, guard: NewGuard(cfg.AllowSensitive...)}
}

// Agent is the agent whose memory this is.
func (m *Memory) Agent() string { return m.cfg.Agent }

// TimelineRetention is how long timeline memories are kept.
func (m *Memory) TimelineRetention() time.Duration { return m.cfg.TimelineRetention }

// Now is the memory's clock reading.
func (m *Memory) Now() time.Time { return m.cfg.Clock.Now() }

// Guard is the guard that checks writes.
func (m *Memory) Guard() Guard { return m.guard }

// Entry is a memory to write.
type Entry struct {
	Key     string
	Content string
	// Category defaults to knowledge.
	Category  store.MemoryCategory
	Kind      store.MemoryKind
	Source    store.MemorySource
	SessionID string
	// Importance defaults to DefaultImportance (TimelineImportance for
	// timeline entries).
	Importance *float64
}

// Remember validates, guards and stores e, replacing the memory of the same
// key. It reports whether an existing memory was replaced.
func (m *Memory) Remember(ctx context.Context, e Entry) (store.Memory, bool, error) {
	mem, err := m.entry(e)
	if err != nil {
		return store.Memory{}, false, err
	}
	if r := m.guard.Check(mem.Key + "\n" + mem.Content); r != nil {
		return store.Memory{}, false, r
	}
	// A replaced memory keeps its id, so a fresh one tells the two apart.
	mem.ID = store.NewID()
	out, err := m.cfg.Store.PutMemory(ctx, mem)
	if err != nil {
		return store.Memory{}, false, fmt.Errorf("failed to store memory %q: %w", mem.Key, err)
	}
	return out, out.ID != mem.ID, nil
}

// entry checks e and fills its defaults.
func (m *Memory) entry(e Entry) (store.Memory, error) {
	key := strings.TrimSpace(e.Key)
	content := strings.TrimSpace(e.Content)
	if e.Category == "" {
		e.Category = store.MemoryKnowledge
	}
	limit := MaxContentRunes
	if e.Category == store.MemoryTimeline {
		limit = MaxTimelineRunes
	}
	switch {
	case key == "":
		return store.Memory{}, inputErrorf("key is empty: give the memory a short, stable name such as \"preferred_language\"")
	case utf8.RuneCountInString(key) > MaxKeyRunes:
		return store.Memory{}, inputErrorf("key has %d characters, more than %d: use a short name", utf8.RuneCountInString(key), MaxKeyRunes)
	case content == "":
		return store.Memory{}, inputErrorf("content is empty: write the fact itself as one self-contained sentence")
	case utf8.RuneCountInString(content) > limit:
		return store.Memory{}, inputErrorf("content has %d characters, more than %d: a memory is a fact, not a document; "+
			"store the essentials (or several memories)", utf8.RuneCountInString(content), limit)
	case strings.ContainsRune(key+content, 0):
		return store.Memory{}, inputErrorf("the entry contains a NUL character")
	}
	if err := oneOf("category", e.Category, store.MemoryKnowledge, store.MemoryTimeline); err != nil {
		return store.Memory{}, err
	}
	if err := oneOf("kind", e.Kind, "", store.MemoryDecision, store.MemoryFact, store.MemoryFocus, store.MemoryNote); err != nil {
		return store.Memory{}, err
	}
	if err := oneOf("source", e.Source, "", store.SourceUser, store.SourceAgent, store.SourceTool); err != nil {
		return store.Memory{}, err
	}
	importance := DefaultImportance
	if e.Category == store.MemoryTimeline {
		importance = TimelineImportance
	}
	if e.Importance != nil {
		importance = *e.Importance
		if importance < 0 || importance > 1 {
			return store.Memory{}, inputErrorf("importance %v is outside 0.0–1.0", importance)
		}
	}
	return store.Memory{Agent: m.cfg.Agent, Key: key, Content: content, Category: e.Category, Kind: e.Kind,
		Source: e.Source, SessionID: e.SessionID, Importance: importance}, nil
}

func oneOf[T ~string](field string, v T, allowed ...T) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	names := make([]string, 0, len(allowed))
	for _, a := range allowed {
		if a != "" {
			names = append(names, string(a))
		}
	}
	return inputErrorf("unknown %s %q: use one of %s", field, v, strings.Join(names, ", "))
}

// Query is a recall request.
type Query struct {
	// Text holds the keywords (required).
	Text      string
	Category  store.MemoryCategory
	SessionID string
	Kinds     []store.MemoryKind
	// Since and Until bound when a memory was last written.
	Since, Until time.Time
	// Limit defaults to 10, at most MaxLimit.
	Limit int
	// FullTextOnly turns off the substring fallback.
	FullTextOnly bool
}

// Hit is a recalled memory as the model sees it.
type Hit struct {
	Key        string               `json:"key"`
	Content    string               `json:"content"`
	Category   store.MemoryCategory `json:"category,omitempty"`
	Kind       store.MemoryKind     `json:"kind,omitempty"`
	Source     store.MemorySource   `json:"source,omitempty"`
	SessionID  string               `json:"session_id,omitempty"`
	Importance float64              `json:"importance"`
	// Date is the day the memory was last written (UTC), "" when unknown.
	Date string `json:"date,omitempty"`
	// AgeDays is how many whole days ago it was written; -1 when unknown,
	// which is neither new nor old and takes part in no age comparison.
	AgeDays int `json:"ageDays"`
	// Stale is true when AgeDays is known and past the staleness threshold.
	Stale bool `json:"stale"`
}

// Recall searches the memory; see store.MemorySearcher for the ranking.
func (m *Memory) Recall(ctx context.Context, q Query) ([]Hit, error) {
	text := strings.TrimSpace(q.Text)
	switch {
	case text == "":
		return nil, inputErrorf("query is empty: give a few distinctive keywords")
	case utf8.RuneCountInString(text) > MaxQueryRunes:
		return nil, inputErrorf("query has %d characters, more than %d: give a few distinctive keywords, not a passage",
			utf8.RuneCountInString(text), MaxQueryRunes)
	case strings.ContainsRune(text, 0):
		return nil, inputErrorf("query contains a NUL character")
	case len(segment.QueryTerms(text)) == 0 && len(segment.Words(text, 1)) == 0:
		return nil, inputErrorf("query %q has no searchable words (only stop-words or punctuation): give distinctive keywords", text)
	case !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since):
		return nil, inputErrorf("until (%s) is before since (%s)", q.Until.UTC().Format(time.RFC3339), q.Since.UTC().Format(time.RFC3339))
	case q.Limit < 0 || q.Limit > MaxLimit:
		return nil, inputErrorf("limit %d is outside 1–%d", q.Limit, MaxLimit)
	}
	hits, err := m.cfg.Store.SearchMemories(ctx, store.MemoryQuery{Agent: m.cfg.Agent, Text: text, Category: q.Category,
		SessionID: q.SessionID, Kinds: q.Kinds, Since: q.Since, Until: q.Until, Limit: q.Limit, FullTextOnly: q.FullTextOnly})
	if err != nil {
		return nil, fmt.Errorf("failed to recall memories: %w", err)
	}
	now := m.cfg.Clock.Now()
	out := make([]Hit, len(hits))
	for i, h := range hits {
		out[i] = m.hit(h.Memory, now)
	}
	return out, nil
}

func (m *Memory) hit(mem store.Memory, now time.Time) Hit {
	h := Hit{Key: mem.Key, Content: mem.Content, Category: mem.Category, Kind: mem.Kind, Source: mem.Source,
		SessionID: mem.SessionID, Importance: mem.Importance, AgeDays: AgeDays(mem.UpdatedAt, now)}
	if h.AgeDays >= 0 {
		h.Date = mem.UpdatedAt.UTC().Format(time.DateOnly)
		h.Stale = now.Sub(mem.UpdatedAt) > m.cfg.StaleAfter
	}
	return h
}

// AgeDays is how many whole days before now t was: -1 when t is unknown
// (zero) or lies more than a day ahead (a clock it cannot be compared with).
func AgeDays(t, now time.Time) int {
	if t.IsZero() {
		return -1
	}
	d := now.Sub(t)
	if d < -24*time.Hour {
		return -1
	}
	return max(0, int(d/(24*time.Hour)))
}

// Forget removes the memory with key.
func (m *Memory) Forget(ctx context.Context, key string) error {
	key = strings.TrimSpace(key)
	if key == "" {
		return inputErrorf("key is empty: give the key of the memory to forget (memory_recall shows keys)")
	}
	err := m.cfg.Store.DeleteMemory(ctx, m.cfg.Agent, key)
	if errors.Is(err, store.ErrNotFound) {
		return inputErrorf("there is no memory with key %q; memory_recall shows the keys of stored memories", key)
	}
	if err != nil {
		return fmt.Errorf("failed to forget memory %q: %w", key, err)
	}
	return nil
}

// PruneTimeline removes timeline memories older than the retention period;
// knowledge is never touched. It returns how many were removed.
func (m *Memory) PruneTimeline(ctx context.Context) (int64, error) {
	n, err := m.cfg.Store.PruneMemories(ctx, m.cfg.Agent, store.MemoryTimeline, m.cfg.Clock.Now().Add(-m.cfg.TimelineRetention))
	if err != nil {
		return 0, fmt.Errorf("failed to prune timeline: %w", err)
	}
	return n, nil
}
