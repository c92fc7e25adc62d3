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
	"slices"
	"strings"
	"sync"
	"time"

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
	res, err := s.runConfined(ctx, spec, t, tool.Env{Workspace: spec.Workspace, SessionID: call.SessionID, Agent: call.Agent}, call.Args)
	switch {
	case tool.IsArgumentError(err):
		var ae *tool.ArgumentError
		errors.As(err, &ae)
		_ = send(conn, message{Type: typeError, Error: ae.Err.Error(), Argument: true})
	case err != nil:
		_ = send(conn, message{Type: typeError, Error: err.Error()})
	default:
		if err := sendLarge(conn, message{Type: typeResult, Result: wireResult(res)}); err != nil {
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
	if err := s.makeWorkspace(ws); err != nil {
		return sandbox.Spec{}, err
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

// runConfined runs the tool on an OS thread confined for its spec, as a
// program is forked from one (sandbox.ConfineThread: Landlock limits it to
// the workspace, the opted-in paths and system folders read-only; no
// capabilities). The tool's own opens happen on that thread: its goroutine
// is locked to it, and Go starts new threads from a clean template thread,
// never from a locked one. A panic of the tool is the call's error, not the
// server's end.
func (s *Server) runConfined(ctx context.Context, spec sandbox.Spec, t tool.Tool, env tool.Env, args json.RawMessage) (tool.Result, error) {
	type result struct {
		res tool.Result
		err error
	}
	done := make(chan result, 1)
	job := func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("tool %s failed: %v", t.Name(), r)}
			}
		}()
		res, err := t.Run(ctx, env, args)
		done <- result{res: res, err: err}
	}
	if err := s.confined.run(spec, job); err != nil {
		return tool.Result{}, fmt.Errorf("failed to confine the call of %s: %w", t.Name(), err)
	}
	r := <-done
	return r.res, r.err
}

// confinedThreads keeps threads confined for a spec between calls:
// confining one (a new thread, a Landlock ruleset) costs about a third of a
// millisecond, and an Agent's calls all share one spec. A thread confined
// for a spec only ever runs calls of that same spec (the same workspace and
// allowed paths, so the same restrictions); it ends after idleThread
// without work, and at most maxIdleThreads per spec wait.
type confinedThreads struct {
	mu   sync.Mutex
	idle map[string][]*confinedThread
}

const (
	idleThread     = time.Minute
	maxIdleThreads = 4
)

// confinedThread is a goroutine locked to a confined OS thread, running
// the jobs it is given.
type confinedThread struct {
	jobs chan func()
}

// run runs job on a thread confined for spec: an idle one, or a new one.
func (c *confinedThreads) run(spec sandbox.Spec, job func()) error {
	key := specKey(spec)
	c.mu.Lock()
	var th *confinedThread
	if list := c.idle[key]; len(list) > 0 {
		th, c.idle[key] = list[len(list)-1], list[:len(list)-1]
	}
	c.mu.Unlock()
	if th == nil {
		var err error
		if th, err = c.start(key, spec); err != nil {
			return err
		}
	}
	th.jobs <- func() {
		job()
		c.release(key, th)
	}
	return nil
}

// start confines a new thread for spec.
func (c *confinedThreads) start(key string, spec sandbox.Spec) (*confinedThread, error) {
	th := &confinedThread{jobs: make(chan func())}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: Go ends the confined thread with this goroutine
		if _, err := sandbox.ConfineThread(spec); err != nil {
			ready <- err
			return
		}
		ready <- nil
		idle := time.NewTimer(idleThread)
		defer idle.Stop()
		for {
			select {
			case job := <-th.jobs:
				job()
				idle.Reset(idleThread)
			case <-idle.C:
				if c.retire(key, th) {
					return
				}
			}
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return th, nil
}

// release puts a thread that finished a job back in the idle list, or
// tells it to end when enough wait.
func (c *confinedThreads) release(key string, th *confinedThread) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*confinedThread{}
	}
	if len(c.idle[key]) < maxIdleThreads {
		c.idle[key] = append(c.idle[key], th)
		return
	}
	// Ends its goroutine (and so its thread) after this job.
	go func() { th.jobs <- runtime.Goexit }()
}

// retire takes an idle thread out of the list so it can end; false when a
// job has just taken it.
func (c *confinedThreads) retire(key string, th *confinedThread) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.idle[key]
	i := slices.Index(list, th)
	if i < 0 {
		return false
	}
	c.idle[key] = slices.Delete(list, i, i+1)
	if len(c.idle[key]) == 0 {
		delete(c.idle, key)
	}
	return true
}

// specKey identifies the restrictions of a spec.
func specKey(s sandbox.Spec) string {
	return s.Workspace + "\x00" + strings.Join(s.ReadOnly, "\x00") + "\x01" + strings.Join(s.ReadWrite, "\x00")
}
