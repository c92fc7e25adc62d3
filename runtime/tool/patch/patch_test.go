package patch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/patch"
)

// absent marks a file that must not exist.
const absent = "\x00absent"

// run applies patchText through a registry holding t.
func run(tb testing.TB, tl tool.Tool, env tool.Env, patchText string) tool.Result {
	tb.Helper()
	args, err := json.Marshal(map[string]string{"input": patchText})
	if err != nil {
		tb.Fatal(err)
	}
	return runRaw(tb, tl, env, string(args))
}

// runRaw calls apply_patch with raw JSON arguments.
func runRaw(tb testing.TB, tl tool.Tool, env tool.Env, args string) tool.Result {
	tb.Helper()
	reg, err := tool.NewRegistry(tl)
	if err != nil {
		tb.Fatal(err)
	}
	return reg.Execute(context.Background(), env, llm.ToolCall{ID: "c1", Name: "apply_patch", Arguments: args})
}

// setup writes files (relative path → content) under root.
func setup(tb testing.TB, root string, files map[string]string) {
	tb.Helper()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// expectFiles checks files (relative path → content, or absent) under root.
func expectFiles(g Gomega, root string, files map[string]string) {
	for p, want := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if want == absent {
			g.Expect(os.IsNotExist(err)).To(BeTrue(), "%s should not exist", p)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), p)
		g.Expect(string(data)).To(Equal(want), p)
	}
}

// body wraps sections in the begin and end markers.
func body(lines ...string) string {
	return "*** Begin Patch\n" + strings.Join(lines, "\n") + "\n*** End Patch"
}

const goFile = `package main

import "fmt"

func hello() {
	fmt.Println("hello")
}

func bye() {
	fmt.Println("hello")
}

func main() {
	hello()
	bye()
}
`

