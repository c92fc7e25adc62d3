package fs_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestFileWrite(t *testing.T) {
	tests := []struct {
		name    string
		setup   map[string]string
		args    any
		isError bool
		want    string // substring of Content
		file    string // file to check afterwards
		content string // its expected content
	}{
		{name: "creates file and parent folders", args: map[string]any{"path": "a/b/c.txt", "content": "hello\n"},
			want: "Created a/b/c.txt (6 bytes written).", file: "a/b/c.txt", content: "hello\n"},
		{name: "overwrites", setup: map[string]string{"x.txt": "old content"}, args: map[string]any{"path": "x.txt", "content": "new"},
			want: "Overwrote x.txt (3 bytes written).", file: "x.txt", content: "new"},
		{name: "empty content", args: map[string]any{"path": "empty.txt", "content": ""},
			want: "Created empty.txt (0 bytes written).", file: "empty.txt", content: ""},
		{name: "multi-byte content counts bytes", args: map[string]any{"path": "u.txt", "content": "héllo"},
			want: "(6 bytes written)", file: "u.txt", content: "héllo"},
		{name: "path is a folder", setup: map[string]string{"d/f.txt": ""}, args: map[string]any{"path": "d", "content": "x"},
			isError: true, want: "d is a folder"},
		{name: "parent is a file", setup: map[string]string{"f.txt": "x"}, args: map[string]any{"path": "f.txt/g.txt", "content": "x"},
			isError: true, want: "a parent of f.txt/g.txt is a file"},
		{name: "empty path", args: map[string]any{"path": "", "content": "x"}, isError: true, want: "path is empty"},
		{name: "content missing", args: `{"path": "a.txt"}`, isError: true, want: "invalid arguments"},
		{name: "content wrong type", args: `{"path": "a.txt", "content": ["x"]}`, isError: true, want: "invalid arguments"},
	}
	for name, raw := range invalidArgCases("path") {
		tests = append(tests, struct {
			name    string
			setup   map[string]string
			args    any
			isError bool
			want    string
			file    string
			content string
		}{name: name, args: raw, isError: true, want: "error:"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			env := workspace(t)
			writeFiles(t, env.Workspace, tt.setup)
			res := call(t, env, "file_write", tt.args)
			g.Expect(res.IsError).To(Equal(tt.isError), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tt.want))
			if tt.file != "" {
				g.Expect(readFile(t, env.Workspace, tt.file)).To(Equal(tt.content))
			}
			// No temporary files are left behind.
			leftovers, _ := filepath.Glob(filepath.Join(env.Workspace, "*", ".*.tmp-*"))
			top, _ := filepath.Glob(filepath.Join(env.Workspace, ".*.tmp-*"))
			g.Expect(append(leftovers, top...)).To(BeEmpty())
		})
	}
}

