package execserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/picobot/picobot/runtime/tool"
)

// Sandboxed returns t run by the exec server instead of in the runtime: the
// file tools, so that the files they may open are decided by the kernel for
// the sandbox container's user (which holds no credential and cannot read
// the runtime's files or /proc), not only by their own path checks. The
// server runs its own copy of the tool of the same name (Config.Tools),
// reaching readOnly and readWrite besides the workspace (the Agent's
// spec.tools.fs.allowedPaths). Name, schema and traits are t's.
func Sandboxed(c *Client, t tool.Tool, readOnly, readWrite []string) tool.Tool {
	return &sandboxedTool{Tool: t, c: c, readOnly: readOnly, readWrite: readWrite}
}

type sandboxedTool struct {
	tool.Tool
	c                   *Client
	readOnly, readWrite []string
}

// Run implements tool.Tool.
func (s *sandboxedTool) Run(ctx context.Context, env tool.Env, args json.RawMessage) (tool.Result, error) {
	if env.Workspace == "" {
		return tool.Errorf("error: no workspace is set for this session."), nil
	}
	if err := ShareWorkspace(env.Workspace); err != nil {
		return tool.Result{}, err
	}
	return s.c.CallTool(ctx, Request{Workspace: env.Workspace, ReadOnly: s.readOnly, ReadWrite: s.readWrite,
		Tool: &ToolCall{Name: s.Name(), Args: args, SessionID: env.SessionID, Agent: env.Agent}})
}

// CallTool runs req.Tool in the sandbox container and returns its result.
// Arguments that do not fit the tool come back as a *tool.ArgumentError, as
// from the tool itself; ending ctx ends the call.
func (c *Client) CallTool(ctx context.Context, req Request) (tool.Result, error) {
	if req.Tool == nil {
		return tool.Result{}, errors.New("failed to call a tool in the sandbox container: no tool named")
	}
	raw, err := c.callToolRaw(ctx, req)
	if err != nil {
		return tool.Result{}, err
	}
	where := "sandbox container"
	if c.remote != nil {
		where = "sandbox pod"
	}
	return decodeAnswer(req.Tool.Name, where, raw)
}

// callToolRaw runs req.Tool and returns the server's answer (a result or
// an error message) as it was sent, undecoded: the relays between the
// runtime and a sandbox pod pass it on as they got it, so a large result
// (a file's bytes) is decoded once, by the caller of CallTool.
func (c *Client) callToolRaw(ctx context.Context, req Request) ([]byte, error) {
	name := req.Tool.Name
	if c.remote != nil {
		return c.remote.callToolRaw(ctx, req)
	}
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	// The server ends the call when the connection closes.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if err := sendLarge(conn, req); err != nil {
		return nil, fmt.Errorf("failed to call %s in the sandbox container: %w", name, err)
	}
	raw, fds, err := receiveRaw(conn)
	closeAll(fds)
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("failed to call %s in the sandbox container: %w", name, ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("failed to call %s in the sandbox container: lost the exec server: %w", name, err)
	}
	return raw, nil
}

// decodeAnswer is the result of tool name's answer raw from the sandbox
// (where: "sandbox container" or "sandbox pod").
func decodeAnswer(name, where string, raw []byte) (tool.Result, error) {
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		return tool.Result{}, fmt.Errorf("failed to call %s in the %s: failed to decode the answer: %w", name, where, err)
	}
	switch {
	case m.Type == typeResult && m.Result != nil:
		return m.Result.toolResult(), nil
	case m.Type == typeError && m.Argument:
		return tool.Result{}, &tool.ArgumentError{Tool: name, Err: errors.New(m.Error)}
	case m.Type == typeError:
		return tool.Result{}, fmt.Errorf("failed to call %s in the %s: %s", name, where, m.Error)
	}
	return tool.Result{}, fmt.Errorf("failed to call %s in the %s: unexpected answer %q", name, where, m.Type)
}

// ShareWorkspace opens a workspace the runtime created (0700) to the pod's
// group, which the sandbox container's user shares (fsGroup): read, write
// and setgid on the workspace, so what either side creates there keeps the
// group, and passage (g+x) through the runtime's folders above it, up to
// the first one the group can already pass (the volume's root).
func ShareWorkspace(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("failed to share workspace %q with the sandbox container: %w", dir, err)
	}
	if want := fi.Mode() | 0o070 | os.ModeSetgid; fi.Mode() != want {
		if err := os.Chmod(dir, want); err != nil {
			return fmt.Errorf("failed to share workspace %q with the sandbox container: %w", dir, err)
		}
	}
	for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("failed to let the sandbox container reach workspace %q: %w", dir, err)
		}
		if fi.Mode().Perm()&0o010 != 0 {
			return nil
		}
		if err := os.Chmod(d, fi.Mode()|0o010); err != nil {
			return fmt.Errorf("failed to let the sandbox container reach workspace %q: %w", dir, err)
		}
	}
	return nil
}

// wireResult is a tool's result as the exec server sends it.
func wireResult(res tool.Result) *ToolResult {
	out := &ToolResult{Content: res.Content, IsError: res.IsError}
	for _, a := range res.Artifacts {
		out.Artifacts = append(out.Artifacts, ToolArtifact{Name: a.Name, MediaType: a.MediaType, Data: a.Data, PresentToUser: a.PresentToUser})
	}
	return out
}

// toolResult is the result a tool called in the sandbox returned.
func (r *ToolResult) toolResult() tool.Result {
	out := tool.Result{Content: r.Content, IsError: r.IsError}
	for _, a := range r.Artifacts {
		out.Artifacts = append(out.Artifacts, tool.Artifact{Name: a.Name, MediaType: a.MediaType, Data: a.Data, PresentToUser: a.PresentToUser})
	}
	return out
}
