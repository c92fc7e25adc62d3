package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	defaultCols     = 120
	defaultRows     = 40
	defaultWaitMs   = 500
	maxWaitMs       = 10_000
	maxPTYs         = 16
	ptyBuffer       = 1 << 20
	ptyWriteTimeout = 5 * time.Second
	// settle is how long read keeps collecting once output started to
	// arrive, so one answer is not split across calls.
	settle = 100 * time.Millisecond
)

// PTYManager runs interactive programs (shells, REPLs, installers that ask
// questions) on pseudo-terminals for the pty tool, one set per session. Close
// (or CloseSession) kills every program and everything it started.
type PTYManager struct {
	cfg config

	mu       sync.Mutex
	sessions map[string]map[string]*terminal
	seq      int
	closed   bool
	wg       sync.WaitGroup
}

// NewPTYManager returns an empty manager.
func NewPTYManager(opts ...Option) *PTYManager {
	return &PTYManager{cfg: newConfig(opts), sessions: map[string]map[string]*terminal{}}
}

// terminal is one program on a pseudo-terminal.
type terminal struct {
	id, command string
	seq         int
	cols, rows  int
	started     time.Time
	prog        program
	master      *os.File
	out         *ringBuffer
	// exited is closed when the program has been reaped, readDone when the
	// terminal's output has been read to the end.
	exited   chan struct{}
	readDone chan struct{}
	summary  string

	mu         sync.Mutex
	readOffset int64
}

func (t *terminal) running() bool {
	select {
	case <-t.exited:
		return false
	default:
		return true
	}
}

func (t *terminal) status() string {
	if t.running() {
		return fmt.Sprintf("running for %s", time.Since(t.started).Round(time.Second))
	}
	return "exited (" + t.summary + ")"
}

// ptyArgs are the arguments of pty.
type ptyArgs struct {
	Action    string `json:"action" jsonschema:"spawn, write, read, kill or list"`
	Command   string `json:"command,omitempty" jsonschema:"spawn: the program to run, e.g. bash or python3"`
	SessionID string `json:"session_id,omitempty" jsonschema:"write, read, kill: the terminal id spawn returned"`
	Data      string `json:"data,omitempty" jsonschema:"write: keys to type; escapes such as \\r (Enter), \\t, \\e, \\x03 and \\u0003 (Ctrl-C) are understood"`
	Literal   bool   `json:"literal,omitempty" jsonschema:"write: send data exactly as given, without interpreting backslash escapes"`
	Cols      int    `json:"cols,omitempty" jsonschema:"spawn: terminal width, default 120"`
	Rows      int    `json:"rows,omitempty" jsonschema:"spawn: terminal height, default 40"`
	WaitMs    int    `json:"wait_ms,omitempty" jsonschema:"read and spawn: wait up to this long for new output; default 500, max 10000"`
}

// Tool returns the pty tool backed by m.
func (m *PTYManager) Tool() tool.Tool {
	return tool.New("pty",
		"Run interactive programs on a persistent terminal. spawn starts command (returns a session_id and its first output); "+
			"write types data (use \\r for Enter, \\u0003 for Ctrl-C); read returns new output, waiting up to wait_ms for it; "+
			"kill ends the program and everything it started; list shows the terminals. Output has terminal escape codes removed.",
		m.run,
		tool.Enum("action", "spawn", "write", "read", "kill", "list"),
		tool.Range("cols", tool.Bound(20), tool.Bound(500)),
		tool.Range("rows", tool.Bound(5), tool.Bound(200)),
		tool.Range("wait_ms", tool.Bound(0), tool.Bound(maxWaitMs)),
	)
}

