// Package localrun runs scheduled runs in-process: each run is a fresh
// session of the target agent (as runtime/agenthost builds it), whose turn runs
// with the run's tool set — the agent's tools minus send_message (delivery
// is the scheduler's) plus complete_scheduled_run, with delegation forced
// to the foreground. Embedded mode uses it as its scheduler.Runner; a
// cluster session pod can use it to execute a run it was handed.
package localrun

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/audit"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// Channel is the session channel of scheduled runs: a run's session id is
// "cron:<job key>/<run id>:default", so no two runs share history.
const Channel = protocol.ChannelCron

// Tool names the run's tool set adds and removes.
const (
	CompleteTool = "complete_scheduled_run"
	sendMessage  = "send_message"
	delegateTool = "delegate"
)

// maxMessage bounds the message of complete_scheduled_run.
const maxMessage = 4000

// instructions extend the agent's system prompt in a run.
const instructions = `## Scheduled run
This is a scheduled run, not a chat: there is no chat history and nobody reads your replies. The task is the user message and carries its own context. Do it with your tools, then call complete_scheduled_run exactly once: ok (nothing needs attention), alert (the user must know something), failed (you could not do the task) or refused (you will not do it). Only that call's message reaches the user, by the job's delivery policy; you cannot send messages yourself. Delegation runs in the foreground.`

// Agent is what a run needs of its target agent: what runtime/agenthost
// built for it (the loop with the agent's tools, and the config of its
// session manager).
type Agent struct {
	Name    string
	Loop    *agent.Loop
	Session session.Config
}

// Agents finds an agent by name; false when there is none.
type Agents func(name string) (Agent, bool)

// Runner implements scheduler.Runner with in-process turns.
type Runner struct {
	agents    Agents
	workspace func(tenant, agent string) func(session.ID) string
	slots     *slots
	tool      tool.Tool

	mu       sync.Mutex
	managers map[managerKey]*session.Manager
}

// managerKey names the derived manager of an agent's runs in a tenant; the
// agent's loop stands for the agent (a rebuilt agent has a new loop).
type managerKey struct {
	loop   *agent.Loop
	tenant string
}

var _ scheduler.Runner = (*Runner)(nil)

// Option adjusts a Runner.
type Option func(*Runner)

// WithWorkspace gives runs of a tenant's agent their working folders (a
// host serving several tenants keeps their workspaces apart); the agent's
// own Workspace when not set.
func WithWorkspace(fn func(tenant, agent string) func(session.ID) string) Option {
	return func(r *Runner) { r.workspace = fn }
}

