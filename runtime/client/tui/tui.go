// Package tui is `picobot chat`: a full-screen terminal client of the
// gateway on bubbletea. It shows the current dialog's transcript with the
// reply streaming in, tool calls dimmed on one line each (Ctrl+O opens them),
// and passes slash commands through to the agent.
package tui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textarea"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/client"
)

// requestTimeout bounds REST calls and the WebSocket handshake.
const requestTimeout = 15 * time.Second

// historySize is how many stored messages are shown of a dialog.
const historySize = 100

// maxInputLines is the height the input grows to.
const maxInputLines = 6

// Config is what the chat talks to.
type Config struct {
	Client *client.Client
	// Agents are the gateway's agents, as listed before starting.
	Agents []client.Agent
	// Agent is the agent to talk to; when empty and there are several
	// Agents, the chat starts with a picker.
	Agent string
	// ChatID is the chat (the same one across runs continues its dialogs).
	ChatID string
	// Explain turns an error into one line saying what to do (the error's
	// text when nil).
	Explain func(error) string
	// MarkdownStyle is glamour's style for the agent's answers: "dark"
	// (default), "light", "notty" (no colours), ...
	MarkdownStyle string
}

// Model is the chat's bubbletea model.
type Model struct {
	cfg   Config
	agent string
	md    *markdown

	picking bool
	pick    int

	conn *client.Conn
	turn *client.Turn
	// approval is the exec approval request of the running turn waiting
	// for the user's y or n.
	approval *client.Event
	// sending is set while a message is on its way (turn is nil until the
	// gateway has it).
	sending  bool
	stopping bool
	// stale marks the transcript as possibly incomplete (the connection
	// broke mid-turn): it is reloaded from the gateway.
	stale bool

	// loads numbers REST loads (shared by the model's copies); sessionsSeq
	// and historySeq are the newest applied.
	loads                   *atomic.Int64
	sessionsSeq, historySeq int64

	log       transcript
	toolsOpen bool
	session   string // id of the dialog shown
	dialog    string
	title     string
	usage     string
	errLine   string

	// runsTicking is set while a read of the running run cards is
	// scheduled (runcards.go).
	runsTicking bool

	input textarea.Model
	// lines is the transcript as drawn; body is how many of them show, and
	// scroll how far up from the end they are (0: following the end).
	lines    []string
	body     int
	scroll   int
	width    int
	height   int
	quitting bool
}

// New returns the chat model.
func New(cfg Config) Model {
	in := textarea.New()
	in.Prompt = "› "
	in.ShowLineNumbers = false
	in.CharLimit = 0
	in.MaxHeight = maxInputLines
	in.SetHeight(1)
	in.KeyMap.InsertNewline = key.NewBinding(key.WithKeys("alt+enter", "ctrl+j"))
	in.FocusedStyle.CursorLine = in.FocusedStyle.Text
	in.Focus()
	m := Model{cfg: cfg, agent: cfg.Agent, input: in, width: 80, height: 24, loads: &atomic.Int64{}, md: newMarkdown(cmp.Or(cfg.MarkdownStyle, "dark"))}
	if m.agent == "" {
		switch len(cfg.Agents) {
		case 1:
			m.agent = cfg.Agents[0].Name
		default:
			m.picking = true
		}
	}
	m.placeholder()
	return m
}

func (m *Model) placeholder() {
	m.input.Placeholder = "Message " + m.agent + " — /help for commands"
}

// Run runs the chat on a terminal until the user quits.
func Run(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	p := tea.NewProgram(New(cfg), tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen())
	final, err := p.Run()
	if m, ok := final.(Model); ok {
		m.Close()
	}
	if err != nil && !errors.Is(err, tea.ErrProgramKilled) {
		return fmt.Errorf("failed to run the chat UI: %w", err)
	}
	return nil
}

// Close closes the connection to the gateway.
func (m Model) Close() {
	if m.conn != nil {
		_ = m.conn.Close()
	}
}

// Init connects and loads the current dialog.
func (m Model) Init() tea.Cmd {
	if m.picking {
		return nil
	}
	return m.start()
}

func (m Model) start() tea.Cmd {
	return tea.Batch(textarea.Blink, m.dial(), m.loadSessions())
}

// Messages of the model's commands.
type (
	connMsg struct {
		conn *client.Conn
		err  error
	}
	lostMsg     struct{ conn *client.Conn }
	sessionsMsg struct {
		seq int64
		s   *client.Sessions
		err error
	}
	historyMsg struct {
		seq     int64
		session string
		msgs    []client.Message
		err     error
	}
	sentMsg struct {
		conn *client.Conn // the connection used, maybe a new one
		turn *client.Turn
		text string
		err  error
	}
	eventMsg struct {
		turn *client.Turn
		ev   client.Event
	}
	endMsg struct {
		turn *client.Turn
		err  error
	}
	stopMsg     struct{ err error }
	approvedMsg struct {
		code     string
		answered bool
		err      error
	}
)