func TestFileWriteKeepsModeAndFollowsSymlinks(t *testing.T) {
	g := NewWithT(t)
	env := workspace(t)
	writeFiles(t, env.Workspace, map[string]string{"run.sh": "#!/bin/sh\n", "real/target.txt": "old"})
	script := filepath.Join(env.Workspace, "run.sh")
	g.Expect(os.Chmod(script, 0o755)).To(Succeed())
	link := filepath.Join(env.Workspace, "link.txt")
	g.Expect(os.Symlink(filepath.Join(env.Workspace, "real", "target.txt"), link)).To(Succeed())

	res := call(t, env, "file_write", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	fi, err := os.Stat(script)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o755)))

	res = call(t, env, "file_write", map[string]any{"path": "new.txt", "content": "x"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	fi, err = os.Stat(filepath.Join(env.Workspace, "new.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o644)))

	res = call(t, env, "file_write", map[string]any{"path": "link.txt", "content": "through the link"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("Overwrote"))
	fi, err = os.Lstat(link)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode() & os.ModeSymlink).NotTo(BeZero())
	g.Expect(readFile(t, env.Workspace, "real/target.txt")).To(Equal("through the link"))
}

func TestFileEdit(t *testing.T) {
	const src = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n\tprintln(\"bye\")\n}\n"
	tests := []struct {
		name    string
		file    string // content of f.go before the call
		args    map[string]any
		isError bool
		want    string
		after   string // content of f.go after the call
	}{
		{name: "unique replacement", file: src,
			args:  map[string]any{"path": "f.go", "old_string": "println(\"bye\")", "new_string": "println(\"ciao\")"},
			want:  "Edited f.go: replaced 1 occurrence(s).",
			after: "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n\tprintln(\"ciao\")\n}\n"},
		{name: "replace_all", file: src,
			args:  map[string]any{"path": "f.go", "old_string": "\"hi\"", "new_string": "\"hello\"", "replace_all": true},
			want:  "replaced 2 occurrence(s)",
			after: "package main\n\nfunc main() {\n\tprintln(\"hello\")\n\tprintln(\"hello\")\n\tprintln(\"bye\")\n}\n"},
		{name: "multi-line old_string made unique with context", file: src,
			args:  map[string]any{"path": "f.go", "old_string": "\tprintln(\"hi\")\n\tprintln(\"bye\")", "new_string": "\tprintln(\"bye\")"},
			want:  "Edited f.go: replaced 1 occurrence(s).",
			after: "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"bye\")\n}\n"},
		{name: "deleting text", file: "a b c", args: map[string]any{"path": "f.go", "old_string": " b", "new_string": ""},
			want: "Edited f.go: replaced 1 occurrence(s).", after: "a c"},
		{name: "CRLF file matched with LF old_string", file: "one\r\ntwo\r\nthree\r\n",
			args:  map[string]any{"path": "f.go", "old_string": "one\ntwo", "new_string": "1\n2"},
			want:  "Edited f.go: replaced 1 occurrence(s).",
			after: "1\r\n2\r\nthree\r\n"},
		{name: "missing file", args: map[string]any{"path": "f.go", "old_string": "a", "new_string": "b"},
			isError: true, want: "f.go does not exist"},
		{name: "not found", file: src, args: map[string]any{"path": "f.go", "old_string": "goodbye", "new_string": "x"},
			isError: true, want: "old_string was not found in f.go. Read the file with file_read", after: src},
		{name: "not found because of indentation", file: src, args: map[string]any{"path": "f.go", "old_string": "    println(\"bye\")", "new_string": "x"},
			isError: true, want: "different whitespace or indentation", after: src},
		{name: "not found because of line-number prefix", file: src, args: map[string]any{"path": "f.go", "old_string": "     6\t\tprintln(\"bye\")", "new_string": "x"},
			isError: true, want: "line-number prefixes", after: src},
		{name: "several occurrences without replace_all", file: src,
			args:    map[string]any{"path": "f.go", "old_string": "println(\"hi\")", "new_string": "x"},
			isError: true, want: "occurs 2 times in f.go. Include more surrounding lines", after: src},
		{name: "identical strings", file: src, args: map[string]any{"path": "f.go", "old_string": "main", "new_string": "main"},
			isError: true, want: "identical", after: src},
		{name: "empty old_string", file: src, args: map[string]any{"path": "f.go", "old_string": "", "new_string": "x"},
			isError: true, want: "use file_write", after: src},
		{name: "folder", args: map[string]any{"path": ".", "old_string": "a", "new_string": "b"},
			isError: true, want: "is a folder"},
		{name: "missing new_string", file: src, args: map[string]any{"path": "f.go", "old_string": "a"},
			isError: true, want: "invalid arguments", after: src},
		{name: "replace_all wrong type", file: src, args: map[string]any{"path": "f.go", "old_string": "a", "new_string": "b", "replace_all": "yes"},
			isError: true, want: "invalid arguments", after: src},
		{name: "unknown property", file: src, args: map[string]any{"path": "f.go", "old_string": "a", "new_string": "b", "line": 3},
			isError: true, want: "invalid arguments", after: src},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			env := workspace(t)
			if tt.file != "" {
				writeFiles(t, env.Workspace, map[string]string{"f.go": tt.file})
			}
			res := call(t, env, "file_edit", tt.args)
			g.Expect(res.IsError).To(Equal(tt.isError), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tt.want))
			if tt.after != "" {
				g.Expect(readFile(t, env.Workspace, "f.go")).To(Equal(tt.after))
			}
		})
	}
}

func TestFileEditInvalidJSON(t *testing.T) {
	g := NewWithT(t)
	for name, raw := range invalidArgCases("path") {
		res := call(t, workspace(t), "file_edit", raw)
		g.Expect(res.IsError).To(BeTrue(), name)
	}
}

func TestFileEditKeepsMode(t *testing.T) {
	g := NewWithT(t)
	env := workspace(t)
	writeFiles(t, env.Workspace, map[string]string{"run.sh": "echo a\n"})
	p := filepath.Join(env.Workspace, "run.sh")
	g.Expect(os.Chmod(p, 0o750)).To(Succeed())
	res := call(t, env, "file_edit", map[string]any{"path": p, "old_string": "a", "new_string": "b"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	fi, err := os.Stat(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o750)))
	g.Expect(readFile(t, env.Workspace, "run.sh")).To(Equal("echo b\n"))
}
