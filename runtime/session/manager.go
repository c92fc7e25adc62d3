package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/logctx"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// DefaultTitle is the title of a conversation until it is auto-titled.
const DefaultTitle = "New conversation"

// Defaults of the manager.
const (
	DefaultLeaseTTL   = 30 * time.Second
	autoTitleMessages = 2  // auto-title after the first exchange (the title is the first request)
	recentDialogs     = 10 // /sessions and List show this many
	timelineContext   = 3  // timeline summaries loaded on restore
)

// ErrBusy means another runtime holds the session's lease.
var ErrBusy = errors.New("session is owned by another runtime")

// TimelineStore keeps compression summaries as timeline memory and returns the
// latest ones of a session for restore. The memory package implements it; a
// nil TimelineStore keeps summaries only in the running turn.
type TimelineStore interface {
	AddTimeline(ctx context.Context, agent, sessionID, summary string) error
	RecentTimeline(ctx context.Context, agent, sessionID string, n int) ([]string, error)
}

// ArtifactStore stores files a session produces (/dump, and the files tools
// present to the user) and opens the files users attach to their messages;
// artifact.Store implements it.
type ArtifactStore interface {
	Save(ctx context.Context, sessionID, name, mediaType string, data []byte) (store.Artifact, error)
	Open(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error)
}

// Config wires a Manager.
type Config struct {
	// Artifacts stores /dump transcripts and the files tools present to the
	// user (screenshots, send_message's files to this conversation), owned
	// by the session; without it /dump says so and such files are not
	// attached (the tool result says so), nor are the files users attach to
	// their messages (the message says so).
	Artifacts ArtifactStore
	// ArtifactURL is where clients fetch an artifact; it becomes the url of
	// attachments and of their links in stored messages.
	ArtifactURL func(store.Artifact) string
	// MCPStatus is the /mcp report (connection status and tools of the agent's
	// MCP servers); without it the agent has none.
	MCPStatus func() string
	// Health is the /health report (package health's text); without it
	// /health says no health service runs here.
	Health func(ctx context.Context) string
	Store  store.Store
	Loop   *agent.Loop
	// Agent is the agent name recorded on sessions and memories.
	Agent string
	// System is the agent's instructions.
	System string
	// Prompt, when set, returns sections appended to System for one turn
	// (relevant memories, the skill list); "" adds nothing.
	Prompt func(ctx context.Context, in PromptInput) string
	// Compressor shrinks long histories before a turn. Optional.
	Compressor *agent.Compressor
	Timeline   TimelineStore
	// Holder identifies this runtime in session leases (pod name).
	Holder   string
	LeaseTTL time.Duration
	// Workspace returns the working folder of a session.
	Workspace func(id ID) string
	Clock     clock.WithTicker
	// Signals, when set, hands turns the signals background runs sent to
	// their session: every pending one joins the user message of the
	// session's next turn, and steer ones reach a running turn between two
	// tool batches (agent.Input.Steer). Optional.
	Signals SignalSource
	// Leased, when set, counts the sessions whose lease this manager holds
	// (metrics.SessionsLeased): one more when it takes a session's lease,
	// one less when it releases or loses it.
	Leased Gauge
}

// Gauge is a value that goes up and down (a prometheus.Gauge).
type Gauge interface {
	Inc()
	Dec()
}

// SignalSource gives a session the signals waiting for it
// (delegate.SignalInbox).
type SignalSource interface {
	// Take returns the session's pending signals as text (steer ones only
	// when steerOnly; "" when none) and commit, which marks them consumed
	// once the text is stored.
	Take(ctx context.Context, sessionID string, steerOnly bool) (text string, commit func(context.Context) error, err error)
}

// Derived is c for runs of the same agent with other tools (a scheduled
// run's, a sub-agent's): a loop of its own with tools, and instructions
// after the agent's own.
func (c Config) Derived(tools *tool.Registry, instructions string) Config {
	loop := *c.Loop
	loop.Tools = tools
	c.Loop = &loop
	c.Signals = nil // signals go to the session that started a run, never to a run
	if c.System != "" {
		c.System += "\n\n"
	}
	c.System += instructions
	return c
}

