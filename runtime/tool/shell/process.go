package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	defaultYield       = 10 * time.Second
	maxYieldMs         = 120_000
	defaultExecTimeout = 1800
	maxExecTimeout     = 86_400
	// processBuffer is the output kept per background process.
	processBuffer = 1 << 20
	// maxShown is the most output one exec or process call returns.
	maxShown = 50_000
	// maxProcesses bounds what one session keeps (running and finished).
	maxProcesses    = 64
	defaultLogLines = 200
	stdinTimeout    = 5 * time.Second
)

// Process states as the model sees them.
const (
	stateRunning = "running"
	stateExited  = "exited"
)

// ProcessManager runs commands that may outlive the tool call that started
// them (servers, builds, watchers) for the exec and process tools. Processes
// belong to the session that started them: a session cannot see, read or kill
// another's. One manager serves a runtime; Close (or CloseSession when one
// session ends) kills what is left.
type ProcessManager struct {
	cfg config

	mu       sync.Mutex
	sessions map[string]map[string]*process
	seq      int
	closed   bool
	wg       sync.WaitGroup
}

// NewProcessManager returns an empty manager.
func NewProcessManager(opts ...Option) *ProcessManager {
	return &ProcessManager{cfg: newConfig(opts), sessions: map[string]map[string]*process{}}
}

// process is one command started by exec.
type process struct {
	id, command string
	seq         int
	started     time.Time
	timeout     time.Duration
	ch          *child
	out         *ringBuffer
	// done is closed once the command ended and its output is complete;
	// the result fields below are final then.
	done chan struct{}

	mu         sync.Mutex
	stdin      *os.File
	pollOffset int64
	reason     string // why it ended early: "timeout", "killed"
	ended      time.Time
	summary    string
}

func (p *process) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// status describes the process in one line.
func (p *process) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.finished() {
		return fmt.Sprintf("%s for %s", stateRunning, time.Since(p.started).Round(time.Second))
	}
	s := fmt.Sprintf("%s (%s) after %s", stateExited, p.summary, p.ended.Sub(p.started).Round(time.Millisecond))
	switch p.reason {
	case "timeout":
		s += ", killed at its timeout"
	case "killed":
		s += ", killed on request"
	}
	return s
}

// Tools returns the exec and process tools backed by m.
func (m *ProcessManager) Tools() []tool.Tool { return []tool.Tool{m.ExecTool(), m.ProcessTool()} }

// execArgs are the arguments of exec.
type execArgs struct {
	Command    string `json:"command" jsonschema:"the bash command to run"`
	YieldMs    *int   `json:"yieldMs,omitempty" jsonschema:"wait this long (ms, default 10000) for the command; if it is still running it continues in the background"`
	Background bool   `json:"background,omitempty" jsonschema:"start in the background and return at once"`
	Timeout    int    `json:"timeout,omitempty" jsonschema:"seconds before the command is killed; default 1800"`
}

// ExecTool returns the exec tool.
func (m *ProcessManager) ExecTool() tool.Tool {
	return tool.New("exec",
		"Run a bash command in the workspace. Returns output and exit code if it ends within yieldMs (default 10 s); "+
			"otherwise it keeps running and you get status \"running\" and a sessionId for the process tool (poll, log, "+
			"write, kill). background=true returns at once. Killed with its children after timeout s (default 1800).",
		m.exec,
		tool.Range("yieldMs", tool.Bound(0), tool.Bound(maxYieldMs)),
		tool.Range("timeout", tool.Bound(1), tool.Bound(maxExecTimeout)),
	)
}

func (m *ProcessManager) exec(ctx context.Context, env tool.Env, args execArgs) (tool.Result, error) {
	if strings.TrimSpace(args.Command) == "" {
		return tool.Errorf("error: command is empty; pass the bash command to run."), nil
	}
	if r, err := m.cfg.permit(ctx, env, "exec", args.Command); r != nil || err != nil {
		return deref(r), err
	}
	timeout := time.Duration(args.Timeout) * time.Second
	if args.Timeout == 0 {
		timeout = defaultExecTimeout * time.Second
	}
	yield := defaultYield
	if args.YieldMs != nil {
		yield = time.Duration(*args.YieldMs) * time.Millisecond
	}
	if m.cfg.foreground {
		// The process tool is denied: nothing could poll or kill a
		// command left running, so it runs to its end (or timeout).
		args.Background, yield = false, timeout+time.Minute
	}
	p, err := m.start(env, args.Command, timeout)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	if args.Background || yield <= 0 {
		return tool.Text(m.runningReport(p, timeout)), nil
	}
	timer := time.NewTimer(yield)
	defer timer.Stop()
	select {
	case <-p.done:
		m.forget(env.SessionID, p.id)
		return finishedReport(p), nil
	case <-timer.C:
		return tool.Text(m.runningReport(p, timeout)), nil
	case <-ctx.Done():
		p.kill("killed")
		<-p.done
		m.forget(env.SessionID, p.id)
		return tool.Result{}, fmt.Errorf("failed to finish command: %w", ctx.Err())
	}
}