func TestApplyPatch(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string]string
		patch  string
		output string            // exact output on success
		errs   []string          // substrings of the error; empty means success
		after  map[string]string // expected files afterwards
	}{
		{
			name:   "add file in new folders",
			patch:  body("*** Add File: a/b/new.txt", "+first", "+second"),
			output: "Success. Updated the following files:\nA a/b/new.txt",
			after:  map[string]string{"a/b/new.txt": "first\nsecond\n"},
		},
		{
			name:  "add file with an empty line written without +",
			patch: body("*** Add File: x.md", "+# Title", "", "+text"),
			after: map[string]string{"x.md": "# Title\n\ntext\n"},
		},
		{
			name:  "add empty file",
			patch: body("*** Add File: empty.txt"),
			after: map[string]string{"empty.txt": ""},
		},
		{
			name:   "delete file",
			files:  map[string]string{"old.txt": "bye\n"},
			patch:  body("*** Delete File: old.txt"),
			output: "Success. Updated the following files:\nD old.txt",
			after:  map[string]string{"old.txt": absent},
		},
		{
			name:  "update with anchor",
			files: map[string]string{"main.go": goFile},
			patch: body("*** Update File: main.go", "@@ func bye() {", "-\tfmt.Println(\"hello\")", "+\tfmt.Println(\"bye\")"),
			after: map[string]string{"main.go": strings.Replace(goFile, "func bye() {\n\tfmt.Println(\"hello\")", "func bye() {\n\tfmt.Println(\"bye\")", 1)},
		},
		{
			name:   "update without @@ before the first hunk",
			files:  map[string]string{"a.txt": "one\ntwo\nthree\n"},
			patch:  body("*** Update File: a.txt", " one", "-two", "+2"),
			output: "Success. Updated the following files:\nM a.txt",
			after:  map[string]string{"a.txt": "one\n2\nthree\n"},
		},
		{
			name:  "several hunks in one file",
			files: map[string]string{"n.txt": "1\n2\n3\n4\n5\n6\n7\n8\n9\n"},
			patch: body("*** Update File: n.txt",
				"@@", " 1", "-2", "+two",
				"@@", " 4", "-5", "+five", "+5.5",
				"@@", "-8", " 9"),
			after: map[string]string{"n.txt": "1\ntwo\n3\n4\nfive\n5.5\n6\n7\n9\n"},
		},
		{
			name:  "blank lines between hunks are separators",
			files: map[string]string{"n.txt": "a\nb\nc\nd\n"},
			patch: body("*** Update File: n.txt", "@@", "-a", "+A", "", "@@", "-d", "+D", ""),
			after: map[string]string{"n.txt": "A\nb\nc\nD\n"},
		},
		{
			name:  "empty context line written without a space",
			files: map[string]string{"n.txt": "a\n\nb\n"},
			patch: body("*** Update File: n.txt", "@@", " a", "", "-b", "+B"),
			after: map[string]string{"n.txt": "a\n\nB\n"},
		},
		{
			name:   "move and change",
			files:  map[string]string{"src/a.go": "package a\n"},
			patch:  body("*** Update File: src/a.go", "*** Move to: pkg/b/b.go", "@@", "-package a", "+package b"),
			output: "Success. Updated the following files:\nM pkg/b/b.go (moved from src/a.go)",
			after:  map[string]string{"src/a.go": absent, "pkg/b/b.go": "package b\n"},
		},
		{
			name:  "pure rename",
			files: map[string]string{"a.txt": "x\n"},
			patch: body("*** Update File: a.txt", "*** Move to: b.txt"),
			after: map[string]string{"a.txt": absent, "b.txt": "x\n"},
		},
		{
			name:  "several files",
			files: map[string]string{"m.txt": "m\n", "d.txt": "d\n"},
			patch: body("*** Add File: a.txt", "+a",
				"*** Update File: m.txt", "@@", "-m", "+M",
				"*** Delete File: d.txt"),
			output: "Success. Updated the following files:\nA a.txt\nM m.txt\nD d.txt",
			after:  map[string]string{"a.txt": "a\n", "m.txt": "M\n", "d.txt": absent},
		},
		{
			name:  "fuzzy match ignoring trailing whitespace",
			files: map[string]string{"w.txt": "alpha  \nbeta\t\ngamma\n"},
			patch: body("*** Update File: w.txt", "@@", " alpha", "-beta", "+BETA"),
			after: map[string]string{"w.txt": "alpha  \nBETA\ngamma\n"},
		},
		{
			name:  "fuzzy match ignoring indentation",
			files: map[string]string{"i.py": "def f():\n\tif x:\n\t\treturn 1\n"},
			patch: body("*** Update File: i.py", "@@ def f():", "     if x:", "-        return 1", "+        return 2"),
			after: map[string]string{"i.py": "def f():\n\tif x:\n        return 2\n"},
		},
		{
			name:  "exact match preferred over an earlier fuzzy one",
			files: map[string]string{"e.txt": "  x\ny\nx\ny\n"},
			patch: body("*** Update File: e.txt", "@@", " x", "-y", "+Y"),
			after: map[string]string{"e.txt": "  x\ny\nx\nY\n"},
		},
		{
			name:  "end of file picks the last occurrence",
			files: map[string]string{"r.txt": "x\ny\nx\ny\n"},
			patch: body("*** Update File: r.txt", "@@", " x", "-y", "+z", "*** End of File"),
			after: map[string]string{"r.txt": "x\ny\nx\nz\n"},
		},
		{
			name:  "append at end of file",
			files: map[string]string{"r.txt": "x\n"},
			patch: body("*** Update File: r.txt", "@@", "+appended", "*** End of File"),
			after: map[string]string{"r.txt": "x\nappended\n"},
		},
		{
			name:  "insert after anchor",
			files: map[string]string{"main.go": goFile},
			patch: body("*** Update File: main.go", "@@ func main() {", "+\tinit()"),
			after: map[string]string{"main.go": strings.Replace(goFile, "func main() {\n", "func main() {\n\tinit()\n", 1)},
		},
		{
			name:  "nested anchors",
			files: map[string]string{"c.py": "class A:\n    def run(self):\n        pass\nclass B:\n    def run(self):\n        pass\n"},
			patch: body("*** Update File: c.py", "@@ class B:", "@@     def run(self):", "-        pass", "+        return 1"),
			after: map[string]string{"c.py": "class A:\n    def run(self):\n        pass\nclass B:\n    def run(self):\n        return 1\n"},
		},
		{
			name:  "shortened anchor",
			files: map[string]string{"main.go": goFile},
			patch: body("*** Update File: main.go", "@@ func bye", "-\tfmt.Println(\"hello\")", "+\tfmt.Println(\"bye\")"),
			after: map[string]string{"main.go": strings.Replace(goFile, "func bye() {\n\tfmt.Println(\"hello\")", "func bye() {\n\tfmt.Println(\"bye\")", 1)},
		},
		{
			name:  "anchor repeated as first context line",
			files: map[string]string{"main.go": goFile},
			patch: body("*** Update File: main.go", "@@ func bye() {", " func bye() {", "-\tfmt.Println(\"hello\")", "+\tfmt.Println(\"bye\")"),
			after: map[string]string{"main.go": strings.Replace(goFile, "func bye() {\n\tfmt.Println(\"hello\")", "func bye() {\n\tfmt.Println(\"bye\")", 1)},
		},
		{
			name:  "unified diff header",
			files: map[string]string{"u.txt": "a\nb\n"},
			patch: body("*** Update File: u.txt", "@@ -1,2 +1,2 @@", " a", "-b", "+c"),
			after: map[string]string{"u.txt": "a\nc\n"},
		},
		{
			name:  "CRLF file keeps CRLF",
			files: map[string]string{"w.txt": "one\r\ntwo\r\n"},
			patch: body("*** Update File: w.txt", "@@", "-two", "+2"),
			after: map[string]string{"w.txt": "one\r\n2\r\n"},
		},
		{
			name:  "CRLF patch text",
			files: map[string]string{"w.txt": "one\ntwo\n"},
			patch: strings.ReplaceAll(body("*** Update File: w.txt", "@@", "-two", "+2"), "\n", "\r\n"),
			after: map[string]string{"w.txt": "one\n2\n"},
		},
		{
			name:  "missing final newline is kept",
			files: map[string]string{"n.txt": "a\nb"},
			patch: body("*** Update File: n.txt", "@@", "-a", "+A"),
			after: map[string]string{"n.txt": "A\nb"},
		},
		{
			name:  "heredoc wrapper and padding",
			files: map[string]string{"h.txt": "a\n"},
			patch: "<<'EOF'\n*** Begin Patch \n *** Update File: h.txt\n@@\n-a\n+b\n*** End Patch\nEOF\n",
			after: map[string]string{"h.txt": "b\n"},
		},
		{
			name:  "delete then add the same path",
			files: map[string]string{"x.txt": "old\n"},
			patch: body("*** Delete File: x.txt", "*** Add File: x.txt", "+new"),
			after: map[string]string{"x.txt": "new\n"},
		},
		{
			name:  "add then update the same file",
			patch: body("*** Add File: x.txt", "+one", "*** Update File: x.txt", "@@", "-one", "+two"),
			after: map[string]string{"x.txt": "two\n"},
		},

		// Errors: nothing may change.
		{
			name:  "missing begin marker",
			patch: "*** Update File: a.txt\n@@\n-a\n+b\n*** End Patch",
			errs:  []string{"invalid patch", "first line of the patch must be '*** Begin Patch'", "Nothing was changed"},
		},
		{
			name:  "missing end marker",
			patch: "*** Begin Patch\n*** Add File: a.txt\n+a",
			errs:  []string{"last line of the patch must be '*** End Patch'"},
			after: map[string]string{"a.txt": absent},
		},
		{
			name:  "no sections",
			patch: "*** Begin Patch\n*** End Patch",
			errs:  []string{"no file sections"},
		},
		{
			name:  "unknown section",
			patch: body("*** Rename File: a.txt"),
			errs:  []string{"line 2", "expected '*** Add File: <path>'"},
		},
		{
			name:  "unprefixed line in a hunk",
			files: map[string]string{"a.txt": "a\n"},
			patch: body("*** Update File: a.txt", "@@", "-a", "b"),
			errs:  []string{"line 5", `unexpected line "b" in hunk 1 of a.txt`},
			after: map[string]string{"a.txt": "a\n"},
		},
		{
			name:  "added line without +",
			patch: body("*** Add File: a.txt", "+a", "b"),
			errs:  []string{"line 4", "must start with '+'"},
			after: map[string]string{"a.txt": absent},
		},
		{
			name:  "update without hunks",
			files: map[string]string{"a.txt": "a\n"},
			patch: body("*** Update File: a.txt", "*** Delete File: a.txt"),
			errs:  []string{"has no hunks"},
			after: map[string]string{"a.txt": "a\n"},
		},
		{
			name:  "empty path",
			patch: body("*** Delete File: "),
			errs:  []string{"needs a path"},
		},
		{
			name:  "update of a missing file",
			patch: body("*** Update File: nope.txt", "@@", "-a", "+b"),
			errs:  []string{"nope.txt: cannot be updated: the file does not exist", "Add File"},
		},
		{
			name:  "delete of a missing file",
			patch: body("*** Delete File: nope.txt"),
			errs:  []string{"nope.txt: cannot be deleted: the file does not exist"},
		},
		{
			name:  "add of an existing file",
			files: map[string]string{"a.txt": "keep\n"},
			patch: body("*** Add File: a.txt", "+new"),
			errs:  []string{"a.txt: cannot be added: the file already exists", "Update File"},
			after: map[string]string{"a.txt": "keep\n"},
		},
		{
			name:  "move onto an existing file",
			files: map[string]string{"a.txt": "a\n", "b.txt": "b\n"},
			patch: body("*** Update File: a.txt", "*** Move to: b.txt", "@@", "-a", "+c"),
			errs:  []string{"cannot be moved to b.txt: that file already exists"},
			after: map[string]string{"a.txt": "a\n", "b.txt": "b\n"},
		},
		{
			name:  "folder as file",
			files: map[string]string{"dir/x.txt": "x\n"},
			patch: body("*** Delete File: dir"),
			errs:  []string{"dir: is a folder"},
			after: map[string]string{"dir/x.txt": "x\n"},
		},
		{
			name:  "parent is a file",
			files: map[string]string{"f.txt": "x\n"},
			patch: body("*** Add File: f.txt/g.txt", "+x"),
			errs:  []string{"a parent of this path is a file"},
		},
		{
			name:  "one bad hunk changes nothing",
			files: map[string]string{"a.txt": "a\nb\nc\n", "b.txt": "1\n2\n3\n", "gone.txt": "stay\n"},
			patch: body(
				"*** Add File: new/created.txt", "+x",
				"*** Update File: a.txt", "@@", "-a", "+A",
				"*** Delete File: gone.txt",
				"*** Update File: b.txt", "@@", "-1", "+one", "@@", " 2", "-4", "+four"),
			errs:  []string{"apply_patch failed; nothing was changed", "b.txt: hunk 2 did not match", "searched from line 2", "  | 2\n  | 4", "file_read"},
			after: map[string]string{"new/created.txt": absent, "a.txt": "a\nb\nc\n", "b.txt": "1\n2\n3\n", "gone.txt": "stay\n"},
		},
		{
			name:  "anchor not found",
			files: map[string]string{"main.go": goFile},
			patch: body("*** Update File: main.go", "@@ func missing() {", "-x", "+y"),
			errs:  []string{"main.go: hunk 1 did not match: context line not found", "@@ func missing() {"},
			after: map[string]string{"main.go": goFile},
		},
		{
			name:  "hunks out of order",
			files: map[string]string{"n.txt": "1\n2\n3\n4\n"},
			patch: body("*** Update File: n.txt", "@@", "-3", "+three", "@@", "-1", "+one"),
			errs:  []string{"hunk 2 matches only before the previous hunk"},
			after: map[string]string{"n.txt": "1\n2\n3\n4\n"},
		},
		{
			name:  "end of file hunk that is not at the end still needs its lines",
			files: map[string]string{"n.txt": "1\n2\n"},
			patch: body("*** Update File: n.txt", "@@", "-9", "*** End of File"),
			errs:  []string{"hunk 1 did not match"},
		},
		{
			name:  "empty input",
			patch: "  ",
			errs:  []string{"input is empty"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			env := tool.Env{Workspace: t.TempDir(), SessionID: "s"}
			setup(t, env.Workspace, tt.files)
			res := run(t, patch.New(), env, tt.patch)
			if len(tt.errs) == 0 {
				g.Expect(res.IsError).To(BeFalse(), res.Content)
				if tt.output != "" {
					g.Expect(res.Content).To(Equal(tt.output))
				}
			} else {
				g.Expect(res.IsError).To(BeTrue(), res.Content)
				for _, e := range tt.errs {
					g.Expect(res.Content).To(ContainSubstring(e))
				}
			}
			expectFiles(g, env.Workspace, tt.after)
			if len(tt.errs) > 0 {
				// Untouched files keep their content.
				expectFiles(g, env.Workspace, tt.files)
			}
			// No temporary files are left behind.
			var temps []string
			_ = filepath.WalkDir(env.Workspace, func(p string, d os.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), ".patch-") {
					temps = append(temps, p)
				}
				return nil
			})
			g.Expect(temps).To(BeEmpty())
		})
	}
}

