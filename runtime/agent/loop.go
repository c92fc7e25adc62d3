// Package agent runs the stateless tool-calling loop of one turn: call the
// model, run the tools it asks for, feed the results back, until a final
// answer or the step limit. It knows no session, bus or channel: history comes
// in, new messages and events go out.
package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// StopReason says how a turn ended.
type StopReason string

// How a turn ends.
const (
	StopFinal     StopReason = "final"      // the model answered
	StopStepLimit StopReason = "step_limit" // MaxSteps model calls without a final answer
	StopCancelled StopReason = "cancelled"  // ctx was cancelled (/stop)
	// StopClientTools: the model called tools the client runs
	// (Input.ClientTools); Output.ClientCalls holds the calls.
	StopClientTools StopReason = "client_tools"
)

// DefaultMaxSteps bounds the model calls of one turn.
const DefaultMaxSteps = 25

// Loop is the agent loop. It holds no per-turn state and is safe for
// concurrent turns.
type Loop struct {
	Provider llm.Provider
	Tools    *tool.Registry
	// MaxSteps bounds model calls per turn (DefaultMaxSteps when 0).
	MaxSteps int
	// Compressor shrinks the history when the provider reports a context
	// overflow (one retry per turn). Optional.
	Compressor *Compressor
	// MaxTokens caps each model answer (provider default when 0).
	MaxTokens int
	// Images decides whether the images tools return (screenshots, image
	// files, MCP image content) reach the model as image parts; the zero
	// value sends a note in their place.
	Images Images
	// Observer is told of every tool call the loop runs (metrics).
	// Optional.
	Observer ToolObserver
	// Auditor records every tool call the loop runs (the audit log,
	// package audit). Optional.
	Auditor ToolAuditor
}

// ToolAuditor records the tool calls of turns (package audit implements
// it). It is called on the goroutine of the call, concurrently for a
// concurrent batch.
type ToolAuditor interface {
	// ToolCall is called as call starts, with the turn's environment
	// (agent, session); done is called with whether its result is an
	// error, before the model sees it.
	ToolCall(ctx context.Context, env tool.Env, call llm.ToolCall) (done func(isError bool))
}

// ToolObserver is told of the tool calls of turns (package metrics
// implements it). It is called on the goroutine of the call, concurrently
// for a concurrent batch.
type ToolObserver interface {
	// ToolStarted is called as a call of the tool named name starts (""
	// when the registry has no such tool: the name is the model's, not a
	// tool's); done is called with whether its result is an error.
	ToolStarted(ctx context.Context, name string) (done func(isError bool))
}

// Input is one turn.
type Input struct {
	// System is the system prompt without the tool list (added by the loop).
	System string
	// History ends with the new user message.
	History []llm.Message
	Env     tool.Env
	// Stream asks the provider for token deltas.
	Stream bool
	// Sink receives events; it must not block for long. Optional.
	Sink func(turn.Event)
	// Checkpoint, when set, persists the turn's progress as it is made: it
	// receives each assistant message that calls tools before any of those
	// tools runs, and each tool message as soon as its call has finished (in
	// the order of the calls), so that a turn interrupted by a crash resumes
	// from its last stored step and never runs a finished call again. An
	// error ends the turn before anything else runs (Output still holds
	// what was done, for the caller to store when it can).
	Checkpoint func(ctx context.Context, m llm.Message) error
	// StepsDone is how many model calls of this turn ran before this Run (a
	// turn resumed after a crash, whose History ends with those steps):
	// steps are numbered on from it and MaxSteps bounds the whole turn.
	StepsDone int
	// Settings are the client's model settings for every call of the turn.
	// Optional.
	Settings *llm.Settings
	// ClientTools are tools the client runs itself (an OpenAI client's
	// function tools): offered to the model beside the agent's, and a step
	// that calls one ends the turn (StopClientTools) without running the
	// agent's calls of that step. Optional.
	ClientTools []llm.ToolDef
	// Steer, when set, is asked at the end of each tool batch — the safe
	// boundary where the model is about to read the batch's results — for
	// text to put before the model now (steer signals of background runs).
	// The text joins the batch's last tool result before that result is
	// checkpointed (a message of its own there would end the turn for
	// readers of the stored history), and commit is called once it is
	// stored. Optional.
	Steer func(ctx context.Context) (text string, commit func(context.Context) error)
}