// start launches command for the calling session.
func (m *ProcessManager) start(env tool.Env, command string, timeout time.Duration) (*process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("the process manager is shut down; no new commands can start")
	}
	procs := m.sessions[env.SessionID]
	if procs == nil {
		procs = map[string]*process{}
		m.sessions[env.SessionID] = procs
	}
	if len(procs) >= maxProcesses && !dropOldestFinished(procs) {
		return nil, fmt.Errorf("this session already has %d running processes; kill some with the process tool first", maxProcesses)
	}
	out := newRingBuffer(processBuffer)
	ch, stdin, err := m.cfg.startChild(env.Workspace, command, out, true)
	if err != nil {
		return nil, err
	}
	m.seq++
	p := &process{
		id: fmt.Sprintf("p%d", m.seq), command: command, seq: m.seq, started: time.Now(), timeout: timeout,
		ch: ch, out: out, done: make(chan struct{}), stdin: stdin,
	}
	procs[p.id] = p
	m.wg.Add(1)
	go m.monitor(p, timeout)
	return p, nil
}

func dropOldestFinished(procs map[string]*process) bool {
	var oldest *process
	for _, p := range procs {
		if p.finished() && (oldest == nil || p.seq < oldest.seq) {
			oldest = p
		}
	}
	if oldest == nil {
		return false
	}
	delete(procs, oldest.id)
	return true
}

// monitor waits for the process to end (or kills it at its timeout) and
// records how it ended.
func (m *ProcessManager) monitor(p *process, timeout time.Duration) {
	defer m.wg.Done()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.ch.exited:
	case <-timer.C:
		p.kill("timeout")
	}
	p.ch.finish()
	_, summary := p.ch.exitSummary()
	p.mu.Lock()
	p.summary, p.ended = summary, time.Now()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	p.mu.Unlock()
	close(p.done)
}

// kill ends the process group, remembering why.
func (p *process) kill(reason string) {
	p.mu.Lock()
	if !p.finished() && p.reason == "" {
		p.reason = reason
	}
	p.mu.Unlock()
	p.ch.kill()
}

func (m *ProcessManager) lookup(session, id string) (*process, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.sessions[session][id]
	return p, ok
}

func (m *ProcessManager) forget(session, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions[session], id)
}

// list returns the session's processes in start order.
func (m *ProcessManager) list(session string) []*process {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*process, 0, len(m.sessions[session]))
	for _, p := range m.sessions[session] {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *process) int { return a.seq - b.seq })
	return out
}

// newOutput returns output since the last poll and moves the poll mark.
func (p *process) newOutput() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, end, dropped := p.out.since(p.pollOffset)
	p.pollOffset = end
	return shown(data, dropped)
}

// shown renders an output segment for the model: at most maxShown bytes (the
// most recent ones), saying what was left out.
func shown(data []byte, dropped int64) string {
	var notes []string
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("[%d bytes of earlier output were dropped from the buffer]", dropped))
	}
	if len(data) > maxShown {
		notes = append(notes, fmt.Sprintf("[%d bytes not shown; use process log to page through the output]", len(data)-maxShown))
		data = data[len(data)-maxShown:]
		for len(data) > 0 && !utf8.RuneStart(data[0]) {
			data = data[1:]
		}
	}
	s := strings.ToValidUTF8(string(data), "\uFFFD")
	if len(notes) > 0 {
		s = strings.Join(notes, "\n") + "\n" + s
	}
	return s
}