// Manager owns the sessions of one agent in one runtime. Safe for concurrent
// use: turns of one session are serialised by its lock, different sessions
// run in parallel.
type Manager struct {
	cfg Config
	// gen is what Reconfigure switches: the parts of cfg that come from
	// the agent's spec. A turn reads it once, when it starts, and keeps it.
	gen     atomic.Pointer[Generation]
	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	running map[string]*runningTurn   // session id -> its turn running here
	held    map[string]time.Time      // sessions whose lease this manager took -> when it last took or renewed it
	hist    map[string]*storedHistory // sessions whose lease is held -> their history as last loaded
}

// storedHistory is a session's stored messages from its compression mark on,
// as last loaded. The message log is append-only and a session's seq grows
// in commit order (appends lock the session), so the next load reads only
// what came after lastSeq — whoever wrote it (this manager's turns, a
// send_message from elsewhere) — instead of the whole history every turn.
type storedHistory struct {
	// since is the session's compression mark and prefix the timeline
	// context that goes before msgs (both as read when the cache was
	// filled).
	since   time.Time
	prefix  []llm.Message
	lastSeq int64
	msgs    []llm.Message
	// titled: the session's title is no longer the default (it never
	// becomes the default again), so auto-titling has nothing to do.
	// current: see extendHistory. Both are read and written under
	// Manager.mu; the other fields never change.
	titled, current bool
}

// maxCachedHistories caps the histories kept between turns; a session
// beyond it is loaded whole on its next turn.
const maxCachedHistories = 512

// NewManager returns a manager.
func NewManager(cfg Config) *Manager {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Workspace == nil {
		cfg.Workspace = func(ID) string { return "" }
	}
	m := &Manager{cfg: cfg, locks: map[string]*sync.Mutex{}, running: map[string]*runningTurn{}, held: map[string]time.Time{},
		hist: map[string]*storedHistory{}}
	m.gen.Store(generationOf(cfg))
	return m
}

// Generation is the part of a Config that comes from the agent's spec
// (model loop and tools, instructions, prompt sections, compressor, /mcp)
// and that Reconfigure switches while the manager keeps its sessions,
// leases and histories.
type Generation struct {
	Loop       *agent.Loop
	System     string
	Prompt     func(ctx context.Context, in PromptInput) string
	Compressor *agent.Compressor
	MCPStatus  func() string
}

func generationOf(cfg Config) *Generation {
	return &Generation{Loop: cfg.Loop, System: cfg.System, Prompt: cfg.Prompt, Compressor: cfg.Compressor, MCPStatus: cfg.MCPStatus}
}

// Reconfigure switches the turns that start from now on to cfg's
// generation (a reloaded agent spec); a turn already running finishes on
// the generation it started with. Only the Generation fields of cfg are
// used: the store, leases and workspaces stay.
func (m *Manager) Reconfigure(cfg Config) { m.gen.Store(generationOf(cfg)) }

// generation is the generation new turns use.
func (m *Manager) generation() *Generation { return m.gen.Load() }

