// Package fs holds the file tools the model uses to read, write, edit and
// search files: file_read, file_write, file_edit, file_search and
// content_search.
//
// Relative paths resolve against the session workspace (tool.Env.Resolve);
// absolute paths are accepted, so the workspace is a convenience, not a
// sandbox. Tools that must stay inside the workspace (apply_patch) enforce that
// themselves.
package fs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	// sniffLen is how much of a file is inspected for NUL bytes to decide that
	// it is binary (the heuristic git and grep use).
	sniffLen = 8 << 10
	// newFilePerm is the mode of files the tools create.
	newFilePerm os.FileMode = 0o644
	// newDirPerm is the mode of folders the tools create.
	newDirPerm os.FileMode = 0o755
)

// skippedDirs are folders the search tools never descend into: they are large,
// generated, and almost never what the model is looking for.
var skippedDirs = map[string]bool{".git": true, "node_modules": true}

// Tools returns the five file tools, so a caller registers them together.
func Tools() []tool.Tool {
	return []tool.Tool{NewFileRead(), NewFileWrite(), NewFileEdit(), NewFileSearch(), NewContentSearch()}
}

// isBinary reports whether head, the start of a file, looks binary.
func isBinary(head []byte) bool {
	if len(head) > sniffLen {
		head = head[:sniffLen]
	}
	return bytes.IndexByte(head, 0) >= 0
}

// writeAtomic replaces path with data through a temporary file in the same
// folder and a rename, so readers never see a half-written file and a failed
// write leaves the old content in place.
func writeAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("failed to create temporary file in %q: %w", dir, err)
	}
	name := tmp.Name()
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(name)
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("failed to write temporary file %q: %w", name, err)
	}
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("failed to set mode of temporary file %q: %w", name, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("failed to sync temporary file %q: %w", name, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("failed to close temporary file %q: %w", name, err)
	}
	if err = os.Rename(name, path); err != nil {
		return fmt.Errorf("failed to rename %q to %q: %w", name, path, err)
	}
	return nil
}

// writeTarget returns the file a write to path must replace: the target of a
// symlink (so writing through a link updates what it points to instead of
// replacing the link with a regular file), or path itself.
func writeTarget(path string) string {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return path
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return path
	}
	return resolved
}

// missingOrDenied turns the common open errors into a message for the model;
// ok is false for other errors, which the caller reports as failures.
func missingOrDenied(err error, shown string) (res tool.Result, ok bool) {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return tool.Errorf("error: %s does not exist. Check the path, or find the file with file_search.", shown), true
	case errors.Is(err, os.ErrPermission):
		return tool.Errorf("error: permission denied for %s. Choose a file you are allowed to access.", shown), true
	}
	return tool.Result{}, false
}

// regularFile checks that p (shown to the model as shown) is a regular file,
// turning the usual problems into messages that say what to do instead.
// Devices and pipes are refused because reading them may never end.
func regularFile(p, shown string) (tool.Result, bool) {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		if res, ok := missingOrDenied(err, shown); ok {
			return res, false
		}
		return tool.Errorf("error: cannot access %s: %v", shown, err), false
	case fi.IsDir():
		return tool.Errorf("error: %s is a folder, not a file. List its files with file_search (pattern \"*\", path %q).", shown, shown), false
	case !fi.Mode().IsRegular():
		return tool.Errorf("error: %s is not a regular file (it is a device, pipe or socket).", shown), false
	}
	return tool.Result{}, true
}

// globMatcher matches a glob against a file: a pattern with a slash is matched
// against the path relative to the search folder, one without against the file
// name at any depth (as find -name and fd do), which is what models expect
// from "*.go".
type globMatcher struct {
	pattern string
	byName  bool
}

// newGlobMatcher validates pattern.
func newGlobMatcher(pattern string) (globMatcher, error) {
	p := strings.TrimPrefix(filepath.ToSlash(strings.TrimSpace(pattern)), "./")
	if p == "" {
		return globMatcher{}, errors.New("the glob pattern is empty")
	}
	if strings.HasPrefix(p, "/") {
		return globMatcher{}, fmt.Errorf("the glob pattern %q is absolute; put the folder in path and keep the pattern relative (for example \"**/*.go\")", pattern)
	}
	if !doublestar.ValidatePattern(p) {
		return globMatcher{}, fmt.Errorf("the glob pattern %q is invalid (check brackets and braces)", pattern)
	}
	return globMatcher{pattern: p, byName: !strings.Contains(p, "/")}, nil
}

// match reports whether the file at rel (slash-separated, relative to the
// search folder) matches.
func (m globMatcher) match(rel string) bool {
	name := rel
	if m.byName {
		name = rel[strings.LastIndexByte(rel, '/')+1:]
	}
	return doublestar.MatchUnvalidated(m.pattern, name)
}

// folderArg resolves a folder argument and checks that it is a folder.
func folderArg(env tool.Env, p string) (abs string, res tool.Result, ok bool) {
	abs = env.Resolve(p)
	shown := p
	if shown == "" {
		shown = "the workspace"
		if abs == "" {
			return "", tool.Errorf("error: no workspace is set for this session; pass an absolute path."), false
		}
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if r, known := missingOrDenied(err, shown); known {
			return "", r, false
		}
		return "", tool.Errorf("error: cannot access %s: %v", shown, err), false
	}
	if !fi.IsDir() {
		return "", tool.Errorf("error: %s is a file, not a folder. Pass a folder as path, or read the file with file_read.", shown), false
	}
	return abs, tool.Result{}, true
}