func (m *ProcessManager) runningReport(p *process, timeout time.Duration) string {
	out := p.newOutput()
	var b strings.Builder
	fmt.Fprintf(&b, "status: running\nsessionId: %s\n", p.id)
	if strings.TrimSpace(out) != "" {
		fmt.Fprintf(&b, "output so far:\n%s\n", strings.TrimRight(out, "\n"))
	}
	fmt.Fprintf(&b, "The command continues in the background (killed after %d s). Use the process tool with sessionId %q: "+
		"poll for new output and the exit status, log for past output, write to send input, kill to stop it.",
		int(timeout/time.Second), p.id)
	return b.String()
}

func finishedReport(p *process) tool.Result {
	out := orNone(p.newOutput())
	p.mu.Lock()
	reason, summary := p.reason, p.summary
	p.mu.Unlock()
	if reason == "timeout" {
		return tool.Errorf("error: command killed after %d s (timeout), with everything it started. Output so far:\n%s",
			int(p.timeout/time.Second), out)
	}
	return tool.Text(fmt.Sprintf("%s\n[%s]", out, summary))
}

// processArgs are the arguments of process.
type processArgs struct {
	Action    string `json:"action" jsonschema:"list, poll (new output and status), log (past output by line), write (stdin), kill, clear (forget finished processes), remove (kill and forget)"`
	SessionID string `json:"sessionId,omitempty" jsonschema:"the process id exec returned; required except for list and clear"`
	Data      string `json:"data,omitempty" jsonschema:"write: text to send to the process's stdin"`
	EOF       bool   `json:"eof,omitempty" jsonschema:"write: close stdin after the data"`
	Offset    *int   `json:"offset,omitempty" jsonschema:"log: first line (0-based); omit for the last lines"`
	Limit     int    `json:"limit,omitempty" jsonschema:"log: number of lines; default 200"`
}

// ProcessTool returns the process tool.
func (m *ProcessManager) ProcessTool() tool.Tool {
	return tool.New("process",
		"Manage commands exec left running in the background: list, poll (new output since the last poll, and the exit status "+
			"once finished), log (output by line: offset/limit, default the last 200 lines), write (send data to stdin; "+
			"eof=true closes it), kill, clear (forget finished processes), remove (kill and forget one).",
		m.process,
		tool.Enum("action", "list", "poll", "log", "write", "kill", "clear", "remove"),
		tool.Range("offset", tool.Bound(0), nil),
		tool.Range("limit", tool.Bound(1), tool.Bound(10_000)),
	)
}

func (m *ProcessManager) process(ctx context.Context, env tool.Env, args processArgs) (tool.Result, error) {
	switch args.Action {
	case "list":
		return m.listReport(env.SessionID), nil
	case "clear":
		if args.SessionID == "" {
			return m.clearFinished(env.SessionID), nil
		}
	}
	if args.SessionID == "" {
		return tool.Errorf("error: sessionId is required for %s; use action list to see the processes.", args.Action), nil
	}
	p, ok := m.lookup(env.SessionID, args.SessionID)
	if !ok {
		return tool.Errorf("error: no process %q in this session; use action list to see the processes.", args.SessionID), nil
	}
	switch args.Action {
	case "poll":
		out := p.newOutput()
		if out == "" {
			out = "(no new output)"
		}
		return tool.Text(fmt.Sprintf("sessionId: %s\nstatus: %s\n%s", p.id, p.status(), strings.TrimRight(out, "\n"))), nil
	case "log":
		return logReport(p, args.Offset, args.Limit), nil
	case "write":
		return p.write(args.Data, args.EOF), nil
	case "kill":
		if p.finished() {
			return tool.Text(fmt.Sprintf("%s had already ended: %s", p.id, p.status())), nil
		}
		p.kill("killed")
		if err := waitDone(ctx, p); err != nil {
			return tool.Result{}, err
		}
		return tool.Text(fmt.Sprintf("killed %s: %s", p.id, p.status())), nil
	case "clear":
		if !p.finished() {
			return tool.Errorf("error: %s is still running; kill it first or use action remove.", p.id), nil
		}
		m.forget(env.SessionID, p.id)
		return tool.Text(fmt.Sprintf("forgot %s", p.id)), nil
	case "remove":
		p.kill("killed")
		if err := waitDone(ctx, p); err != nil {
			return tool.Result{}, err
		}
		m.forget(env.SessionID, p.id)
		return tool.Text(fmt.Sprintf("removed %s (%s)", p.id, p.status())), nil
	}
	return tool.Errorf("error: unknown action %q", args.Action), nil
}

func waitDone(ctx context.Context, p *process) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("failed to wait for process %s to end: %w", p.id, ctx.Err())
	}
}