func (m *PTYManager) run(ctx context.Context, env tool.Env, args ptyArgs) (tool.Result, error) {
	wait := time.Duration(defaultWaitMs) * time.Millisecond
	if args.WaitMs > 0 {
		wait = time.Duration(args.WaitMs) * time.Millisecond
	}
	switch args.Action {
	case "list":
		return m.list(env.SessionID), nil
	case "spawn":
		if strings.TrimSpace(args.Command) == "" {
			return tool.Errorf("error: command is required for spawn, e.g. \"bash\"."), nil
		}
		// What is typed into the terminal later is not checked: an
		// allowlist that names an interactive program (bash, python3)
		// lets through whatever is typed into it.
		if r, err := m.cfg.permit(ctx, env, "pty", args.Command); r != nil || err != nil {
			return deref(r), err
		}
		t, err := m.spawn(env, args.Command, args.Cols, args.Rows)
		if err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		out := t.read(ctx, wait)
		return tool.Text(fmt.Sprintf("session_id: %s\nstatus: %s\n%s", t.id, t.status(), out)), nil
	}
	if args.SessionID == "" {
		return tool.Errorf("error: session_id is required for %s; use action list to see the terminals.", args.Action), nil
	}
	t, ok := m.lookup(env.SessionID, args.SessionID)
	if !ok {
		return tool.Errorf("error: no terminal %q in this session; use action list to see the terminals.", args.SessionID), nil
	}
	switch args.Action {
	case "write":
		data := args.Data
		if !args.Literal {
			data = unescape(data)
		}
		if data == "" {
			return tool.Errorf("error: data is empty; pass the keys to type."), nil
		}
		if !t.running() {
			return tool.Errorf("error: %s has %s; it reads no more input. Kill it and spawn a new one.", t.id, t.status()), nil
		}
		_ = t.master.SetWriteDeadline(time.Now().Add(ptyWriteTimeout))
		if _, err := t.master.WriteString(data); err != nil {
			return tool.Errorf("error: failed to write to %s: %v; read it to see what it is doing.", t.id, err), nil
		}
		return tool.Text(fmt.Sprintf("wrote %d bytes to %s; use read to see the response.", len(data), t.id)), nil
	case "read":
		out := t.read(ctx, wait)
		return tool.Text(fmt.Sprintf("session_id: %s\nstatus: %s\n%s", t.id, t.status(), out)), nil
	case "kill":
		m.forget(env.SessionID, t.id)
		t.kill()
		out := t.read(ctx, 0)
		return tool.Text(fmt.Sprintf("killed %s (%s)\nfinal output:\n%s", t.id, t.summary, out)), nil
	}
	return tool.Errorf("error: unknown action %q", args.Action), nil
}

func (m *PTYManager) spawn(env tool.Env, command string, cols, rows int) (*terminal, error) {
	if cols == 0 {
		cols = defaultCols
	}
	if rows == 0 {
		rows = defaultRows
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("the terminal manager is shut down; no new terminals can start")
	}
	terms := m.sessions[env.SessionID]
	if terms == nil {
		terms = map[string]*terminal{}
		m.sessions[env.SessionID] = terms
	}
	if len(terms) >= maxPTYs {
		return nil, fmt.Errorf("this session already has %d terminals; kill some first", maxPTYs)
	}
	prog, f, err := m.cfg.launch.startTTY(m.cfg.spec(env.Workspace, "TERM=xterm-256color"), m.cfg.argv(command), cols, rows)
	if err != nil {
		return nil, err
	}
	master, err := pollable(f)
	if err != nil {
		prog.kill()
		_ = f.Close()
		_, _, _ = prog.wait()
		return nil, err
	}
	m.seq++
	t := &terminal{
		id: fmt.Sprintf("t%d", m.seq), command: command, seq: m.seq, cols: cols, rows: rows,
		started: time.Now(), prog: prog, master: master, out: newRingBuffer(ptyBuffer),
		exited: make(chan struct{}), readDone: make(chan struct{}),
	}
	terms[t.id] = t
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		defer close(t.readDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				_, _ = t.out.Write(buf[:n])
			}
			if err != nil {
				return // EIO once every program holding the terminal is gone, or closed by kill
			}
		}
	}()
	go func() {
		defer m.wg.Done()
		_, t.summary = describeExit(prog.wait())
		close(t.exited)
	}()
	return t, nil
}

// pollable returns the pty master as a file the Go poller manages. creack/pty
// hands it over in blocking mode (it calls Fd()), and a blocking read cannot
// be interrupted by Close; a non-blocking duplicate can.
func pollable(f *os.File) (*os.File, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("failed to duplicate terminal: %w", errno)
	}
	if err := syscall.SetNonblock(int(fd), true); err != nil {
		_ = syscall.Close(int(fd))
		return nil, fmt.Errorf("failed to make terminal non-blocking: %w", err)
	}
	_ = f.Close()
	return os.NewFile(fd, "/dev/ptmx"), nil
}

// read returns output since the last read. With none yet it waits up to wait
// for some; once some arrived it keeps collecting while more follows quickly.
func (t *terminal) read(ctx context.Context, wait time.Duration) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var quiet <-chan time.Time
wait:
	for {
		end, changed := t.out.end()
		if end > t.readOffset && quiet == nil {
			quiet = time.After(min(settle, wait))
		}
		select {
		case <-changed:
			if quiet != nil {
				quiet = time.After(settle)
			}
		case <-quiet:
			break wait
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		case <-t.readDoneIfIdle(end):
			break wait
		}
	}
	data, end, dropped := t.out.since(t.readOffset)
	t.readOffset = end
	text := cleanTerminal(data)
	if dropped > 0 {
		text = fmt.Sprintf("[%d bytes of earlier output were dropped]\n%s", dropped, text)
	}
	if len(text) > maxShown {
		cut := text[len(text)-maxShown:]
		for len(cut) > 0 && !utf8.RuneStart(cut[0]) {
			cut = cut[1:]
		}
		text = fmt.Sprintf("[%d bytes not shown]\n%s", len(text)-len(cut), cut)
	}
	if strings.TrimSpace(text) == "" {
		return "(no new output)"
	}
	return text
}