func TestApplyPatchKeepsMode(t *testing.T) {
	g := NewWithT(t)
	env := tool.Env{Workspace: t.TempDir()}
	setup(t, env.Workspace, map[string]string{"run.sh": "echo a\n"})
	p := filepath.Join(env.Workspace, "run.sh")
	g.Expect(os.Chmod(p, 0o755)).To(Succeed())
	res := run(t, patch.New(), env, body("*** Update File: run.sh", "*** Move to: bin/run.sh", "@@", "-echo a", "+echo b"))
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	fi, err := os.Stat(filepath.Join(env.Workspace, "bin", "run.sh"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o755)))

	res = run(t, patch.New(), env, body("*** Add File: new.txt", "+x"))
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	fi, err = os.Stat(filepath.Join(env.Workspace, "new.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o644)))
}

func TestApplyPatchWorkspaceBoundary(t *testing.T) {
	// Layout: <parent>/ws is the workspace, <parent>/outside is not.
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	outside := filepath.Join(parent, "outside")
	newEnv := func(t *testing.T) tool.Env {
		t.Helper()
		for _, d := range []string{ws, outside} {
			if err := os.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
		}
		setup(t, ws, map[string]string{"inside.txt": "in\n"})
		setup(t, outside, map[string]string{"secret.txt": "secret\n"})
		for link, target := range map[string]string{
			"out-dir":      outside,
			"out-file.txt": filepath.Join(outside, "secret.txt"),
			"dangling.txt": filepath.Join(outside, "nothing-here.txt"),
			"in-link.txt":  filepath.Join(ws, "inside.txt"),
		} {
			if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
				t.Fatal(err)
			}
		}
		return tool.Env{Workspace: ws}
	}
	abs := func(p string) string { return filepath.Join(outside, p) }

	tests := []struct {
		name    string
		patch   string
		allowed map[string]string // files under outside after the patch when allowed
	}{
		{"dot-dot add", body("*** Add File: ../outside/new.txt", "+x"), map[string]string{"new.txt": "x\n"}},
		{"dot-dot inside the path", body("*** Add File: sub/../../outside/new.txt", "+x"), map[string]string{"new.txt": "x\n"}},
		{"absolute path outside", body("*** Add File: "+abs("new.txt"), "+x"), map[string]string{"new.txt": "x\n"}},
		{"delete outside", body("*** Delete File: ../outside/secret.txt"), map[string]string{"secret.txt": absent}},
		{"update outside", body("*** Update File: "+abs("secret.txt"), "@@", "-secret", "+leaked"), map[string]string{"secret.txt": "leaked\n"}},
		{"add through a symlinked folder", body("*** Add File: out-dir/new.txt", "+x"), map[string]string{"new.txt": "x\n"}},
		{"update through a symlinked file", body("*** Update File: out-file.txt", "@@", "-secret", "+leaked"), map[string]string{"secret.txt": "leaked\n"}},
		{"add through a dangling symlink", body("*** Add File: dangling.txt", "+x"), nil},
		{"move out of the workspace", body("*** Update File: inside.txt", "*** Move to: ../outside/moved.txt"), map[string]string{"moved.txt": "in\n"}},
		{"move into a symlinked folder", body("*** Update File: inside.txt", "*** Move to: out-dir/moved.txt"), map[string]string{"moved.txt": "in\n"}},
	}
	for _, tt := range tests {
		t.Run("rejected: "+tt.name, func(t *testing.T) {
			g := NewWithT(t)
			env := newEnv(t)
			res := run(t, patch.New(), env, tt.patch)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring("outside the workspace"))
			g.Expect(res.Content).To(ContainSubstring("nothing was changed"))
			expectFiles(g, outside, map[string]string{"secret.txt": "secret\n", "new.txt": absent, "moved.txt": absent, "nothing-here.txt": absent})
			expectFiles(g, ws, map[string]string{"inside.txt": "in\n"})
		})
		if tt.allowed == nil {
			continue
		}
		t.Run("allowed: "+tt.name, func(t *testing.T) {
			g := NewWithT(t)
			env := newEnv(t)
			res := run(t, patch.New(patch.AllowOutsideWorkspace()), env, tt.patch)
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			expectFiles(g, outside, tt.allowed)
		})
	}

	t.Run("absolute paths and symlinks that stay inside are fine", func(t *testing.T) {
		g := NewWithT(t)
		env := newEnv(t)
		res := run(t, patch.New(), env, body("*** Update File: "+filepath.Join(ws, "inside.txt"), "@@", "-in", "+changed"))
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		expectFiles(g, ws, map[string]string{"inside.txt": "changed\n"})

		// Updating through a link changes its target and keeps the link.
		res = run(t, patch.New(), env, body("*** Update File: in-link.txt", "@@", "-changed", "+via link"))
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		expectFiles(g, ws, map[string]string{"inside.txt": "via link\n"})
		fi, err := os.Lstat(filepath.Join(ws, "in-link.txt"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode() & os.ModeSymlink).NotTo(BeZero())
	})

	t.Run("no workspace", func(t *testing.T) {
		g := NewWithT(t)
		res := run(t, patch.New(), tool.Env{}, body("*** Add File: x.txt", "+x"))
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(res.Content).To(ContainSubstring("no workspace"))
	})
}

