package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/picobot/picobot/runtime/client"
)

// entryKind is what a transcript entry shows.
type entryKind int

const (
	entryUser entryKind = iota
	entryAssistant
	entryTool
	entryCommand // a slash command's reply
	entryNote    // the client's own remarks (stopped, reconnected, ...)
	entryError   // an error the gateway reported for a turn
	entryApproval
)

// entry is one item of the transcript.
type entry struct {
	kind entryKind
	text string
	// streaming marks the assistant entry deltas are appended to.
	streaming bool
	// Tool calls.
	callID, name, args, result string
	hasResult, isError         bool
	// runs are the sub-agent runs a delegate or sessions_spawn call
	// started (runcards.go).
	runs []runCard

	// cache is the entry's lines as last rendered, for look.
	cache []string
	look  look
}

// look is what an entry's rendering depends on besides the entry.
type look struct {
	width     int
	agent     string
	toolsOpen bool
	md        *markdown
}

// transcript is the conversation as shown.
type transcript struct {
	entries []entry
	// drawn is how many lines the last drawing had (a capacity hint).
	drawn int
}

func (t *transcript) add(e entry) { t.entries = append(t.entries, e) }

func (t *transcript) last() *entry {
	if len(t.entries) == 0 {
		return nil
	}
	return &t.entries[len(t.entries)-1]
}

// endStream closes the streaming assistant entry, if any.
func (t *transcript) endStream() {
	if l := t.last(); l != nil && l.kind == entryAssistant && l.streaming {
		l.streaming, l.look = false, look{}
	}
}

// apply adds a turn event.
func (t *transcript) apply(e client.Event) {
	switch e.Kind {
	case client.KindDelta:
		if l := t.last(); l != nil && l.kind == entryAssistant && l.streaming {
			l.text += e.Text
			l.look = look{}
			return
		}
		t.add(entry{kind: entryAssistant, text: e.Text, streaming: true})
	case client.KindFinal:
		if l := t.last(); l != nil && l.kind == entryAssistant && l.streaming {
			l.text, l.streaming, l.look = e.Text, false, look{}
			return
		}
		if strings.TrimSpace(e.Text) != "" {
			t.add(entry{kind: entryAssistant, text: e.Text})
		}
	case client.KindToolCall:
		t.endStream()
		t.add(entry{kind: entryTool, callID: e.CallID, name: e.Name, args: e.Arguments})
		t.last().runs = runCardsOf(*t.last())
	case client.KindToolResult:
		t.endStream()
		if tc := t.tool(e.CallID); tc != nil {
			tc.result, tc.hasResult, tc.isError, tc.look = e.Content, true, e.IsError, look{}
			tc.runs = runCardsOf(*tc)
			return
		}
		t.add(entry{kind: entryTool, callID: e.CallID, name: e.Name, result: e.Content, hasResult: true, isError: e.IsError})
		t.last().runs = runCardsOf(*t.last())
	case client.KindCommand:
		t.endStream()
		t.add(entry{kind: entryCommand, text: e.Text})
	case client.KindApproval:
		t.endStream()
		t.add(entry{kind: entryApproval, text: fmt.Sprintf("⚠ Approve this %s command? %s.\n  %s\n  y approve · n deny (code %s; refused without an answer within %s)",
			e.Name, e.Reason, e.Command, e.Code, time.Duration(e.TimeoutMS)*time.Millisecond)})
	case client.KindApprovalResult:
		t.add(entry{kind: entryNote, text: approvalOutcome(e.Code, e.Outcome)})
	case client.KindUsage:
		// shown in the status line
	default:
		// A kind newer than this client: show its text, if it has one.
		if e.Text != "" {
			t.endStream()
			t.add(entry{kind: entryNote, text: "[" + e.Kind + "] " + e.Text})
		}
	}
}

// approvalOutcome says how an approval request ended.
func approvalOutcome(code, outcome string) string {
	switch outcome {
	case "approved":
		return "✓ Approved " + code + ": the command runs."
	case "timed_out":
		return "⌛ No answer to " + code + " in time: the command was refused."
	}
	return "✗ Denied " + code + ": the command was not run."
}

// tool finds the latest tool entry of a call id.
func (t *transcript) tool(callID string) *entry {
	for i := len(t.entries) - 1; i >= 0; i-- {
		if e := &t.entries[i]; e.kind == entryTool && e.callID == callID && callID != "" {
			return e
		}
	}
	return nil
}