func (m *Manager) lock(id string) func() {
	m.mu.Lock()
	l := m.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Inbound is a user message from a channel.
type Inbound struct {
	Channel, ChatID string
	// DialogID, when set, is the dialog the message is for; the chat's
	// current dialog takes it when empty, or when that dialog was deleted.
	DialogID string
	// MessageID is the channel's id of the message: a redelivery with the same
	// id is processed once. Generated when empty.
	MessageID string
	Text      string
	// Files are the files the user attached: copied into the session's
	// workspace, linked in the stored message, and images shown to the
	// model with it (when it accepts images).
	Files  []Upload
	Stream bool
	Sink   func(turn.Event)
	// Approver asks the message's user to approve commands (exec
	// approvals); nil when there is no user to ask.
	Approver tool.Approver
	// Canvas is the chat's web canvas (the canvas tool); nil when none.
	Canvas tool.Canvas
}

// PromptInput is what a Config.Prompt sees of the turn it extends.
type PromptInput struct {
	SessionID ID
	// Text is the user's message of the turn.
	Text string
}

// Reply is the outcome of handling an inbound message.
type Reply struct {
	SessionID string
	Text      string
	// Command is the slash command handled ("" for a model turn).
	Command string
	// Duplicate: the message id was processed before; nothing ran again.
	Duplicate bool
	// Failed: the slash command did not do what was asked (Text says why).
	Failed bool
	// Attachments are the files the turn's tools presented to the user,
	// stored as artifacts of the session; they belong to the reply (the
	// final event carries them too, and the stored reply links them).
	Attachments []turn.Attachment
	Output      *agent.Output
}

// Handle processes one inbound message: a slash command, or a model turn in
// three phases — (1) under the session lock: persist the user message, restore
// history, compress (prepare); (2) without it: the agent loop, storing the
// files its tools present to the user as they come (run); (3) under the lock:
// persist the results (with links to those files, and for a turn the user
// stopped, the text streamed so far marked with StoppedMarker) and auto-title
// (finish).
func (m *Manager) Handle(ctx context.Context, in Inbound) (Reply, error) {
	if cmd, ok := ParseCommand(in.Text); ok {
		return m.command(ctx, in, cmd)
	}
	id, err := m.resolveFor(ctx, in)
	if err != nil {
		return Reply{}, err
	}
	ctx = logctx.Add(ctx, "session", id.String())
	if in.MessageID == "" {
		in.MessageID = "m_" + NewDialogID()[2:] + fmt.Sprint(m.cfg.Clock.Now().UnixNano())
	}
	prompted := metrics.TimePhase(ctx, metrics.PhasePrompt)
	t, dup, err := m.prepare(ctx, id, in)
	prompted()
	if dup != nil {
		return m.answerDuplicate(ctx, id, dup)
	}
	if t == nil {
		return Reply{SessionID: id.String()}, err
	}
	m.run(ctx, t, in)
	defer metrics.TimePhase(ctx, metrics.PhasePersist)()
	return m.finish(ctx, t)
}

// resolveFor returns the session of a message: its dialog when it names
// one that still exists, else the chat's current dialog.
func (m *Manager) resolveFor(ctx context.Context, in Inbound) (ID, error) {
	if in.DialogID != "" {
		id := ID{Channel: in.Channel, ChatID: in.ChatID, DialogID: in.DialogID}
		s, err := m.cfg.Store.GetSession(ctx, id.String())
		switch {
		case err == nil && s.DeletedAt == nil:
			return id, nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return ID{}, fmt.Errorf("failed to get session %q: %w", id, err)
		}
	}
	return m.Resolve(ctx, in.Channel, in.ChatID)
}

// pending is a model turn between its phases.
type pending struct {
	id  ID
	sid string
	// messageID is the user message's; the turn's messages are stored as
	// <messageID>/<n>, n counting the turn's messages from 0 (turnMessageID),
	// so that storing one again (a checkpoint, then phase 3) is a no-op.
	messageID string
	// base is how many messages of the turn were stored before this run
	// (a resumed turn), stepsDone how many model calls they hold.
	base, stepsDone int
	// userAt is when the user message was stored (the compression mark).
	userAt time.Time
	// gen is the generation the turn runs on, read once as it starts.
	gen     *Generation
	system  string
	history []llm.Message
	// ctx is cancelled by Stop (errStopped), a lost lease or a shutdown.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// checkpointed counts the messages of this run stored as they came.
	checkpointed int
	// cut: a shutdown or a lost lease ended the turn before its answer.
	cut bool
	// Filled in by run.
	// running registers the turn while it runs (setRunning).
	running     *runningTurn
	out         *agent.Output
	files       *turnFiles
	err         error
	userStopped bool
}

// prepare is phase 1: under the session lock it takes the lease, stores the
// user message and builds the turn's history and system prompt. It returns
// no turn but the duplicate when the message was processed before.
func (m *Manager) prepare(ctx context.Context, id ID, in Inbound) (*pending, *duplicate, error) {
	sid := id.String()
	unlock := m.lock(sid)
	defer unlock()
	// A lease taken or renewed less than a third of its TTL ago is still
	// ours: taking it again would only cost a write per turn.
	if !m.leaseFresh(sid) {
		ok, err := m.cfg.Store.AcquireLease(ctx, sid, m.cfg.Holder, m.cfg.LeaseTTL)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s", ErrBusy, sid)
		}
		m.markLeased(sid)
	}
	text, commitSignals := in.Text, func(context.Context) error { return nil }
	var uploads uploadedFiles
	if len(in.Files) > 0 {
		uploads = m.receiveUploads(ctx, id, in.Files)
		text = JoinSections(text, uploads.lines)
	}
	if m.cfg.Signals != nil {
		sigs, commit, err := m.cfg.Signals.Take(ctx, sid, false)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to read the signals of session %q: %w", sid, err)
		}
		if sigs != "" {
			text, commitSignals = JoinSections(text, sigs), commit
		}
	}
	stored, err := m.cfg.Store.AppendMessages(ctx, sid, store.Message{ID: in.MessageID, Role: llm.RoleUser, Content: text})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to store message of session %q: %w", sid, err)
	}
	if !stored[0].Duplicate {
		// Signals that joined a message stored before stay pending.
		if err := commitSignals(ctx); err != nil {
			return nil, nil, fmt.Errorf("failed to mark the signals of session %q consumed: %w", sid, err)
		}
	}
	m.extendHistory(sid, stored, true)
	t := &pending{id: id, sid: sid, messageID: in.MessageID, userAt: stored[0].CreatedAt}
	if stored[0].Duplicate {
		// The message came before. Its answer may be stored, or its turn
		// may run here now; otherwise a runtime died (or was stopped)
		// mid-turn, and the turn resumes from its last stored step.
		dup, err := m.resumeOrAnswer(ctx, t, stored[0])
		if dup != nil || err != nil {
			return nil, dup, err
		}
	}
	history, err := m.history(ctx, id) // read only: the loop works on a copy
	if err != nil {
		return nil, nil, err
	}
	g := m.generation()
	history = m.withUploadImages(g, history, text, uploads.images)
	system := m.systemPrompt(ctx, g, id, in.Text)
	history, compressed, err := m.compress(ctx, g, id, system, history, false)
	if err != nil {
		return nil, nil, err
	}
	if compressed {
		if err := m.markCompressed(ctx, sid, stored[0].CreatedAt); err != nil {
			return nil, nil, err
		}
	}
	// Marked running before the lock goes, so a redelivery of this message
	// cannot start the same turn again (see unfinished).
	t.ctx, t.cancel = context.WithCancelCause(ctx)
	t.system, t.history, t.gen = system, history, g
	t.running = m.setRunning(sid, in.MessageID, t.cancel)
	return t, nil, nil
}

