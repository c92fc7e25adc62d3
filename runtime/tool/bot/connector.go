package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

const connectorDescription = "Speak through this agent's connectors (its channels). list: each with type, readiness, its chat and " +
	"who may use it. send: message to the connector's chat. bot_task and bot_agenda take connector to deliver results there."

type connectorArgs struct {
	Action  string `json:"action"`
	ID      string `json:"id,omitempty" jsonschema:"send: connector id from list"`
	Message string `json:"message,omitempty"`
}

// maxMessage bounds one send (Telegram's limit is 4096; longer texts are
// split by the channel).
const maxMessage = 16000

func newConnector(cfg Config, a *feature.Agent) tool.Tool {
	c := &connector{cfg: cfg, a: a}
	return tool.New("bot_connector", connectorDescription, c.run, tool.Enum("action", "list", "send"))
}

type connector struct {
	cfg Config
	a   *feature.Agent
}

type connectorOut struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Ready  bool   `json:"ready"`
	Status string `json:"status,omitempty"`
	ChatID string `json:"chat_id,omitempty"`
	// Allowed are the instances that may use it: a connector is declared
	// by one Agent, for that Agent's sessions, scheduled runs and tasks.
	Allowed []string `json:"allowed"`
}

func (c *connector) run(ctx context.Context, env tool.Env, a connectorArgs) (tool.Result, error) {
	tenant := c.a.Host.Tenant
	if t, err := store.TenantFrom(ctx); err == nil {
		tenant = t
	} else {
		ctx = store.WithTenant(ctx, tenant)
	}
	switch a.Action {
	case "list":
		return c.list(tenant)
	case "send":
		return c.send(ctx, env, a)
	}
	return tool.Errorf("error: action %q is unknown; use list or send", a.Action), nil
}

func (c *connector) list(tenant string) (tool.Result, error) {
	ready := map[string]bool{}
	why := map[string]string{}
	reported := false
	if c.cfg.Channels != nil {
		if st := c.cfg.Channels.Status(tenant, c.a.Spec.Name); st != nil {
			reported = true
			for _, s := range st {
				ready[s.Name], why[s.Name] = s.Ready, s.Message
				if s.Mode != "" && s.Ready {
					why[s.Name] = s.Mode
				}
			}
		}
	}
	conns := agentspec.Connectors(c.a.Spec)
	out := make([]connectorOut, 0, len(conns))
	for _, cn := range conns {
		o := connectorOut{ID: cn.Name, Type: string(cn.Type), ChatID: cn.ChatID, Allowed: []string{c.a.Spec.Name}}
		switch {
		case reported:
			o.Ready, o.Status = ready[cn.Name], why[cn.Name]
		case cn.Type == "web" || cn.Type == "terminal":
			o.Ready = true
		default:
			o.Status = "declared; this runtime does not report channel readiness"
		}
		if cn.ChatID == "" {
			o.Status = strings.TrimPrefix(o.Status+"; no chatID: reaches only chats that wrote to the agent", "; ")
		}
		out = append(out, o)
	}
	b, err := json.Marshal(map[string]any{"connectors": out})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode connectors: %w", err)
	}
	return tool.Text(string(b)), nil
}

func (c *connector) send(ctx context.Context, env tool.Env, a connectorArgs) (tool.Result, error) {
	msg := strings.TrimSpace(a.Message)
	switch {
	case a.ID == "" || msg == "":
		return tool.Errorf("error: send needs id (from list) and message"), nil
	case len([]rune(msg)) > maxMessage:
		return tool.Errorf("error: message has more than %d characters", maxMessage), nil
	}
	ch, chat, _, _ := store.ParseSessionID(env.SessionID)
	name, chatID, err := agentspec.ConnectorTarget(c.a.Spec, a.ID, ch, chat)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if c.cfg.Sender == nil {
		return tool.Errorf("error: nothing was sent: this runtime cannot deliver messages"), nil
	}
	target := outbound.Target{Channel: name, ChatID: chatID}
	res, err := c.cfg.Sender.Deliver(ctx, outbound.Message{Agent: c.a.Spec.Name, Target: target.String(), Text: msg, Origin: env.SessionID})
	var de *outbound.DeliveryError
	switch {
	case err == nil:
		return tool.Text(fmt.Sprintf("Sent through connector %s to chat %s (%d attempt(s)).", name, chatID, res.Attempts)), nil
	case errors.As(err, &de), errors.Is(err, outbound.ErrUnknownChannel), errors.Is(err, outbound.ErrBadTarget):
		return tool.Errorf("error: not sent through connector %s: %v", name, err), nil
	}
	return tool.Result{}, err
}
