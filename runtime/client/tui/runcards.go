package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/picobot/picobot/runtime/client"
)

// Sub-agent run cards: a delegate or sessions_spawn call shows, under its
// tool line, one card per run it starts — target, status, progress (the
// run's tool steps), task and result — read every runPollEvery from the
// gateway while the run goes on. "/cancel-run ID" (ID or its first
// characters, as the card shows it) cancels a run; a background run's
// continuation turn comes into the transcript when it has answered.

// runPollEvery is how often running cards are read again.
const runPollEvery = 2 * time.Second

// runIDShown is how many characters of a run id a card shows.
const runIDShown = 8

// runCard is one run of a call.
type runCard struct {
	target, task, runID, status, result, progress string
	// undelivered is set once the card saw the run's continuation still to
	// come, so its arrival reloads the transcript.
	undelivered bool
}

func isRunTool(name string) bool { return name == "delegate" || name == "sessions_spawn" }

// runCardsOf reads the runs of a tool call from its arguments and result.
func runCardsOf(e entry) []runCard {
	if !isRunTool(e.name) {
		return nil
	}
	var a struct {
		Target  string `json:"target"`
		Task    string `json:"task"`
		AgentID string `json:"agentId"`
		Label   string `json:"label"`
		Tasks   []struct {
			Target string `json:"target"`
			Task   string `json:"task"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal([]byte(e.args), &a)
	var cards []runCard
	switch {
	case e.name == "sessions_spawn":
		task := a.Task
		if a.Label != "" {
			task = a.Label + ": " + task
		}
		cards = []runCard{{target: a.AgentID, task: task}}
	case len(a.Tasks) > 0:
		for _, t := range a.Tasks {
			cards = append(cards, runCard{target: cmpOr(t.Target, a.Target), task: t.Task})
		}
	default:
		cards = []runCard{{target: a.Target, task: a.Task}}
	}
	type result struct {
		RunID  string `json:"run_id"`
		RunID2 string `json:"runId"`
		Status string `json:"status"`
		Result string `json:"result"`
		Error  string `json:"error"`
	}
	var results []result
	if e.hasResult {
		var one result
		if err := json.Unmarshal([]byte(e.result), &results); err != nil {
			if json.Unmarshal([]byte(e.result), &one) == nil && (one.RunID != "" || one.RunID2 != "" || one.Status != "") {
				results = []result{one}
			} else {
				results = []result{{Status: "failed", Result: e.result}}
			}
		}
	}
	for i := range cards {
		c := &cards[i]
		c.status = "running"
		if i < len(results) {
			r := results[i]
			c.runID, c.status, c.result = cmpOr(r.RunID, r.RunID2), cmpOr(r.Status, "failed"), cmpOr(r.Error, r.Result)
			if c.status == "accepted" {
				c.status = "running"
			}
			if c.status == "running" {
				c.result = ""
			}
		} else if e.hasResult {
			c.status = "failed"
		}
	}
	return cards
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func ended(status string) bool {
	return status == "succeeded" || status == "failed" || status == "cancelled"
}

// renderRunCards draws the cards of a tool entry.
func renderRunCards(cards []runCard, width int) string {
	var b strings.Builder
	for _, c := range cards {
		head := "    ⇢ " + cmpOr(c.target, "sub-agent") + " · " + c.status
		if c.progress != "" {
			head += " · " + c.progress
		}
		if c.runID != "" && !ended(c.status) {
			head += "  [/cancel-run " + shortRun(c.runID) + "]"
		}
		b.WriteString(styleSelected.Render(ansi.Truncate(head, width, "…")) + "\n")
		if c.task != "" {
			b.WriteString(styleDim.Render(ansi.Truncate("      "+oneLine(c.task), width, "…")) + "\n")
		}
		if c.result != "" {
			b.WriteString(styleDim.Render(ansi.Truncate("      → "+oneLine(c.result), width, "…")) + "\n")
		}
	}
	return b.String()
}

func shortRun(id string) string { return id[:min(len(id), runIDShown)] }

// runsTickMsg asks for the running cards to be read again.
type runsTickMsg struct{}

// runReadMsg is a card read (or cancelled) from the gateway.
type runReadMsg struct {
	card   client.RunCard
	err    error
	cancel bool
}

// activeRuns are the ids of the transcript's runs that have not ended, or
// whose continuation is still to come.
func (m *Model) activeRuns() []string {
	var ids []string
	for i := range m.log.entries {
		for _, c := range m.log.entries[i].runs {
			if c.runID != "" && (!ended(c.status) || c.undelivered) {
				ids = append(ids, c.runID)
			}
		}
	}
	return ids
}

// scheduleRuns starts the next read of the running cards, unless one is
// pending or none runs.
func (m *Model) scheduleRuns() tea.Cmd {
	if m.runsTicking || len(m.activeRuns()) == 0 {
		return nil
	}
	m.runsTicking = true
	return tea.Tick(runPollEvery, func(time.Time) tea.Msg { return runsTickMsg{} })
}

// readRuns reads every running card.
func (m *Model) readRuns() tea.Cmd {
	m.runsTicking = false
	var cmds []tea.Cmd
	for _, id := range m.activeRuns() {
		cmds = append(cmds, m.readRun(id, false))
	}
	return tea.Batch(cmds...)
}

func (m Model) readRun(id string, cancel bool) tea.Cmd {
	c, agent, chat := m.cfg.Client, m.agent, m.cfg.ChatID
	return func() tea.Msg {
		ctx, stop := context.WithTimeout(context.Background(), requestTimeout)
		defer stop()
		if cancel {
			card, err := c.CancelRun(ctx, agent, chat, id)
			return runReadMsg{card: card, err: err, cancel: true}
		}
		card, err := c.RunCard(ctx, agent, chat, id)
		return runReadMsg{card: card, err: err}
	}
}

// runRead updates the cards of a run; a background run whose continuation
// the card saw still to come and which has now answered reloads the
// transcript, where that turn now is.
func (m *Model) runRead(msg runReadMsg) tea.Cmd {
	if msg.err != nil {
		if msg.cancel {
			m.errLine = "Could not cancel the run: " + m.describe(msg.err)
		}
		return nil
	}
	r, reload := msg.card, false
	for i := range m.log.entries {
		e := &m.log.entries[i]
		for j := range e.runs {
			c := &e.runs[j]
			if c.runID != r.RunID {
				continue
			}
			c.status = r.Status
			if r.Ended() {
				c.result = r.Result
			}
			if r.Steps > 0 {
				c.progress = fmt.Sprintf("%d step%s", r.Steps, map[bool]string{true: "", false: "s"}[r.Steps == 1])
				if r.LastTool != "" {
					c.progress += " · last: " + r.LastTool
				}
			}
			switch {
			case r.Mode == "background" && (r.Completion == "reserved" || r.Completion == "ready"):
				c.undelivered = true
			case c.undelivered && r.Completion == "delivered":
				c.undelivered, reload = false, true
			case r.Completion != "ready":
				c.undelivered = false
			}
			e.look = look{}
		}
	}
	if reload && !m.busy() && m.session != "" {
		return m.loadHistory(m.session)
	}
	return nil
}

// cancelRun handles "/cancel-run ID": the run of the transcript whose id
// starts with ID.
func (m *Model) cancelRun(text string) tea.Cmd {
	prefix := strings.TrimSpace(strings.TrimPrefix(text, "/cancel-run"))
	var match []string
	for _, id := range m.activeRuns() {
		if prefix != "" && strings.HasPrefix(id, prefix) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		m.errLine = "No running run " + prefix + " here: /cancel-run takes the id a card shows."
		return nil
	case 1:
		return m.readRun(match[0], true)
	default:
		m.errLine = "Several runs start with " + prefix + ": give more of the id."
		return nil
	}
}