// systemPrompt is the agent's system prompt with what Config.Prompt adds for
// this turn.
func (m *Manager) systemPrompt(ctx context.Context, g *Generation, id ID, text string) string {
	if g.Prompt == nil {
		return g.System
	}
	return JoinSections(g.System, g.Prompt(ctx, PromptInput{SessionID: id, Text: text}))
}

// JoinSections joins two sections of a system prompt, either of which may
// be empty.
func JoinSections(a, b string) string {
	switch {
	case b == "":
		return a
	case a == "":
		return b
	}
	return a + "\n\n" + b
}

// run is phase 2: the agent loop, without the session lock, while a
// heartbeat renews the lease.
func (m *Manager) run(ctx context.Context, t *pending, in Inbound) {
	stopHeartbeat := m.heartbeat(t.ctx, t.sid, t.cancel)
	t.files = m.newTurnFiles(ctx, t.sid, in.Sink)
	t.out, t.err = t.gen.Loop.Run(t.ctx, agent.Input{
		System: t.system, History: t.history, Stream: in.Stream, Sink: t.files.emit,
		Env:        tool.Env{Workspace: m.cfg.Workspace(t.id), SessionID: t.sid, Agent: m.cfg.Agent, Approver: in.Approver, Canvas: in.Canvas},
		Checkpoint: func(_ context.Context, msg llm.Message) error { return m.checkpoint(ctx, t, msg) },
		StepsDone:  t.stepsDone,
		Steer:      m.steer(t.sid),
	})
	stopHeartbeat()
	t.userStopped = errors.Is(context.Cause(t.ctx), errStopped)
	t.cut = t.err != nil && t.ctx.Err() != nil && !t.userStopped
	t.cancel(nil)
	m.endRunning(t.running)
}

