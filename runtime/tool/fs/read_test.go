package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// numbered builds file_read's rendering of lines from..to of a file whose line
// i is "line i".
func numbered(from, to int) string {
	var b []string
	for i := from; i <= to; i++ {
		b = append(b, fmt.Sprintf("%6d\tline %d", i, i))
	}
	return strings.Join(b, "\n")
}

// lines returns n lines "line 1".."line n", each ending in a newline.
func lines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestFileRead(t *testing.T) {
	env := workspace(t)
	long := strings.Repeat("x", 99)
	var capped strings.Builder
	for range 1000 {
		capped.WriteString(long + "\n")
	}
	writeFiles(t, env.Workspace, map[string]string{
		"five.txt":       lines(5),
		"noeol.txt":      "a\nb",
		"big.txt":        lines(2500),
		"capped.txt":     capped.String(),
		"oneline.txt":    strings.Repeat("y", 60_000) + "\nafter\n",
		"empty.txt":      "",
		"crlf.txt":       "one\r\ntwo\r\n",
		"dir/inside.txt": "x\n",
		"bin.dat":        "abc\x00def",
		"utf8.txt":       "héllo wörld\n",
	})
	abs := filepath.Join(env.Workspace, "five.txt")

	tests := []struct {
		name    string
		args    any
		isError bool
		want    []string // substrings of Content
		exact   string   // whole Content, when set
	}{
		{name: "whole small file", args: map[string]any{"path": "five.txt"}, exact: numbered(1, 5)},
		{name: "absolute path", args: map[string]any{"path": abs}, exact: numbered(1, 5)},
		{name: "last line without newline", args: map[string]any{"path": "noeol.txt"}, exact: "     1\ta\n     2\tb"},
		{name: "offset and limit", args: map[string]any{"path": "five.txt", "offset": 2, "limit": 2},
			exact: numbered(2, 3) + "\n\n[Showing lines 2-3 of 5. Call file_read with offset=4 to continue.]"},
		{name: "offset to the end", args: map[string]any{"path": "five.txt", "offset": 4}, exact: numbered(4, 5)},
		{name: "default limit 2000", args: map[string]any{"path": "big.txt"},
			want: []string{numbered(1999, 2000), "[Showing lines 1-2000 of 2500. Call file_read with offset=2001 to continue.]"}},
		{name: "second page", args: map[string]any{"path": "big.txt", "offset": 2001},
			exact: numbered(2001, 2500)},
		{name: "output capped at 50,000 characters", args: map[string]any{"path": "capped.txt"},
			want: []string{"[Output capped at 50000 characters: showing lines 1-467 of 1000. Call file_read with offset=468 to continue.]"}},
		{name: "single line longer than the cap", args: map[string]any{"path": "oneline.txt"},
			want: []string{"[Line 1 is longer than 50000 characters and was cut. The file has 2 lines; call file_read with offset=2 to continue.]"}},
		{name: "empty file", args: map[string]any{"path": "empty.txt"}, exact: "(empty.txt is empty)"},
		{name: "CRLF shown without CR", args: map[string]any{"path": "crlf.txt"}, exact: "     1\tone\n     2\ttwo"},
		{name: "utf-8", args: map[string]any{"path": "utf8.txt"}, exact: "     1\théllo wörld"},
		{name: "missing file", args: map[string]any{"path": "nope.txt"}, isError: true, want: []string{"nope.txt does not exist", "file_search"}},
		{name: "directory", args: map[string]any{"path": "dir"}, isError: true, want: []string{"dir is a folder", "file_search"}},
		{name: "binary file", args: map[string]any{"path": "bin.dat"}, isError: true, want: []string{"binary", "NUL"}},
		{name: "offset past the end", args: map[string]any{"path": "five.txt", "offset": 9}, isError: true,
			want: []string{"offset 9 is past the end of five.txt, which has 5 lines"}},
		{name: "empty path", args: map[string]any{"path": " "}, isError: true, want: []string{"path is empty"}},
		{name: "offset below 1", args: map[string]any{"path": "five.txt", "offset": 0}, isError: true, want: []string{"invalid arguments"}},
		{name: "limit below 1", args: map[string]any{"path": "five.txt", "limit": -3}, isError: true, want: []string{"invalid arguments"}},
		{name: "offset not an integer", args: `{"path": "five.txt", "offset": 1.5}`, isError: true, want: []string{"invalid arguments"}},
	}
	for name, raw := range invalidArgCases("path") {
		tests = append(tests, struct {
			name    string
			args    any
			isError bool
			want    []string
			exact   string
		}{name: name, args: raw, isError: true, want: []string{"error:"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, env, "file_read", tt.args)
			g.Expect(res.IsError).To(Equal(tt.isError), res.Content)
			if tt.exact != "" {
				g.Expect(res.Content).To(Equal(tt.exact))
			}
			for _, w := range tt.want {
				g.Expect(res.Content).To(ContainSubstring(w))
			}
			g.Expect(len([]rune(res.Content))).To(BeNumerically("<=", 50_000+300))
		})
	}
}

func TestFileReadCappedOutputResumes(t *testing.T) {
	g := NewWithT(t)
	env := workspace(t)
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&b, "%03d %s\n", i, strings.Repeat("z", 95))
	}
	writeFiles(t, env.Workspace, map[string]string{"f.txt": b.String()})

	// Page through the file following the notes; every line appears once.
	seen, offset := 0, 1
	for range 10 {
		res := call(t, env, "file_read", map[string]any{"path": "f.txt", "offset": offset})
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		body, note, _ := strings.Cut(res.Content, "\n\n[")
		for _, l := range strings.Split(body, "\n") {
			seen++
			g.Expect(l).To(HavePrefix(fmt.Sprintf("%6d\t%03d ", seen, seen)))
		}
		if note == "" {
			break
		}
		_, err := fmt.Sscanf(note[strings.Index(note, "offset=")+len("offset="):], "%d", &offset)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(offset).To(Equal(seen + 1))
	}
	g.Expect(seen).To(Equal(1000))
}

func TestFileReadPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	g := NewWithT(t)
	env := workspace(t)
	writeFiles(t, env.Workspace, map[string]string{"secret.txt": "x\n"})
	g.Expect(os.Chmod(filepath.Join(env.Workspace, "secret.txt"), 0)).To(Succeed())
	res := call(t, env, "file_read", map[string]any{"path": "secret.txt"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("permission denied"))
}
