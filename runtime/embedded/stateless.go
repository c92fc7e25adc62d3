package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/tool"
)

// Complete implements gateway.StatelessBackend: one turn of the agent on
// exactly the client's messages, in the request's goroutine, with no
// session, no bus message and nothing of the conversation stored. Its
// tools work in a scratch workspace removed after the turn.
func (r *Runtime) Complete(ctx context.Context, c gateway.Completion) (gateway.Completed, error) {
	a, ta, err := r.scope(ctx, c.Agent)
	if err != nil {
		return gateway.Completed{}, err
	}
	if !a.info.Ready {
		return gateway.Completed{}, gateway.Errorf(gateway.CodeNoModel, "agent %s has no usable model (%s): %s", a.name, a.info.Reason, a.info.Message)
	}
	if err := a.checkClientTools(c.Tools); err != nil {
		return gateway.Completed{}, err
	}
	cfg := a.Session
	workspace, err := r.scratchWorkspace(ta)
	if err != nil {
		return gateway.Completed{}, err
	}
	defer func() { _ = os.RemoveAll(workspace) }()
	system := cfg.System
	if cfg.Prompt != nil && len(c.Messages) > 0 {
		system = joinSections(system, cfg.Prompt(ctx, session.PromptInput{Text: lastUser(c.Messages)}))
	}
	out, err := a.Loop.Run(ctx, agent.Input{
		System: joinSections(system, c.System), History: c.Messages, Stream: c.Stream, Sink: c.Sink,
		Settings: c.Settings, ClientTools: c.Tools,
		Env: tool.Env{Workspace: workspace, SessionID: filepath.Base(workspace), Agent: a.name},
	})
	if err != nil {
		ce, known := sessionrt.Coded(err)
		if !known {
			r.log.Error("Stateless turn failed", "agent", a.name, "err", err)
		}
		return gateway.Completed{}, ce
	}
	return gateway.Completed{Text: out.Final, ToolCalls: out.ClientCalls}, nil
}

// checkClientTools refuses client tools when the agent declines them, and
// any named like one of its own.
func (a *agentRuntime) checkClientTools(defs []llm.ToolDef) error {
	if len(defs) == 0 {
		return nil
	}
	if ct := a.spec.Spec.Tools; ct != nil && ct.ClientTools != nil && !*ct.ClientTools {
		return &gateway.CodedError{Code: gateway.CodeBadRequest, Err: gateway.ErrClientToolsRefused}
	}
	if a.Loop.Tools == nil {
		return nil
	}
	for _, d := range defs {
		if _, clash := a.Loop.Tools.Get(d.Name); clash {
			return &gateway.CodedError{Code: gateway.CodeBadRequest, Err: fmt.Errorf("%w: %q; rename it", gateway.ErrClientToolClash, d.Name)}
		}
	}
	return nil
}

// scratchWorkspace makes a fresh folder for one stateless turn beside the
// tenant's session workspaces of the agent.
func (r *Runtime) scratchWorkspace(ta *tenantAgent) (string, error) {
	base := filepath.Join(r.opts.StateDir, "workspaces", ta.tenant, ta.agent)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("failed to create workspace folder %q: %w", base, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(base, "stateless-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("failed to create workspace %q: %w", dir, err)
	}
	return dir, nil
}

// lastUser is the text of the last user message (memory recall's query).
func lastUser(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

// joinSections joins two prompt sections, either of which may be empty.
func joinSections(a, b string) string {
	switch {
	case b == "":
		return a
	case a == "":
		return b
	}
	return a + "\n\n" + b
}

var _ gateway.StatelessBackend = (*Runtime)(nil)
