package fs_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// layout is two sessions' workspaces side by side and a secret beside them;
// s1's workspace holds the symlinks a shell command could have made.
func layout(t *testing.T) (env tool.Env, other, secret string) {
	t.Helper()
	root := t.TempDir()
	ws, other := filepath.Join(root, "s1"), filepath.Join(root, "s2")
	writeFiles(t, root, map[string]string{"s1/own.txt": "own\n", "s2/theirs.txt": "other-session-data\n", "agent.secret": "agent-secret\n"})
	secret = filepath.Join(root, "agent.secret")
	for link, target := range map[string]string{"up": root, "secret-link": secret, "other-link": other, "etc-link": "/etc", "rel-up": "../s2/theirs.txt"} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	return tool.Env{Workspace: ws, SessionID: "s1", Agent: "test"}, other, secret
}

func TestFileToolsStayInTheWorkspace(t *testing.T) {
	env, other, secret := layout(t)
	leaks := []string{"other-session-data", "agent-secret", "root:"}
	reads := []struct{ name, tool, path string }{
		{"absolute outside", "file_read", "/etc/passwd"},
		{"dot-dot", "file_read", "../s2/theirs.txt"},
		{"absolute other session", "file_read", filepath.Join(other, "theirs.txt")},
		{"symlink to a file outside", "file_read", "secret-link"},
		{"relative symlink out", "file_read", "rel-up"},
		{"through a symlinked folder", "file_read", "up/agent.secret"},
		{"through /etc link", "file_read", "etc-link/passwd"},
		{"edit through a link", "file_edit", "secret-link"},
		{"search a linked folder", "content_search", "other-link"},
		{"list a linked folder", "file_search", "up"},
	}
	for _, tc := range reads {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			args := map[string]any{"path": tc.path}
			switch tc.tool {
			case "file_edit":
				args["old_string"], args["new_string"] = "agent-secret", "pwned"
			case "content_search":
				args["pattern"] = "data"
			case "file_search":
				args["pattern"] = "*"
			}
			res := callWith(t, nil, env, tc.tool, args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			for _, l := range leaks {
				g.Expect(res.Content).NotTo(ContainSubstring(l))
			}
		})
	}
	g := NewWithT(t)
	// A search of the whole workspace does not follow links out of it.
	res := callWith(t, nil, env, "content_search", map[string]any{"pattern": "secret|data|root"})
	for _, l := range leaks {
		g.Expect(res.Content).NotTo(ContainSubstring(l))
	}
	// Writes through links or to absolute paths outside are refused and
	// change nothing.
	for _, p := range []string{"secret-link", "etc-link/picobot-probe", "up/dropped", "/etc/picobot-probe", filepath.Join(other, "dropped")} {
		res := callWith(t, nil, env, "file_write", map[string]any{"path": p, "content": "pwned"})
		g.Expect(res.IsError).To(BeTrue(), p+": "+res.Content)
	}
	g.Expect(os.ReadFile(secret)).To(Equal([]byte("agent-secret\n")))
	for _, p := range []string{"/etc/picobot-probe", filepath.Join(other, "dropped"), filepath.Join(filepath.Dir(other), "dropped")} {
		g.Expect(p).NotTo(BeAnExistingFile())
	}
	g.Expect(callWith(t, nil, env, "file_read", map[string]any{"path": "/etc/passwd"}).Content).To(Equal(
		"error: /etc/passwd is outside the workspace. The file tools work inside the workspace; use a path relative to it."))
}

func TestFileToolsWorkInsideTheWorkspace(t *testing.T) {
	g := NewWithT(t)
	env, _, _ := layout(t)
	g.Expect(os.Symlink("own.txt", filepath.Join(env.Workspace, "alias"))).To(Succeed())
	// An absolute path into the workspace and a link that stays inside it.
	res := callWith(t, nil, env, "file_read", map[string]any{"path": filepath.Join(env.Workspace, "own.txt")})
	g.Expect(res.Content).To(ContainSubstring("own"))
	res = callWith(t, nil, env, "file_write", map[string]any{"path": "alias", "content": "through the alias\n"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(readFile(t, env.Workspace, "own.txt")).To(Equal("through the alias\n"))
	res = callWith(t, nil, env, "file_write", map[string]any{"path": "deep/new/file.txt", "content": "x"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	res = callWith(t, nil, env, "file_search", map[string]any{"pattern": "*.txt"})
	g.Expect(res.Content).To(ContainSubstring("deep/new/file.txt"))
	g.Expect(res.Content).To(ContainSubstring("own.txt"))
}

func TestAllowedPathsAreTheOptIn(t *testing.T) {
	g := NewWithT(t)
	env, _, _ := layout(t)
	extra := t.TempDir()
	writeFiles(t, extra, map[string]string{"docs/guide.md": "the guide\n", "out/.keep": "", "single.conf": "key=value\n", "beside.conf": "hidden\n"})
	opts := []fs.Option{fs.AllowPaths([]string{filepath.Join(extra, "docs"), filepath.Join(extra, "single.conf")}, []string{filepath.Join(extra, "out")})}

	res := callWith(t, opts, env, "file_read", map[string]any{"path": filepath.Join(extra, "docs", "guide.md")})
	g.Expect(res.Content).To(ContainSubstring("the guide"))
	res = callWith(t, opts, env, "file_read", map[string]any{"path": filepath.Join(extra, "single.conf")})
	g.Expect(res.Content).To(ContainSubstring("key=value"))
	res = callWith(t, opts, env, "file_read", map[string]any{"path": filepath.Join(extra, "beside.conf")})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("outside the workspace. The file tools work inside the workspace and in "))
	g.Expect(res.Content).To(ContainSubstring(filepath.Join(extra, "docs") + " (read-only)"))

	res = callWith(t, opts, env, "file_write", map[string]any{"path": filepath.Join(extra, "docs", "guide.md"), "content": "x"})
	g.Expect(res.Content).To(Equal("error: " + filepath.Join(extra, "docs", "guide.md") + " is in " + filepath.Join(extra, "docs") + ", which this agent may only read."))
	res = callWith(t, opts, env, "file_write", map[string]any{"path": filepath.Join(extra, "out", "report.txt"), "content": "done\n"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(readFile(t, extra, "out/report.txt")).To(Equal("done\n"))
	res = callWith(t, opts, env, "content_search", map[string]any{"pattern": "guide", "path": filepath.Join(extra, "docs")})
	g.Expect(res.Content).To(ContainSubstring("guide.md:1: the guide"))
}
