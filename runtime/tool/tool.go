// Package tool is the framework every agent tool is built on: a tool has a
// name, a short description, a JSON Schema for its arguments (generated from a
// Go struct), and a Run function. The Registry validates arguments against the
// schema before a tool runs and turns every failure (unknown tool, malformed
// JSON, schema violation, tool error, panic) into a tool result the model can
// read, so a turn never crashes because of a tool.
package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// Artifact is a file a tool produced (a screenshot, a generated report). The
// session stores it in the artifact store and may attach it to the reply.
type Artifact struct {
	Name      string
	MediaType string
	Data      []byte
	// PresentToUser attaches the artifact to the final reply; false keeps it
	// for the model only.
	PresentToUser bool
}

// Result is what a tool returns to the model.
type Result struct {
	// Content is the text the model reads.
	Content string
	// IsError marks a failure; Content then says why and, where possible, what
	// to do instead.
	IsError bool
	// Artifacts are files produced by the call.
	Artifacts []Artifact
}

// Errorf builds an error result.
func Errorf(format string, args ...any) Result {
	return Result{Content: fmt.Sprintf(format, args...), IsError: true}
}

// Text builds a plain successful result.
func Text(s string) Result { return Result{Content: s} }

// Env is what a tool call may know about where it runs.
type Env struct {
	// Workspace is the session's working folder (absolute). Relative paths
	// resolve against it.
	Workspace string
	// SessionID scopes per-session state (todo plans, background processes).
	SessionID string
	// Agent is the name of the agent running the call.
	Agent string
	// Approver asks the turn's user whether a command may run (exec
	// approvals); nil when the turn has no user to ask (a stateless
	// OpenAI-compatible turn, a scheduled run), and a command that needs
	// an answer is then refused.
	Approver Approver
	// Canvas is the chat's canvas panel in the web UI (the canvas tool);
	// nil when the turn has no chat to show one in.
	Canvas Canvas
}

// CanvasCommand is what the canvas tool asks the chat's canvas to do (its
// fields are the tool's arguments, checked; docs/canvas.md).
type CanvasCommand struct {
	Action, URL, JavaScript string
	// Messages are A2UI v0.8 messages, one JSON object each.
	Messages  [][]byte
	SurfaceID string
	Format    string
	// Wait is set for the actions the client answers (eval, snapshot):
	// how long to wait for the answer.
	Wait time.Duration
	// SessionID is the session of the call (Env.SessionID).
	SessionID string
}

