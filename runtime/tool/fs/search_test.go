package fs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// tree is a small project used by the search tests.
var tree = map[string]string{
	"main.go":                  "package main\n\nfunc main() {\n\tRun()\n}\n",
	"run.go":                   "package main\n\n// Run starts the app.\nfunc Run() {}\n",
	"run_test.go":              "package main\n\nfunc TestRun(t *testing.T) { Run() }\n",
	"README.md":                "# App\nRun it with go run .\n",
	"pkg/util/strings.go":      "package util\n\nfunc Upper(s string) string { return s }\n",
	"pkg/util/strings_test.go": "package util\n",
	"web/app.ts":               "export function run() {}\n",
	"web/app.tsx":              "export const App = () => null\n",
	".git/config":              "[core]\nfunc = main\n",
	"node_modules/x/index.go":  "package x\nfunc main() {}\n",
	"web/node_modules/y.go":    "package y\nfunc main() {}\n",
	".hidden/h.go":             "package h\n",
}

func TestFileSearch(t *testing.T) {
	env := workspace(t)
	writeFiles(t, env.Workspace, tree)
	tests := []struct {
		name    string
		args    any
		isError bool
		exact   string
		want    string
	}{
		{name: "name pattern matches at any depth, sorted, skipping .git and node_modules", args: map[string]any{"pattern": "*.go"},
			exact: ".hidden/h.go\nmain.go\npkg/util/strings.go\npkg/util/strings_test.go\nrun.go\nrun_test.go"},
		{name: "double star", args: map[string]any{"pattern": "**/*_test.go"}, exact: "pkg/util/strings_test.go\nrun_test.go"},
		{name: "path pattern", args: map[string]any{"pattern": "pkg/**/*.go"}, exact: "pkg/util/strings.go\npkg/util/strings_test.go"},
		{name: "single-level path pattern", args: map[string]any{"pattern": "web/*"}, exact: "web/app.ts\nweb/app.tsx"},
		{name: "braces", args: map[string]any{"pattern": "*.{ts,md}"}, exact: "README.md\nweb/app.ts"},
		{name: "leading ./", args: map[string]any{"pattern": "./web/*.tsx"}, exact: "web/app.tsx"},
		{name: "relative to path", args: map[string]any{"pattern": "*.go", "path": "pkg"}, exact: "util/strings.go\nutil/strings_test.go"},
		{name: "absolute path", args: map[string]any{"pattern": "*.ts*", "path": filepath.Join(env.Workspace, "web")}, exact: "app.ts\napp.tsx"},
		{name: "limit cuts results", args: map[string]any{"pattern": "*.go", "limit": 2},
			exact: ".hidden/h.go\nmain.go\n\n[Showing the first 2 of 6 matches. Narrow the pattern or path, or raise limit.]"},
		{name: "exactly the limit", args: map[string]any{"pattern": "*_test.go", "limit": 2}, exact: "pkg/util/strings_test.go\nrun_test.go"},
		{name: "no match", args: map[string]any{"pattern": "*.rs"}, exact: "No files match \"*.rs\" in the workspace."},
		{name: "no match with a path pattern gives a hint", args: map[string]any{"pattern": "util/*.go"}, want: "start with **/"},
		{name: "missing folder", args: map[string]any{"pattern": "*", "path": "nope"}, isError: true, want: "nope does not exist"},
		{name: "path is a file", args: map[string]any{"pattern": "*", "path": "main.go"}, isError: true, want: "main.go is a file, not a folder"},
		{name: "invalid pattern", args: map[string]any{"pattern": "[a-"}, isError: true, want: "is invalid"},
		{name: "absolute pattern", args: map[string]any{"pattern": "/etc/*"}, isError: true, want: "put the folder in path"},
		{name: "empty pattern", args: map[string]any{"pattern": " "}, isError: true, want: "empty"},
		{name: "limit out of range", args: map[string]any{"pattern": "*", "limit": 0}, isError: true, want: "invalid arguments"},
	}
	for name, raw := range invalidArgCases("pattern") {
		tests = append(tests, struct {
			name    string
			args    any
			isError bool
			exact   string
			want    string
		}{name: name, args: raw, isError: true, want: "error:"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, env, "file_search", tt.args)
			g.Expect(res.IsError).To(Equal(tt.isError), res.Content)
			switch {
			case tt.exact != "":
				g.Expect(res.Content).To(Equal(tt.exact))
			case tt.want != "":
				g.Expect(res.Content).To(ContainSubstring(tt.want))
			default:
				t.Fatal("the row expects neither an exact answer nor a part of one")
			}
		})
	}
}

