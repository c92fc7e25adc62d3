package agent

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/llm"
)

// Compression defaults: trigger at 70% of a 128K
// window, truncate tool outputs of 2,000+ characters, up to 3 summary rounds,
// hard truncation above 90%.
const (
	DefaultContextWindow = 128000
	DefaultTriggerRatio  = 0.70
	DefaultHardRatio     = 0.90
	DefaultMaxRounds     = 3
	DefaultToolTrimChars = 2000
	// DefaultKeep is N in "keep the first N and last N messages".
	DefaultKeep = 4
)

// Compressor keeps a conversation inside the model's context window.
//
// Stages, cheapest first, each run only while the estimate is still above the
// trigger: (1) fast trim — merge runs of same-role plain messages and cut old
// tool outputs of ToolTrimChars or more; (2) LLM summary rounds — the
// assistant/tool messages between two consecutive user messages become one
// summary message, handed to OnSummary for timeline memory; (3) above the hard
// ratio, keep the first N and last N messages, plus every user message. Tool
// call chains are never split, so the result is always a valid conversation.
type Compressor struct {
	Window        int
	TriggerRatio  float64
	HardRatio     float64
	MaxRounds     int
	ToolTrimChars int
	Keep          int
	// Summarizer writes the summaries; without it stage 2 is skipped.
	Summarizer llm.Provider
	// OnSummary receives each summary (timeline memory). Optional.
	OnSummary func(ctx context.Context, summary string) error
}

// Stats says what a compression did.
type Stats struct {
	Before, After  int // estimated tokens
	TrimmedOutputs int
	Merged         int
	SummaryRounds  int
	Dropped        int
}

func (s Stats) String() string {
	return fmt.Sprintf("compressed history from ~%d to ~%d tokens (%d tool outputs trimmed, %d messages merged, %d summary rounds, %d messages dropped)",
		s.Before, s.After, s.TrimmedOutputs, s.Merged, s.SummaryRounds, s.Dropped)
}

func (c *Compressor) window() int {
	if c.Window > 0 {
		return c.Window
	}
	return DefaultContextWindow
}

func orDefault[T int | float64](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// EstimateTokens approximates the token count of a request. Exact counts need
// the provider's tokenizer; a conservative estimate is enough to decide when to
// compress: about 4 bytes per token for Latin text, one token per CJK
// character, plus a small overhead per message.
func EstimateTokens(system string, msgs []llm.Message, tools []llm.ToolDef) int {
	n := textTokens(system)
	for _, m := range msgs {
		n += 4 + textTokens(m.Content)
		for _, tc := range m.ToolCalls {
			n += 4 + textTokens(tc.Name) + textTokens(tc.Arguments)
		}
		n += 800 * len(m.Images)
	}
	for _, t := range tools {
		n += 8 + textTokens(t.Name) + textTokens(t.Description) + len(t.Parameters)/4
	}
	return n
}

func textTokens(s string) int {
	ascii, wide := 0, 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		wide++
		i += size
	}
	return (ascii+3)/4 + wide
}

// NeedsCompression reports whether the request is above the trigger.
func (c *Compressor) NeedsCompression(system string, msgs []llm.Message, tools []llm.ToolDef) bool {
	return EstimateTokens(system, msgs, tools) > int(float64(c.window())*orDefault(c.TriggerRatio, DefaultTriggerRatio))
}