// finish is phase 3: persist what the turn produced, even when the user
// stopped it or it failed, so the tool-call chain stays whole (the text a
// stopped turn streamed is kept, marked). A turn cancelled by a shutdown or
// a lost lease stores nothing more than its checkpoints: its next owner
// resumes it from there, and reports the call that was running as
// interrupted rather than running it again.
func (m *Manager) finish(ctx context.Context, t *pending) (Reply, error) {
	unlock := m.lock(t.sid)
	defer unlock()
	defer m.forgetRunning(t)
	reply := Reply{SessionID: t.sid, Output: t.out, Attachments: t.files.attachments()}
	if t.cut {
		return reply, errors.Join(t.err, fmt.Errorf("%w: turn of session %q was cut short; it resumes from its last stored step", ErrInterrupted, t.sid))
	}
	// A cancelled turn must still be recorded: use a context that outlives
	// the caller's.
	pctx := context.WithoutCancel(ctx)
	if news := t.files.messages(t.out, t.userStopped); len(news) > 0 {
		// The checkpointed ones are stored already (storing them again
		// would be a no-op, but costs a round trip).
		if len(news) > t.checkpointed {
			if err := m.storeTurn(pctx, t, t.checkpointed, news[t.checkpointed:]...); err != nil {
				return reply, errors.Join(t.err, err)
			}
		}
		if t.out.Compressed {
			if err := m.markCompressed(pctx, t.sid, t.userAt); err != nil {
				return reply, errors.Join(t.err, err)
			}
		}
		if err := m.autoTitle(pctx, t.sid); err != nil {
			return reply, errors.Join(t.err, err)
		}
	}
	if t.err != nil {
		return reply, t.err
	}
	reply.Text = t.out.Final
	return reply, nil
}

// steer returns the turn's agent.Input.Steer: the session's pending steer
// signals (nil without Config.Signals).
func (m *Manager) steer(sid string) func(context.Context) (string, func(context.Context) error) {
	if m.cfg.Signals == nil {
		return nil
	}
	return func(ctx context.Context) (string, func(context.Context) error) {
		text, commit, err := m.cfg.Signals.Take(ctx, sid, true)
		if err != nil || text == "" {
			return "", nil // a signal not read now is read at the next boundary or turn
		}
		return "[While you were working]\n" + text, commit
	}
}

