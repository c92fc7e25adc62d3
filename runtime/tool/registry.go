package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
)

// Registry holds the tools of one agent. It is immutable after construction
// apart from Register, and safe for concurrent use once built.
type Registry struct {
	tools map[string]Tool
	names []string // sorted
}

// NewRegistry returns a registry holding tools; a duplicate name is an error.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: make(map[string]Tool, len(tools))}
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds a tool.
func (r *Registry) Register(t Tool) error {
	name := strings.ToLower(t.Name())
	if name == "" {
		return errors.New("failed to register tool: empty name")
	}
	if _, dup := r.tools[name]; dup {
		return fmt.Errorf("failed to register tool %q: name already registered", name)
	}
	r.tools[name] = t
	i := sort.SearchStrings(r.names, name)
	r.names = append(r.names, "")
	copy(r.names[i+1:], r.names[i:])
	r.names[i] = name
	return nil
}

// Get returns the tool named name (case-insensitive) or by one of its
// aliases (Canonical: a model may call an MCP tool
// mcp__<server>__<tool>, the spelling other agents use).
func (r *Registry) Get(name string) (Tool, bool) {
	t, ok := r.tools[strings.ToLower(name)]
	if !ok {
		t, ok = r.tools[Canonical(name)]
	}
	return t, ok
}

// Names returns the sorted tool names.
func (r *Registry) Names() []string { return append([]string(nil), r.names...) }

// Len is the number of tools.
func (r *Registry) Len() int { return len(r.names) }

// Filter returns a registry with the tools keep accepts (the tool policy's
// effective set, a sub-agent's allowed tools).
func (r *Registry) Filter(keep func(name string) bool) *Registry {
	out := &Registry{tools: map[string]Tool{}}
	for _, n := range r.names {
		if keep(n) {
			out.tools[n] = r.tools[n]
			out.names = append(out.names, n)
		}
	}
	return out
}

// Definitions declares the tools to the model, in name order so requests are
// byte-stable (prompt caches depend on it).
func (r *Registry) Definitions() []llm.ToolDef {
	defs := make([]llm.ToolDef, 0, len(r.names))
	for _, n := range r.names {
		t := r.tools[n]
		defs = append(defs, llm.ToolDef{Name: n, Description: t.Description(), Parameters: t.Schema()})
	}
	return defs
}

// Summary is the short human-readable tool list for the system prompt: one
// line per tool with the first sentence of its description.
func (r *Registry) Summary() string {
	var b strings.Builder
	for _, n := range r.names {
		d := r.tools[n].Description()
		if i := strings.IndexAny(d, ".\n"); i > 0 {
			d = d[:i]
		}
		fmt.Fprintf(&b, "- %s: %s\n", n, d)
	}
	return b.String()
}

// Concurrent reports whether every call in the batch may run at the same time:
// all known, read-only and not exclusive.
func (r *Registry) Concurrent(calls []llm.ToolCall) bool {
	if len(calls) < 2 {
		return false
	}
	for _, c := range calls {
		t, ok := r.Get(c.Name)
		if !ok {
			return false
		}
		if tr := t.Traits(); !tr.ReadOnly || tr.Exclusive {
			return false
		}
	}
	return true
}

// Execute runs one call and always returns a result for the model: unknown
// tools, invalid arguments, tool errors and panics become error results that
// say what went wrong. Cancellation of ctx is reported the same way.
func (r *Registry) Execute(ctx context.Context, env Env, call llm.ToolCall) (res Result) {
	t, ok := r.Get(call.Name)
	if !ok {
		return Errorf("error: unknown tool %q; available tools: %s", call.Name, strings.Join(r.names, ", "))
	}
	defer func() {
		if p := recover(); p != nil {
			res = Errorf("error: tool %s failed unexpectedly: %v", t.Name(), p)
		}
	}()
	out, err := t.Run(ctx, env, json.RawMessage(call.Arguments))
	switch {
	case err == nil:
		return out
	case IsArgumentError(err):
		return Errorf("error: %v. Fix the arguments to match the tool's schema and call it again.", err)
	case ctx.Err() != nil:
		return Errorf("error: %s was cancelled: %v", t.Name(), ctx.Err())
	default:
		return Errorf("error: %s failed: %v", t.Name(), err)
	}
}
