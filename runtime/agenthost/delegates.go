package agenthost

import (
	"context"
	"fmt"
	"slices"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// subAgentTool is the tool sub-agents never get: the plan belongs to the
// session that delegated.
const subAgentTool = "todo"

// subAgentInstructions close a sub-agent run's system prompt.
const subAgentInstructions = `## Delegated task
Another agent handed you the task in the user message; it carries all the context you get (you do not see that agent's conversation). Do it with your tools, then answer with the result: your final answer is returned to that agent, nobody else reads it.`

// backgroundInstructions follow subAgentInstructions in a background run.
const backgroundInstructions = `
This run is in the background: the other agent goes on meanwhile. If it must know something before your final answer, use emit_signal.`

// LocalDelegates runs delegated tasks in this process (embedded mode): each
// a fresh session of the target agent, built from its own manifest with its
// own model and keys, whose tools are its own minus todo, narrowed to the
// call's allowed_tools.
type LocalDelegates struct {
	// Find returns a built agent by name.
	Find func(name string) (*Built, bool)
	// Workspace gives the runs of a tenant's agent their folders; the
	// agent's own Workspace when nil.
	Workspace func(tenant, agent string) func(session.ID) string
}

var _ delegate.Runner = (*LocalDelegates)(nil)

func (l *LocalDelegates) find(name string) (*Built, error) {
	b, ok := l.Find(name)
	if !ok || b.Loop == nil || b.Loop.Tools == nil {
		return nil, fmt.Errorf("no agent %q: %w", name, delegate.ErrUnknownAgent)
	}
	return b, nil
}

// Tools implements delegate.Runner.
func (l *LocalDelegates) Tools(_ context.Context, agent string) ([]string, error) {
	b, err := l.find(agent)
	if err != nil {
		return nil, err
	}
	return SubAgentTools(b.Loop.Tools.Names()), nil
}

// SubAgentTools are the tools a sub-agent run of an agent with tools may
// get: all but todo.
func SubAgentTools(tools []string) []string {
	return slices.DeleteFunc(slices.Clone(tools), func(n string) bool { return n == subAgentTool })
}

// SubAgent is the session config of one sub-agent run of b: its own tools
// minus todo, narrowed to tools when not nil, and a system prompt that says
// the answer goes back to the delegating agent. Both modes run delegated
// tasks on it: in-process (LocalDelegates) and in the target's own session
// pods (runtime/cluster).
func (b *Built) SubAgent(tools []string) session.Config {
	cfg, _ := b.subAgent(tools, false) // only a background run registers a tool, which can fail
	return cfg
}

// SubAgentRun is SubAgent for a run of the given mode: a background run
// also gets emit_signal (a session pod serving a background run's chat).
func (b *Built) SubAgentRun(tools []string, background bool) (session.Config, error) {
	return b.subAgent(tools, background)
}

// subAgent is SubAgent; a background run also gets emit_signal (every
// background run, and nothing else, may signal its parent).
func (b *Built) subAgent(tools []string, background bool) (session.Config, error) {
	reg := b.Loop.Tools.Filter(func(n string) bool {
		return n != subAgentTool && (tools == nil || slices.Contains(tools, n))
	})
	instructions := subAgentInstructions
	if background {
		if err := reg.Register(delegate.NewSignal(b.Session.Store)); err != nil {
			return session.Config{}, fmt.Errorf("failed to give the run emit_signal: %w", err)
		}
		instructions += backgroundInstructions
	}
	return b.Session.Derived(reg, instructions), nil
}

// Run implements delegate.Runner.
func (l *LocalDelegates) Run(ctx context.Context, req delegate.Request) (string, string, error) {
	b, err := l.find(req.Agent)
	if err != nil {
		return "", "", err
	}
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return "", "", fmt.Errorf("failed to run a task of agent %q: %w", req.Agent, err)
	}
	cfg, err := b.subAgent(req.Tools, req.Mode == delegate.ModeBackground)
	if err != nil {
		return "", "", fmt.Errorf("failed to run %q: %w", req.RunID, err)
	}
	if l.Workspace != nil {
		cfg.Workspace = l.Workspace(tenant, req.Agent)
	}
	m := session.NewManager(cfg)
	reply, err := m.Handle(ctx, session.Inbound{Channel: protocol.ChannelDelegate, ChatID: req.RunID, MessageID: req.RunID, Text: req.Text})
	if reply.SessionID != "" {
		_ = m.Release(context.WithoutCancel(ctx), reply.SessionID) // the run's session has nothing more to do
	}
	if err != nil {
		return "", reply.SessionID, fmt.Errorf("the run of agent %q failed: %w", req.Agent, err)
	}
	return reply.Text, reply.SessionID, nil
}