// Compress shrinks msgs. With force it runs every stage even below the
// trigger (after the provider reported an overflow, our estimate was wrong).
// msgs is not modified.
func (c *Compressor) Compress(ctx context.Context, system string, msgs []llm.Message, tools []llm.ToolDef, force bool) ([]llm.Message, Stats, error) {
	est := func(m []llm.Message) int { return EstimateTokens(system, m, tools) }
	trigger := int(float64(c.window()) * orDefault(c.TriggerRatio, DefaultTriggerRatio))
	hard := int(float64(c.window()) * orDefault(c.HardRatio, DefaultHardRatio))
	if force {
		// Aim well below what the provider refused.
		trigger, hard = min(trigger, est(msgs)*6/10), min(hard, est(msgs)*7/10)
	}
	st := Stats{Before: est(msgs)}
	out := RepairToolChains(msgs)
	if st.Before <= trigger {
		st.After = st.Before
		return out, st, nil
	}

	out, st.Merged = mergeSameRole(out)
	out, st.TrimmedOutputs = trimToolOutputs(out, orDefault(c.ToolTrimChars, DefaultToolTrimChars))

	for round := 0; round < orDefault(c.MaxRounds, DefaultMaxRounds) && c.Summarizer != nil && est(out) > trigger; round++ {
		next, summary, ok, err := c.summarizeOneSpan(ctx, out)
		if err != nil {
			return nil, st, err
		}
		if !ok {
			break
		}
		if c.OnSummary != nil {
			if err := c.OnSummary(ctx, summary); err != nil {
				return nil, st, fmt.Errorf("failed to store compression summary: %w", err)
			}
		}
		out = next
		st.SummaryRounds++
	}

	if est(out) > hard {
		var dropped int
		out, dropped = hardTruncate(out, orDefault(c.Keep, DefaultKeep), func(m []llm.Message) bool { return est(m) <= hard })
		st.Dropped = dropped
	}
	st.After = est(out)
	return out, st, nil
}

// mergeSameRole merges consecutive user messages, and consecutive assistant
// messages without tool calls, into one.
func mergeSameRole(msgs []llm.Message) ([]llm.Message, int) {
	out := make([]llm.Message, 0, len(msgs))
	merged := 0
	for _, m := range msgs {
		if n := len(out); n > 0 {
			prev := &out[n-1]
			plain := func(x llm.Message) bool {
				return len(x.ToolCalls) == 0 && (x.Role == llm.RoleUser || x.Role == llm.RoleAssistant)
			}
			if prev.Role == m.Role && plain(*prev) && plain(m) {
				prev.Content = strings.TrimRight(prev.Content, "\n") + "\n\n" + m.Content
				prev.Images = append(prev.Images, m.Images...)
				merged++
				continue
			}
		}
		out = append(out, m)
	}
	return out, merged
}

// trimToolOutputs cuts tool outputs of limit or more characters, except those
// of the current turn (after the last user message), which the model is still
// working with.
func trimToolOutputs(msgs []llm.Message, limit int) ([]llm.Message, int) {
	last := lastUser(msgs)
	trimmed := 0
	for i := 0; i < last; i++ {
		m := &msgs[i]
		if m.Role != llm.RoleTool || utf8.RuneCountInString(m.Content) < limit {
			continue
		}
		r := []rune(m.Content)
		head := limit / 2
		m.Content = string(r[:head]) + fmt.Sprintf("\n…[%d characters of old tool output removed by context compression]", len(r)-head)
		trimmed++
	}
	return msgs, trimmed
}

func lastUser(msgs []llm.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return i
		}
	}
	return len(msgs)
}

// summarizeOneSpan replaces the first span of assistant/tool messages that
// lies between two user messages (not the current turn's) with a summary.
func (c *Compressor) summarizeOneSpan(ctx context.Context, msgs []llm.Message) ([]llm.Message, string, bool, error) {
	start := -1
	for i, m := range msgs {
		if m.Role != llm.RoleUser {
			continue
		}
		// Messages strictly between the previous user message and this one;
		// a span that is already a single summary is done.
		if n := i - start - 1; start >= 0 && (n >= 2 || n == 1 && !isSummary(msgs[start+1])) {
			return c.replaceSpan(ctx, msgs, start+1, i)
		}
		start = i
	}
	return msgs, "", false, nil
}

const summaryPrefix = "[Summary of earlier steps] "

func isSummary(m llm.Message) bool {
	return m.Role == llm.RoleAssistant && strings.HasPrefix(m.Content, summaryPrefix)
}

