package tool

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
)

type greetArgs struct {
	Name  string `json:"name" jsonschema:"Who to greet"`
	Times int    `json:"times,omitempty" jsonschema:"How often"`
	Loud  bool   `json:"loud,omitempty"`
}

func testRegistry(t *testing.T) *Registry {
	t.Helper()
	greet := New("greet", "Greet someone. Use it to say hello.", func(_ context.Context, env Env, a greetArgs) (Result, error) {
		n := max(a.Times, 1)
		s := ""
		for range n {
			s += "hello " + a.Name + " from " + env.Agent + ";"
		}
		return Text(s), nil
	}, ReadOnly(), Range("times", Bound(1), Bound(5)))
	boom := New("boom", "Always panics.", func(context.Context, Env, struct{}) (Result, error) { panic("kaboom") })
	fail := New("fail", "Always fails.", func(context.Context, Env, struct{}) (Result, error) { return Result{}, errors.New("disk full") })
	excl := New("excl", "Exclusive reader.", func(context.Context, Env, struct{}) (Result, error) { return Text("ok"), nil }, ReadOnly(), Exclusive())
	mode := New("mode", "Pick a mode.", func(_ context.Context, _ Env, a struct {
		Mode string `json:"mode"`
	}) (Result, error) {
		return Text(a.Mode), nil
	}, Enum("mode", "fast", "slow"))
	r, err := NewRegistry(greet, boom, fail, excl, mode)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return r
}

func TestExecuteTurnsEveryFailureIntoAToolResult(t *testing.T) {
	r := testRegistry(t)
	env := Env{Agent: "pico"}
	cases := []struct {
		name, tool, args string
		isErr            bool
		want             string
	}{
		{"ok", "greet", `{"name":"Ada","times":2}`, false, "hello Ada from pico;hello Ada from pico;"},
		{"case-insensitive name", "GREET", `{"name":"Ada"}`, false, "hello Ada from pico;"},
		{"unknown tool", "grete", `{}`, true, `error: unknown tool "grete"; available tools: boom, excl, fail, greet, mode`},
		{"malformed JSON", "greet", `{"name": "Ada"`, true, "error: invalid arguments for greet: arguments are not valid JSON"},
		{"missing required", "greet", `{}`, true, "name"},
		{"wrong type", "greet", `{"name": 5}`, true, "invalid arguments for greet"},
		{"unknown property", "greet", `{"name":"Ada","colour":"red"}`, true, "colour"},
		{"out of range", "greet", `{"name":"Ada","times":9}`, true, "invalid arguments for greet"},
		{"enum violated", "mode", `{"mode":"turbo"}`, true, "invalid arguments for mode"},
		{"enum ok", "mode", `{"mode":"slow"}`, false, "slow"},
		{"empty arguments mean {}", "excl", ``, false, "ok"},
		{"panic recovered", "boom", `{}`, true, "error: tool boom failed unexpectedly: kaboom"},
		{"tool error", "fail", `{}`, true, "error: fail failed: disk full"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := r.Execute(context.Background(), env, llm.ToolCall{ID: "1", Name: tc.tool, Arguments: tc.args})
			g.Expect(res.IsError).To(Equal(tc.isErr), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tc.want))
			if tc.isErr && tc.tool == "greet" {
				g.Expect(res.Content).To(ContainSubstring("Fix the arguments"))
			}
		})
	}
}