// Output is what a turn produced.
type Output struct {
	// History is the full conversation after the turn (compressed if the
	// provider overflowed), ready to persist.
	History []llm.Message
	// New are the messages this turn appended (assistant and tool messages).
	New        []llm.Message
	Final      string
	Usage      llm.Usage
	Steps      int
	StopReason StopReason
	// Compressed reports that History was compressed during the turn.
	Compressed bool
	Artifacts  []tool.Artifact
	// Partial is the text a cancelled turn's interrupted model call had
	// streamed (not in New: the call never finished). The caller decides
	// whether to keep it (the session runtime does when the user stopped
	// the turn).
	Partial string
	// ClientCalls are the calls of Input.ClientTools that ended the turn
	// (the last message of New holds them and no others).
	ClientCalls []llm.ToolCall
}

// SystemPrompt is the system prompt sent to the model: the agent's prompt and
// a one-line-per-tool summary (the schemas travel separately).
func SystemPrompt(base string, tools *tool.Registry) string {
	if tools == nil || tools.Len() == 0 {
		return base
	}
	var b strings.Builder
	b.Grow(len(base) + 64*tools.Len())
	b.WriteString(base)
	if base != "" {
		b.WriteString("\n\n")
	}
	b.WriteString("## Tools\n")
	b.WriteString(tools.Summary())
	return b.String()
}

// Run executes one turn. It returns the Output even with an error (for
// example on cancellation), so the caller can persist what happened; the
// history in it always has a valid tool-call chain.
func (l *Loop) Run(ctx context.Context, in Input) (*Output, error) {
	t := l.newTurnRun(in)
	for t.step = in.StepsDone + 1; t.step <= t.maxSteps; t.step++ {
		resp, retry, err := t.callModel(ctx)
		if err != nil {
			return t.out, err
		}
		if retry {
			t.step-- // a retry is not a step of its own
			continue
		}
		if done, err := t.act(ctx, t.answer(resp)); done || err != nil {
			return t.out, err
		}
	}
	t.stopAtStepLimit()
	return t.out, nil
}

// turnRun is the state of one Run: what every step needs and what the turn
// has gathered so far. The Loop itself holds none of it.
type turnRun struct {
	l        *Loop
	in       Input
	out      *Output
	emit     func(turn.Event)
	maxSteps int
	reg      *tool.Registry
	system   string
	defs     []llm.ToolDef
	onDelta  func(llm.Delta) // nil unless the turn streams
	step     int
	// partial is the text the current model call streamed so far;
	// providers call onDelta synchronously, inside Complete.
	partial strings.Builder
	// overflowRetried and truncRetried allow one retry each per turn.
	overflowRetried, truncRetried bool
}

func (l *Loop) newTurnRun(in Input) *turnRun {
	t := &turnRun{l: l, in: in, out: &Output{History: RepairToolChains(in.History)}}
	t.emit, t.maxSteps, t.reg = l.defaults(in)
	t.system = SystemPrompt(in.System, t.reg)
	t.defs = append(slices.Clip(t.reg.Definitions()), in.ClientTools...) // client tools beside the agent's
	if in.Stream {
		t.onDelta = func(d llm.Delta) {
			t.partial.WriteString(d.Text)
			t.emit(turn.Event{Kind: turn.EventDelta, Step: t.step, Text: d.Text})
		}
	}
	return t
}

// callModel makes the step's model call. retry says that the call failed
// in a way the turn recovers from and is to be made again.
func (t *turnRun) callModel(ctx context.Context) (resp *llm.Response, retry bool, err error) {
	req := llm.Request{System: t.system, Messages: t.l.Images.limit(t.out.History), Tools: t.defs, MaxTokens: t.l.MaxTokens}
	t.in.Settings.Apply(&req)
	t.partial.Reset()
	ctx = turn.WithNotices(ctx, func(text string) { t.emit(turn.Event{Kind: turn.EventNotice, Step: t.step, Text: text}) })
	resp, err = t.l.Provider.Complete(ctx, req, t.onDelta)
	if err == nil {
		return resp, false, nil
	}
	retry, err = t.recoverModelError(ctx, err)
	return nil, retry, err
}

