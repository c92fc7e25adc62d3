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
	existed, res, ok, err := ps.put(env, a.Path, []byte(a.Content), false)
	if !ok {
		return res, err
	}
	verb := "Created"
	if existed {
		verb = "Overwrote"
	}
	return tool.Text(fmt.Sprintf("%s %s (%d bytes written).", verb, a.Path, len(a.Content))), nil
}

// put writes data to the file at path atomically (with the file's
// permissions when it exists), creating missing folders; existed reports
// whether it replaced a file. A folder is refused, and with regularOnly
// anything but a regular file. Without ok, res is the model's error or err
// an unexpected failure.
func (ps *Paths) put(env tool.Env, path string, data []byte, regularOnly bool) (existed bool, res tool.Result, ok bool, err error) {
	pl, p, res, ok := ps.writable(env, path)
	if !ok {
		return false, res, false, nil
	}
	defer pl.Close()
	perm := newFilePerm
	switch fi, err := pl.root.Stat(p); {
	case err == nil && regularOnly && !fi.Mode().IsRegular():
		return false, tool.Errorf("error: %s is not a regular file", path), false, nil
	case err == nil && fi.IsDir():
		return false, tool.Errorf("error: %s is a folder. Pass a file path (for example %s).", path, filepath.Join(path, "file.txt")), false, nil
	case err == nil:
		perm, existed = fi.Mode().Perm(), true
	case errors.Is(err, os.ErrNotExist):
	case errors.Is(err, syscall.ENOTDIR):
		return false, tool.Errorf("error: a parent of %s is a file, not a folder. Choose another path.", path), false, nil
	default:
		if res, ok := openError(err, path); ok {
			return false, res, false, nil
		}
		return false, tool.Result{}, false, errorf("stat file", path, err)
	}
	if err := pl.root.MkdirAll(filepath.Dir(p), newDirPerm); err != nil {
		if escaped(err) {
			return false, escapes(path), false, nil
		}
		if errors.Is(err, os.ErrPermission) {
			return false, tool.Errorf("error: permission denied creating the folder of %s. Choose a path you are allowed to write.", path), false, nil
		}
		return false, tool.Errorf("error: cannot create the folder of %s: %v. Check that no parent of the path is a file.", path, err), false, nil
	}
	if err := writeAtomic(pl.root, p, data, perm); err != nil {
		if escaped(err) {
			return false, escapes(path), false, nil
		}
		if errors.Is(err, os.ErrPermission) {
			return false, tool.Errorf("error: permission denied writing %s. Choose a path you are allowed to write.", path), false, nil
		}
		return false, tool.Result{}, false, err
	}
	return existed, tool.Result{}, true, nil
}