func TestContentSearch(t *testing.T) {
	env := workspace(t)
	writeFiles(t, env.Workspace, tree)
	writeFiles(t, env.Workspace, map[string]string{
		"data/long.txt": "needle " + strings.Repeat("é", 400) + "\n",
		"data/bin.dat":  "needle\x00binary",
		"data/crlf.txt": "needle at end\r\nnothing\r\n",
		"many.txt":      strings.Repeat("hit\n", 5),
	})
	big := filepath.Join(env.Workspace, "data", "huge.log")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("needle\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(11 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		args    any
		isError bool
		exact   string
		want    []string
	}{
		{name: "regexp over the workspace, sorted, skipping .git and node_modules", args: map[string]any{"pattern": `func \w+\(`},
			exact: "main.go:3: func main() {\npkg/util/strings.go:3: func Upper(s string) string { return s }\nrun.go:4: func Run() {}\nrun_test.go:3: func TestRun(t *testing.T) { Run() }"},
		{name: "anchors apply per line", args: map[string]any{"pattern": `^package util$`},
			exact: "pkg/util/strings.go:1: package util\npkg/util/strings_test.go:1: package util"},
		{name: "end anchor with CRLF", args: map[string]any{"pattern": `end$`, "path": "data"}, exact: "crlf.txt:1: needle at end"},
		{name: "case sensitive by default", args: map[string]any{"pattern": "run it"}, exact: "No matches for \"run it\" in the workspace."},
		{name: "case insensitive", args: map[string]any{"pattern": "run it", "case_insensitive": true}, exact: "README.md:2: Run it with go run ."},
		{name: "glob by name", args: map[string]any{"pattern": "Run", "glob": "*_test.go"}, exact: "run_test.go:3: func TestRun(t *testing.T) { Run() }"},
		{name: "glob by path", args: map[string]any{"pattern": "export", "glob": "web/*.tsx"}, exact: "web/app.tsx:1: export const App = () => null"},
		{name: "single file", args: map[string]any{"pattern": "Run", "path": "run.go"}, exact: "run.go:3: // Run starts the app.\nrun.go:4: func Run() {}"},
		{name: "folder path", args: map[string]any{"pattern": "package", "path": "pkg/util"},
			exact: "strings.go:1: package util\nstrings_test.go:1: package util"},
		{name: "long line cut to 300 characters; binary and huge files skipped", args: map[string]any{"pattern": "needle", "path": "data"},
			exact: "crlf.txt:1: needle at end\nlong.txt:1: needle " + strings.Repeat("é", 300-len("needle ")) + "…"},
		{name: "limit cuts results", args: map[string]any{"pattern": "hit", "path": "many.txt", "limit": 3},
			exact: "many.txt:1: hit\nmany.txt:2: hit\nmany.txt:3: hit\n\n[Stopped at 3 matches. Narrow the pattern, path or glob, or raise limit.]"},
		{name: "limit reached exactly", args: map[string]any{"pattern": "hit", "path": "many.txt", "limit": 5},
			want: []string{"many.txt:5: hit"}},
		{name: "limit cuts across files", args: map[string]any{"pattern": "^package", "limit": 2},
			want: []string{".hidden/h.go:1: package h\nmain.go:1: package main\n\n[Stopped at 2 matches."}},
		{name: "invalid regexp", args: map[string]any{"pattern": "func (", "path": "."}, isError: true,
			want: []string{`invalid regular expression "func ("`, "RE2", "backslash"}},
		{name: "lookahead is not RE2", args: map[string]any{"pattern": "a(?=b)"}, isError: true, want: []string{"invalid regular expression"}},
		{name: "binary file named directly", args: map[string]any{"pattern": "needle", "path": "data/bin.dat"}, isError: true, want: []string{"binary"}},
		{name: "huge file named directly", args: map[string]any{"pattern": "needle", "path": "data/huge.log"}, isError: true, want: []string{"larger than 10 MiB"}},
		{name: "missing path", args: map[string]any{"pattern": "x", "path": "nope"}, isError: true, want: []string{"nope does not exist"}},
		{name: "invalid glob", args: map[string]any{"pattern": "x", "glob": "{a"}, isError: true, want: []string{"is invalid"}},
		{name: "empty pattern", args: map[string]any{"pattern": ""}, isError: true, want: []string{"pattern is empty"}},
		{name: "case_insensitive wrong type", args: map[string]any{"pattern": "x", "case_insensitive": "yes"}, isError: true, want: []string{"invalid arguments"}},
	}
	for name, raw := range invalidArgCases("pattern") {
		tests = append(tests, struct {
			name    string
			args    any
			isError bool
			exact   string
			want    []string
		}{name: name, args: raw, isError: true, want: []string{"error:"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, env, "content_search", tt.args)
			g.Expect(res.IsError).To(Equal(tt.isError), res.Content)
			if tt.exact != "" {
				g.Expect(res.Content).To(Equal(tt.exact))
			}
			for _, w := range tt.want {
				g.Expect(res.Content).To(ContainSubstring(w))
			}
		})
	}
}