// fromHistory rebuilds a transcript from stored messages; explain words a
// failed turn's error as the live turn did.
func fromHistory(msgs []client.Message, explain func(error) string) transcript {
	var t transcript
	for _, m := range msgs {
		switch m.Role {
		case "user":
			t.add(entry{kind: entryUser, text: m.Content})
			if m.Error != nil {
				t.add(entry{kind: entryError, text: explain(m.Error)})
			}
		case "assistant":
			if strings.TrimSpace(m.Content) != "" {
				t.add(entry{kind: entryAssistant, text: m.Content})
			}
			for _, c := range m.ToolCalls {
				t.add(entry{kind: entryTool, callID: c.ID, name: c.Name, args: c.Arguments})
			}
		case "tool":
			t.apply(client.Event{Kind: client.KindToolResult, CallID: m.ToolCallID, Name: m.Name, Content: m.Content, IsError: m.IsError})
		}
	}
	return t
}

// Styles of the transcript and the frame around it. Plain ANSI colours, so
// the terminal's theme decides the shades and nothing queries the terminal.
var (
	styleHeader    = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("4"))
	styleUser      = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("6"))
	styleAssistant = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("5"))
	styleDim       = lipgloss.NewStyle().Faint(true)
	styleError     = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styleErrorBar  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("1"))
	styleOnline    = lipgloss.NewStyle().Foreground(lipgloss.Color("10")).Background(lipgloss.Color("4"))
	styleOffline   = lipgloss.NewStyle().Foreground(lipgloss.Color("9")).Background(lipgloss.Color("4"))
	styleSelected  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("6"))
)

// maxOpenLines bounds an opened tool argument or result.
const maxOpenLines = 20

// lines draws the transcript at a width, as screen lines; toolsOpen shows
// tool arguments and results in full instead of one line per call. Entries
// are rendered once per look and kept, so a streamed delta re-renders one.
func (t *transcript) lines(width int, agent string, toolsOpen bool, md *markdown) []string {
	lk := look{width: max(width, 20), agent: agent, toolsOpen: toolsOpen, md: md}
	out := make([]string, 0, t.drawn+8)
	for i := range t.entries {
		e := &t.entries[i]
		// A blank line between entries, none between consecutive tool lines.
		if i > 0 && (e.kind != entryTool || t.entries[i-1].kind != entryTool) {
			out = append(out, "")
		}
		if e.look != lk {
			e.cache, e.look = strings.Split(strings.TrimSuffix(e.render(lk), "\n"), "\n"), lk
		}
		out = append(out, e.cache...)
	}
	t.drawn = len(out)
	return out
}

// render draws one entry, ending in a newline.
func (e *entry) render(lk look) string {
	width := lk.width
	switch e.kind {
	case entryUser:
		return styleUser.Render("You") + "\n" + wrap(e.text, width) + "\n"
	case entryAssistant:
		if e.streaming {
			return styleAssistant.Render(lk.agent) + "\n" + wrap(e.text+"▍", width) + "\n"
		}
		return styleAssistant.Render(lk.agent) + "\n" + lk.md.render(e.text, width) + "\n"
	case entryTool:
		return renderTool(*e, width, lk.toolsOpen)
	case entryCommand:
		return styleDim.Render(wrap(e.text, width)) + "\n"
	case entryNote:
		return styleDim.Italic(true).Render(wrap(e.text, width)) + "\n"
	case entryError:
		return styleError.Render(wrap("✗ "+e.text, width)) + "\n"
	case entryApproval:
		return styleSelected.Render(wrap(e.text, width)) + "\n"
	}
	return ""
}

func renderTool(e entry, width int, open bool) string {
	mark, state := "▸", "…"
	if open {
		mark = "▾"
	}
	switch {
	case e.isError:
		state = "✗ " + oneLine(e.result)
	case e.hasResult:
		state = "→ " + oneLine(e.result)
	}
	if !open {
		line := "  " + mark + " " + e.name + " " + oneLine(e.args) + " " + state
		return styleDim.Render(ansi.Truncate(line, width, "…")) + "\n" + renderRunCards(e.runs, width)
	}
	var b strings.Builder
	b.WriteString(styleDim.Render(ansi.Truncate("  "+mark+" "+e.name+" ("+e.callID+")", width, "…")) + "\n")
	block := func(label, text string) {
		lines := strings.Split(wrap(strings.TrimRight(text, "\n"), width-6), "\n")
		if len(lines) > maxOpenLines {
			lines = append(lines[:maxOpenLines], "…")
		}
		b.WriteString(styleDim.Render("    "+label) + "\n")
		for _, l := range lines {
			b.WriteString(styleDim.Render("      "+l) + "\n")
		}
	}
	block("arguments", e.args)
	switch {
	case e.isError:
		block("error", e.result)
	case e.hasResult:
		block("result", e.result)
	default:
		b.WriteString(styleDim.Render("    running…") + "\n")
	}
	b.WriteString(renderRunCards(e.runs, width))
	return b.String()
}

// oneLine folds whitespace so text fits one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// wrap wraps text to a width, keeping its line breaks.
func wrap(s string, width int) string {
	return ansi.Wrap(strings.TrimRight(s, "\n"), max(width, 10), "")
}