func (m *ProcessManager) listReport(session string) tool.Result {
	procs := m.list(session)
	if len(procs) == 0 {
		return tool.Text("no processes in this session")
	}
	var b strings.Builder
	for _, p := range procs {
		cmd := p.command
		if len(cmd) > 80 {
			cmd = strings.ToValidUTF8(cmd[:77], "") + "..."
		}
		cmd = strings.ReplaceAll(cmd, "\n", " ")
		fmt.Fprintf(&b, "%s\t%s\t%s\n", p.id, p.status(), cmd)
	}
	return tool.Text(strings.TrimRight(b.String(), "\n"))
}

func (m *ProcessManager) clearFinished(session string) tool.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, p := range m.sessions[session] {
		if p.finished() {
			ids = append(ids, id)
			delete(m.sessions[session], id)
		}
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return tool.Text("no finished processes to clear")
	}
	return tool.Text("cleared " + strings.Join(ids, ", "))
}

func logReport(p *process, offset *int, limit int) tool.Result {
	if limit <= 0 {
		limit = defaultLogLines
	}
	data, _, dropped := p.out.since(0)
	text := strings.ToValidUTF8(string(data), "\uFFFD")
	lines := strings.SplitAfter(text, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	total := len(lines)
	start := max(0, total-limit)
	if offset != nil {
		start = *offset
	}
	if start > total {
		return tool.Errorf("error: offset %d is past the end of the output (%d lines).", start, total)
	}
	end := min(total, start+limit)
	body := strings.Join(lines[start:end], "")
	var b strings.Builder
	fmt.Fprintf(&b, "sessionId: %s\nstatus: %s\n", p.id, p.status())
	if total == 0 {
		b.WriteString("(no output)")
		return tool.Text(b.String())
	}
	fmt.Fprintf(&b, "lines %d-%d of %d", start, end-1, total)
	if dropped > 0 {
		fmt.Fprintf(&b, " (the first %d bytes of output were dropped; line 0 is the oldest kept line)", dropped)
	}
	b.WriteString(":\n")
	if len(body) > maxShown {
		cut := body[:maxShown]
		for len(cut) > 0 && !utf8.RuneStart(body[len(cut)]) {
			cut = cut[:len(cut)-1]
		}
		body = cut + fmt.Sprintf("\n[cut at %d bytes; ask for fewer lines]", len(cut))
	}
	b.WriteString(strings.TrimRight(body, "\n"))
	return tool.Text(b.String())
}

// write sends data to the process's stdin.
func (p *process) write(data string, eof bool) tool.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin == nil {
		if p.finished() {
			return tool.Errorf("error: %s has ended (%s); it reads no more input.", p.id, p.summary)
		}
		return tool.Errorf("error: the stdin of %s was closed (eof); it reads no more input.", p.id)
	}
	if data != "" {
		_ = p.stdin.SetWriteDeadline(time.Now().Add(stdinTimeout))
		if _, err := p.stdin.WriteString(data); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return tool.Errorf("error: %s is not reading its input (write timed out after %s); poll it to see what it is doing.", p.id, stdinTimeout)
			}
			return tool.Errorf("error: failed to write to %s: %v; poll it to see whether it is still running.", p.id, err)
		}
	}
	msg := fmt.Sprintf("wrote %d bytes to the stdin of %s", len(data), p.id)
	if eof {
		_ = p.stdin.Close()
		p.stdin = nil
		msg += " and closed it"
	}
	return tool.Text(msg + "; use poll to see the response.")
}

// CloseSession kills and forgets the processes of one session; call it when
// the session ends.
func (m *ProcessManager) CloseSession(session string) {
	m.mu.Lock()
	procs := m.sessions[session]
	delete(m.sessions, session)
	m.mu.Unlock()
	for _, p := range procs {
		p.kill("killed")
	}
	for _, p := range procs {
		<-p.done
	}
}

// Close kills every process of every session and waits until they are gone.
// The manager accepts no new commands afterwards.
func (m *ProcessManager) Close() {
	m.mu.Lock()
	m.closed = true
	var all []*process
	for _, procs := range m.sessions {
		for _, p := range procs {
			all = append(all, p)
		}
	}
	m.sessions = map[string]map[string]*process{}
	m.mu.Unlock()
	for _, p := range all {
		p.kill("killed")
	}
	m.wg.Wait()
}
