// Package llmtask is the llm_task tool: a JSON-only model call for structured
// workflow steps, validated against a JSON Schema the caller supplies. No tools
// are offered to the model in that call, and the answer is untrusted data.
package llmtask

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
)

// Resolver returns the provider for "provider/model" (the agent's configured
// endpoints; never arbitrary URLs from the model).
type Resolver func(provider, model string) (llm.Provider, error)

// Config of the tool.
type Config struct {
	DefaultProvider, DefaultModel string
	// AllowedModels lists "provider/model" strings; when set, anything else is
	// refused.
	AllowedModels []string
	// MaxTokens default 800, Timeout default 30s (openclaw llm-task defaults).
	MaxTokens int
	Timeout   time.Duration
	Resolve   Resolver
}

type args struct {
	Prompt      string         `json:"prompt" jsonschema:"The task. The answer will be a single JSON value."`
	Input       any            `json:"input,omitempty" jsonschema:"Data the task works on."`
	Schema      map[string]any `json:"schema,omitempty" jsonschema:"JSON Schema the answer must satisfy."`
	Provider    string         `json:"provider,omitempty"`
	Model       string         `json:"model,omitempty"`
	Temperature *float64       `json:"temperature,omitempty"`
	MaxTokens   int            `json:"maxTokens,omitempty"`
	TimeoutMs   int            `json:"timeoutMs,omitempty"`
}

// New returns the llm_task tool.
func New(cfg Config) tool.Tool {
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 800
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	return tool.New("llm_task",
		"Run a JSON-only LLM step (no tools) and return its JSON answer, validated against an optional JSON Schema. For structured extraction and classification inside workflows.",
		cfg.run, tool.ReadOnly(),
		tool.Range("maxTokens", tool.Bound(1), tool.Bound(16000)),
		tool.Range("timeoutMs", tool.Bound(1000), tool.Bound(300000)),
		tool.Range("temperature", tool.Bound(0), tool.Bound(2)))
}

func (cfg Config) run(ctx context.Context, _ tool.Env, a args) (tool.Result, error) {
	provider, model := a.Provider, a.Model
	if provider == "" {
		provider = cfg.DefaultProvider
	}
	if model == "" {
		model = cfg.DefaultModel
	}
	if provider == "" || model == "" {
		return tool.Errorf("error: no model for llm_task: pass provider and model, or configure a default"), nil
	}
	name := provider + "/" + model
	if len(cfg.AllowedModels) > 0 && !slices.Contains(cfg.AllowedModels, name) {
		return tool.Errorf("error: model %q is not allowed for llm_task; allowed: %s", name, strings.Join(cfg.AllowedModels, ", ")), nil
	}
	var resolved *jsonschema.Resolved
	if a.Schema != nil {
		raw, _ := json.Marshal(a.Schema)
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			return tool.Errorf("error: schema is not a JSON Schema: %v", err), nil
		}
		r, err := s.Resolve(nil)
		if err != nil {
			return tool.Errorf("error: schema is not usable: %v", err), nil
		}
		resolved = r
	}
	p, err := cfg.Resolve(provider, model)
	if err != nil {
		return tool.Errorf("error: model %q is not available: %v", name, err), nil
	}
	timeout := cfg.Timeout
	if a.TimeoutMs > 0 {
		timeout = time.Duration(a.TimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	maxTokens := cfg.MaxTokens
	if a.MaxTokens > 0 {
		maxTokens = a.MaxTokens
	}

	var user strings.Builder
	user.WriteString(a.Prompt)
	if a.Input != nil {
		in, _ := json.MarshalIndent(a.Input, "", "  ")
		user.WriteString("\n\nInput:\n")
		user.Write(in)
	}
	if a.Schema != nil {
		sch, _ := json.Marshal(a.Schema)
		user.WriteString("\n\nThe answer must satisfy this JSON Schema:\n")
		user.Write(sch)
	}
	msgs := []llm.Message{{Role: llm.RoleUser, Content: user.String()}}
	system := "Answer with one JSON value only: no code fences, no commentary."
	// One repair round: the model sees why its answer was refused.
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := p.Complete(ctx, llm.Request{Model: model, System: system, Messages: msgs, JSON: true,
			MaxTokens: maxTokens, Temperature: a.Temperature}, nil)
		if err != nil {
			return tool.Errorf("error: llm_task call to %s failed: %v", name, err), nil
		}
		answer := stripFences(resp.Message.Content)
		value, problem := check(answer, resolved)
		if problem == "" {
			out, _ := json.Marshal(value)
			return tool.Text(string(out)), nil
		}
		if attempt == 1 {
			return tool.Errorf("error: llm_task answer rejected: %s. Answer was: %s", problem, clip(answer, 500)), nil
		}
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Message.Content},
			llm.Message{Role: llm.RoleUser, Content: "That answer was rejected: " + problem + ". Reply again with only the corrected JSON."})
	}
	return tool.Errorf("error: llm_task produced no answer"), nil
}

func check(answer string, schema *jsonschema.Resolved) (any, string) {
	var v any
	if err := json.Unmarshal([]byte(answer), &v); err != nil {
		return nil, fmt.Sprintf("not valid JSON (%v)", err)
	}
	if schema != nil {
		if err := schema.Validate(v); err != nil {
			return nil, fmt.Sprintf("does not match the schema (%v)", err)
		}
	}
	return v, ""
}

// stripFences removes a ```json fence some models add despite instructions.
func stripFences(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "```") {
		s = strings.TrimPrefix(s, "```")
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = strings.TrimSuffix(strings.TrimSpace(s), "```")
	}
	return strings.TrimSpace(s)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
