package fs_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// call runs one tool call through a registry, so schema validation and the
// registry's error handling are part of every test. args is raw JSON when it
// is a string, otherwise it is marshalled.
func call(t testing.TB, env tool.Env, name string, args any) tool.Result {
	t.Helper()
	return callWith(t, nil, env, name, args)
}

// callWith is call with the tools built from opts.
func callWith(t testing.TB, opts []fs.Option, env tool.Env, name string, args any) tool.Result {
	t.Helper()
	reg, err := tool.NewRegistry(fs.Tools(opts...)...)
	if err != nil {
		t.Fatalf("failed to build registry: %v", err)
	}
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatalf("failed to marshal arguments: %v", err)
		}
		raw = string(b)
	}
	return reg.Execute(context.Background(), env, llm.ToolCall{ID: "call-1", Name: name, Arguments: raw})
}

// workspace returns an env whose workspace is a fresh temporary folder.
func workspace(t testing.TB) tool.Env {
	t.Helper()
	return tool.Env{Workspace: t.TempDir(), SessionID: "s1", Agent: "test"}
}

// writeFiles creates files (path → content) under root.
func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readFile returns the content of root/p.
func readFile(t testing.TB, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// invalidArgCases are argument errors every tool must turn into an error
// result: wrong JSON, wrong type, missing required and unknown properties.
func invalidArgCases(required string) map[string]string {
	return map[string]string{
		"malformed JSON":   `{"` + required + `":`,
		"wrong type":       `{"` + required + `": 5}`,
		"missing required": `{}`,
		"unknown property": `{"` + required + `": "x", "bogus": 1}`,
	}
}

func TestToolsHaveSchemasAndTraits(t *testing.T) {
	g := NewWithT(t)
	reg, err := tool.NewRegistry(fs.Tools()...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reg.Names()).To(Equal([]string{"content_search", "file_edit", "file_read", "file_search", "file_write"}))
	readOnly := map[string]bool{"file_read": true, "file_search": true, "content_search": true}
	for _, n := range reg.Names() {
		tl, _ := reg.Get(n)
		g.Expect(tl.Traits().ReadOnly).To(Equal(readOnly[n]), n)
		g.Expect(len(tl.Description())).To(BeNumerically("<", 200), n)
		g.Expect(json.Valid(tl.Schema())).To(BeTrue(), n)
	}
}
