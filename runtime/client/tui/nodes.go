package tui

import (
	"context"
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/picobot/picobot/runtime/client"
)

// nodesMsg is the answer to a /nodes command: the text to show, or why it
// failed.
type nodesMsg struct {
	text string
	err  error
}

const nodesUsage = "/nodes lists the paired devices; /nodes approve|reject|revoke <id> decides on one."

// nodesCommand handles "/nodes [approve|reject|revoke <id>]" here, through
// the gateway's REST API, without a turn of the agent.
func (m *Model) nodesCommand(text string) tea.Cmd {
	words := strings.Fields(text)[1:]
	c := m.cfg.Client
	switch {
	case len(words) == 0 || (len(words) == 1 && words[0] == "list"):
		return func() tea.Msg {
			ctx, stop := context.WithTimeout(context.Background(), requestTimeout)
			defer stop()
			list, err := c.Nodes(ctx, "")
			if err != nil {
				return nodesMsg{err: err}
			}
			return nodesMsg{text: describeNodes(list)}
		}
	case len(words) == 2 && (words[0] == "approve" || words[0] == "reject" || words[0] == "revoke"):
		decision, id := words[0], words[1]
		return func() tea.Msg {
			ctx, stop := context.WithTimeout(context.Background(), requestTimeout)
			defer stop()
			n, err := c.DecideNode(ctx, id, decision)
			if err != nil {
				return nodesMsg{err: err}
			}
			return nodesMsg{text: fmt.Sprintf("Node %s (%s) is %s.", n.ID, n.Name, n.State)}
		}
	}
	m.errLine = nodesUsage
	return nil
}

// describeNodes is the /nodes listing: pending requests first.
func describeNodes(list []client.Node) string {
	if len(list) == 0 {
		return "No paired devices. Run `picobot node` on a machine to pair it."
	}
	var b strings.Builder
	for _, pass := range []bool{true, false} {
		for _, n := range list {
			if (n.State == "pending") != pass {
				continue
			}
			conn := "offline"
			if n.Connected {
				conn = "online"
			}
			fmt.Fprintf(&b, "%s  %s  %s, %s, %s: %s\n", n.ID, n.Name, n.State, conn, n.Platform, strings.Join(n.Capabilities, ", "))
		}
	}
	b.WriteString(nodesUsage)
	return b.String()
}