func (m Model) dial() tea.Cmd {
	c := m.cfg.Client
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		conn, err := c.Dial(ctx)
		return connMsg{conn: conn, err: err}
	}
}

func watch(conn *client.Conn) tea.Cmd {
	return func() tea.Msg {
		<-conn.Done()
		return lostMsg{conn: conn}
	}
}

// loadSessions and loadHistory number their answers, which may arrive out of
// order; an answer older than one already applied is dropped.
func (m Model) loadSessions() tea.Cmd {
	c, agent, chat, seq := m.cfg.Client, m.agent, m.cfg.ChatID, m.loads.Add(1)
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		s, err := c.Sessions(ctx, agent, chat)
		return sessionsMsg{seq: seq, s: s, err: err}
	}
}

func (m Model) loadHistory(session string) tea.Cmd {
	c, seq := m.cfg.Client, m.loads.Add(1)
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		msgs, err := c.Messages(ctx, session, historySize)
		return historyMsg{seq: seq, session: session, msgs: msgs, err: err}
	}
}

// send sends text, dialing first when there is no live connection.
func (m Model) send(text string) tea.Cmd {
	c, conn, s := m.cfg.Client, m.conn, client.Send{Agent: m.agent, ChatID: m.cfg.ChatID, Text: text}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		if conn == nil || conn.Err() != nil {
			var err error
			if conn, err = c.Dial(ctx); err != nil {
				return sentMsg{text: text, err: err}
			}
		}
		t, err := conn.Send(ctx, s)
		return sentMsg{conn: conn, turn: t, text: text, err: err}
	}
}

func next(t *client.Turn) tea.Cmd {
	return func() tea.Msg {
		ev, err := t.Recv(context.Background())
		if err != nil {
			return endMsg{turn: t, err: err}
		}
		return eventMsg{turn: t, ev: ev}
	}
}

// answer gives the user's answer to an exec approval request.
func (m Model) answer(code string, approve bool) tea.Cmd {
	conn, agent, chat := m.conn, m.agent, m.cfg.ChatID
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		if conn == nil {
			return approvedMsg{code: code, err: client.ErrConnectionLost}
		}
		ok, err := conn.Approve(ctx, agent, chat, code, approve)
		return approvedMsg{code: code, answered: ok, err: err}
	}
}

func (m Model) stop() tea.Cmd {
	conn, agent, chat := m.conn, m.agent, m.cfg.ChatID
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		_, err := conn.Stop(ctx, agent, chat)
		return stopMsg{err: err}
	}
}

// Update handles a message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmd tea.Cmd
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyMsg:
		if m.picking {
			return m.pickKey(msg)
		}
		var done bool
		if m, cmd, done = m.key(msg); done {
			return m, cmd
		}
	case connMsg:
		cmd = m.connected(msg.conn, msg.err)
	case lostMsg:
		if msg.conn == m.conn {
			m.conn = nil
			m.errLine = "Lost the connection to the gateway at " + m.cfg.Client.URL() + "; it reconnects when you send."
		}
	case sessionsMsg:
		cmd = m.sessions(msg)
	case historyMsg:
		m.history(msg)
	case sentMsg:
		cmd = m.sent(msg)
	case eventMsg:
		if msg.turn == m.turn {
			if msg.ev.Kind == client.KindCommand {
				// Links the gateway gives as paths (/dump's file) open
				// only with its address in front.
				msg.ev.Text = absoluteLinks(msg.ev.Text, m.cfg.Client.URL())
			}
			m.log.apply(msg.ev)
			switch msg.ev.Kind {
			case client.KindUsage:
				m.usage = fmt.Sprintf("%d in / %d out tokens", msg.ev.InputTokens, msg.ev.OutputTokens)
			case client.KindApproval:
				ev := msg.ev
				m.approval = &ev
			case client.KindApprovalResult:
				if m.approval != nil && m.approval.Code == msg.ev.Code {
					m.approval = nil
				}
			}
			cmd = next(m.turn)
		}
	case endMsg:
		if msg.turn == m.turn {
			cmd = m.ended(msg.err)
		}
	case stopMsg:
		if msg.err != nil {
			m.errLine = "Could not stop the turn: " + msg.err.Error()
		}
	case runsTickMsg:
		cmd = m.readRuns()
	case runReadMsg:
		cmd = m.runRead(msg)
	case nodesMsg:
		if msg.err != nil {
			m.errLine = "Nodes: " + m.describe(msg.err)
		} else {
			m.log.add(entry{kind: entryNote, text: msg.text})
		}
	case approvedMsg:
		switch {
		case msg.err != nil:
			m.errLine = "Could not answer approval " + msg.code + ": " + m.describe(msg.err)
		case !msg.answered:
			m.errLine = "Approval " + msg.code + " is no longer waiting (answered, timed out, or its turn ended)."
		}
	}
	var icmd tea.Cmd
	if _, isKey := msg.(tea.KeyMsg); !isKey {
		m.input, icmd = m.input.Update(msg) // cursor blink
	}
	m.layout()
	runs := m.scheduleRuns() // before m is returned: it marks the tick pending
	return m, tea.Batch(cmd, icmd, runs)
}

