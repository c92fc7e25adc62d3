package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/picobot/picobot/runtime/client"
)

// keyHelp is the footer when nothing else is to be said.
const keyHelp = "Enter send · Alt+Enter new line · Ctrl+O tool details · PgUp/PgDn scroll · Ctrl+C stop/quit"

// layout sizes the transcript and the input to the window and draws the
// transcript; scrolled up, it keeps the same lines in view as it grows.
func (m *Model) layout() {
	m.input.SetWidth(max(m.width-1, 10))
	m.input.SetHeight(min(max(m.input.LineCount(), 1), maxInputLines))
	h := m.height - 1 /* header */ - m.input.Height() - 1 /* status */
	if m.errLine != "" {
		h--
	}
	m.body = max(h, 0)
	lines := m.log.lines(m.width, m.agent, m.toolsOpen, m.md)
	if m.scroll > 0 {
		m.scroll += len(lines) - len(m.lines)
	}
	m.lines = lines
	m.scroll = min(max(m.scroll, 0), max(len(lines)-m.body, 0))
}

// transcriptView is the part of the transcript in view, m.body lines.
func (m Model) transcriptView() string {
	end := max(len(m.lines)-m.scroll, 0)
	out := make([]string, 0, m.body)
	out = append(out, m.lines[max(end-m.body, 0):end]...)
	for len(out) < m.body {
		out = append(out, "")
	}
	return strings.Join(out, "\n")
}

// View draws the screen.
func (m Model) View() string {
	if m.quitting {
		return ""
	}
	if m.picking {
		return m.pickerView()
	}
	parts := []string{m.header()}
	if m.body > 0 {
		parts = append(parts, m.transcriptView())
	}
	if m.errLine != "" {
		parts = append(parts, styleErrorBar.Render(pad(ansi.Truncate("✗ "+m.errLine, m.width, "…"), m.width)))
	}
	parts = append(parts, m.status(), m.input.View())
	return strings.Join(parts, "\n")
}

func (m Model) header() string {
	title := m.title
	switch {
	case m.dialog == "":
		title = "new conversation"
	case title == "":
		title = m.dialog
	default:
		title += " (" + m.dialog + ")"
	}
	left := styleHeader.Render(" PicoBot │ " + m.agent + " │ " + title + " ")
	state := styleOnline.Render(" ● online ")
	switch a, ok := m.agentInfo(); {
	case m.conn == nil:
		state = styleOffline.Render(" ○ offline ")
	case ok && !a.Ready:
		state = styleOffline.Render(" ● not ready ")
	}
	gap := m.width - ansi.StringWidth(left) - ansi.StringWidth(state)
	if gap < 0 {
		return ansi.Truncate(left, m.width, "…")
	}
	return left + styleHeader.Render(strings.Repeat(" ", gap)) + state
}

func (m Model) status() string {
	var s string
	switch {
	case m.stopping:
		s = "Stopping…"
	case m.sending:
		s = "Sending…"
	case m.approval != nil:
		s = "Approve " + m.approval.Name + " command " + m.approval.Code + "? y approve · n deny"
	case m.turn != nil:
		s = m.agent + " is replying… (Ctrl+C stops)"
	case m.usage != "":
		s = m.usage + " · " + keyHelp
	default:
		s = keyHelp
	}
	if m.scroll > 0 {
		s = fmt.Sprintf("[%d more lines below: PgDn] ", m.scroll) + s
	}
	return styleDim.Render(ansi.Truncate(s, m.width, "…"))
}

func (m Model) pickerView() string {
	var b strings.Builder
	b.WriteString(styleHeader.Render(pad(" PicoBot │ pick an agent", m.width)) + "\n\n")
	if len(m.cfg.Agents) == 0 {
		b.WriteString("The gateway has no agents. Add an Agent manifest and restart it.\n")
	}
	for i, a := range m.cfg.Agents {
		state := "ready"
		if !a.Ready {
			state = "not ready: " + a.Message
		}
		line := fmt.Sprintf("  %s  %s", a.Name, styleDim.Render(state))
		if i == m.pick {
			line = styleSelected.Render("› "+a.Name) + "  " + styleDim.Render(state)
		}
		b.WriteString(ansi.Truncate(line, m.width, "…") + "\n")
	}
	b.WriteString("\n" + styleDim.Render("↑/↓ choose · Enter start · Ctrl+C quit"))
	return b.String()
}

// pad fills s with spaces to a width.
func pad(s string, width int) string {
	if w := ansi.StringWidth(s); w < width {
		return s + strings.Repeat(" ", width-w)
	}
	return s
}

// agentInfo is what the gateway said of the agent talked to.
func (m Model) agentInfo() (client.Agent, bool) {
	for _, a := range m.cfg.Agents {
		if a.Name == m.agent {
			return a, true
		}
	}
	return client.Agent{}, false
}
