package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/turn"
)

// StoppedMarker ends the assistant message stored for a turn the user
// stopped, after the text streamed so far, so that both the model (in later
// turns) and the user (in the history) see the answer was cut short.
const StoppedMarker = "[stopped]"

// errStopped is the cancel cause of a turn stopped by Stop (/stop, the stop
// frame), as opposed to a shutdown or a lost lease.
var errStopped = errors.New("turn stopped by the user")

// turnFiles handles the files of one turn: it stores the artifacts that tools
// present to the user as their results arrive, puts references on the
// tool_result and final events before passing them on, and adds the
// references to the messages stored for the turn (markdown links, which the
// history, the web UI and the model read). Artifacts a tool keeps for the
// model (PresentToUser false) are not stored.
type turnFiles struct {
	// ctx outlives the turn: files produced before a stop are kept.
	ctx   context.Context
	sid   string
	saver ArtifactStore
	url   func(store.Artifact) string
	sink  func(turn.Event)

	mu      sync.Mutex
	results []toolFiles       // one per tool_result event, in order
	all     []turn.Attachment // every file of the turn, in order
}

// toolFiles are the files of one tool result.
type toolFiles struct {
	callID string
	refs   []turn.Attachment
	// notes say which files could not be stored, and why.
	notes []string
}

func (m *Manager) newTurnFiles(ctx context.Context, sid string, sink func(turn.Event)) *turnFiles {
	return &turnFiles{ctx: context.WithoutCancel(ctx), sid: sid, saver: m.cfg.Artifacts, url: m.cfg.ArtifactURL, sink: sink}
}

// emit is the loop's sink: it stamps the session and stores the files.
func (t *turnFiles) emit(e turn.Event) {
	e.Session = t.sid
	switch e.Kind {
	case turn.EventToolResult:
		if e.ToolResult != nil {
			e = t.toolResult(e)
		}
	case turn.EventFinal:
		e.Attachments = t.attachments()
	}
	if t.sink != nil {
		t.sink(e)
	}
}

// toolResult stores the presented artifacts of a tool result and returns
// the event with their references (and a note on the files that could not
// be stored).
func (t *turnFiles) toolResult(e turn.Event) turn.Event {
	tf := toolFiles{callID: e.ToolResult.CallID}
	for _, a := range e.ToolResult.Artifacts {
		if !a.PresentToUser {
			continue
		}
		if t.saver == nil {
			tf.notes = append(tf.notes, fmt.Sprintf("%s was not attached: this runtime has no artifact store", a.Name))
			continue
		}
		rec, err := t.saver.Save(t.ctx, t.sid, a.Name, a.MediaType, a.Data)
		if err != nil {
			tf.notes = append(tf.notes, fmt.Sprintf("%s was not attached: %v", a.Name, err))
			continue
		}
		ref := turn.Attachment{ID: rec.ID, Name: rec.Name, MediaType: rec.MediaType}
		if t.url != nil {
			ref.URL = t.url(rec)
		}
		tf.refs = append(tf.refs, ref)
	}
	t.mu.Lock()
	t.results = append(t.results, tf)
	t.all = append(t.all, tf.refs...)
	t.mu.Unlock()
	if len(tf.refs) > 0 || len(tf.notes) > 0 {
		tr := *e.ToolResult
		tr.Content = withNotes(tr.Content, tf.notes)
		e.ToolResult = &tr
		e.Attachments = tf.refs
	}
	return e
}

// attachments returns every file of the turn so far.
func (t *turnFiles) attachments() []turn.Attachment {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.all)
}

// messages returns the messages to store for a turn: the loop's new
// messages with the references of their files, plus, for a turn the user
// stopped, an assistant message with the text streamed so far and
// StoppedMarker. The files of the whole turn are appended to its last
// assistant message when that is the turn's reply (no tool calls), so a
// file sent to this conversation (send_message) reaches the reply.
func (t *turnFiles) messages(out *agent.Output, userStopped bool) []llm.Message {
	if out == nil {
		return nil
	}
	msgs := slices.Clone(out.New)
	for i := range msgs {
		msgs[i] = t.decorate(msgs[i])
	}
	t.mu.Lock()
	all := t.all
	t.mu.Unlock()
	if userStopped && out.StopReason == agent.StopCancelled {
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: stoppedText(out.Partial)})
	}
	if n := len(msgs); n > 0 && len(all) > 0 && msgs[n-1].Role == llm.RoleAssistant && len(msgs[n-1].ToolCalls) == 0 {
		msgs[n-1].Content = withFiles(msgs[n-1].Content, all)
	}
	return msgs
}

// decorate returns a tool message with the references of its call's files
// and the notes on those that could not be stored; other messages as they
// are.
func (t *turnFiles) decorate(m llm.Message) llm.Message {
	if m.Role != llm.RoleTool {
		return m
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.results {
		if r.callID == m.ToolCallID {
			m.Content = withFiles(withNotes(m.Content, r.notes), r.refs)
			break
		}
	}
	return m
}

// stoppedText is the stored reply of a stopped turn.
func stoppedText(partial string) string {
	p := strings.TrimRightFunc(partial, unicode.IsSpace)
	if p == "" {
		return StoppedMarker
	}
	return p + "\n\n" + StoppedMarker
}

// withFiles appends the markdown links of files to a message's text.
func withFiles(text string, refs []turn.Attachment) string {
	if len(refs) == 0 {
		return text
	}
	md := turn.AttachmentsMarkdown(refs)
	if strings.TrimSpace(text) == "" {
		return md
	}
	return text + "\n\n" + md
}

// withNotes appends notes in parentheses, one per line.
func withNotes(text string, notes []string) string {
	for _, n := range notes {
		if text != "" {
			text += "\n"
		}
		text += "(" + n + ")"
	}
	return text
}