// key handles a key press; done means the key was consumed and the caller
// returns at once.
func (m Model) key(k tea.KeyMsg) (Model, tea.Cmd, bool) {
	switch {
	case k.Type == tea.KeyCtrlC:
		if !m.busy() || m.stopping {
			m.quitting = true
			return m, tea.Quit, true
		}
		m.stopping = true
		if m.turn == nil {
			return m, nil, false // stopped once the send is out
		}
		return m, m.stop(), false
	case m.approval != nil && m.input.Value() == "" && (k.String() == "y" || k.String() == "n"):
		code := m.approval.Code
		m.approval = nil
		return m, m.answer(code, k.String() == "y"), true
	case k.Type == tea.KeyCtrlO:
		m.toolsOpen = !m.toolsOpen
		return m, nil, false
	case k.Type == tea.KeyPgUp:
		m.scroll = min(m.scroll+max(m.body/2, 1), max(len(m.lines)-m.body, 0))
		return m, nil, true
	case k.Type == tea.KeyPgDown:
		m.scroll = max(m.scroll-max(m.body/2, 1), 0)
		return m, nil, true
	case k.Type == tea.KeyEnter && !k.Alt && !k.Paste:
		return m.submit()
	}
	// At full height while editing, the input does not scroll its first
	// line away when a line is added; layout shrinks it to fit after.
	m.input.SetHeight(maxInputLines)
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	return m, cmd, false
}

// submit handles Enter: send the input, or act on it locally.
func (m Model) submit() (Model, tea.Cmd, bool) {
	text := strings.TrimSpace(m.input.Value())
	switch {
	case text == "":
		return m, nil, false
	case text == "/quit" || text == "/exit":
		m.quitting = true
		return m, tea.Quit, true
	case strings.HasPrefix(text, "/cancel-run"):
		m.input.Reset()
		return m, m.cancelRun(text), false
	case text == "/nodes" || strings.HasPrefix(text, "/nodes "):
		m.input.Reset()
		m.log.add(entry{kind: entryNote, text: text})
		return m, m.nodesCommand(text), false
	case m.busy() && text == "/stop":
		m.input.Reset()
		if m.stopping {
			return m, nil, false
		}
		m.stopping = true
		if m.turn == nil {
			return m, nil, false
		}
		return m, m.stop(), false
	case m.busy() && isApprovalAnswer(text):
		// "/approve K7Q2" typed while the turn waits answers it.
		m.input.Reset()
		code, approve, _ := approval.ParseAnswer(text)
		if m.approval != nil && m.approval.Code == code {
			m.approval = nil
		}
		return m, m.answer(code, approve), false
	case m.busy():
		m.errLine = "A reply is still running: wait for it, or press Ctrl+C to stop it."
		return m, nil, false
	}
	m.input.Reset()
	m.errLine = ""
	kind := entryUser
	if strings.HasPrefix(text, "/") {
		kind = entryNote // a command shows as typed, dimmed
	}
	m.log.add(entry{kind: kind, text: text})
	m.sending = true
	m.usage = "" // the line counts this turn's tokens, none if it fails
	return m, m.send(text), false
}

// isApprovalAnswer reports whether text is "/approve CODE" or "/deny CODE".
func isApprovalAnswer(text string) bool {
	_, _, ok := approval.ParseAnswer(text)
	return ok
}

// busy says a message is on its way or its reply is running.
func (m Model) busy() bool { return m.sending || m.turn != nil }

func (m Model) pickKey(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	switch k.String() {
	case "ctrl+c", "esc", "q":
		m.quitting = true
		return m, tea.Quit
	case "up", "k", "shift+tab":
		m.pick = (m.pick + len(m.cfg.Agents) - 1) % max(len(m.cfg.Agents), 1)
	case "down", "j", "tab":
		m.pick = (m.pick + 1) % max(len(m.cfg.Agents), 1)
	case "enter":
		if len(m.cfg.Agents) == 0 {
			return m, nil
		}
		m.agent, m.picking = m.cfg.Agents[m.pick].Name, false
		m.placeholder()
		m.layout()
		return m, m.start()
	}
	return m, nil
}