func TestSearchCancelled(t *testing.T) {
	g := NewWithT(t)
	env := workspace(t)
	files := map[string]string{}
	for i := range 600 {
		files[fmt.Sprintf("d%d/f%d.txt", i%10, i)] = "x\n"
	}
	writeFiles(t, env.Workspace, files)
	reg, err := tool.NewRegistry(fs.Tools()...)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []llm.ToolCall{
		{Name: "content_search", Arguments: `{"pattern": "x"}`},
		{Name: "file_search", Arguments: `{"pattern": "*.txt"}`},
	} {
		res := reg.Execute(ctx, env, c)
		g.Expect(res.IsError).To(BeTrue(), c.Name)
		g.Expect(res.Content).To(ContainSubstring("cancelled"), c.Name)
	}
}

// BenchmarkContentSearch searches a workspace of 2,000 source-like files.
func BenchmarkContentSearch(b *testing.B) {
	env := workspace(b)
	files := map[string]string{}
	var body strings.Builder
	for i := range 120 {
		fmt.Fprintf(&body, "\tvalue%d := compute(%d) // some ordinary line of code\n", i, i)
	}
	for i := range 2000 {
		content := "package p\n\nfunc f() {\n" + body.String() + "}\n"
		if i%100 == 0 {
			content += "// TODO: needle here\n"
		}
		files[fmt.Sprintf("pkg%02d/sub%d/file%04d.go", i%40, i%3, i)] = content
	}
	writeFiles(b, env.Workspace, files)
	reg, err := tool.NewRegistry(fs.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, args string }{
		{"literal", `{"pattern": "TODO: needle"}`},
		{"regexp", `{"pattern": "TODO:\\s+\\w+ here"}`},
		{"case_insensitive", `{"pattern": "todo: needle", "case_insensitive": true}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				res := reg.Execute(context.Background(), env, llm.ToolCall{Name: "content_search", Arguments: bc.args})
				if res.IsError || strings.Count(res.Content, "\n") != 19 {
					b.Fatalf("unexpected result: %.200s", res.Content)
				}
			}
		})
	}
}

func TestSearchWithoutWorkspace(t *testing.T) {
	g := NewWithT(t)
	for _, name := range []string{"file_search", "content_search"} {
		res := call(t, tool.Env{}, name, map[string]any{"pattern": "x"})
		g.Expect(res.IsError).To(BeTrue(), name)
		g.Expect(res.Content).To(ContainSubstring("no workspace is set"), name)
	}
}