// readDoneIfIdle returns readDone when nothing more can arrive, so a read of a
// finished program does not sit out its wait.
func (t *terminal) readDoneIfIdle(end int64) <-chan struct{} {
	if end > t.readOffset {
		return nil
	}
	return t.readDone
}

// kill ends the program and every process in its terminal session: its own
// process group, the job-control groups an interactive shell creates, then
// the terminal itself (which hangs up anything left).
func (t *terminal) kill() {
	// Even after the shell exited its jobs may live on in the session.
	t.prog.kill()
	<-t.exited
	select {
	case <-t.readDone:
	case <-time.After(graceDrain):
	}
	_ = t.master.Close()
	<-t.readDone
}

func (m *PTYManager) lookup(session, id string) (*terminal, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.sessions[session][id]
	return t, ok
}

func (m *PTYManager) forget(session, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions[session], id)
}

func (m *PTYManager) list(session string) tool.Result {
	m.mu.Lock()
	terms := make([]*terminal, 0, len(m.sessions[session]))
	for _, t := range m.sessions[session] {
		terms = append(terms, t)
	}
	m.mu.Unlock()
	if len(terms) == 0 {
		return tool.Text("no terminals in this session")
	}
	slices.SortFunc(terms, func(a, b *terminal) int { return a.seq - b.seq })
	var b strings.Builder
	for _, t := range terms {
		fmt.Fprintf(&b, "%s\t%s\t%dx%d\t%s\n", t.id, t.status(), t.cols, t.rows, t.command)
	}
	return tool.Text(strings.TrimRight(b.String(), "\n"))
}

// CloseSession kills the terminals of one session; call it when the session
// ends.
func (m *PTYManager) CloseSession(session string) {
	m.mu.Lock()
	terms := m.sessions[session]
	delete(m.sessions, session)
	m.mu.Unlock()
	for _, t := range terms {
		t.kill()
	}
}

// Close kills every terminal of every session and waits until their programs
// are gone. The manager starts no new terminals afterwards.
func (m *PTYManager) Close() {
	m.mu.Lock()
	m.closed = true
	var all []*terminal
	for _, terms := range m.sessions {
		for _, t := range terms {
			all = append(all, t)
		}
	}
	m.sessions = map[string]map[string]*terminal{}
	m.mu.Unlock()
	for _, t := range all {
		t.kill()
	}
	m.wg.Wait()
}

// ansi matches terminal control sequences: CSI (colours, cursor moves), OSC
// (window titles, hyperlinks), charset selection and other two-byte escapes.
var ansi = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+][0-9A-Za-z]|\x1b[@-Z\\-_=>]`)

// cleanTerminal turns raw terminal output into text: escape sequences and
// control characters removed, CRLF as LF, a lone CR (progress bars redrawing
// a line) as LF.
func cleanTerminal(data []byte) string {
	s := ansi.ReplaceAllString(strings.ToValidUTF8(string(data), "\uFFFD"), "")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// unescape interprets the backslash escapes models write for keys: \r \n \t
// \e \a \b \0 \\ \xHH \uHHHH \UHHHHHHHH. Anything else is kept as written.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		next := s[i+1]
		if c, ok := simpleEscape(next); ok {
			b.WriteByte(c)
			i++
			continue
		}
		width := 0
		switch next {
		case 'x':
			width = 2
		case 'u':
			width = 4
		case 'U':
			width = 8
		}
		if width > 0 && i+2+width <= len(s) {
			v, err := strconv.ParseUint(s[i+2:i+2+width], 16, 32)
			switch {
			case err != nil:
			case next == 'x':
				b.WriteByte(byte(v))
				i += 1 + width
				continue
			case utf8.ValidRune(rune(v)):
				b.WriteRune(rune(v))
				i += 1 + width
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func simpleEscape(c byte) (byte, bool) {
	switch c {
	case 'r':
		return '\r', true
	case 'n':
		return '\n', true
	case 't':
		return '\t', true
	case 'e':
		return 0x1b, true
	case 'a':
		return 0x07, true
	case 'b':
		return 0x08, true
	case '0':
		return 0, true
	case '\\':
		return '\\', true
	}
	return 0, false
}