// heartbeat renews the session lease every third of its TTL until stopped; a
// lost lease cancels the turn (another runtime owns the session now).
func (m *Manager) heartbeat(ctx context.Context, sid string, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := m.cfg.Clock.NewTicker(m.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C():
				err := m.cfg.Store.RenewLease(ctx, sid, m.cfg.Holder, m.cfg.LeaseTTL)
				if errors.Is(err, store.ErrLeaseLost) {
					m.mu.Lock()
					m.dropHeld(sid)
					m.mu.Unlock()
					cancel(err)
					return
				}
				if err == nil {
					m.markLeased(sid)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// leaseFresh reports whether this manager took or renewed the session's
// lease less than a third of its TTL ago.
func (m *Manager) leaseFresh(sid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.held[sid]
	return ok && m.cfg.Clock.Since(at) < m.cfg.LeaseTTL/3
}

func (m *Manager) markLeased(sid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[sid]; !ok && m.cfg.Leased != nil {
		m.cfg.Leased.Inc()
	}
	m.held[sid] = m.cfg.Clock.Now()
}

// dropHeld forgets a session whose lease this manager gave up or lost
// (under m.mu).
func (m *Manager) dropHeld(sid string) {
	if _, ok := m.held[sid]; ok && m.cfg.Leased != nil {
		m.cfg.Leased.Dec()
	}
	delete(m.held, sid)
	delete(m.hist, sid)
}

// runningTurn is a turn in progress in this manager.
type runningTurn struct {
	cancel context.CancelCauseFunc
	// messageID is the message whose turn it is.
	messageID string
	// done is closed once phase 3 has stored the turn's results (or, for a
	// turn cut short, decided to store nothing more): the turn stays
	// registered until then, so that its message coming again waits for
	// the answer rather than resuming the turn a second time.
	done chan struct{}
	// ended: the loop has ended, nothing is left to stop (under
	// Manager.mu). cut: the turn was cut short (set before done closes).
	ended, cut bool
}

func (m *Manager) setRunning(sid, messageID string, cancel context.CancelCauseFunc) *runningTurn {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &runningTurn{messageID: messageID, cancel: cancel, done: make(chan struct{})}
	m.running[sid] = r
	return r
}

// endRunning marks the end of a turn's loop.
func (m *Manager) endRunning(r *runningTurn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.ended = true
}

// forgetRunning unregisters turn t once phase 3 is done with it (under the
// session lock), unless another turn of the session took its place.
func (m *Manager) forgetRunning(t *pending) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := t.running
	r.cut = t.cut
	close(r.done)
	if m.running[t.sid] == r {
		delete(m.running, t.sid)
	}
}

// runningTurnOf returns the session's turn running here, or nil.
func (m *Manager) runningTurnOf(sid string) *runningTurn {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running[sid]
}

// Stop cancels the running turn of a session (the /stop command); it reports
// whether one was running. The turn's work so far is stored, and the text
// it streamed becomes its reply, marked with StoppedMarker.
func (m *Manager) Stop(sid string) bool {
	m.mu.Lock()
	r := m.running[sid]
	live := r != nil && !r.ended
	m.mu.Unlock()
	if live {
		r.cancel(errStopped)
	}
	return live
}

// Release gives up the lease of a session (idle exit).
func (m *Manager) Release(ctx context.Context, sid string) error {
	m.mu.Lock()
	m.dropHeld(sid)
	m.mu.Unlock()
	return m.cfg.Store.ReleaseLease(ctx, sid, m.cfg.Holder)
}

// ReleaseAll gives up every lease this manager took, so another runtime can
// take the sessions over at once (clean shutdown).
func (m *Manager) ReleaseAll(ctx context.Context) error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.held))
	for id := range m.held {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, m.Release(ctx, id))
	}
	return errors.Join(errs...)
}

// autoTitle names a dialog after its first request once it has enough
// messages, while the title is still the default.
func (m *Manager) autoTitle(ctx context.Context, sid string) error {
	m.mu.Lock()
	h := m.hist[sid]
	titled := h != nil && h.titled
	m.mu.Unlock()
	if titled {
		return nil
	}
	s, err := m.cfg.Store.GetSession(ctx, sid)
	if err != nil {
		return err
	}
	if !s.TitleIsDefault {
		m.markTitled(sid)
		return nil
	}
	n, err := m.cfg.Store.CountMessages(ctx, sid)
	if err != nil || n < autoTitleMessages {
		return err
	}
	first, err := m.cfg.Store.LoadMessages(ctx, sid, store.LoadOptions{})
	if err != nil {
		return err
	}
	for _, msg := range first {
		if msg.Role == llm.RoleUser && strings.TrimSpace(msg.Content) != "" {
			title := titleFrom(titleText(msg.Content))
			f := false
			if _, err := m.cfg.Store.UpdateSession(ctx, sid, store.SessionUpdate{Title: &title, TitleIsDefault: &f}); err != nil {
				return err
			}
			m.markTitled(sid)
			return nil
		}
	}
	return nil
}

// markTitled notes that a cached session is titled (see storedHistory).
func (m *Manager) markTitled(sid string) {
	m.mu.Lock()
	if h := m.hist[sid]; h != nil {
		h.titled = true
	}
	m.mu.Unlock()
}

// titleFrom makes a title of at most 48 characters from a first message.
func titleFrom(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(t) <= 48 {
		return t
	}
	r := []rune(t)[:47]
	return strings.TrimSpace(string(r)) + "…"
}
