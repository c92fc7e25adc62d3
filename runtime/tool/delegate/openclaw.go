package delegate

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// OpenClaw's face of the delegate edges: agents_list lists them and
// sessions_spawn starts a background run along one, announcing its result
// back in the calling chat (the continuation turn of background.go, whose
// reply is the announcement).

// Names of the OpenClaw tools over the delegate edges.
const (
	AgentsListName = "agents_list"
	SpawnName      = "sessions_spawn"
)

// maxLabelChars bounds a spawned run's label.
const maxLabelChars = 80

// Cleanup values of sessions_spawn.
const (
	CleanupKeep   = "keep"
	CleanupDelete = "delete"
)

// ListedAgent is one entry of agents_list.
type ListedAgent struct {
	// ID is what sessions_spawn's agentId (and delegate's target) takes:
	// the edge's name.
	ID string `json:"id"`
	// Agent is the Agent that does the work.
	Agent       string `json:"agent"`
	Description string `json:"description,omitempty"`
}

// NewAgentsList returns agents_list of the agent cfg describes: the targets
// its spec.delegates edges allow. allowAny is always false: an edge names
// one Agent (the schema has no "*"), so every target is listed.
func NewAgentsList(cfg Config) tool.Tool {
	return tool.New(AgentsListName, "List the agent ids you may start with sessions_spawn (agentId) or hand tasks to with delegate (target)",
		func(context.Context, tool.Env, struct{}) (tool.Result, error) {
			out := struct {
				Requester string        `json:"requester"`
				Agents    []ListedAgent `json:"agents"`
				AllowAny  bool          `json:"allowAny"`
			}{Requester: cfg.Agent, Agents: []ListedAgent{}}
			for _, e := range cfg.Edges {
				out.Agents = append(out.Agents, ListedAgent{ID: e.Name, Agent: e.AgentRef.Name, Description: e.Description})
			}
			return jsonResult(out)
		}, tool.ReadOnly())
}

// SpawnArgs are the arguments of sessions_spawn.
type SpawnArgs struct {
	Task              string `json:"task" jsonschema:"a clear, self-contained task; the sub-agent sees only this, never this conversation"`
	Label             string `json:"label,omitempty" jsonschema:"a short name for the run (at most 80 characters), shown with its result"`
	AgentID           string `json:"agentId,omitempty" jsonschema:"the agent to run it (agents_list shows the ids); may be left out when you have exactly one"`
	Model             string `json:"model,omitempty" jsonschema:"not available: the sub-agent always runs on its own Agent's model"`
	RunTimeoutSeconds int    `json:"runTimeoutSeconds,omitempty" jsonschema:"stop the run after this many seconds (0, the default: no limit of its own)"`
	Cleanup           string `json:"cleanup,omitempty" jsonschema:"keep (default): keep the run's session; delete: delete it once the run has ended"`
}

// Spawned is sessions_spawn's answer.
type Spawned struct {
	Status          string `json:"status"`
	RunID           string `json:"runId"`
	ChildSessionKey string `json:"childSessionKey"`
	AgentID         string `json:"agentId"`
	Label           string `json:"label,omitempty"`
}

// NewSpawn returns sessions_spawn of the agent cfg describes: a background
// delegate run (the same agent_runs record, reserved completion slot and
// continuation turn) that returns accepted at once; the continuation turn
// is the announce step, whose reply goes to the chat unless it is exactly
// ANNOUNCE_SKIP.
func NewSpawn(cfg Config) tool.Tool {
	if cfg.Active == nil {
		cfg.Active = NewActiveRuns()
	}
	d := &delegator{cfg: cfg}
	return tool.New(SpawnName, "Start a sub-agent run in the background on a task of its own and return at once (status accepted). "+
		"When it ends, its result comes back to this chat as a message of its own, which you announce to the user (or answer "+
		"exactly ANNOUNCE_SKIP to stay silent). agents_list shows the agents you may start.",
		d.spawn, tool.Enum("cleanup", CleanupKeep, CleanupDelete))
}

func (d *delegator) spawn(ctx context.Context, env tool.Env, a SpawnArgs) (tool.Result, error) {
	if d.cfg.Runner == nil {
		return tool.Errorf("error: sub-agent runs are not available here: %s", d.cfg.Unavailable), nil
	}
	task, label := strings.TrimSpace(a.Task), strings.TrimSpace(a.Label)
	switch {
	case Depth(ctx) > 0:
		return tool.Errorf("error: a sub-agent cannot use sessions_spawn; do the task yourself or delegate in the foreground"), nil
	case d.cfg.Background == nil:
		return tool.Errorf("error: sessions_spawn is not available here: background runs are not; use delegate (foreground) instead"), nil
	case env.SessionID == "" || strings.HasPrefix(env.SessionID, protocol.ChannelStateless+":"):
		return tool.Errorf("error: a spawned run announces its result in a later turn of this chat, and this turn has no stored chat " +
			"(a stateless request); use delegate (foreground) instead"), nil
	case task == "":
		return tool.Errorf("error: give a task"), nil
	case utf8.RuneCountInString(label) > maxLabelChars:
		return tool.Errorf("error: label has %d characters; at most %d", utf8.RuneCountInString(label), maxLabelChars), nil
	case strings.TrimSpace(a.Model) != "":
		return tool.Errorf("error: model overrides are not available: a sub-agent runs on its own Agent's model (leave model out)"), nil
	case a.RunTimeoutSeconds < 0:
		return tool.Errorf("error: runTimeoutSeconds must be 0 (no limit) or more, got %d", a.RunTimeoutSeconds), nil
	}
	del := false
	switch a.Cleanup {
	case "", CleanupKeep:
	case CleanupDelete:
		del = true
	default:
		return tool.Errorf("error: cleanup %q is not keep or delete", a.Cleanup), nil
	}
	target := strings.TrimSpace(a.AgentID)
	if target == "" && len(d.cfg.Edges) == 1 {
		target = d.cfg.Edges[0].Name
	}
	it := Item{Target: target, Task: task}
	req, msg, err := d.request(ctx, env, it)
	if err != nil {
		return tool.Result{}, err
	}
	if msg != "" {
		return tool.Errorf("error: agentId: %s", msg), nil
	}
	req.Spawn = &Spawn{Label: label, TimeoutSeconds: a.RunTimeoutSeconds, Delete: del}
	res := d.startOne(ctx, env, it, req)
	if res.Status != string(store.RunRunning) {
		return tool.Errorf("error: the run could not start: %s", res.Error), nil
	}
	child := session.ID{Channel: protocol.ChannelDelegate, ChatID: req.RunID, DialogID: session.DefaultDialog}
	return jsonResult(Spawned{Status: "accepted", RunID: req.RunID, ChildSessionKey: child.String(), AgentID: target, Label: label})
}
