package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/picobot/picobot/runtime/tool"
)

// WriteArgs are the arguments of file_write.
type WriteArgs struct {
	Path    string `json:"path" jsonschema:"File to write; relative paths resolve against the workspace"`
	Content string `json:"content" jsonschema:"The complete new content of the file"`
}

// NewFileWrite returns file_write, which creates or replaces a whole file. The
// write is atomic so a crash or a concurrent reader never sees half a file.
func NewFileWrite(opts ...Option) tool.Tool {
	return tool.New("file_write",
		"Create a file or replace its whole content; missing parent folders are created. To change part of a file use file_edit.",
		newPaths(opts).writeFile,
	)
}

func (ps *Paths) writeFile(_ context.Context, env tool.Env, a WriteArgs) (tool.Result, error) {
	if strings.TrimSpace(a.Path) == "" {
		return tool.Errorf("error: path is empty. Pass the file to write."), nil
	}
	pl, p, res, ok := ps.writable(env, a.Path)
	if !ok {
		return res, nil
	}
	defer pl.Close()
	perm, existed := newFilePerm, false
	switch fi, err := pl.root.Stat(p); {
	case err == nil && fi.IsDir():
		return tool.Errorf("error: %s is a folder. Pass a file path (for example %s).", a.Path, filepath.Join(a.Path, "file.txt")), nil
	case err == nil:
		perm, existed = fi.Mode().Perm(), true
	case errors.Is(err, os.ErrNotExist):
	case errors.Is(err, syscall.ENOTDIR):
		return tool.Errorf("error: a parent of %s is a file, not a folder. Choose another path.", a.Path), nil
	default:
		if res, ok := openError(err, a.Path); ok {
			return res, nil
		}
		return tool.Result{}, errorf("stat file", a.Path, err)
	}
	if err := pl.root.MkdirAll(filepath.Dir(p), newDirPerm); err != nil {
		if escaped(err) {
			return escapes(a.Path), nil
		}
		if errors.Is(err, os.ErrPermission) {
			return tool.Errorf("error: permission denied creating the folder of %s. Choose a path you are allowed to write.", a.Path), nil
		}
		return tool.Errorf("error: cannot create the folder of %s: %v. Check that no parent of the path is a file.", a.Path, err), nil
	}
	if err := writeAtomic(pl.root, p, []byte(a.Content), perm); err != nil {
		if escaped(err) {
			return escapes(a.Path), nil
		}
		if errors.Is(err, os.ErrPermission) {
			return tool.Errorf("error: permission denied writing %s. Choose a path you are allowed to write.", a.Path), nil
		}
		return tool.Result{}, err
	}
	verb := "Created"
	if existed {
		verb = "Overwrote"
	}
	return tool.Text(fmt.Sprintf("%s %s (%d bytes written).", verb, a.Path, len(a.Content))), nil
}
