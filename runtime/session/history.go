package session

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// A session's history as the model sees it: restored from the store after
// the last compression, cached between turns, and compressed when it grows.

// History restores a session's conversation for the model: with a compression
// mark, the latest timeline summaries as [Previous Context] followed by the
// messages after the mark; otherwise every message. Broken tool-call chains
// (a runtime died mid-turn) are repaired.
func (m *Manager) History(ctx context.Context, id ID) ([]llm.Message, error) {
	msgs, err := m.history(ctx, id)
	if err != nil {
		return nil, err
	}
	return agent.RepairToolChains(msgs), nil // a copy: msgs may be the cache's
}

// history is History without the repair and copy: the messages may be the
// cache's own, to read only (the agent loop and the compressor repair a copy
// of what they are given). The cache only grows past their end.
func (m *Manager) history(ctx context.Context, id ID) ([]llm.Message, error) {
	sid := id.String()
	m.mu.Lock()
	h := m.hist[sid]
	m.mu.Unlock()
	var since time.Time
	var prefix []llm.Message
	if h != nil {
		// Cached while this manager holds the lease; markCompressed, the
		// only writer of the compression mark, drops the cache.
		since, prefix = h.since, h.prefix
	} else {
		s, err := m.cfg.Store.GetSession(ctx, sid)
		if err != nil {
			return nil, fmt.Errorf("failed to read session %q: %w", id, err)
		}
		if s.LastCompressedAt != nil {
			since = *s.LastCompressedAt
			if m.cfg.Timeline != nil {
				sums, err := m.cfg.Timeline.RecentTimeline(ctx, m.cfg.Agent, sid, timelineContext)
				if err != nil {
					return nil, fmt.Errorf("failed to load timeline of %q: %w", id, err)
				}
				if len(sums) > 0 {
					prefix = []llm.Message{{Role: llm.RoleUser, Content: "[Previous Context]\n" + strings.Join(sums, "\n\n")},
						{Role: llm.RoleAssistant, Content: "Understood; I will continue from there. (Earlier details: timeline_recall.)"}}
				}
			}
		}
	}
	msgs, err := m.loadHistory(ctx, sid, since, prefix)
	if err != nil {
		return nil, err
	}
	if len(prefix) > 0 {
		return slices.Concat(prefix, msgs), nil
	}
	return slices.Clip(msgs), nil
}

// loadHistory returns the session's stored messages from since on, reading
// only the new ones when the session's history is cached; it caches the
// result, with the timeline context prefix that goes before it, while this
// manager holds the session's lease. The slice returned is the cache's:
// callers must not modify it.
func (m *Manager) loadHistory(ctx context.Context, sid string, since time.Time, prefix []llm.Message) ([]llm.Message, error) {
	m.mu.Lock()
	h := m.hist[sid]
	m.mu.Unlock()
	opts := store.LoadOptions{Since: since}
	var cached []llm.Message
	if h != nil && h.since.Equal(since) {
		opts.AfterSeq, cached = h.lastSeq, h.msgs
	}
	if cached != nil && m.takeCurrent(h) {
		return cached, nil
	}
	msgs, err := m.cfg.Store.LoadMessages(ctx, sid, opts)
	if err != nil {
		return nil, fmt.Errorf("failed to load messages of %q: %w", sid, err)
	}
	if len(msgs) == 0 && opts.AfterSeq > 0 { // nothing new since the cached load
		return cached, nil
	}
	// A new slice: the cached one may be in use by a caller.
	out := make([]llm.Message, len(cached), len(cached)+len(msgs))
	copy(out, cached)
	next := &storedHistory{since: since, prefix: prefix, lastSeq: opts.AfterSeq}
	for _, msg := range msgs {
		out = append(out, msg.ToLLM())
		next.lastSeq = msg.Seq
	}
	next.msgs = out
	m.mu.Lock()
	if _, leased := m.held[sid]; leased && (m.hist[sid] != nil || len(m.hist) < maxCachedHistories) {
		if old := m.hist[sid]; old != nil {
			next.titled = old.titled
		}
		m.hist[sid] = next
	}
	m.mu.Unlock()
	return out, nil
}

// extendHistory adds messages this manager just stored to the session's
// cached history when their seqs directly follow it, so nothing has to be
// read back; otherwise the cache stays behind and the next load reads what
// it misses. verified (the user message of a turn, stored just before its
// history is loaded, under the session lock) also marks the cache current:
// nobody else wrote to the session between the cache's last message and
// this one, so that load needs no read at all.
func (m *Manager) extendHistory(sid string, stored []store.Message, verified bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.hist[sid]
	if h == nil {
		return
	}
	seq := h.lastSeq
	for _, msg := range stored {
		if msg.Duplicate || msg.Seq != seq+1 {
			h.current = false
			return
		}
		seq++
	}
	next := &storedHistory{since: h.since, prefix: h.prefix, lastSeq: seq, titled: h.titled, current: verified}
	// Appending may write past the end of h.msgs in a shared array: safe,
	// as whoever holds h.msgs reads only up to its length, and h is
	// replaced here, never extended again.
	next.msgs = h.msgs
	for _, msg := range stored {
		next.msgs = append(next.msgs, msg.ToLLM())
	}
	m.hist[sid] = next
}

// takeCurrent reports whether h was marked current by extendHistory, and
// clears the mark: it vouches for one load only.
func (m *Manager) takeCurrent(h *storedHistory) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := h.current
	h.current = false
	return cur
}

// compress runs the compressor when the history is above its trigger (or
// always with force), sending summaries to the timeline.
func (m *Manager) compress(ctx context.Context, g *Generation, id ID, system string, history []llm.Message, force bool) ([]llm.Message, bool, error) {
	if g.Compressor == nil {
		return history, false, nil
	}
	var defs []llm.ToolDef
	if g.Loop != nil && g.Loop.Tools != nil {
		defs = g.Loop.Tools.Definitions()
	}
	if !force && !g.Compressor.NeedsCompression(agent.SystemPrompt(system, g.Loop.Tools), history, defs) {
		return history, false, nil
	}
	c := *g.Compressor
	if m.cfg.Timeline != nil {
		c.OnSummary = func(ctx context.Context, summary string) error {
			return m.cfg.Timeline.AddTimeline(ctx, m.cfg.Agent, id.String(), summary)
		}
	}
	out, _, err := c.Compress(ctx, system, history, defs, force)
	if err != nil {
		return nil, false, fmt.Errorf("failed to compress session %q: %w", id, err)
	}
	return out, true, nil
}

func (m *Manager) markCompressed(ctx context.Context, sid string, at time.Time) error {
	// The cached history starts at the old mark: the next turn reloads.
	m.mu.Lock()
	delete(m.hist, sid)
	m.mu.Unlock()
	if _, err := m.cfg.Store.UpdateSession(ctx, sid, store.SessionUpdate{LastCompressedAt: &at}); err != nil {
		return fmt.Errorf("failed to mark session %q compressed: %w", sid, err)
	}
	return nil
}
