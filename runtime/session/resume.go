package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// A turn's progress is stored step by step (checkpoints): the assistant
// message that calls tools before any of them runs, and each tool result as
// soon as its call has finished. A message handled again after its runtime
// died (a redelivery, a client's retry with the same id) therefore finds
// either its stored answer, or the turn's stored steps to resume from: the
// calls that finished keep their results and never run again, and a call
// that was running when the runtime died is recorded as interrupted
// (InterruptedResult) for the model to judge.

// ErrInterrupted is the error of a turn that a shutdown or a lost lease cut
// short before its answer: its checkpoints are stored, and whoever handles
// its message next resumes it from there.
var ErrInterrupted = errors.New("turn interrupted")

// ErrUnanswered is the error of a message received before whose turn
// stored no answer (it failed) and which a later message of the session
// has overtaken, so it cannot be resumed: only sending it again with a new
// id gets it answered.
var ErrUnanswered = errors.New("message has no answer")

// InterruptedResult is the result recorded for a tool call that was
// running when its runtime stopped, found when the turn resumes.
const InterruptedResult = "error: this call was interrupted: the runtime stopped while it ran (a crash or a restart), " +
	"before its result was recorded. It was not run again and may have completed in part or in full: " +
	"check its effects before running it again."

// turnMessageID is the id of the n-th message (from 0) a turn stores after
// its user message.
func turnMessageID(userMessageID string, n int) string {
	return fmt.Sprintf("%s/%d", userMessageID, n)
}

// storedTurn is what the store holds of a turn: the messages after its user
// message, up to the next user message.
type storedTurn struct {
	// n is how many messages the turn stored, steps how many of them are
	// the model's (one per model call).
	n, steps int
	// answer is the turn's reply (its last assistant message without tool
	// calls); answered says there is one.
	answer   string
	answered bool
	// overtaken: a later user message follows, so the turn cannot go on.
	overtaken bool
	// open are the calls of the turn's last step without a stored result.
	open []llm.ToolCall
}

// readTurn reads a turn from the messages stored after its user message.
func readTurn(after []store.Message) storedTurn {
	var t storedTurn
	results := map[string]bool{}
	for _, msg := range after {
		if msg.Role == llm.RoleUser {
			t.overtaken = true
			break
		}
		t.n++
		switch msg.Role {
		case llm.RoleAssistant:
			t.steps++
			t.open = msg.ToolCalls
			if len(msg.ToolCalls) == 0 {
				t.answer, t.answered = msg.Content, true
			}
		case llm.RoleTool:
			results[msg.ToolCallID] = true
		}
	}
	open := t.open[:0:0]
	for _, c := range t.open {
		if !results[c.ID] {
			open = append(open, c)
		}
	}
	t.open = open
	return t
}

// duplicate is a message received before whose turn is not to run (again)
// here: prepare's outcome for it.
type duplicate struct {
	user store.Message
	turn storedTurn
	// running, when not nil, is the session's turn running in this
	// manager: the answer is read once it is done.
	running *runningTurn
}

// resumeOrAnswer handles a message whose user message was stored before.
// It returns the duplicate to answer when the turn is answered, overtaken or
// running here; otherwise it prepares t to resume the turn: numbering goes
// on after the stored messages, and the calls of the last stored step
// without a result are recorded as interrupted, never run again. Called in
// phase 1, under the session lock.
func (m *Manager) resumeOrAnswer(ctx context.Context, t *pending, user store.Message) (*duplicate, error) {
	if r := m.runningTurnOf(t.sid); r != nil {
		return &duplicate{user: user, running: r}, nil
	}
	after, err := m.cfg.Store.LoadMessages(ctx, t.sid, store.LoadOptions{AfterSeq: user.Seq})
	if err != nil {
		return nil, fmt.Errorf("failed to load the turn of message %q: %w", user.ID, err)
	}
	st := readTurn(after)
	if st.answered || st.overtaken {
		return &duplicate{user: user, turn: st}, nil
	}
	t.base, t.stepsDone = st.n, st.steps
	if len(st.open) == 0 {
		return nil, nil
	}
	results := make([]llm.Message, len(st.open))
	for i, c := range st.open {
		results[i] = llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: InterruptedResult, IsError: true}
	}
	if err := m.storeTurn(ctx, t, 0, results...); err != nil {
		return nil, err
	}
	t.base += len(results)
	return nil, nil
}

// answerDuplicate answers a message received before with the answer its
// turn stored, waiting first for the session's turn running here (which
// may be its own). A message without an answer gets ErrUnanswered.
func (m *Manager) answerDuplicate(ctx context.Context, id ID, dup *duplicate) (Reply, error) {
	sid := id.String()
	reply := Reply{SessionID: sid, Duplicate: true}
	if dup.running != nil {
		select {
		case <-dup.running.done: // its results are stored
		case <-ctx.Done():
			return reply, ctx.Err()
		}
		if dup.running.cut && dup.running.messageID == dup.user.ID {
			return reply, fmt.Errorf("%w: turn of message %q was cut short; it resumes from its last stored step when the message comes again", ErrInterrupted, dup.user.ID)
		}
		after, err := m.cfg.Store.LoadMessages(ctx, sid, store.LoadOptions{AfterSeq: dup.user.Seq})
		if err != nil {
			return reply, fmt.Errorf("failed to load the answer of message %q: %w", dup.user.ID, err)
		}
		dup.turn = readTurn(after)
	}
	if !dup.turn.answered {
		return reply, fmt.Errorf("%w: message %q was received before and its turn failed before an answer; "+
			"send it again with a new id to have it answered", ErrUnanswered, dup.user.ID)
	}
	reply.Text = dup.turn.answer
	return reply, nil
}

