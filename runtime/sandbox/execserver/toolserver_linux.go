//go:build linux

package execserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/tool"
)

// maxCachedToolSets bounds the tool sets kept by allowed paths; past it the
// cache starts over.
const maxCachedToolSets = 16

// callTool runs a tool call and answers it. The connection closing ends the
// call (its context).
func (s *Server) callTool(conn *net.UnixConn, req Request) {
	call := req.Tool
	spec, err := s.checkTool(req)
	if err != nil {
		_ = send(conn, message{Type: typeError, Error: err.Error()})
		return
	}
	t := s.tool(call.Name, req.ReadOnly, req.ReadWrite)
	if t == nil {
		_ = send(conn, message{Type: typeError, Error: fmt.Sprintf("the sandbox runs no tool %q", call.Name)})
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Nothing more comes from the runtime: a read ends when it closes.
		var m message
		fds, _ := receive(conn, &m)
		closeAll(fds)
		cancel()
	}()
	res, err := runConfined(ctx, spec, t, tool.Env{Workspace: spec.Workspace, SessionID: call.SessionID, Agent: call.Agent}, call.Args)
	switch {
	case tool.IsArgumentError(err):
		var ae *tool.ArgumentError
		errors.As(err, &ae)
		_ = send(conn, message{Type: typeError, Error: ae.Err.Error(), Argument: true})
	case err != nil:
		_ = send(conn, message{Type: typeError, Error: err.Error()})
	default:
		if err := sendLarge(conn, message{Type: typeResult, Result: &ToolResult{Content: res.Content, IsError: res.IsError}}); err != nil {
			s.cfg.Log.Warn("Exec server failed to answer a tool call", "tool", call.Name, "err", err)
		}
	}
}

// checkTool validates a tool call: a named tool and a workspace inside the
// server's.
func (s *Server) checkTool(req Request) (sandbox.Spec, error) {
	if req.Tool.Name == "" {
		return sandbox.Spec{}, errors.New("no tool named")
	}
	if len(req.Argv) > 0 || req.TTY != nil {
		return sandbox.Spec{}, errors.New("a tool call runs no program")
	}
	ws := filepath.Clean(req.Workspace)
	if !filepath.IsAbs(ws) || !within(ws, s.cfg.Workspace) {
		return sandbox.Spec{}, fmt.Errorf("workspace %q is not inside the sandbox's workspace folder %q", req.Workspace, s.cfg.Workspace)
	}
	spec := sandbox.Spec{Workspace: ws, ReadOnly: req.ReadOnly, ReadWrite: req.ReadWrite}
	if err := spec.Prepare(); err != nil {
		return sandbox.Spec{}, err
	}
	return spec, nil
}

// tool returns the server's tool name for an Agent that may reach readOnly
// and readWrite, nil when the server has none of that name.
func (s *Server) tool(name string, readOnly, readWrite []string) tool.Tool {
	if s.cfg.Tools == nil {
		return nil
	}
	key := strings.Join(readOnly, "\x00") + "\x01" + strings.Join(readWrite, "\x00")
	s.toolsMu.Lock()
	defer s.toolsMu.Unlock()
	set, ok := s.tools[key]
	if !ok {
		if s.tools == nil || len(s.tools) >= maxCachedToolSets {
			s.tools = map[string]map[string]tool.Tool{}
		}
		set = map[string]tool.Tool{}
		for _, t := range s.cfg.Tools(readOnly, readWrite) {
			set[t.Name()] = t
		}
		s.tools[key] = set
	}
	return set[name]
}

// runConfined runs the tool on an OS thread confined for the call, as a
// program is forked from one (sandbox.ConfineThread: Landlock limits it to
// the workspace, the opted-in paths and system folders read-only; no
// capabilities). The tool's own opens happen on that thread: its goroutine
// is locked to it, and Go starts new threads from a clean template thread,
// never from a locked one. The thread ends with the call. A panic of the
// tool is the call's error, not the server's end.
func runConfined(ctx context.Context, spec sandbox.Spec, t tool.Tool, env tool.Env, args json.RawMessage) (tool.Result, error) {
	type result struct {
		res tool.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: Go ends the confined thread with this goroutine
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("tool %s failed: %v", t.Name(), r)}
			}
		}()
		if _, err := sandbox.ConfineThread(spec); err != nil {
			done <- result{err: fmt.Errorf("failed to confine the call of %s: %w", t.Name(), err)}
			return
		}
		res, err := t.Run(ctx, env, args)
		done <- result{res: res, err: err}
	}()
	r := <-done
	return r.res, r.err
}
