package agentspec

import (
	"fmt"
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// Connector is one of an Agent's channels as the agent speaks through it on
// its own initiative (dsh's connectors): bot_connector send, and agenda
// reminders and task results sent to it by name.
type Connector struct {
	// Name is the channel's name (its type when spec.channels gives none).
	Name string
	Type picobotv1alpha1.ChannelType
	// ChatID is the chat it speaks in ("" when spec.channels gives none).
	ChatID string
}

// Connectors lists the Agent's channels in spec order. A connector belongs
// to the Agent that declares it: that Agent's sessions, scheduled runs and
// tasks are the instances allowed to use it.
func Connectors(a *picobotv1alpha1.Agent) []Connector {
	out := make([]Connector, 0, len(a.Spec.Channels))
	for _, c := range a.Spec.Channels {
		name := c.Name
		if name == "" {
			name = string(c.Type)
		}
		out = append(out, Connector{Name: name, Type: c.Type, ChatID: c.ChatID})
	}
	return out
}

// ConnectorTarget resolves a connector name to where a message goes: the
// connector's chatID, or currentChat when the caller's own session is on
// that connector and it has none. The error says what to fix.
func ConnectorTarget(a *picobotv1alpha1.Agent, name, currentChannel, currentChat string) (channel, chat string, err error) {
	conns := Connectors(a)
	names := make([]string, len(conns))
	for i, c := range conns {
		names[i] = c.Name
		if c.Name != name {
			continue
		}
		switch {
		case c.ChatID != "":
			return c.Name, c.ChatID, nil
		case currentChannel == c.Name && currentChat != "":
			return c.Name, currentChat, nil
		}
		return "", "", fmt.Errorf("connector %q has no chat to speak in: its spec.channels entry sets no chatID", name)
	}
	if len(names) == 0 {
		return "", "", fmt.Errorf("no connector %q: this agent has no channels (spec.channels)", name)
	}
	return "", "", fmt.Errorf("no connector %q; this agent's connectors: %s", name, strings.Join(names, ", "))
}