// CanvasAnswer is a web client's answer to a command it runs.
type CanvasAnswer struct {
	// Value is eval's result (JSON or text).
	Value string `json:"value,omitempty"`
	// Image is snapshot's image (the bytes) and MediaType its type.
	Image     []byte `json:"image,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	// Error says why the client could not do it.
	Error string `json:"error,omitempty"`
}

// Canvas shows commands on the web canvas of the turn's chat.
type Canvas interface {
	// Canvas sends cmd to the chat's web client; with cmd.Wait set it
	// waits that long for the client's answer (an error when none comes).
	Canvas(ctx context.Context, cmd CanvasCommand) (CanvasAnswer, error)
}

// ApprovalRequest is a command a tool wants the user to approve.
type ApprovalRequest struct {
	// Tool is the tool that would run the command (bash, exec, pty).
	Tool, Command string
	// Reason says why the user is asked ("not in the allowlist").
	Reason string
	// Timeout is how long to wait for the answer before it is a denial.
	Timeout time.Duration
	// SessionID is the session of the call (Env.SessionID), which clients
	// see on the request.
	SessionID string
}

// Approver asks the user of the running turn to approve a command, in the
// chat the turn belongs to, and waits for the answer.
type Approver interface {
	// Approve returns whether the user approved; when not, why says what
	// happened ("denied by the user", "no answer within 2m0s"). err is set
	// when the turn ended while waiting.
	Approve(ctx context.Context, req ApprovalRequest) (approved bool, why string, err error)
}

// Resolve turns a path argument into an absolute path, relative ones against
// the workspace.
func (e Env) Resolve(p string) string {
	if p == "" {
		return e.Workspace
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(e.Workspace, p)
}

// Tool is one capability offered to the model.
type Tool interface {
	// Name is the identifier the model calls (lower_snake_case).
	Name() string
	// Description tells the model when to use the tool; keep it short, it is
	// sent with every request.
	Description() string
	// Schema is the JSON Schema of the arguments object.
	Schema() json.RawMessage
	// Traits says how the loop may schedule the tool.
	Traits() Traits
	// Run executes a call whose arguments already passed the schema.
	Run(ctx context.Context, env Env, args json.RawMessage) (Result, error)
}

// Traits are scheduling facts about a tool. Calls in one batch run
// concurrently only when every tool in the batch is ReadOnly and not Exclusive.
type Traits struct {
	ReadOnly  bool
	Exclusive bool
}

// Func is a tool implemented by a typed function. Build it with New.
type Func[A any] struct {
	name, desc string
	traits     Traits
	schema     json.RawMessage
	resolved   *jsonschema.Resolved
	fn         func(ctx context.Context, env Env, args A) (Result, error)
}

// Option adjusts a tool built with New.
type Option func(*options)

type options struct {
	traits Traits
	adjust []func(*jsonschema.Schema)
}

// ReadOnly marks a tool without side effects.
func ReadOnly() Option { return func(o *options) { o.traits.ReadOnly = true } }

// Exclusive makes a tool run alone.
func Exclusive() Option { return func(o *options) { o.traits.Exclusive = true } }

// Adjust edits the generated schema (enums, bounds, defaults) before it is
// resolved; struct tags only carry descriptions.
func Adjust(fn func(s *jsonschema.Schema)) Option {
	return func(o *options) { o.adjust = append(o.adjust, fn) }
}

// Enum restricts property prop to values.
func Enum(prop string, values ...any) Option {
	return Adjust(func(s *jsonschema.Schema) {
		if p := s.Properties[prop]; p != nil {
			p.Enum = values
		}
	})
}

// Range bounds a numeric property (nil leaves a side open).
func Range(prop string, minimum, maximum *float64) Option {
	return Adjust(func(s *jsonschema.Schema) {
		if p := s.Properties[prop]; p != nil {
			p.Minimum, p.Maximum = minimum, maximum
		}
	})
}

// Bound is a helper for Range.
func Bound(v float64) *float64 { return &v }

// New builds a tool whose arguments are the JSON form of A. Its schema is
// generated from A (field `jsonschema` tags are descriptions; fields without
// omitempty are required; unknown properties are rejected). New panics on a
// type that cannot be described, which is a programming error found by any test
// that registers the tool.
func New[A any](name, description string, fn func(ctx context.Context, env Env, args A) (Result, error), opts ...Option) *Func[A] {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s, err := jsonschema.For[A](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: failed to generate schema: %v", name, err))
	}
	dropNullTypes(s)
	for _, fn := range o.adjust {
		fn(s)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: failed to resolve schema: %v", name, err))
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tool %s: failed to encode schema: %v", name, err))
	}
	return &Func[A]{name: name, desc: description, traits: o.traits, schema: raw, resolved: resolved, fn: fn}
}

// dropNullTypes turns the ["null", T] types generated for pointer fields into
// T: optional fields are simply omitted, and several OpenAI-compatible servers
// reject type arrays in tool schemas.
func dropNullTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && (s.Types[0] == "null" || s.Types[1] == "null") {
		t := s.Types[0]
		if t == "null" {
			t = s.Types[1]
		}
		s.Type, s.Types = t, nil
	}
	for _, p := range s.Properties {
		dropNullTypes(p)
	}
	dropNullTypes(s.Items)
	dropNullTypes(s.AdditionalProperties)
}

// Name implements Tool.
func (f *Func[A]) Name() string { return f.name }

// Description implements Tool.
func (f *Func[A]) Description() string { return f.desc }

// Schema implements Tool.
func (f *Func[A]) Schema() json.RawMessage { return f.schema }

// Traits implements Tool.
func (f *Func[A]) Traits() Traits { return f.traits }

// Validate checks raw arguments against the schema and decodes them.
func (f *Func[A]) Validate(raw json.RawMessage) (A, error) {
	var args A
	var instance any
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := json.Unmarshal(raw, &instance); err != nil {
		return args, fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	// Models often send null for optional arguments they do not use: treat it
	// as absent (a null for a required argument still fails as missing).
	if obj, ok := instance.(map[string]any); ok {
		stripped := false
		for k, v := range obj {
			if v == nil {
				delete(obj, k)
				stripped = true
			}
		}
		if stripped {
			raw, _ = json.Marshal(obj)
		}
	}
	if err := f.resolved.Validate(instance); err != nil {
		return args, err
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return args, fmt.Errorf("arguments do not fit %s: %w", reflect.TypeFor[A](), err)
	}
	return args, nil
}

// Run implements Tool.
func (f *Func[A]) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	args, err := f.Validate(raw)
	if err != nil {
		return Result{}, &ArgumentError{Tool: f.name, Err: err}
	}
	return f.fn(ctx, env, args)
}

// ArgumentError reports arguments that failed validation.
type ArgumentError struct {
	Tool string
	Err  error
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("invalid arguments for %s: %v", e.Tool, e.Err)
}

func (e *ArgumentError) Unwrap() error { return e.Err }

// IsArgumentError reports whether err is an ArgumentError.
func IsArgumentError(err error) bool {
	var ae *ArgumentError
	return errors.As(err, &ae)
}

// WorkspaceFiles reads and writes whole files of a session's workspace for
// the runtime's own tools (a message's attachments, a browser upload, a
// node's media) where the tools' programs see them. A tool without one
// uses the runtime's own folder (embedded mode, a sandbox container sharing
// the workspace volume); in a sandbox pod, another pod's volume, it reaches
// them through the exec server (execserver.WorkspaceFiles).
type WorkspaceFiles interface {
	// ReadFile reads the regular file p (relative to env.Workspace, or
	// absolute inside it), refusing one of more than maxBytes.
	ReadFile(ctx context.Context, env Env, p string, maxBytes int64) ([]byte, error)
	// WriteFile creates or replaces the file p, creating missing folders.
	WriteFile(ctx context.Context, env Env, p string, data []byte) error
}
