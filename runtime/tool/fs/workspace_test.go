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

// The runtime's whole file reads and writes (what a sandbox pod's exec
// server runs for it) keep the file tools' confinement and their bounds,
// and move bytes unchanged, binary ones included.
func TestWorkspaceToolsMoveWholeFilesInsideTheWorkspace(t *testing.T) {
	g := NewWithT(t)
	ws := t.TempDir()
	outside := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o600)).To(Succeed())
	g.Expect(os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(ws, "link.txt"))).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(ws, "out"))).To(Succeed())
	g.Expect(os.Mkdir(filepath.Join(ws, "dir"), 0o700)).To(Succeed())
	reg, err := tool.NewRegistry(fs.WorkspaceTools()...)
	g.Expect(err).NotTo(HaveOccurred())
	env := tool.Env{Workspace: ws}
	run := func(name string, args any) tool.Result {
		raw, _ := json.Marshal(args)
		return reg.Execute(context.Background(), env, llm.ToolCall{ID: "c1", Name: name, Arguments: string(raw)})
	}
	read := func(p string, maxBytes int64) tool.Result {
		return run(fs.WorkspaceReadName, fs.WorkspaceReadArgs{Path: p, MaxBytes: maxBytes})
	}

	data := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	res := run(fs.WorkspaceWriteName, fs.WorkspaceWriteArgs{Path: "nodes/n1/snap.bin", Data: data})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(os.ReadFile(filepath.Join(ws, "nodes", "n1", "snap.bin"))).To(Equal(data))
	res = read("nodes/n1/snap.bin", 6)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Artifacts).To(Equal([]tool.Artifact{{Name: "snap.bin", Data: data}}))
	res = read(filepath.Join(ws, "nodes/n1/snap.bin"), 6)
	g.Expect(res.IsError).To(BeFalse(), "an absolute path inside the workspace: %s", res.Content)

	for _, c := range []struct {
		path     string
		maxBytes int64
		want     string
	}{
		{"nodes/n1/snap.bin", 5, "nodes/n1/snap.bin has 6 bytes, more than the 5 byte limit"},
		{"nodes/n1/snap.bin", 0, "maxBytes must be between 1 and"},
		{"nodes/n1/snap.bin", fs.MaxWorkspaceFile + 1, "maxBytes must be between 1 and"},
		{"link.txt", 100, "link.txt is a symbolic link that leads outside the workspace"},
		{"out/secret.txt", 100, "leads outside the workspace"},
		{"../" + filepath.Base(outside) + "/secret.txt", 100, "is outside the workspace"},
		{filepath.Join(outside, "secret.txt"), 100, "is outside the workspace"},
		{"dir", 100, "dir is a folder"},
		{"missing.txt", 100, "missing.txt does not exist"},
		{" ", 100, "path is empty"},
	} {
		res := read(c.path, c.maxBytes)
		g.Expect(res.IsError).To(BeTrue(), c.path)
		g.Expect(res.Content).To(ContainSubstring(c.want), c.path)
		g.Expect(res.Artifacts).To(BeEmpty(), c.path)
	}

	for _, c := range []struct{ path, want string }{
		{"link.txt", "leads outside the workspace"},
		{"out/new.txt", "leads outside the workspace"},
		{"../" + filepath.Base(outside) + "/new.txt", "is outside the workspace"},
		{"dir", "dir is not a regular file"},
		{"nodes/n1/snap.bin/x", "a parent of nodes/n1/snap.bin/x is a file"},
	} {
		res := run(fs.WorkspaceWriteName, fs.WorkspaceWriteArgs{Path: c.path, Data: []byte("x")})
		g.Expect(res.IsError).To(BeTrue(), c.path)
		g.Expect(res.Content).To(ContainSubstring(c.want), c.path)
	}
	g.Expect(os.ReadFile(filepath.Join(outside, "secret.txt"))).To(BeEquivalentTo("secret"))
	g.Expect(filepath.Join(outside, "new.txt")).NotTo(BeAnExistingFile())
}