// New returns a runner for the agents agents finds.
func New(agents Agents, opts ...Option) *Runner {
	s := &slots{byID: map[string]*slot{}}
	r := &Runner{agents: agents, slots: s, tool: newCompleteTool(s), managers: map[managerKey]*session.Manager{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Run implements scheduler.Runner: one turn of a fresh session, whose
// outcome is the run's single complete_scheduled_run call (failed when it
// made none or several).
func (r *Runner) Run(ctx context.Context, req scheduler.RunRequest) (scheduler.RunResult, error) {
	built, ok := r.agents(req.Agent)
	if !ok {
		hint := "name an existing agent in the job's agentRef (agent_id)"
		if req.Agent == scheduler.RootAgent {
			hint = fmt.Sprintf("the job names no agent, so it runs on the root agent: mark one with spec.role: root, create an agent named %q or name one in the job's agentRef (agent_id)", scheduler.RootAgent)
		}
		return scheduler.RunResult{}, fmt.Errorf("no agent named %q in tenant %q; %s: %w", req.Agent, req.Tenant, hint, scheduler.ErrUnknownAgent)
	}
	mgr, err := r.manager(built, req.Tenant)
	if err != nil {
		return scheduler.RunResult{}, err
	}
	chat := req.Job + "/" + req.RunID
	sid := session.ID{Channel: Channel, ChatID: chat, DialogID: session.DefaultDialog}.String()
	sl := r.slots.open(sid)
	defer r.slots.close(sid)
	text := fmt.Sprintf("[Scheduled run of %q for %s]\n\n%s", req.JobName, req.ScheduledTime.UTC().Format("2006-01-02T15:04:05Z07:00"), req.Prompt)
	// The run's tool calls are the CronJob's in the audit log.
	ctx = audit.WithActor(ctx, "cron:"+req.Job)
	reply, runErr := mgr.Handle(ctx, session.Inbound{Channel: Channel, ChatID: chat, MessageID: req.RunID, Text: text})
	if reply.SessionID != "" {
		sid = reply.SessionID
	}
	res := scheduler.RunResult{SessionID: sid}
	calls, outcome, message := sl.result()
	switch {
	case calls > 1:
		res.Outcome = store.OutcomeFailed
		res.Message = fmt.Sprintf("complete_scheduled_run was called %d times; a run completes exactly once (the first call said %s: %s)",
			calls, outcome, message)
	case calls == 1:
		res.Outcome, res.Message = outcome, message
	case runErr != nil:
		return res, fmt.Errorf("the run's turn failed: %w", runErr)
	default:
		res.Outcome = store.OutcomeFailed
		res.Message = "The run ended without calling complete_scheduled_run; plain final text is not an outcome"
		if final := strings.TrimSpace(reply.Text); final != "" {
			res.Message += fmt.Sprintf(" (its final text: %q)", excerpt(final, 200))
		}
	}
	return res, nil
}

func excerpt(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// manager derives, once per built agent, the session manager of its runs:
// the agent's session config with the run's tools and instructions.
func (r *Runner) manager(b Agent, tenant string) (*session.Manager, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := managerKey{loop: b.Loop, tenant: tenant}
	if m := r.managers[key]; m != nil {
		return m, nil
	}
	if b.Loop == nil || b.Loop.Tools == nil {
		return nil, fmt.Errorf("agent %q has no agent loop to run with", b.Name)
	}
	tools := b.Loop.Tools.Filter(func(name string) bool {
		return name != sendMessage && name != CompleteTool && name != delegateTool
	})
	if d, ok := b.Loop.Tools.Get(delegateTool); ok {
		if err := tools.Register(foreground{Tool: d}); err != nil {
			return nil, fmt.Errorf("failed to build the run tools of agent %q: %w", b.Name, err)
		}
	}
	if err := tools.Register(r.tool); err != nil {
		return nil, fmt.Errorf("failed to build the run tools of agent %q: %w", b.Name, err)
	}
	cfg := b.Session.Derived(tools, instructions)
	if r.workspace != nil {
		cfg.Workspace = r.workspace(tenant, b.Name)
	}
	m := session.NewManager(cfg)
	r.managers[key] = m
	return m, nil
}

// foreground is the delegate tool of a run: every delegation runs in the
// foreground, so the run's outcome covers its sub-agents' work and nothing
// reports back after the run has ended.
type foreground struct{ tool.Tool }

// Run implements tool.Tool.
func (f foreground) Run(ctx context.Context, env tool.Env, args json.RawMessage) (tool.Result, error) {
	var m map[string]any
	if json.Unmarshal(args, &m) == nil {
		if mode, ok := m["mode"]; ok && mode != "foreground" {
			m["mode"] = "foreground"
			if b, err := json.Marshal(m); err == nil {
				args = b
			}
		}
	}
	return f.Tool.Run(ctx, env, args)
}

// slots hold the complete_scheduled_run calls of the runs in progress, by
// session id.
type slots struct {
	mu   sync.Mutex
	byID map[string]*slot
}

type slot struct {
	mu      sync.Mutex
	calls   int
	outcome store.CronOutcome
	message string
}

func (s *slots) open(sid string) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &slot{}
	s.byID[sid] = sl
	return sl
}

func (s *slots) close(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sid)
}

func (s *slots) get(sid string) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[sid]
}

func (sl *slot) result() (int, store.CronOutcome, string) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.calls, sl.outcome, sl.message
}

type completeArgs struct {
	Outcome string `json:"outcome" jsonschema:"ok, alert, failed or refused"`
	Message string `json:"message" jsonschema:"what the user reads"`
}

const completeDescription = "End this scheduled run. Call exactly once with the outcome (ok: nothing needs attention; alert: the user must know; " +
	"failed: the task could not be done; refused: you will not do it) and the message for the user. Plain text is not an outcome."

func newCompleteTool(s *slots) tool.Tool {
	return tool.New(CompleteTool, completeDescription, func(_ context.Context, env tool.Env, a completeArgs) (tool.Result, error) {
		sl := s.get(env.SessionID)
		if sl == nil {
			return tool.Errorf("error: complete_scheduled_run works only in a scheduled run, and this session is not one."), nil
		}
		msg := strings.TrimSpace(a.Message)
		switch n := utf8.RuneCountInString(msg); {
		case msg == "":
			return tool.Errorf("error: message is empty; say in a sentence or two what the run found or did."), nil
		case n > maxMessage:
			return tool.Errorf("error: message has %d characters; keep it under %d.", n, maxMessage), nil
		}
		sl.mu.Lock()
		defer sl.mu.Unlock()
		sl.calls++
		if sl.calls > 1 {
			return tool.Errorf("error: this run was already completed (outcome %s). A run completes exactly once, so it is now recorded as failed. End your turn.", sl.outcome), nil
		}
		sl.outcome, sl.message = store.CronOutcome(a.Outcome), msg
		return tool.Text(fmt.Sprintf("Recorded outcome %s. The scheduler delivers it by the job's policy. End your turn now.", a.Outcome)), nil
	}, tool.Enum("outcome", string(store.OutcomeOK), string(store.OutcomeAlert), string(store.OutcomeFailed), string(store.OutcomeRefused)))
}
