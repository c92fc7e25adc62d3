package fs

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/picobot/picobot/runtime/tool"
)

// The runtime's own reads and writes of workspace files (a message's
// attachments, a browser upload, a node's media) run where the programs'
// files are. In a sandbox pod that is another pod's volume: the exec server
// runs these two tools for the runtime (execserver.WorkspaceFiles), with
// the file tools' confinement (the areas of Paths, every open beneath an
// os.Root, and the server's Landlock rules). They are no tools of the
// model: no agent's registry holds them.
const (
	// WorkspaceReadName reads a whole file, as an artifact.
	WorkspaceReadName = "workspace_file_read"
	// WorkspaceWriteName creates or replaces a whole file.
	WorkspaceWriteName = "workspace_file_write"
	// MaxWorkspaceFile bounds a file the two tools move: what a message
	// attaches (20 MB by default) or a browser uploads, with room.
	MaxWorkspaceFile = 40 << 20
)

// WorkspaceReadArgs are the arguments of workspace_file_read.
type WorkspaceReadArgs struct {
	Path string `json:"path" jsonschema:"File to read; relative paths resolve against the workspace"`
	// MaxBytes refuses a larger file (at most MaxWorkspaceFile).
	MaxBytes int64 `json:"maxBytes"`
}

// WorkspaceWriteArgs are the arguments of workspace_file_write.
type WorkspaceWriteArgs struct {
	Path string `json:"path" jsonschema:"File to write; relative paths resolve against the workspace"`
	Data []byte `json:"data"`
}

// WorkspaceTools are workspace_file_read and workspace_file_write.
func WorkspaceTools(opts ...Option) []tool.Tool {
	ps := newPaths(opts)
	return []tool.Tool{
		tool.New(WorkspaceReadName, "Read a whole workspace file for the runtime.", ps.readWhole, tool.ReadOnly()),
		tool.New(WorkspaceWriteName, "Create or replace a whole workspace file for the runtime.", ps.writeWhole,
			// The bytes travel in base64, as encoding/json writes a []byte.
			tool.Adjust(func(s *jsonschema.Schema) { s.Properties["data"] = &jsonschema.Schema{Type: "string"} })),
	}
}

// readWhole answers the file as an artifact named after it; a file larger
// than MaxBytes, a folder, a device or a path outside the areas is an
// error result.
func (ps *Paths) readWhole(_ context.Context, env tool.Env, a WorkspaceReadArgs) (tool.Result, error) {
	if strings.TrimSpace(a.Path) == "" {
		return tool.Errorf("error: path is empty"), nil
	}
	if a.MaxBytes <= 0 || a.MaxBytes > MaxWorkspaceFile {
		return tool.Errorf("error: maxBytes must be between 1 and %d", MaxWorkspaceFile), nil
	}
	pl, f, res, err := ps.openRegular(env, a.Path)
	if f == nil {
		return res, err
	}
	defer pl.Close()
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, a.MaxBytes+1))
	if err != nil {
		return tool.Errorf("error: cannot read %s: %v", a.Path, err), nil
	}
	if int64(len(data)) > a.MaxBytes {
		size := int64(len(data))
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		return tool.Errorf("error: %s has %d bytes, more than the %d byte limit", a.Path, size, a.MaxBytes), nil
	}
	return tool.Result{Content: fmt.Sprintf("Read %s (%d bytes).", a.Path, len(data)),
		Artifacts: []tool.Artifact{{Name: filepath.Base(a.Path), Data: data}}}, nil
}

// writeWhole writes the file atomically, creating missing folders.
func (ps *Paths) writeWhole(_ context.Context, env tool.Env, a WorkspaceWriteArgs) (tool.Result, error) {
	if strings.TrimSpace(a.Path) == "" {
		return tool.Errorf("error: path is empty"), nil
	}
	if len(a.Data) > MaxWorkspaceFile {
		return tool.Errorf("error: %s would have %d bytes, more than the %d byte limit", a.Path, len(a.Data), MaxWorkspaceFile), nil
	}
	if _, res, ok, err := ps.put(env, a.Path, a.Data, true); !ok {
		return res, err
	}
	return tool.Text(fmt.Sprintf("Wrote %s (%d bytes).", a.Path, len(a.Data))), nil
}