// checkpoint stores one message of the running turn as soon as the loop
// has it (agent.Input.Checkpoint). A result that comes after a shutdown or
// a lost lease cut the turn is not stored: the call was cut short, and the
// turn's next owner records it as interrupted.
func (m *Manager) checkpoint(ctx context.Context, t *pending, msg llm.Message) error {
	if t.ctx.Err() != nil && !errors.Is(context.Cause(t.ctx), errStopped) {
		return fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(t.ctx))
	}
	if err := m.storeTurn(context.WithoutCancel(ctx), t, t.checkpointed, t.files.decorate(msg)); err != nil {
		return err
	}
	t.checkpointed++
	return nil
}

// storeTurn stores messages of the turn, the first of them being the
// first-th of this run, with the ids that make storing one again a no-op.
func (m *Manager) storeTurn(ctx context.Context, t *pending, first int, msgs ...llm.Message) error {
	sm := make([]store.Message, len(msgs))
	for i, msg := range msgs {
		sm[i] = store.FromLLM(msg)
		sm[i].ID = turnMessageID(t.messageID, t.base+first+i)
	}
	if n := len(sm); n > 0 {
		sm[n-1].Meta = usageMeta(t, sm[n-1])
	}
	stored, err := m.cfg.Store.AppendMessages(ctx, t.sid, sm...)
	if err != nil {
		return fmt.Errorf("failed to store turn of session %q: %w", t.sid, err)
	}
	m.extendHistory(t.sid, stored, false)
	return nil
}

// usageMeta is the Meta of a stored message with, on the turn's answer (an
// assistant message calling no tool, stored once the loop ended), the
// turn's token counts.
func usageMeta(t *pending, m store.Message) map[string]string {
	if t.out == nil || m.Role != llm.RoleAssistant || len(m.ToolCalls) > 0 {
		return m.Meta
	}
	u := t.out.Usage
	if u.InputTokens == 0 && u.OutputTokens == 0 {
		return m.Meta
	}
	meta := maps.Clone(m.Meta)
	if meta == nil {
		meta = map[string]string{}
	}
	meta[store.MetaTokensIn], meta[store.MetaTokensOut] = strconv.Itoa(u.InputTokens), strconv.Itoa(u.OutputTokens)
	return meta
}

// UnfinishedTurn is a turn whose runtime stopped before its answer: handling
// its user message again resumes it.
type UnfinishedTurn struct {
	Session   ID
	MessageID string
	Text      string
}

// maxResumeScan bounds the sessions and the messages of one session that
// Unfinished reads.
const maxResumeScan = 500

// Unfinished lists the agent's turns left without an answer mid-way in the
// current dialogs of chats active since since: the last message is a step
// of the turn's tool chain. A runtime whose queue does not survive a
// restart (embedded mode's in-process bus) queues them again at start, so a
// turn cut short by a crash goes on without waiting for its client to
// resend the message. (A turn that failed at a later step, a model error,
// is among them too: it gets one more try.)
func (m *Manager) Unfinished(ctx context.Context, since time.Time) ([]UnfinishedTurn, error) {
	list, err := m.cfg.Store.ListSessions(ctx, store.SessionFilter{Limit: maxResumeScan})
	if err != nil {
		return nil, fmt.Errorf("failed to list sessions: %w", err)
	}
	var out []UnfinishedTurn
	for _, s := range list {
		if s.LastMessageAt.Before(since) {
			break // newest first
		}
		if s.Agent != m.cfg.Agent {
			continue
		}
		u, ok, err := m.unfinishedIn(ctx, s)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, u)
		}
	}
	return out, nil
}

// unfinishedIn returns the unfinished turn of a session, if it has one and
// is its chat's current dialog.
func (m *Manager) unfinishedIn(ctx context.Context, s store.Session) (UnfinishedTurn, bool, error) {
	last, err := m.cfg.Store.LoadMessages(ctx, s.ID, store.LoadOptions{Last: maxResumeScan})
	if err != nil {
		return UnfinishedTurn{}, false, fmt.Errorf("failed to load session %q: %w", s.ID, err)
	}
	if n := len(last); n == 0 || (last[n-1].Role == llm.RoleAssistant && len(last[n-1].ToolCalls) == 0) {
		return UnfinishedTurn{}, false, nil
	}
	i := len(last) - 1
	for i >= 0 && last[i].Role != llm.RoleUser {
		i--
	}
	if i < 0 || i == len(last)-1 {
		// A turn longer than the scan, or one that stored no step: it
		// may have failed before its model answered (no model, a model
		// error), and its user did not ask again. It resumes when its
		// message comes again.
		return UnfinishedTurn{}, false, nil
	}
	cur, err := m.cfg.Store.CurrentDialog(ctx, s.Channel, s.ChatID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && cur != s.DialogID) {
		return UnfinishedTurn{}, false, nil // the chat moved to another dialog
	}
	if err != nil {
		return UnfinishedTurn{}, false, fmt.Errorf("failed to read current dialog of session %q: %w", s.ID, err)
	}
	id := ID{Channel: s.Channel, ChatID: s.ChatID, DialogID: s.DialogID}
	return UnfinishedTurn{Session: id, MessageID: last[i].ID, Text: last[i].Content}, true, nil
}
