// Package memory implements the long-term memory tools on an agent's
// longterm.Memory: PicoBot's memory_store, memory_recall, timeline_recall,
// memory_forget and routine_maintenance, and dsh-bot's bot_remember and
// bot_recall. Bad arguments and refused writes come back to the model as tool
// errors that say what to do; store failures are logged and reported without
// their database detail.
package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/picobot/picobot/runtime/memory/longterm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Tool names (runtime/tool/policy catalog).
const (
	NameStore       = "memory_store"
	NameRecall      = "memory_recall"
	NameTimeline    = "timeline_recall"
	NameForget      = "memory_forget"
	NameMaintenance = "routine_maintenance"
	NameRemember    = "bot_remember"
	NameBotRecall   = "bot_recall"
)

// New returns the seven memory tools of mem. log receives store failures.
func New(mem *longterm.Memory, log *slog.Logger) []tool.Tool {
	if log == nil {
		log = slog.Default()
	}
	t := &tools{mem: mem, log: log}
	kinds := []any{string(store.MemoryDecision), string(store.MemoryFact), string(store.MemoryFocus), string(store.MemoryNote)}
	return []tool.Tool{
		tool.New(NameStore, "Store a long-term fact or preference (Knowledge) under a short key; the same key replaces the old value. "+
			"Never store credentials or identity numbers.", t.store,
			tool.Range("importance", tool.Bound(0), tool.Bound(1))),
		tool.New(NameRecall, "Search long-term Knowledge by keywords (Chinese needs no spaces). "+
			"Each result has source, ageDays (-1 = unknown) and stale.", t.recall,
			tool.Range("since", tool.Bound(0), nil), tool.Range("until", tool.Bound(0), nil),
			tool.Range("limit", tool.Bound(1), tool.Bound(longterm.MaxLimit)), tool.ReadOnly()),
		tool.New(NameTimeline, "Search the Timeline: summaries of earlier (compressed or idle) conversations.", t.timeline,
			tool.Range("since", tool.Bound(0), nil), tool.Range("until", tool.Bound(0), nil),
			tool.Range("limit", tool.Bound(1), tool.Bound(longterm.MaxLimit)), tool.ReadOnly()),
		tool.New(NameForget, "Delete a memory by its key.", t.forget),
		tool.New(NameMaintenance, "Routine upkeep: delete Timeline memories older than the retention period (Knowledge is kept).", t.maintain),
		tool.New(NameRemember, "Remember one durable entry: a self-contained sentence with absolute dates (2026-04-28, never \"today\"). "+
			"kind: focus → user profile, decision/fact → core memory, note (default) → monthly notes. "+
			"source: user, agent (default) or tool — use tool for what you did not verify yourself.", t.remember,
			tool.Enum("kind", kinds...),
			tool.Enum("source", string(store.SourceUser), string(store.SourceAgent), string(store.SourceTool))),
		tool.New(NameBotRecall, "Search remembered entries by words (Chinese is matched by character pairs). "+
			"Each result has source, ageDays (-1 = unknown) and stale.", t.botRecall,
			tool.Adjust(func(s *jsonschema.Schema) {
				if p := s.Properties["kinds"]; p != nil && p.Items != nil {
					p.Items.Enum = kinds
				}
			}), tool.ReadOnly()),
	}
}

type tools struct {
	mem *longterm.Memory
	log *slog.Logger
}

// fail turns an error into a tool result: the model reads input errors and
// refusals as they are; store failures are logged and summarised.
func (t *tools) fail(ctx context.Context, name string, err error) (tool.Result, error) {
	if longterm.IsForModel(err) {
		return tool.Errorf("error: %v", err), nil
	}
	if ctx.Err() != nil {
		return tool.Result{}, err
	}
	t.log.Error("Memory tool failed", "tool", name, "agent", t.mem.Agent(), "err", err)
	return tool.Errorf("error: %s could not reach the memory store; nothing was changed. Try again later.", name), nil
}

// StoreArgs are the arguments of memory_store.
type StoreArgs struct {
	Key        string   `json:"key" jsonschema:"short unique name, e.g. preferred_language"`
	Content    string   `json:"content" jsonschema:"the fact, as one self-contained sentence"`
	Importance *float64 `json:"importance,omitempty" jsonschema:"0.0-1.0, default 0.5"`
}

func (t *tools) store(ctx context.Context, env tool.Env, a StoreArgs) (tool.Result, error) {
	m, replaced, err := t.mem.Remember(ctx, longterm.Entry{Key: a.Key, Content: a.Content, Category: store.MemoryKnowledge,
		Source: store.SourceAgent, SessionID: env.SessionID, Importance: a.Importance})
	if err != nil {
		return t.fail(ctx, NameStore, err)
	}
	verb := "Stored"
	if replaced {
		verb = "Replaced"
	}
	return tool.Text(fmt.Sprintf("%s memory %q (importance %.2g).", verb, m.Key, m.Importance)), nil
}

// RecallArgs are the arguments of memory_recall.
type RecallArgs struct {
	Query string `json:"query" jsonschema:"space-separated keywords"`
	Since int64  `json:"since,omitempty" jsonschema:"written at or after, unix ms"`
	Until int64  `json:"until,omitempty" jsonschema:"written at or before, unix ms"`
	Limit int    `json:"limit,omitempty" jsonschema:"maximum results, default 10"`
}

func (t *tools) recall(ctx context.Context, _ tool.Env, a RecallArgs) (tool.Result, error) {
	return t.search(ctx, NameRecall, longterm.Query{Text: a.Query, Category: store.MemoryKnowledge,
		Since: millis(a.Since), Until: millis(a.Until), Limit: a.Limit})
}