// recoverModelError handles a failed model call: a cancelled turn ends
// with what the call had streamed; a context overflow compresses the
// history and a cut stream asks again (once each per turn); any other error
// ends the turn.
func (t *turnRun) recoverModelError(ctx context.Context, err error) (retry bool, _ error) {
	switch {
	case ctx.Err() != nil:
		t.out.StopReason, t.out.Partial = StopCancelled, t.partial.String()
		return false, fmt.Errorf("turn cancelled: %w", ctx.Err())
	case errors.Is(err, llm.ErrContextOverflow) && !t.overflowRetried && t.l.Compressor != nil:
		t.overflowRetried = true
		compressed, stats, cerr := t.l.Compressor.Compress(ctx, t.system, t.out.History, t.defs, true)
		if cerr != nil {
			return false, fmt.Errorf("failed to compress history after context overflow: %w", errors.Join(err, cerr))
		}
		t.out.History, t.out.Compressed = compressed, true
		t.emit(turn.Event{Kind: turn.EventCompressed, Step: t.step, Text: stats.String()})
		return true, nil
	case errors.Is(err, llm.ErrTruncated) && !t.truncRetried:
		// A cut stream carries no usable answer: ask once more.
		t.truncRetried = true
		return true, nil
	default:
		return false, fmt.Errorf("failed to call model at step %d: %w", t.step, err)
	}
}

// answer counts the step and its usage and returns the model's message
// as the assistant's, every tool call with an ID.
func (t *turnRun) answer(resp *llm.Response) llm.Message {
	t.out.Steps = t.step
	t.out.Usage.Add(resp.Usage)
	u := resp.Usage
	t.emit(turn.Event{Kind: turn.EventUsage, Step: t.step, Usage: &u})
	msg := resp.Message
	msg.Role = llm.RoleAssistant
	for i := range msg.ToolCalls {
		if msg.ToolCalls[i].ID == "" {
			msg.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", t.step, i)
		}
	}
	return msg
}

// act records the model's message and does what it asks: it ends the turn
// (done) when the message calls client tools or calls none, and otherwise
// runs the agent's tool calls, checkpointed before any of them runs.
func (t *turnRun) act(ctx context.Context, msg llm.Message) (done bool, _ error) {
	if t.out.endForClient(msg, t.in.ClientTools) {
		return true, nil
	}
	t.out.add(msg)
	if len(msg.ToolCalls) == 0 {
		t.out.Final, t.out.StopReason = msg.Content, StopFinal
		t.emit(turn.Event{Kind: turn.EventFinal, Step: t.step, Text: msg.Content})
		return true, nil
	}
	if err := checkpoint(ctx, t.in.Checkpoint, msg); err != nil {
		// Not one of these calls may run before they are on record:
		// a crash would lose that they did.
		return true, err
	}
	if err := t.l.callTools(ctx, t.reg, t.in, t.step, msg.ToolCalls, t.out, t.emit); err != nil {
		return true, err
	}
	if ctx.Err() != nil {
		t.out.StopReason = StopCancelled
		return true, fmt.Errorf("turn cancelled: %w", ctx.Err())
	}
	return false, nil
}

// stopAtStepLimit ends a turn that used its steps without a final answer,
// with an answer that says so.
func (t *turnRun) stopAtStepLimit() {
	t.out.StopReason = StopStepLimit
	t.out.Final = fmt.Sprintf("I stopped after %d steps without finishing. Tell me to continue, or narrow the task.", t.maxSteps)
	t.out.add(llm.Message{Role: llm.RoleAssistant, Content: t.out.Final})
	t.emit(turn.Event{Kind: turn.EventFinal, Step: t.out.Steps, Text: t.out.Final})
}

// endForClient ends the turn when the model's message calls client tools:
// the message is kept with only those calls (the agent's calls of the step
// are not run) and the turn stops with StopClientTools.
func (o *Output) endForClient(msg llm.Message, tools []llm.ToolDef) bool {
	if len(tools) == 0 {
		return false
	}
	var calls []llm.ToolCall
	for _, c := range msg.ToolCalls {
		if slices.ContainsFunc(tools, func(t llm.ToolDef) bool { return t.Name == c.Name }) {
			calls = append(calls, c)
		}
	}
	if calls == nil {
		return false
	}
	msg.ToolCalls = calls
	o.add(msg)
	o.Final, o.ClientCalls, o.StopReason = msg.Content, calls, StopClientTools
	return true
}

// defaults returns the turn's sink, the step limit and the tools, each with
// its default when unset.
func (l *Loop) defaults(in Input) (emit func(turn.Event), maxSteps int, reg *tool.Registry) {
	emit, maxSteps, reg = in.Sink, l.MaxSteps, l.Tools
	if emit == nil {
		emit = func(turn.Event) {}
	}
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	if reg == nil {
		reg, _ = tool.NewRegistry()
	}
	return emit, maxSteps, reg
}

