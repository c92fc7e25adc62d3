package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/memory/longterm"
	"github.com/picobot/picobot/runtime/store"
)

// Bounds of one consolidation.
const (
	// consolidateSessions is how many of the most recently active sessions
	// one pass looks at.
	consolidateSessions = store.DefaultListLimit
	// transcriptRunes caps the conversation sent to the model (the latest
	// part is kept); messageRunes caps one message of it.
	transcriptRunes = 24000
	messageRunes    = 2000
	summaryTokens   = 1024
)

const consolidatePrompt = `You keep an assistant's long-term memory. Summarise the conversation below for the Timeline: ` +
	`what the user asked for, what was decided or done, open questions, and facts worth remembering about the user. ` +
	`Write plain sentences, at most 200 words, with absolute dates. Leave out passwords, keys, tokens and identity or card numbers.`

// Consolidator summarises sessions that have been idle for Idle into
// timeline memory, once per idle period: a session becomes idle when its last
// message is Idle old, is summarised (the messages since its previous
// summary or compression), and is not summarised again until a new message
// starts another idle period. The summary's key records the last message's
// time, so a pass that finds it already written does nothing — restarts and
// several replicas running the same consolidator do not repeat the work.
type Consolidator struct {
	Store store.Store
	// Memory is the agent's memory; its guard redacts summaries.
	Memory *longterm.Memory
	// Provider is the agent's model.
	Provider llm.Provider
	Idle     time.Duration
	// Clock defaults to the real one; Log to slog.Default.
	Clock clock.WithTicker
	Log   *slog.Logger
}

func (c *Consolidator) clock() clock.WithTicker {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

func (c *Consolidator) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// idlePrefix starts the keys of a session's idle summaries.
func idlePrefix(sessionID string) string {
	return "timeline/" + sessionID + "/idle/"
}

// Run consolidates every Idle/4 (between 10 s and a minute) until ctx ends.
// ctx carries the tenant.
func (c *Consolidator) Run(ctx context.Context) {
	every := min(max(c.Idle/4, 10*time.Second), time.Minute)
	t := c.clock().NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
				c.log().Error("Failed to consolidate idle sessions", "agent", c.Memory.Agent(), "err", err)
			}
		}
	}
}

// RunOnce consolidates the sessions idle now and returns how many it
// summarised. A failing session does not stop the others; their errors are
// joined.
func (c *Consolidator) RunOnce(ctx context.Context) (int, error) {
	sessions, err := c.Store.ListSessions(ctx, store.SessionFilter{IncludeArchived: true, Limit: consolidateSessions})
	if err != nil {
		return 0, fmt.Errorf("failed to list sessions: %w", err)
	}
	now := c.clock().Now()
	var errs []error
	done := 0
	for _, s := range sessions {
		if s.Agent != c.Memory.Agent() || s.DeletedAt != nil || now.Sub(s.LastMessageAt) < c.Idle {
			continue
		}
		ok, err := c.consolidate(ctx, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("session %q: %w", s.ID, err))
		}
		if ok {
			done++
		}
	}
	return done, errors.Join(errs...)
}

// consolidate summarises one idle session unless this idle period already is.
func (c *Consolidator) consolidate(ctx context.Context, s store.Session) (bool, error) {
	agent := c.Memory.Agent()
	key := idlePrefix(s.ID) + strconv.FormatInt(s.LastMessageAt.UnixMicro(), 10)
	if _, err := c.Store.GetMemory(ctx, agent, key); err == nil {
		return false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	var since time.Time
	if s.LastCompressedAt != nil {
		since = *s.LastCompressedAt
	}
	prev, err := c.Store.ListMemories(ctx, store.MemoryFilter{Agent: agent, Category: store.MemoryTimeline, SessionID: s.ID,
		KeyPrefix: idlePrefix(s.ID), Limit: 1})
	if err != nil {
		return false, err
	}
	if len(prev) > 0 {
		if us, err := strconv.ParseInt(strings.TrimPrefix(prev[0].Key, idlePrefix(s.ID)), 10, 64); err == nil {
			if t := time.UnixMicro(us).Add(time.Microsecond); t.After(since) {
				since = t
			}
		}
	}
	msgs, err := c.Store.LoadMessages(ctx, s.ID, store.LoadOptions{Since: since})
	if err != nil {
		return false, err
	}
	transcript := renderTranscript(msgs)
	if transcript == "" {
		return false, nil
	}
	resp, err := c.Provider.Complete(ctx, llm.Request{System: consolidatePrompt, MaxTokens: summaryTokens,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: transcript}}}, nil)
	if err != nil {
		return false, fmt.Errorf("failed to summarise: %w", err)
	}
	summary := strings.TrimSpace(c.Memory.Guard().Redact(resp.Message.Content))
	if summary == "" {
		return false, errors.New("failed to summarise: the model answered with an empty summary")
	}
	summary = clipRunes(summary, longterm.MaxTimelineRunes)
	// Written straight to the store: a summary is kept (redacted) even when
	// it touches matters the guard would refuse as a knowledge entry.
	if _, err := c.Store.PutMemory(ctx, store.Memory{Agent: agent, Key: key, Content: summary, Category: store.MemoryTimeline,
		Kind: store.MemoryNote, Source: store.SourceAgent, SessionID: s.ID, Importance: longterm.TimelineImportance}); err != nil {
		return false, fmt.Errorf("failed to store summary: %w", err)
	}
	c.log().Debug("Consolidated idle session", "agent", agent, "session", s.ID)
	return true, nil
}

// renderTranscript writes the conversation as "role: text" lines, long
// messages and the oldest part cut; "" when it holds no user message.
func renderTranscript(msgs []store.Message) string {
	hasUser := false
	lines := make([]string, 0, len(msgs))
	for _, m := range msgs {
		text := strings.TrimSpace(m.Content)
		var calls []string
		for _, tc := range m.ToolCalls {
			calls = append(calls, tc.Name)
		}
		if text == "" && len(calls) == 0 {
			continue
		}
		if m.Role == llm.RoleUser {
			hasUser = true
		}
		who := string(m.Role)
		if m.Role == llm.RoleTool && m.Name != "" {
			who = "tool " + m.Name
		}
		line := who + ": " + clipRunes(text, messageRunes)
		if len(calls) > 0 {
			line += " [called " + strings.Join(calls, ", ") + "]"
		}
		lines = append(lines, line)
	}
	if !hasUser {
		return ""
	}
	out := strings.Join(lines, "\n")
	if n := utf8.RuneCountInString(out); n > transcriptRunes {
		out = "…" + string([]rune(out)[n-transcriptRunes:])
	}
	return out
}