func TestExecuteReportsCancellation(t *testing.T) {
	g := NewWithT(t)
	slow := New("slow", "Waits.", func(ctx context.Context, _ Env, _ struct{}) (Result, error) {
		<-ctx.Done()
		return Result{}, ctx.Err()
	})
	r, err := NewRegistry(slow)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := r.Execute(ctx, Env{}, llm.ToolCall{Name: "slow", Arguments: "{}"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(Equal("error: slow was cancelled: context canceled"))
}

func TestRegistryShape(t *testing.T) {
	g := NewWithT(t)
	r := testRegistry(t)
	_, err := NewRegistry(r.tools["greet"], r.tools["greet"])
	g.Expect(err).To(MatchError(`failed to register tool "greet": name already registered`))

	defs := r.Definitions()
	g.Expect(defs).To(HaveLen(5))
	g.Expect(defs[0].Name).To(Equal("boom"))
	var schema map[string]any
	g.Expect(json.Unmarshal(defs[3].Parameters, &schema)).To(Succeed())
	g.Expect(schema["type"]).To(Equal("object"))
	g.Expect(schema["required"]).To(Equal([]any{"name"}))
	g.Expect(schema["additionalProperties"]).To(Equal(false))
	g.Expect(schema["properties"].(map[string]any)["name"].(map[string]any)["description"]).To(Equal("Who to greet"))

	g.Expect(r.Summary()).To(ContainSubstring("- greet: Greet someone\n"))
	g.Expect(r.Filter(func(n string) bool { return n != "boom" }).Names()).To(Equal([]string{"excl", "fail", "greet", "mode"}))

	read := func(names ...string) []llm.ToolCall {
		var cs []llm.ToolCall
		for _, n := range names {
			cs = append(cs, llm.ToolCall{Name: n})
		}
		return cs
	}
	g.Expect(r.Concurrent(read("greet", "greet"))).To(BeTrue())
	g.Expect(r.Concurrent(read("greet"))).To(BeFalse(), "a single call has nothing to run beside")
	g.Expect(r.Concurrent(read("greet", "excl"))).To(BeFalse(), "exclusive")
	g.Expect(r.Concurrent(read("greet", "fail"))).To(BeFalse(), "not read-only")
	g.Expect(r.Concurrent(read("greet", "nope"))).To(BeFalse(), "unknown")
}

func TestSchemaHasNoNullTypeArrays(t *testing.T) {
	g := NewWithT(t)
	opt := New("opt", "Optional fields.", func(context.Context, Env, struct {
		N    *float64 `json:"n,omitempty"`
		List []string `json:"list,omitempty"`
	}) (Result, error) {
		return Text("ok"), nil
	})
	g.Expect(string(opt.Schema())).NotTo(ContainSubstring(`"null"`))
	g.Expect(string(opt.Schema())).To(ContainSubstring(`"n":{"type":"number"}`))
	r, err := NewRegistry(opt)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Execute(context.Background(), Env{}, llm.ToolCall{Name: "opt", Arguments: `{"n": 2.5, "list": ["a"]}`}).IsError).To(BeFalse())
	g.Expect(r.Execute(context.Background(), Env{}, llm.ToolCall{Name: "opt", Arguments: `{"n": null}`}).IsError).To(BeFalse(), "null means absent")
	g.Expect(r.Execute(context.Background(), Env{}, llm.ToolCall{Name: "opt", Arguments: `{"n": "x"}`}).IsError).To(BeTrue())
}

// TestExecuteAcceptsOtherSpellingsOfAToolName: a model used to other agents
// calls an MCP tool mcp__<server>__<tool> (ours: mcp_<server>_<tool>) or
// a file tool by OpenClaw's name; both reach the tool, and a name that is
// no alias of a registered tool stays unknown.
func TestExecuteAcceptsOtherSpellingsOfAToolName(t *testing.T) {
	g := NewWithT(t)
	echo := func(name string) Tool {
		return New(name, "Echo.", func(_ context.Context, _ Env, a struct {
			Text string `json:"text"`
		}) (Result, error) {
			return Text(name + ": " + a.Text), nil
		})
	}
	r, err := NewRegistry(echo("mcp_files_read_file"), echo("file_read"))
	g.Expect(err).NotTo(HaveOccurred())
	for call, want := range map[string]string{
		"mcp__files__read_file": "mcp_files_read_file: hi",
		"MCP__Files__Read_File": "mcp_files_read_file: hi",
		"read":                  "file_read: hi",
	} {
		res := r.Execute(context.Background(), Env{}, llm.ToolCall{ID: "1", Name: call, Arguments: `{"text":"hi"}`})
		g.Expect(res.IsError).To(BeFalse(), call)
		g.Expect(res.Content).To(Equal(want), call)
	}
	res := r.Execute(context.Background(), Env{}, llm.ToolCall{ID: "1", Name: "mcp__files__write_file", Arguments: `{}`})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring(`unknown tool "mcp__files__write_file"`))
}
