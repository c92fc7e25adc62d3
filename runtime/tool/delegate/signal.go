package delegate

import (
	"context"
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// SignalName is the name of the tool background runs signal their parent
// with. It is not in the policy catalog: every background run gets it and
// no chat does, whatever the policy (like complete_scheduled_run).
const SignalName = "emit_signal"

// maxSignalBytes bounds one signal's message.
const maxSignalBytes = 8 << 10

// SignalStore is what the signal tools need of the store.
type SignalStore interface {
	GetAgentRun(ctx context.Context, id string) (store.AgentRun, error)
	CreateAgentSignal(ctx context.Context, s store.AgentSignal) (store.AgentSignal, error)
	ListAgentSignals(ctx context.Context, f store.AgentSignalFilter) ([]store.AgentSignal, error)
	MarkAgentSignals(ctx context.Context, ids []string, runID string, state store.SignalState) (int, error)
}

// SignalArgs are the arguments of emit_signal.
type SignalArgs struct {
	Message  string `json:"message" jsonschema:"what the agent that started you needs to know now (a finding, progress, a problem)"`
	Delivery string `json:"delivery,omitempty" jsonschema:"queue (default): it reads it at its next turn; steer: it reads it during its current turn, at the next pause between tool calls"`
	Kind     string `json:"kind,omitempty" jsonschema:"a short label: progress, finding, blocker, question"`
}

// NewSignal returns emit_signal for background runs: the run (from the
// call's context, WithRun) sends a structured signal to its parent session.
func NewSignal(s SignalStore) tool.Tool {
	return tool.New(SignalName, "Send a short signal to the agent that started this background run, before your final answer: "+
		"queue waits for its next turn, steer reaches its current turn at the next pause between its tool calls. "+
		"Use it for what cannot wait for your result; your final answer still goes back as usual.",
		func(ctx context.Context, _ tool.Env, a SignalArgs) (tool.Result, error) {
			return emitSignal(ctx, s, a)
		}, tool.Enum("delivery", string(store.SignalQueue), string(store.SignalSteer)))
}

func emitSignal(ctx context.Context, s SignalStore, a SignalArgs) (tool.Result, error) {
	id := runOf(ctx)
	if id == "" {
		return tool.Errorf("error: emit_signal works in background runs only"), nil
	}
	msg := strings.TrimSpace(a.Message)
	switch {
	case msg == "":
		return tool.Errorf("error: give a message"), nil
	case len(msg) > maxSignalBytes:
		return tool.Errorf("error: the message has %d bytes; a signal carries at most %d: say it shorter, the details go in your final answer", len(msg), maxSignalBytes), nil
	}
	delivery := store.SignalDelivery(a.Delivery)
	if delivery == "" {
		delivery = store.SignalQueue
	}
	if delivery != store.SignalQueue && delivery != store.SignalSteer {
		return tool.Errorf("error: delivery %q is not queue or steer", a.Delivery), nil
	}
	run, err := s.GetAgentRun(ctx, id)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to get run %q: %w", id, err)
	}
	if run.Mode != store.RunBackground {
		return tool.Errorf("error: emit_signal works in background runs only"), nil
	}
	if run.Terminal() {
		return tool.Errorf("error: this run has ended (%s); nobody reads its signals", run.Status), nil
	}
	sig, err := s.CreateAgentSignal(context.WithoutCancel(ctx), store.AgentSignal{ID: store.NewID(), RunID: id, SessionID: run.SessionID,
		Delivery: delivery, Kind: strings.TrimSpace(a.Kind), Body: msg})
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to store a signal of run %q: %w", id, err)
	}
	return tool.Text(fmt.Sprintf("signal %s sent (%s)", sig.ID, delivery)), nil
}

// SignalInbox hands a parent session the signals its background runs sent
// (session.Config.Signals): steer signals during a turn, at the boundary
// between two tool batches, and every pending one at the start of a turn.
type SignalInbox struct{ Store SignalStore }

// Take returns the pending signals of a session as text for the model
// (steer ones only when steerOnly), and commit, which marks them consumed
// once that text is stored. No signals is "", nil.
func (in SignalInbox) Take(ctx context.Context, sessionID string, steerOnly bool) (string, func(context.Context) error, error) {
	f := store.AgentSignalFilter{SessionID: sessionID, State: store.SignalPending, Limit: 50}
	if steerOnly {
		f.Delivery = store.SignalSteer
	}
	sigs, err := in.Store.ListAgentSignals(ctx, f)
	if err != nil || len(sigs) == 0 {
		return "", nil, err
	}
	ids := make([]string, len(sigs))
	var b strings.Builder
	for i, s := range sigs {
		ids[i] = s.ID
		label := "Signal"
		if s.Kind != "" {
			label += " (" + s.Kind + ")"
		}
		fmt.Fprintf(&b, "\n\n[%s from background run %s, %s delivery]\n%s", label, s.RunID, s.Delivery, s.Body)
	}
	commit := func(ctx context.Context) error {
		_, err := in.Store.MarkAgentSignals(ctx, ids, "", store.SignalConsumed)
		return err
	}
	return strings.TrimPrefix(b.String(), "\n\n"), commit, nil
}
