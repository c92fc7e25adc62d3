package agenthost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// Complete runs one stateless turn of the agent on exactly req's messages:
// no session, nothing of the conversation stored. Its tools work in a
// scratch workspace (one of the agent's session workspaces, so the same
// permissions apply) removed after the turn; sink, when set, gets the
// turn's events. Embedded mode calls it in the request's goroutine, a
// cluster session pod for a request the gateway queued.
func (b *Built) Complete(ctx context.Context, req protocol.Stateless, stream bool, sink func(turn.Event)) (protocol.Outcome, error) {
	if err := b.CheckClientTools(req.Tools); err != nil {
		return protocol.Outcome{}, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	id := session.ID{Channel: protocol.ChannelStateless, ChatID: hex.EncodeToString(rnd[:]), DialogID: "default"}
	workspace := b.Session.Workspace(id)
	defer func() {
		_ = os.RemoveAll(workspace)
		if b.warm != nil {
			b.warm.CloseWorkspace(workspace)
		}
	}()
	system := b.Session.System
	if b.Session.Prompt != nil && len(req.Messages) > 0 {
		system = session.JoinSections(system, b.Session.Prompt(ctx, session.PromptInput{Text: lastUser(req.Messages)}))
	}
	out, err := b.Loop.Run(ctx, agent.Input{
		System: session.JoinSections(system, req.System), History: req.Messages, Stream: stream, Sink: sink,
		Settings: req.Settings, ClientTools: req.Tools,
		Env: tool.Env{Workspace: workspace, SessionID: id.String(), Agent: b.Name},
	})
	if err != nil {
		return protocol.Outcome{}, err
	}
	return protocol.Outcome{Text: out.Final, ToolCalls: out.ClientCalls}, nil
}

// CheckClientTools refuses client tools when the agent declines them, and
// any named like one of its own.
func (b *Built) CheckClientTools(defs []llm.ToolDef) error {
	if len(defs) == 0 {
		return nil
	}
	if b.noClientTools {
		return &protocol.CodedError{Code: protocol.CodeBadRequest, Err: protocol.ErrClientToolsRefused}
	}
	if b.Loop == nil || b.Loop.Tools == nil {
		return nil
	}
	for _, d := range defs {
		if _, clash := b.Loop.Tools.Get(d.Name); clash {
			return &protocol.CodedError{Code: protocol.CodeBadRequest, Err: fmt.Errorf("%w: %q; rename it", protocol.ErrClientToolClash, d.Name)}
		}
	}
	return nil
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