// add appends a message of the turn to the history and to what is new.
func (o *Output) add(m llm.Message) {
	o.History = append(o.History, m)
	o.New = append(o.New, m)
}

// checkpoint hands a message of the turn to the Input's Checkpoint, if any.
func checkpoint(ctx context.Context, fn func(context.Context, llm.Message) error, m llm.Message) error {
	if fn == nil {
		return nil
	}
	if err := fn(ctx, m); err != nil {
		return fmt.Errorf("failed to record the turn's progress: %w", err)
	}
	return nil
}

// callTools runs one step's tool calls and records each result, in the
// order of the calls, as an event and a message of the turn, checkpointed
// as soon as its call has finished. A checkpoint that fails ends the step:
// the calls after it are not run.
func (l *Loop) callTools(ctx context.Context, reg *tool.Registry, in Input, step int, calls []llm.ToolCall, out *Output, emit func(turn.Event)) error {
	for i := range calls {
		emit(turn.Event{Kind: turn.EventToolCall, Step: step, ToolCall: &calls[i]})
	}
	n := 0
	return l.runTools(ctx, reg, in.Env, calls, func(c llm.ToolCall, r tool.Result) error {
		n++
		var commit func(context.Context) error
		if n == len(calls) && in.Steer != nil && ctx.Err() == nil {
			var text string
			if text, commit = in.Steer(ctx); text != "" {
				r.Content += "\n\n" + text
			}
		}
		m := llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: r.Content, IsError: r.IsError}
		l.Images.attach(&m, r.Artifacts)
		out.add(m)
		out.Artifacts = append(out.Artifacts, r.Artifacts...)
		emit(turn.Event{Kind: turn.EventToolResult, Step: step, ToolResult: &turn.ToolResult{
			CallID: c.ID, Name: c.Name, Content: r.Content, IsError: r.IsError, Artifacts: r.Artifacts}})
		if err := checkpoint(ctx, in.Checkpoint, m); err != nil {
			return err
		}
		if commit != nil {
			return commit(ctx)
		}
		return nil
	})
}

// runTools executes one batch of calls: concurrently when every tool is
// read-only and not exclusive, otherwise in order, handing each result to
// done in the order of the calls (in order, as each call finishes). A call
// not started because the turn was cancelled gets a "cancelled" result, so
// every call has a result; an error of done stops the batch.
func (l *Loop) runTools(ctx context.Context, reg *tool.Registry, env tool.Env, calls []llm.ToolCall, done func(llm.ToolCall, tool.Result) error) error {
	cancelled := func(c llm.ToolCall) tool.Result {
		return tool.Errorf("error: %s was not run: the turn was cancelled", c.Name)
	}
	if reg.Concurrent(calls) {
		results := make([]tool.Result, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() {
				if ctx.Err() != nil {
					results[i] = cancelled(c)
					return
				}
				results[i] = l.execute(ctx, reg, env, c)
			})
		}
		wg.Wait()
		for i, c := range calls {
			if err := done(c, results[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range calls {
		r := cancelled(c)
		if ctx.Err() == nil {
			r = l.execute(ctx, reg, env, c)
		}
		if err := done(c, r); err != nil {
			return err
		}
	}
	return nil
}

// execute runs one call, told to the Observer and the Auditor.
func (l *Loop) execute(ctx context.Context, reg *tool.Registry, env tool.Env, c llm.ToolCall) tool.Result {
	ctx, span := tracing.Start(ctx, tracing.SpanTool, trace.WithAttributes(tracing.AttrTool.String(c.Name), tracing.AttrToolCallID.String(c.ID)))
	defer span.End()
	var observed, audited func(bool)
	if l.Observer != nil {
		name := c.Name
		if _, ok := reg.Get(name); !ok {
			name = ""
		}
		observed = l.Observer.ToolStarted(ctx, name)
	}
	if l.Auditor != nil {
		audited = l.Auditor.ToolCall(ctx, env, c)
	}
	r := reg.Execute(ctx, env, c)
	if observed != nil {
		observed(r.IsError)
	}
	if audited != nil {
		audited(r.IsError)
	}
	toolOutcome(span, r)
	return r
}

// toolOutcome marks the span of a tool call whose result is an error. The
// result's text is the model's to read, not an attribute: it may hold what
// the user or a web page wrote.
func toolOutcome(span trace.Span, r tool.Result) {
	if r.IsError && span.IsRecording() {
		span.SetStatus(codes.Error, "the tool returned an error")
	}
}