// connected adopts a new connection. Two can race (the one dialed at start
// and one dialed by a send): a live one in use is kept, the spare closed.
func (m *Model) connected(conn *client.Conn, err error) tea.Cmd {
	if err != nil {
		if m.conn == nil {
			m.errLine = m.describe(err)
		}
		return nil
	}
	if m.conn != nil && m.conn != conn {
		if m.conn.Err() == nil {
			_ = conn.Close()
			return nil
		}
		_ = m.conn.Close()
	}
	m.conn = conn
	m.errLine = ""
	return watch(conn)
}

func (m *Model) sessions(msg sessionsMsg) tea.Cmd {
	if msg.seq < m.sessionsSeq {
		return nil
	}
	m.sessionsSeq = msg.seq
	if msg.err != nil {
		m.errLine = m.describe(msg.err)
		return nil
	}
	m.dialog, m.title = msg.s.Current, ""
	cur, ok := msg.s.CurrentSession()
	if ok {
		m.title = cur.Title
	}
	if !ok {
		if m.session != "" { // the dialog shown is gone (deleted)
			m.session = ""
			m.log = transcript{entries: m.tail()}
		}
		return nil
	}
	if cur.ID != m.session || m.stale {
		m.session, m.stale = cur.ID, false
		return m.loadHistory(cur.ID)
	}
	return nil
}

// tail is the run of entries at the end that the gateway does not store
// (command replies, notes, errors): they stay visible when the transcript is
// reloaded, e.g. "Switched to d_2" under the dialog it switched to.
func (m *Model) tail() []entry {
	i := len(m.log.entries)
	for i > 0 {
		switch m.log.entries[i-1].kind {
		case entryCommand, entryNote, entryError:
			i--
			continue
		}
		break
	}
	return append([]entry(nil), m.log.entries[i:]...)
}

func (m *Model) history(msg historyMsg) {
	if msg.session != m.session || msg.seq < m.historySeq {
		return // superseded
	}
	m.historySeq = msg.seq
	if m.busy() { // a turn is adding to the transcript now: load it after
		m.stale = true
		return
	}
	if msg.err != nil {
		m.errLine = m.describe(msg.err)
		return
	}
	tail := m.tail()
	m.log = fromHistory(msg.msgs, m.describe)
	m.log.entries = append(m.log.entries, tail...)
	m.lines, m.scroll = nil, 0
}

func (m *Model) sent(msg sentMsg) tea.Cmd {
	var cmds []tea.Cmd
	if msg.conn != nil && msg.conn != m.conn { // dialed for this send: use it
		if m.conn != nil {
			_ = m.conn.Close()
		}
		m.conn = nil
		cmds = append(cmds, m.connected(msg.conn, nil))
	}
	m.sending = false
	if msg.err != nil {
		m.turn, m.stopping = nil, false
		m.errLine = m.describe(msg.err)
		if errors.Is(msg.err, client.ErrConnectionLost) || errors.Is(msg.err, client.ErrUnreachable) {
			m.conn = nil
		}
		// Nothing was sent: take the message back into the input.
		if l := m.log.last(); l != nil && (l.kind == entryUser || l.kind == entryNote) && l.text == msg.text {
			m.log.entries = m.log.entries[:len(m.log.entries)-1]
		}
		if m.input.Value() == "" {
			m.input.SetValue(msg.text)
		}
		return tea.Batch(cmds...)
	}
	m.turn = msg.turn
	if m.stopping { // Ctrl+C before the send went out
		cmds = append(cmds, m.stop())
	}
	return tea.Batch(append(cmds, next(msg.turn))...)
}

func (m *Model) ended(err error) tea.Cmd {
	m.turn, m.stopping, m.approval = nil, false, nil
	m.log.endStream()
	switch {
	case err == nil || errors.Is(err, io.EOF):
	case client.HasCode(err, client.CodeStopped):
		m.log.add(entry{kind: entryNote, text: "Stopped; what was done so far is kept."})
	case errors.Is(err, client.ErrConnectionLost):
		m.conn, m.stale = nil, true
		m.errLine = "Lost the connection to the gateway at " + m.cfg.Client.URL() + " during the reply; it reconnects when you send."
		return nil
	default:
		m.log.add(entry{kind: entryError, text: m.describe(err)})
	}
	return m.loadSessions()
}

// describe says what went wrong in one line, with what to do about it.
func (m *Model) describe(err error) string {
	if m.cfg.Explain != nil {
		return m.cfg.Explain(err)
	}
	return err.Error()
}

// absoluteLinks puts base in front of the markdown links of text that are
// paths of the gateway ("[name](/api/v1/artifacts/…)").
func absoluteLinks(text, base string) string {
	return strings.ReplaceAll(text, "](/", "]("+strings.TrimSuffix(base, "/")+"/")
}