func TestApplyPatchInvalidArguments(t *testing.T) {
	for name, args := range map[string]string{
		"malformed JSON":   `{"input": `,
		"wrong type":       `{"input": 42}`,
		"missing input":    `{}`,
		"unknown property": `{"input": "*** Begin Patch\n*** End Patch", "path": "x"}`,
		"not an object":    `["input"]`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			res := runRaw(t, patch.New(), tool.Env{Workspace: t.TempDir()}, args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(HavePrefix("error:"))
		})
	}
}

// BenchmarkApplyPatch applies a 10-hunk patch to a 2,000-line file.
func BenchmarkApplyPatch(b *testing.B) {
	var src strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&src, "line %d: some ordinary content\n", i)
	}
	hunks := []string{"*** Update File: big.txt"}
	for k := range 10 {
		i := 100 + k*190
		hunks = append(hunks, fmt.Sprintf("@@ line %d: some ordinary content", i-3),
			fmt.Sprintf(" line %d: some ordinary content", i-2),
			fmt.Sprintf(" line %d: some ordinary content", i-1),
			fmt.Sprintf("-line %d: some ordinary content", i),
			fmt.Sprintf("+line %d: changed", i),
			fmt.Sprintf(" line %d: some ordinary content", i+1))
	}
	args, _ := json.Marshal(map[string]string{"input": body(hunks...)})
	ws := b.TempDir()
	env := tool.Env{Workspace: ws}
	reg, err := tool.NewRegistry(patch.New())
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(ws, "big.txt")
	for b.Loop() {
		b.StopTimer()
		if err := os.WriteFile(p, []byte(src.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res := reg.Execute(context.Background(), env, llm.ToolCall{Name: "apply_patch", Arguments: string(args)})
		if res.IsError {
			b.Fatal(res.Content)
		}
	}
}
