package memory

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/memory/longterm"
	"github.com/picobot/picobot/runtime/store"
)

// Limits of the prompt section: it is sent with every turn.
const (
	// PromptMemories is the most memories injected into a turn.
	PromptMemories = 5
	// promptContentRunes clips each injected memory.
	promptContentRunes = 300
)

// residentKinds are the knowledge kinds injected into turns: everything but
// bot_remember's monthly notes, which are recalled on demand.
var residentKinds = []store.MemoryKind{"", store.MemoryDecision, store.MemoryFact, store.MemoryFocus}

// Section returns the memory section of a turn's system prompt: the
// knowledge memories best matching the user's message (relevance, then
// importance), at most PromptMemories, as "- key: content" lines; "" when
// none match. Failures are logged, never fatal to the turn.
func Section(ctx context.Context, mem *longterm.Memory, text string, log *slog.Logger) string {
	text = clipRunes(strings.TrimSpace(text), longterm.MaxQueryRunes)
	if text == "" {
		return ""
	}
	hits, err := mem.Recall(ctx, longterm.Query{Text: text, Category: store.MemoryKnowledge, Kinds: residentKinds,
		Limit: PromptMemories, FullTextOnly: true})
	if err != nil {
		if !longterm.IsForModel(err) && log != nil {
			log.Error("Failed to recall memories for the prompt", "agent", mem.Agent(), "err", err)
		}
		return ""
	}
	if len(hits) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Memory\nLong-term memories matching this message (memory_recall finds more):\n")
	for _, h := range hits {
		content := clipRunes(strings.Join(strings.Fields(h.Content), " "), promptContentRunes)
		fmt.Fprintf(&b, "- %s: %s\n", h.Key, content)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// clipRunes cuts s to n runes, marking the cut.
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
