//go:build unix

package fs_test

import (
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
)

// A named pipe would block a reader forever; the tools refuse it up front.
func TestNamedPipeIsRefused(t *testing.T) {
	env := workspace(t)
	if err := syscall.Mkfifo(filepath.Join(env.Workspace, "pipe"), 0o644); err != nil {
		t.Skipf("cannot create a named pipe: %v", err)
	}
	for name, args := range map[string]map[string]any{
		"file_read":      {"path": "pipe"},
		"file_edit":      {"path": "pipe", "old_string": "a", "new_string": "b"},
		"content_search": {"pattern": "a", "path": "pipe"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, env, name, args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring("not a regular file"))
		})
	}
	// A folder search skips it.
	g := NewWithT(t)
	res := call(t, env, "content_search", map[string]any{"pattern": "a"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
}