// TimelineArgs are the arguments of timeline_recall.
type TimelineArgs struct {
	Query     string `json:"query" jsonschema:"keywords"`
	SessionID string `json:"session_id,omitempty" jsonschema:"only this session's timeline"`
	Since     int64  `json:"since,omitempty" jsonschema:"written at or after, unix ms"`
	Until     int64  `json:"until,omitempty" jsonschema:"written at or before, unix ms"`
	Limit     int    `json:"limit,omitempty" jsonschema:"maximum results, default 10"`
}

func (t *tools) timeline(ctx context.Context, _ tool.Env, a TimelineArgs) (tool.Result, error) {
	return t.search(ctx, NameTimeline, longterm.Query{Text: a.Query, Category: store.MemoryTimeline,
		SessionID: strings.TrimSpace(a.SessionID), Since: millis(a.Since), Until: millis(a.Until), Limit: a.Limit})
}

func (t *tools) search(ctx context.Context, name string, q longterm.Query) (tool.Result, error) {
	hits, err := t.mem.Recall(ctx, q)
	if err != nil {
		return t.fail(ctx, name, err)
	}
	return hitsResult(hits)
}

// hitsResult renders hits as a JSON array (or says there are none).
func hitsResult(hits []longterm.Hit) (tool.Result, error) {
	if len(hits) == 0 {
		return tool.Text("No matching memories."), nil
	}
	b, err := json.Marshal(hits)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode memories: %w", err)
	}
	return tool.Text(string(b)), nil
}

func millis(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ForgetArgs are the arguments of memory_forget.
type ForgetArgs struct {
	Key string `json:"key" jsonschema:"key of the memory to delete"`
}

func (t *tools) forget(ctx context.Context, _ tool.Env, a ForgetArgs) (tool.Result, error) {
	if err := t.mem.Forget(ctx, a.Key); err != nil {
		return t.fail(ctx, NameForget, err)
	}
	return tool.Text(fmt.Sprintf("Forgot memory %q.", strings.TrimSpace(a.Key))), nil
}

// MaintenanceArgs are the (no) arguments of routine_maintenance.
type MaintenanceArgs struct{}

func (t *tools) maintain(ctx context.Context, _ tool.Env, _ MaintenanceArgs) (tool.Result, error) {
	n, err := t.mem.PruneTimeline(ctx)
	if err != nil {
		return t.fail(ctx, NameMaintenance, err)
	}
	days := int(t.mem.TimelineRetention() / (24 * time.Hour))
	return tool.Text(fmt.Sprintf("Removed %d timeline memories older than %d days; knowledge was not touched.", n, days)), nil
}

// RememberArgs are the arguments of bot_remember.
type RememberArgs struct {
	Text   string `json:"text" jsonschema:"the entry, one self-contained sentence"`
	Kind   string `json:"kind,omitempty" jsonschema:"default note"`
	Source string `json:"source,omitempty" jsonschema:"default agent"`
}

// Where bot_remember files each kind: the resident user profile and core
// memory hold what changes behaviour most; everything else goes to monthly
// notes, recalled on demand.
const (
	prefixProfile = "profile/"
	prefixCore    = "core/"
	prefixNotes   = "notes/"
)

var kindImportance = map[store.MemoryKind]float64{
	store.MemoryFocus: 0.8, store.MemoryDecision: 0.7, store.MemoryFact: 0.6, store.MemoryNote: 0.4,
}

func (t *tools) remember(ctx context.Context, env tool.Env, a RememberArgs) (tool.Result, error) {
	kind := store.MemoryKind(a.Kind)
	if kind == "" {
		kind = store.MemoryNote
	}
	source := store.MemorySource(a.Source)
	if source == "" {
		source = store.SourceAgent
	}
	text := strings.TrimSpace(a.Text)
	now := t.mem.Now()
	if rel := RelativeDate(text); rel != "" {
		return tool.Errorf("error: %q is a relative date. Entries are read long after they are written, when it no longer "+
			"points anywhere: write the absolute date instead (today is %s) and call %s again.", rel, now.UTC().Format(time.DateOnly), NameRemember), nil
	}
	sum := sha256.Sum256([]byte(strings.Join(strings.Fields(strings.ToLower(text)), " ")))
	id := hex.EncodeToString(sum[:5])
	var key, place string
	switch kind {
	case store.MemoryFocus:
		key, place = prefixProfile+id, "the user profile"
	case store.MemoryDecision, store.MemoryFact:
		key, place = prefixCore+id, "core memory"
	default:
		key, place = prefixNotes+now.UTC().Format("2006-01")+"/"+id, "the notes of "+now.UTC().Format("2006-01")
	}
	importance := kindImportance[kind]
	m, _, err := t.mem.Remember(ctx, longterm.Entry{Key: key, Content: text, Category: store.MemoryKnowledge, Kind: kind,
		Source: source, SessionID: env.SessionID, Importance: &importance})
	if err != nil {
		return t.fail(ctx, NameRemember, err)
	}
	return tool.Text(fmt.Sprintf("Remembered in %s as %s from %s (key %q).", place, m.Kind, m.Source, m.Key)), nil
}

// BotRecallArgs are the arguments of bot_recall.
type BotRecallArgs struct {
	Query string   `json:"query" jsonschema:"words to look for"`
	Kinds []string `json:"kinds,omitempty" jsonschema:"only these kinds"`
}

func (t *tools) botRecall(ctx context.Context, _ tool.Env, a BotRecallArgs) (tool.Result, error) {
	kinds := make([]store.MemoryKind, len(a.Kinds))
	for i, k := range a.Kinds {
		kinds[i] = store.MemoryKind(k)
	}
	return t.search(ctx, NameBotRecall, longterm.Query{Text: a.Query, Category: store.MemoryKnowledge, Kinds: kinds})
}