func (c *Compressor) replaceSpan(ctx context.Context, msgs []llm.Message, from, to int) ([]llm.Message, string, bool, error) {
	var b strings.Builder
	b.WriteString("User request:\n")
	b.WriteString(msgs[from-1].Content)
	b.WriteString("\n\nWhat happened next:\n")
	for _, m := range msgs[from:to] {
		switch {
		case m.Role == llm.RoleTool:
			fmt.Fprintf(&b, "[tool %s result] %s\n", m.Name, clip(m.Content, 4000))
		case len(m.ToolCalls) > 0:
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(&b, "[assistant called %s %s]\n", tc.Name, clip(tc.Arguments, 500))
			}
			if m.Content != "" {
				fmt.Fprintf(&b, "[assistant] %s\n", m.Content)
			}
		default:
			fmt.Fprintf(&b, "[%s] %s\n", m.Role, m.Content)
		}
	}
	resp, err := c.Summarizer.Complete(ctx, llm.Request{
		System: "You compress conversation history. Summarise what the assistant did and found in reply to the user request: " +
			"decisions, facts learned, files changed, open questions. At most 200 words, no preamble.",
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: b.String()}},
		MaxTokens: 600,
	}, nil)
	if err != nil {
		return nil, "", false, fmt.Errorf("failed to summarise history: %w", err)
	}
	summary := strings.TrimSpace(resp.Message.Content)
	out := make([]llm.Message, 0, len(msgs)-(to-from)+1)
	out = append(out, msgs[:from]...)
	out = append(out, llm.Message{Role: llm.RoleAssistant, Content: summaryPrefix + summary})
	out = append(out, msgs[to:]...)
	return out, summary, true, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// hardTruncate keeps the first keep and the last keep messages and every user
// message, dropping assistant/tool messages in between (whole tool-call chains
// at a time) until fits says the result fits or nothing more can go.
func hardTruncate(msgs []llm.Message, keep int, fits func([]llm.Message) bool) ([]llm.Message, int) {
	type unit struct{ from, to int } // [from, to): a message, or a call with its results
	var units []unit
	for i := 0; i < len(msgs); {
		j := i + 1
		if len(msgs[i].ToolCalls) > 0 {
			for j < len(msgs) && msgs[j].Role == llm.RoleTool {
				j++
			}
		}
		units = append(units, unit{i, j})
		i = j
	}
	drop := make([]bool, len(units))
	build := func() []llm.Message {
		out := make([]llm.Message, 0, len(msgs))
		for k, u := range units {
			if !drop[k] {
				out = append(out, msgs[u.from:u.to]...)
			}
		}
		return out
	}
	dropped := 0
	for k := keep; k < len(units)-keep; k++ {
		if msgs[units[k].from].Role == llm.RoleUser {
			continue
		}
		drop[k] = true
		dropped += units[k].to - units[k].from
		if fits(build()) {
			break
		}
	}
	out := build()
	// Providers want the conversation to open with a user message.
	for len(out) > 0 && out[0].Role != llm.RoleUser {
		n := 1
		if len(out[0].ToolCalls) > 0 {
			for n < len(out) && out[n].Role == llm.RoleTool {
				n++
			}
		}
		out = out[n:]
		dropped += n
	}
	return out, dropped
}

// RepairToolChains makes a loaded history valid for providers: every tool call
// gets a result right after its assistant message (a synthetic error result when
// the run that made the call died before recording one), and tool results
// without a call are dropped.
func RepairToolChains(msgs []llm.Message) []llm.Message {
	// Room for a turn's messages: the loop appends them to the copy.
	out := make([]llm.Message, 0, len(msgs)+8)
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == llm.RoleTool {
			continue // orphan: its call was handled with the assistant message
		}
		out = append(out, m)
		if len(m.ToolCalls) == 0 {
			continue
		}
		results := map[string]llm.Message{}
		j := i + 1
		for ; j < len(msgs) && msgs[j].Role == llm.RoleTool; j++ {
			results[msgs[j].ToolCallID] = msgs[j]
		}
		for _, tc := range m.ToolCalls {
			if r, ok := results[tc.ID]; ok {
				out = append(out, r)
				continue
			}
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Name: tc.Name, IsError: true,
				Content: "error: no result was recorded for this call (the run was interrupted); run it again if it is still needed"})
		}
		i = j - 1
	}
	return out
}
