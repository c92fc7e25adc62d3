package execserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// WorkspaceFiles reads and writes the workspace files of the runtime's own
// tools (a message's attachments, a browser upload, a node's media) through
// the exec server c: in a sandbox pod the programs' workspace is that pod's
// volume, not the runtime's folder. The calls are file tool calls of the
// protocol (fs.WorkspaceReadName, fs.WorkspaceWriteName), which the server
// runs as it runs file_read and file_write: confined to the workspace,
// beneath an os.Root, on a thread under the sandbox's Landlock rules. Over
// the runtime's relay (a client of its socket) the uploads it mirrors are
// in place before each call.
func WorkspaceFiles(c *Client) tool.WorkspaceFiles { return workspaceFiles{c: c} }

type workspaceFiles struct{ c *Client }

// ReadFile implements tool.WorkspaceFiles.
func (w workspaceFiles) ReadFile(ctx context.Context, env tool.Env, p string, maxBytes int64) ([]byte, error) {
	if maxBytes > fs.MaxWorkspaceFile {
		maxBytes = fs.MaxWorkspaceFile
	}
	res, err := w.call(ctx, env, fs.WorkspaceReadName, fs.WorkspaceReadArgs{Path: p, MaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	if len(res.Artifacts) != 1 {
		return nil, fmt.Errorf("failed to read %q in the sandbox: the exec server answered %d files, want 1", p, len(res.Artifacts))
	}
	return res.Artifacts[0].Data, nil
}

// WriteFile implements tool.WorkspaceFiles.
func (w workspaceFiles) WriteFile(ctx context.Context, env tool.Env, p string, data []byte) error {
	_, err := w.call(ctx, env, fs.WorkspaceWriteName, fs.WorkspaceWriteArgs{Path: p, Data: data})
	return err
}

// call runs one of the two tools; its error result is the error.
func (w workspaceFiles) call(ctx context.Context, env tool.Env, name string, args any) (tool.Result, error) {
	if env.Workspace == "" {
		return tool.Result{}, errors.New("no workspace is set for this session")
	}
	if err := ShareWorkspace(env.Workspace); err != nil {
		return tool.Result{}, err
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return tool.Result{}, fmt.Errorf("failed to encode the arguments of %s: %w", name, err)
	}
	res, err := w.c.CallTool(ctx, Request{Workspace: env.Workspace, Tool: &ToolCall{Name: name, Args: raw, SessionID: env.SessionID, Agent: env.Agent}})
	switch {
	case err != nil:
		return tool.Result{}, err
	case res.IsError:
		return tool.Result{}, errors.New(strings.TrimSuffix(strings.TrimPrefix(res.Content, "error: "), "."))
	}
	return res, nil
}
